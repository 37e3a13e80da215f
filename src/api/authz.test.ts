import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { StaticTokenAuthorizer } from './authz.ts';
import { bearerToken } from '../http/identity.ts';
import { ApiError } from '../http/errors.ts';

async function failure(p: Promise<unknown>): Promise<ApiError> {
  try {
    await p;
  } catch (e) {
    expect(e).toBeInstanceOf(ApiError);
    return e as ApiError;
  }
  throw new Error('expected an ApiError');
}

const YAML = `
# local tokens
tokens:
  - token: alice-token-0123456789
    subject: alice
    tenants: [acme, beta]
  - tokenSha256: ${createHash('sha256').update('ops-token-0123456789ab').digest('hex')}
    subject: ops
    tenants: ['*']
  - token: nobody-token-01234567
    subject: nobody
    tenants: []
`;

describe('bearerToken', () => {
  it.each<[string | undefined, string | undefined]>([
    [undefined, undefined],
    ['', undefined],
    ['Bearer abc', 'abc'],
    ['bearer abc', 'abc'],
    ['Bearer   abc  ', 'abc'],
    ['Bearer', undefined],
    ['Bearer ', undefined],
    ['Basic abc', undefined],
    ['Bearer a b', undefined],
    ['abc', undefined],
  ])('%j → %j', (header, token) => {
    expect(bearerToken(header)).toBe(token);
  });
});

describe('StaticTokenAuthorizer', () => {
  const authz = StaticTokenAuthorizer.parse(YAML);

  it('no token is UNAUTHENTICATED', async () => {
    const e = await failure(authz.authenticate(undefined));
    expect([e.code, e.status, e.message]).toEqual(['UNAUTHENTICATED', 401, 'a bearer token is required']);
  });

  it('an unknown token is UNAUTHENTICATED', async () => {
    expect((await failure(authz.authenticate('alice-token-012345678'))).code).toBe('UNAUTHENTICATED');
  });

  it('a token allows exactly its tenants; others are FORBIDDEN', async () => {
    const alice = await authz.authenticate('alice-token-0123456789');
    expect(alice.subject).toBe('alice');
    await authz.authorizeCapacityRead(alice, { tenantId: 'acme' });
    await authz.authorizeCapacityRead(alice, { tenantId: 'beta', poolId: 'pool_x' });
    const e = await failure(authz.authorizeCapacityRead(alice, { tenantId: 'gamma', poolId: 'pool_x' }));
    expect([e.code, e.status, e.message]).toEqual(['FORBIDDEN', 403, 'alice may not read the capacity of pool pool_x of tenant gamma']);
    expect((await failure(authz.authorizeCapacityRead(alice, { tenantId: 'ACME' }))).code).toBe('FORBIDDEN');
  });

  it('* allows every tenant; a token given by its SHA-256 works', async () => {
    const ops = await authz.authenticate('ops-token-0123456789ab');
    await authz.authorizeCapacityRead(ops, { tenantId: 'anyone' });
  });

  it('an empty tenant list allows nothing', async () => {
    const nobody = await authz.authenticate('nobody-token-01234567');
    expect((await failure(authz.authorizeCapacityRead(nobody, { tenantId: 'acme' }))).code).toBe('FORBIDDEN');
  });

  it('a principal it did not issue is FORBIDDEN (deny by default)', async () => {
    expect((await failure(authz.authorizeCapacityRead({ subject: 'alice' }, { tenantId: 'acme' }))).code).toBe('FORBIDDEN');
  });

  it('denyAll refuses every token', async () => {
    expect((await failure(StaticTokenAuthorizer.denyAll().authenticate('alice-token-0123456789'))).code).toBe('UNAUTHENTICATED');
  });

  it('reads JSON too, from a file', async () => {
    const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'bc-tokens-'));
    const file = path.join(dir, 'tokens.json');
    await fs.writeFile(file, JSON.stringify({ tokens: [{ token: 'json-token-0123456789', subject: 'j', tenants: ['acme'] }] }));
    const a = await StaticTokenAuthorizer.fromFile(file);
    await a.authorizeCapacityRead(await a.authenticate('json-token-0123456789'), { tenantId: 'acme' });
    await fs.rm(dir, { recursive: true });
  });

  it.each([
    ['not YAML', 'tokens: [', /not YAML or JSON/],
    ['no tokens key', 'users: []', /tokens/],
    ['a short token', 'tokens: [{token: short, subject: a, tenants: []}]', /tokens\.0\.token/],
    ['both token and hash', `tokens: [{token: aaaaaaaaaaaaaaaaaaaa, tokenSha256: '${'0'.repeat(64)}', subject: a, tenants: []}]`, /exactly one of token and tokenSha256/],
    ['neither', 'tokens: [{subject: a, tenants: []}]', /exactly one/],
    ['an unknown key', 'tokens: [{token: aaaaaaaaaaaaaaaaaaaa, subject: a, tenants: [], admin: true}]', /admin/],
    ['tenants missing', 'tokens: [{token: aaaaaaaaaaaaaaaaaaaa, subject: a}]', /tenants/],
  ])('refuses a file with %s', (_name, text, message) => {
    expect(() => StaticTokenAuthorizer.parse(text, 'f.yaml')).toThrow(message);
  });
});
