// Tokens only over TLS or loopback (ADR 0035): the pure rule, and the capacity API on real listeners — plain HTTP on
// every address, reached through loopback and through this machine's non-loopback address; HTTPS on the latter.
import os from 'node:os';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApp } from '../api/app.ts';
import { StaticTokenAuthorizer } from '../api/authz.ts';
import type { CapacityService } from '../api/capacity-service.ts';
import { listen, type RunningServer } from './server.ts';
import { isLoopbackAddress, tokenTransportAllowed } from './transport.ts';
import { generateCa, issueServingCert } from '../controller/certs.ts';
import { silentLogger } from '../log.ts';
import { request } from '../../test/support/http.ts';

const TOKEN = 'token-acme-only-00001';
/** A non-loopback IPv4 address of this machine, if it has one (the pod network's, in a pod). */
const external = Object.values(os.networkInterfaces())
  .flat()
  .find((i) => i && i.family === 'IPv4' && !i.internal)?.address;

describe('isLoopbackAddress / tokenTransportAllowed', () => {
  it('loopback: 127/8, ::1 and IPv4-mapped 127/8; nothing else', () => {
    for (const a of ['127.0.0.1', '127.1.2.3', '::1', '::ffff:127.0.0.1', '::FFFF:127.0.0.9']) expect(isLoopbackAddress(a)).toBe(true);
    for (const a of ['10.0.0.1', '0.0.0.0', '::', '::ffff:10.0.0.1', 'fd00::1', '128.0.0.1', 'localhost', '', undefined]) expect(isLoopbackAddress(a)).toBe(false);
  });

  it('TLS anywhere; plain HTTP only at a loopback address', () => {
    expect(tokenTransportAllowed({ encrypted: true, localAddress: '10.0.0.5' })).toBe(true);
    expect(tokenTransportAllowed({ localAddress: '127.0.0.1' })).toBe(true);
    expect(tokenTransportAllowed({ localAddress: '10.0.0.5' })).toBe(false);
    expect(tokenTransportAllowed({ localAddress: '::ffff:10.0.0.5' })).toBe(false);
  });
});

describe.skipIf(!external)('the capacity API refuses a token sent over plain HTTP to a non-loopback address', () => {
  const ca = generateCa(Date.now());
  const serving = issueServingCert(ca, ['localhost', external ?? '127.0.0.1'], Date.now());
  let plain: RunningServer;
  let secure: RunningServer;
  beforeAll(async () => {
    const app = createApp({
      service: {} as CapacityService, // never reached: the bodies below are invalid
      authorizer: new StaticTokenAuthorizer({ tokens: [{ token: TOKEN, subject: 'alice', tenants: ['acme'] }] }),
      log: silentLogger,
      ready: async () => undefined,
    });
    plain = await listen(app, { host: '0.0.0.0', port: 0 });
    secure = await listen(app, { host: '0.0.0.0', port: 0, tls: serving });
  });
  afterAll(async () => {
    await plain?.close(0);
    await secure?.close(0);
  });
  const post = (url: string, token?: string) =>
    request(`${url}/api/compute/capacity/summary`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) },
      body: '{}',
      ...(url.startsWith('https') ? { ca: ca.cert, servername: 'localhost' } : {}),
    });

  it('plain HTTP at the pod address: 403 TLS_REQUIRED, for a good token as for a bad one', async () => {
    for (const token of [TOKEN, 'garbage-token-000000']) {
      const r = await post(`http://${external}:${plain.port}`, token);
      expect(r.status).toBe(403);
      expect(r.json).toMatchObject({ error: { code: 'TLS_REQUIRED' } });
      expect(r.headers.connection).toBe('close');
    }
    // No token, nothing to protect: the usual 401; health needs no token.
    expect((await post(`http://${external}:${plain.port}`)).status).toBe(401);
    expect((await request(`http://${external}:${plain.port}/healthz`)).status).toBe(200);
  });

  it('the same listener through loopback, and HTTPS at the pod address: the token is taken (400: the body is invalid)', async () => {
    expect((await post(`http://127.0.0.1:${plain.port}`, TOKEN)).json).toMatchObject({ error: { code: 'INVALID_INPUT' } });
    expect((await post(`https://${external}:${secure.port}`, TOKEN)).json).toMatchObject({ error: { code: 'INVALID_INPUT' } });
    expect((await post(`https://${external}:${secure.port}`, 'garbage-token-000000')).status).toBe(401);
  });
});
