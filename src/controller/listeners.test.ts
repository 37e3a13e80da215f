// The controller's listeners as runController composes them: the capacity API over HTTPS (and plain HTTP on loopback); each serves its own routes only; /metrics is HTTPS
// and needs a token that TokenReview accepts and RBAC allows to get /metrics (the fake API server decides); the
// webhook listener serves the routers passed in; a new certificate is served without a restart.
import { createHash, X509Certificate } from 'node:crypto';
import express from 'express';
import { Registry, Counter } from 'prom-client';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startFakeKubeApi, type FakeKubeApi } from '../../test/support/fake-kube-api.ts';
import { request } from '../../test/support/http.ts';
import { createApp } from '../api/app.ts';
import { AccessReviewer, TokenReviewer } from '../api/authz-kubernetes.ts';
import { StaticTokenAuthorizer } from '../api/authz.ts';
import type { CapacityService } from '../api/capacity-service.ts';
import { createExtenderListener } from '../extender/listener.ts';
import type { ExtenderService } from '../extender/service.ts';
import { silentLogger } from '../log.ts';
import { issueBundle, type TlsBundle } from './certs.ts';
import { createWebhookApp, limitListeners, startListeners, WEBHOOK_MAX_BODY_BYTES, type ControllerListeners } from './listeners.ts';
import { peerOf } from '../http/peer.ts';
import { TLSSocket } from 'node:tls';
import { listen } from '../http/server.ts';
import type { RequestListener } from 'node:http';
import { createMetricsApp } from './metrics-endpoint.ts';



const USERS = {
  'prometheus-token': { username: 'system:serviceaccount:monitoring:prometheus', groups: ['system:serviceaccounts'] },
  'tenant-token': { username: 'system:serviceaccount:team-a:default', groups: ['system:serviceaccounts'] },
};

let fake: FakeKubeApi;
let tlsA: TlsBundle;
let tlsB: TlsBundle;
let listeners: ControllerListeners;
const filterCalls: unknown[] = [];

beforeAll(async () => {
  fake = await startFakeKubeApi({
    users: USERS,
    allowed: () => false,
    allowedNonResource: (user, path, verb) => user === 'system:serviceaccount:monitoring:prometheus' && path === '/metrics' && verb === 'get',
  });
  tlsA = issueBundle(Date.now(), ['localhost', '127.0.0.1']);
  tlsB = issueBundle(Date.now(), ['localhost', '127.0.0.1']);
  const registry = new Registry();
  new Counter({ name: 'bettercompute_test_total', help: 'a test counter', registers: [registry] }).inc(3);
  const kc = fake.kubeConfig();
  const tokens = new TokenReviewer({ kubeConfig: kc });
  const access = new AccessReviewer({ kubeConfig: kc });
  const service = {
    filter: async (args: unknown) => {
      filterCalls.push(args);
      return { Nodes: null, NodeNames: [], FailedNodes: {}, FailedAndUnresolvableNodes: {}, Error: '' };
    },
  } as unknown as ExtenderService;
  const agentRouter = express.Router();
  agentRouter.get('/nodes/:node', (req, res) => void res.json({ node: req.params.node }));
  agentRouter.get('/peer', (req, res) => void res.json({ tlsOnLoop: req.socket instanceof TLSSocket, peer: peerOf(req) }));
  listeners = await startListeners({
    addresses: {
      httpHost: '127.0.0.1',
      httpPort: 0,
      apiLoopbackPort: 0,
      extenderHost: '127.0.0.1',
      extenderPort: 0,
      metricsHost: '127.0.0.1',
      metricsPort: 0,
      webhookHost: '127.0.0.1',
      webhookPort: 0,
    },
    // As runController builds it: no registry, so no /metrics on the API's port.
    api: createApp({ service: {} as CapacityService, authorizer: StaticTokenAuthorizer.denyAll(), log: silentLogger, ready: async () => undefined }),
    extender: createExtenderListener({ service }),
    metrics: createMetricsApp({ registry, authenticate: (t) => tokens.authenticate(t), allowed: (p, a) => access.allowed(p, a), log: silentLogger }),
    webhook: createWebhookApp([{ path: '/agent/v1', router: agentRouter }], silentLogger),
    tls: { cert: tlsA.cert, key: tlsA.key, ca: tlsA.caCert },
  });
}, 60_000);

afterAll(async () => {
  await listeners?.close(0);
  await fake?.close();
});

beforeEach(() => {
  fake.seen.length = 0;
});

describe('the capacity API listener', () => {
  it('HTTPS with the controller’s certificate: health, and neither /metrics nor the extender; plain HTTP refused', async () => {
    expect(listeners.api.url).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
    const ca = tlsA.caCert;
    expect((await request(`${listeners.api.url}/healthz`, { ca })).status).toBe(200);
    const metrics = await request(`${listeners.api.url}/metrics`, { ca });
    expect(metrics.status).toBe(404);
    expect(metrics.json).toMatchObject({ error: { code: 'NOT_FOUND' } });
    const filter = await request(`${listeners.api.url}/scheduler/filter`, { method: 'POST', body: '{}', ca });
    expect(filter.status).toBe(404);
    expect(filterCalls).toEqual([]);
    await expect(request(`${listeners.api.url.replace('https:', 'http:')}/healthz`)).rejects.toThrow();
  });

  it('the loopback listener: the same app in plain HTTP, on 127.0.0.1 only', async () => {
    expect(listeners.apiLoopback?.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect((await request(`${listeners.apiLoopback!.url}/healthz`)).status).toBe(200);
    const summary = await request(`${listeners.apiLoopback!.url}/api/compute/capacity/summary`, { method: 'POST', token: 'any-token-00000000', body: '{}' });
    expect(summary.json).toMatchObject({ error: { code: 'UNAUTHENTICATED' } }); // taken (and refused by denyAll), not TLS_REQUIRED
    expect((listeners.apiLoopback!.server.address() as { address: string }).address).toBe('127.0.0.1');
  });
});

describe('the extender listener', () => {
  it('serves /scheduler/* and nothing else', async () => {
    const pod = { metadata: { name: 'p', namespace: 'n', uid: 'u' }, spec: { containers: [] } };
    const ok = await request(`${listeners.extender.url}/scheduler/filter`, { method: 'POST', body: JSON.stringify({ Pod: pod, NodeNames: ['a'] }) });
    expect(ok.status).toBe(200);
    expect(filterCalls).toHaveLength(1);
    for (const p of ['/metrics', '/healthz', '/api/compute/capacity/summary', '/admission/pods']) {
      const r = await request(`${listeners.extender.url}${p}`, { method: p === '/metrics' || p === '/healthz' ? 'GET' : 'POST', body: '{}' });
      expect(r.status, p).toBe(404);
    }
  });
});

describe('the metrics listener (HTTPS)', () => {
  const metricsUrl = () => `${listeners.metrics.url}/metrics`;

  it('refuses plain HTTP', async () => {
    await expect(request(metricsUrl().replace('https:', 'http:'), { token: 'prometheus-token' })).rejects.toThrow();
  });

  it('no token: 401 UNAUTHENTICATED, without asking the API server', async () => {
    const r = await request(metricsUrl(), { ca: tlsA.caCert });
    expect(r.status).toBe(401);
    expect(r.json).toEqual({ error: { code: 'UNAUTHENTICATED', message: 'a bearer token is required' } });
    expect(fake.seen).toEqual([]);
  });

  it('a token the TokenReview refuses: 401', async () => {
    const r = await request(metricsUrl(), { ca: tlsA.caCert, token: 'forged' });
    expect(r.status).toBe(401);
    expect(r.json).toMatchObject({ error: { code: 'UNAUTHENTICATED' } });
  });

  it('a tenant’s ServiceAccount, valid but not allowed to get /metrics: 403 FORBIDDEN, no metric in the body', async () => {
    const r = await request(metricsUrl(), { ca: tlsA.caCert, token: 'tenant-token' });
    expect(r.status).toBe(403);
    expect(r.json).toEqual({ error: { code: 'FORBIDDEN', message: 'system:serviceaccount:team-a:default may not get /metrics' } });
    expect(r.text).not.toContain('bettercompute_');
    const sar = fake.seen.find((s) => s.path === '/apis/authorization.k8s.io/v1/subjectaccessreviews')!;
    expect(sar.body.spec).toEqual({
      user: 'system:serviceaccount:team-a:default',
      groups: ['system:serviceaccounts'],
      nonResourceAttributes: { path: '/metrics', verb: 'get' },
    });
  });

  it('the scraper allowed by RBAC gets the metrics; both reviews are cached', async () => {
    const r = await request(metricsUrl(), { ca: tlsA.caCert, token: 'prometheus-token' });
    expect(r.status).toBe(200);
    expect(r.text).toContain('bettercompute_test_total 3');
    expect(fake.seen.map((s) => s.path)).toEqual(['/apis/authentication.k8s.io/v1/tokenreviews', '/apis/authorization.k8s.io/v1/subjectaccessreviews']);
    const again = await request(metricsUrl(), { ca: tlsA.caCert, token: 'prometheus-token' });
    expect(again.status).toBe(200);
    expect(fake.seen).toHaveLength(2);
  });

  it('serves /metrics only', async () => {
    const r = await request(`${listeners.metrics.url}/healthz`, { ca: tlsA.caCert, token: 'prometheus-token' });
    expect(r.status).toBe(404);
  });
});

describe('the webhook listener (HTTPS)', () => {
  it('serves the routers passed in, at their paths, and 404 elsewhere', async () => {
    const r = await request(`${listeners.webhook.url}/agent/v1/nodes/gpu-1`, { ca: tlsA.caCert });
    expect(r.status).toBe(200);
    expect(r.json).toEqual({ node: 'gpu-1' });
    const none = await request(`${listeners.webhook.url}/scheduler/bind`, { method: 'POST', ca: tlsA.caCert, body: '{}' });
    expect(none.status).toBe(404);
    expect(none.json).toMatchObject({ error: { code: 'NOT_FOUND' } });
  });

  it('its TLS is not on the event loop (ADR 0048): the routers see the client through peerOf, over TLS, never a TLS socket', async () => {
    const r = await request(`${listeners.webhook.url}/agent/v1/peer`, { ca: tlsA.caCert });
    expect(r.json).toEqual({ tlsOnLoop: false, peer: { address: '127.0.0.1', localAddress: '127.0.0.1', encrypted: true, authorized: false } });
  });

  it('a body over the largest a route takes is refused by the front, from its headers (413)', async () => {
    const r = await request(`${listeners.webhook.url}/agent/v1/nodes/a`, { method: 'POST', ca: tlsA.caCert, body: 'x'.repeat(WEBHOOK_MAX_BODY_BYTES + 1) });
    expect(r.status).toBe(413);
    expect(r.json).toMatchObject({ error: { code: 'PAYLOAD_TOO_LARGE' } });
  });
});

describe('certificate rotation', () => {
  it('setTls: new connections to the HTTPS listeners get the new certificate; no restart', async () => {
    const fp = (pem: string) => createHash('sha256').update(new X509Certificate(pem).raw).digest('hex');
    const before = await request(`${listeners.webhook.url}/agent/v1/nodes/a`, { ca: tlsA.caCert });
    expect(createHash('sha256').update(before.peer!.raw).digest('hex')).toBe(fp(tlsA.cert));
    const port = listeners.webhook.port;
    await listeners.setTls({ cert: tlsB.cert, key: tlsB.key, ca: tlsB.caCert });
    for (const url of [`${listeners.webhook.url}/agent/v1/nodes/a`, `${listeners.metrics.url}/metrics`, `${listeners.api.url}/healthz`]) {
      const after = await request(url, { ca: tlsB.caCert, token: 'prometheus-token' });
      expect(after.status).toBe(200);
      expect(createHash('sha256').update(after.peer!.raw).digest('hex')).toBe(fp(tlsB.cert));
      await expect(request(url, { ca: tlsA.caCert })).rejects.toThrow(/certificate|signature/i);
    }
    expect(listeners.webhook.port).toBe(port);
  });
});

describe('limitListeners (ADR 0036)', () => {
  it('the capacity API (not its probes), /metrics and the agents are limited per source; admission is not', async () => {
    const ok: RequestListener = (_req, res) => res.end('{}');
    const limited: string[] = [];
    const apps = limitListeners({ api: ok, metrics: ok, webhook: ok }, { perSecond: 0.001, burst: 1, onLimited: (l) => limited.push(l) });
    const servers = await Promise.all([apps.api, apps.metrics, apps.webhook].map((h) => listen(h, { host: '127.0.0.1', port: 0 })));
    try {
      const [api, metrics, webhook] = servers.map((s) => s.url);
      const status = async (url: string, method = 'POST') => (await request(url, { method, body: method === 'POST' ? '{}' : undefined })).status;
      expect([await status(`${api}/api/compute/capacity/summary`), await status(`${api}/api/compute/capacity/summary`)]).toEqual([200, 429]);
      expect([await status(`${api}/healthz`, 'GET'), await status(`${api}/readyz`, 'GET')]).toEqual([200, 200]);
      expect([await status(`${metrics}/metrics`, 'GET'), await status(`${metrics}/metrics`, 'GET')]).toEqual([200, 429]);
      expect([await status(`${webhook}/agent/v1/nodes/a`, 'GET'), await status(`${webhook}/agent/v1/nodes/a`, 'GET')]).toEqual([200, 429]);
      for (let i = 0; i < 5; i++) expect(await status(`${webhook}/admission/pods?timeout=10s`)).toBe(200);
      expect(limited).toEqual(['api', 'metrics', 'webhook']);
    } finally {
      await Promise.all(servers.map((s) => s.close(0)));
    }
  });
});
