// The Kubernetes authorizer against a fake API server on loopback that answers TokenReview and SubjectAccessReview.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { KubeConfig } from '@kubernetes/client-node';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { KubernetesAuthorizer } from './authz-kubernetes.ts';
import { ApiError } from './errors.ts';

interface Seen {
  path: string;
  authorization: string | undefined;
  body: Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
}

/** token → user; (user, namespace, name?) → allowed. */
const USERS: Record<string, { username: string; uid: string; groups: string[]; extra?: Record<string, string[]> }> = {
  'alice-token': { username: 'alice', uid: 'u-1', groups: ['team-a', 'system:authenticated'], extra: { scopes: ['read'] } },
  'bob-token': { username: 'bob', uid: 'u-2', groups: ['system:authenticated'] },
};
const allowed = (user: string, ns: string, name?: string) =>
  (user === 'alice' && ns === 'acme') || (user === 'bob' && ns === 'ops' && (name === undefined || name === 'pool_allowed'));

let server: http.Server;
let url: string;
const seen: Seen[] = [];
let failNext = 0;

beforeAll(async () => {
  server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8') || '{}');
      seen.push({ path: req.url ?? '', authorization: req.headers.authorization, body });
      res.setHeader('content-type', 'application/json');
      if (failNext > 0) {
        failNext--;
        res.statusCode = 500;
        res.end(JSON.stringify({ kind: 'Status', apiVersion: 'v1', status: 'Failure', message: 'etcd is sad', code: 500 }));
        return;
      }
      if (req.method === 'POST' && req.url === '/apis/authentication.k8s.io/v1/tokenreviews') {
        const user = USERS[body.spec?.token];
        res.statusCode = 201;
        res.end(JSON.stringify({ ...body, status: user ? { authenticated: true, user, audiences: ['https://kubernetes.default.svc'] } : { authenticated: false, error: 'invalid bearer token' } }));
        return;
      }
      if (req.method === 'POST' && req.url === '/apis/authorization.k8s.io/v1/subjectaccessreviews') {
        const a = body.spec?.resourceAttributes ?? {};
        const ok = a.verb === 'get' && a.group === 'bettercompute.io' && a.resource === 'capacity' && allowed(body.spec.user, a.namespace, a.name);
        res.statusCode = 201;
        res.end(JSON.stringify({ ...body, status: ok ? { allowed: true, reason: 'RBAC: allowed by RoleBinding' } : { allowed: false } }));
        return;
      }
      res.statusCode = 404;
      res.end(JSON.stringify({ kind: 'Status', status: 'Failure', code: 404 }));
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await new Promise((r) => server.close(r));
});
beforeEach(() => {
  seen.length = 0;
  failNext = 0;
});

function kubeConfig(): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: 'fake', server: url, skipTLSVerify: true }],
    users: [{ name: 'controller', token: 'controller-sa-token' }],
    contexts: [{ name: 'fake', cluster: 'fake', user: 'controller' }],
    currentContext: 'fake',
  });
  return kc;
}

async function failure(p: Promise<unknown>): Promise<ApiError> {
  try {
    await p;
  } catch (e) {
    expect(e).toBeInstanceOf(ApiError);
    return e as ApiError;
  }
  throw new Error('expected an ApiError');
}

describe('KubernetesAuthorizer', () => {
  it('no token: UNAUTHENTICATED without asking the API server', async () => {
    const a = new KubernetesAuthorizer({ kubeConfig: kubeConfig() });
    expect((await failure(a.authenticate(undefined))).code).toBe('UNAUTHENTICATED');
    expect(seen).toEqual([]);
  });

  it('a token the TokenReview does not accept: UNAUTHENTICATED', async () => {
    const a = new KubernetesAuthorizer({ kubeConfig: kubeConfig() });
    const e = await failure(a.authenticate('stolen-token'));
    expect([e.code, e.status]).toEqual(['UNAUTHENTICATED', 401]);
    expect(seen).toHaveLength(1);
    expect(seen[0]).toMatchObject({
      path: '/apis/authentication.k8s.io/v1/tokenreviews',
      authorization: 'Bearer controller-sa-token',
      body: { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenReview', spec: { token: 'stolen-token' } },
    });
  });

  it('TokenReview, then a SubjectAccessReview for get capacity.bettercompute.io in the tenant’s namespace', async () => {
    const a = new KubernetesAuthorizer({ kubeConfig: kubeConfig(), audiences: ['bettercompute'] });
    const alice = await a.authenticate('alice-token');
    expect(alice).toEqual({ subject: 'alice', uid: 'u-1', groups: ['team-a', 'system:authenticated'], extra: { scopes: ['read'] } });
    expect(seen[0]!.body.spec).toEqual({ token: 'alice-token', audiences: ['bettercompute'] });
    await a.authorizeCapacityRead(alice, { tenantId: 'acme' });
    expect(seen[1]).toMatchObject({ path: '/apis/authorization.k8s.io/v1/subjectaccessreviews', authorization: 'Bearer controller-sa-token' });
    expect(seen[1]!.body).toEqual({
      apiVersion: 'authorization.k8s.io/v1',
      kind: 'SubjectAccessReview',
      spec: {
        user: 'alice',
        uid: 'u-1',
        groups: ['team-a', 'system:authenticated'],
        extra: { scopes: ['read'] },
        resourceAttributes: { namespace: 'acme', verb: 'get', group: 'bettercompute.io', resource: 'capacity' },
      },
    });
  });

  it('a pool-scoped read names the pool, so RBAC resourceNames can narrow it', async () => {
    const a = new KubernetesAuthorizer({ kubeConfig: kubeConfig() });
    const bob = await a.authenticate('bob-token');
    await a.authorizeCapacityRead(bob, { tenantId: 'ops', poolId: 'pool_allowed' });
    expect(seen[1]!.body.spec.resourceAttributes).toEqual({ namespace: 'ops', verb: 'get', group: 'bettercompute.io', resource: 'capacity', name: 'pool_allowed' });
    const e = await failure(a.authorizeCapacityRead(bob, { tenantId: 'ops', poolId: 'pool_other' }));
    expect([e.code, e.status, e.message]).toEqual(['FORBIDDEN', 403, 'bob may not read the capacity of pool pool_other of tenant ops']);
  });

  it('another tenant’s namespace: FORBIDDEN', async () => {
    const a = new KubernetesAuthorizer({ kubeConfig: kubeConfig() });
    const alice = await a.authenticate('alice-token');
    expect((await failure(a.authorizeCapacityRead(alice, { tenantId: 'ops' }))).code).toBe('FORBIDDEN');
  });

  it('namespaceFor maps a tenant to its namespace', async () => {
    const a = new KubernetesAuthorizer({ kubeConfig: kubeConfig(), namespaceFor: (t) => t.replace('tenant-', '') });
    await a.authorizeCapacityRead(await a.authenticate('alice-token'), { tenantId: 'tenant-acme' });
    expect(seen[1]!.body.spec.resourceAttributes.namespace).toBe('acme');
  });

  it('answers are reused for the TTL, then asked again', async () => {
    let now = 0;
    const a = new KubernetesAuthorizer({ kubeConfig: kubeConfig(), cacheTtlMs: 1000, monotonicNow: () => now });
    for (let i = 0; i < 3; i++) await a.authorizeCapacityRead(await a.authenticate('alice-token'), { tenantId: 'acme' });
    expect(seen).toHaveLength(2);
    for (let i = 0; i < 3; i++) expect((await failure(a.authorizeCapacityRead(await a.authenticate('alice-token'), { tenantId: 'ops' }))).code).toBe('FORBIDDEN');
    expect(seen).toHaveLength(3);
    now = 1000;
    await a.authorizeCapacityRead(await a.authenticate('alice-token'), { tenantId: 'acme' });
    expect(seen).toHaveLength(5);
  });

  it('a rejected token is not cached: the next request asks again', async () => {
    const a = new KubernetesAuthorizer({ kubeConfig: kubeConfig() });
    await failure(a.authenticate('stolen-token'));
    await failure(a.authenticate('stolen-token'));
    expect(seen).toHaveLength(2);
  });

  it('an API server failure is an error, not a decision (the HTTP layer answers INTERNAL)', async () => {
    const a = new KubernetesAuthorizer({ kubeConfig: kubeConfig(), cacheTtlMs: 0 });
    failNext = 1;
    await expect(a.authenticate('alice-token')).rejects.not.toBeInstanceOf(ApiError);
    const alice = await a.authenticate('alice-token');
    failNext = 1;
    await expect(a.authorizeCapacityRead(alice, { tenantId: 'acme' })).rejects.toThrow();
    await a.authorizeCapacityRead(alice, { tenantId: 'acme' });
  });
});
