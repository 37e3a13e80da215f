// `better-compute controller` (runController) with its four listeners, against a test database and the in-process
// fake API server: the fake answers TokenReview, SubjectAccessReview and keeps Secrets and ConfigMaps; everything else
// (informer lists and watches, the Lease) is 404, which the controller retries in the background — enough to see
// what each listener serves, the generated certificate in the Secret, and routers mounted on the webhook listener.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import express from 'express';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.ts';
import { runController, type ControllerServices, type RunningController } from '../../src/controller/run.ts';
import { silentLogger } from '../../src/log.ts';
import { startFakeKubeApi, type FakeKubeApi } from '../support/fake-kube-api.ts';
import { useTestDatabase } from '../support/db.ts';
import { request } from '../support/http.ts';

const ctx = useTestDatabase();
const NS = 'bc-listeners-test';

let fake: FakeKubeApi;
let dir: string;
let controller: RunningController;
let services: ControllerServices | undefined;


beforeAll(async () => {
  fake = await startFakeKubeApi({
    users: {
      'prom-token': { username: 'system:serviceaccount:monitoring:prometheus' },
      'tenant-token': { username: 'system:serviceaccount:team-a:default' },
      // `kubectl create token reader --audience bettercompute.io`, and the same without --audience.
      'reader-token': { username: 'system:serviceaccount:team-a:reader', audiences: ['bettercompute.io'] },
    },
    allowed: () => false,
    allowedNonResource: (user, p, verb) => user === 'system:serviceaccount:monitoring:prometheus' && p === '/metrics' && verb === 'get',
    objects: true,
  });
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bc-listeners-'));
  const config = loadConfig({
    DATABASE_URL: ctx.url,
    KUBECONFIG: fake.kubeconfigFile(dir),
    BETTER_COMPUTE_NAMESPACE: NS,
    POD_NAME: 'listeners-test',
    HOST: '127.0.0.1',
    PORT: '0',
    API_LOOPBACK_PORT: '0',
    BETTER_COMPUTE_AUTH: 'kubernetes',
    EXTENDER_PORT: '0',
    METRICS_PORT: '0',
    WEBHOOK_PORT: '0',
    TLS_EXTRA_SANS: 'localhost,127.0.0.1',
    LOG_LEVEL: 'error',
  });
  controller = await runController(config, silentLogger, {
    webhookRouters(s) {
      services = s;
      const agent = express.Router();
      agent.get('/ping', (_req, res) => void res.json({ namespace: s.config.controllerNamespace }));
      return [{ path: '/agent/v1', router: agent }];
    },
  });
}, 120_000);

afterAll(async () => {
  await controller?.stop();
  await fake?.close();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

describe('runController', () => {
  it('reports its listeners: the capacity API over HTTPS and plain on loopback, the extender on loopback, two more HTTPS', () => {
    expect(controller.url).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
    expect(controller.apiLoopbackUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(controller.extenderUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(controller.metricsUrl).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
    expect(controller.webhookUrl).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
    const urls = [controller.url, controller.apiLoopbackUrl!, controller.extenderUrl, controller.metricsUrl, controller.webhookUrl];
    expect(new Set(urls.map((u) => new URL(u).port)).size).toBe(5);
  });

  it('capacity API tokens: one minted for the API server is refused, one minted for bettercompute.io is taken', async () => {
    const ca = controller.caBundle()!;
    const summary = (token: string) =>
      request(`${controller.url}/api/compute/capacity/summary`, { method: 'POST', ca, token, headers: { 'content-type': 'application/json' }, body: '{"tenantId":"acme"}' });
    const before = fake.seen.length;
    expect(await summary('tenant-token')).toMatchObject({ status: 401, json: { error: { code: 'UNAUTHENTICATED' } } });
    const review = fake.seen.slice(before).find((r) => r.path === '/apis/authentication.k8s.io/v1/tokenreviews');
    expect(review?.body.spec).toEqual({ token: 'tenant-token', audiences: ['bettercompute.io'] });
    // Authenticated; RBAC (allowed: () => false here) then says no.
    expect(await summary('reader-token')).toMatchObject({ status: 403, json: { error: { code: 'FORBIDDEN' } } });
  });

  it('made the TLS Secret and the CA ConfigMap in its namespace, and serves that certificate', async () => {
    const secret = fake.objects.get(`/api/v1/namespaces/${NS}/secrets/better-compute-tls`);
    expect(secret?.type).toBe('kubernetes.io/tls');
    const ca = Buffer.from(secret!.data['ca.crt'], 'base64').toString('utf8');
    expect(controller.caBundle()).toBe(ca);
    expect(fake.objects.get(`/api/v1/namespaces/${NS}/configmaps/better-compute-ca`)?.data).toEqual({ 'ca.crt': ca });
    // Trusting only that CA, for the name localhost.
    expect((await request(`${controller.webhookUrl}/agent/v1/ping`, { ca })).status).toBe(200);
  });

  it('the capacity API listener: health, no /metrics, no /scheduler', async () => {
    const ca = controller.caBundle()!;
    expect((await request(`${controller.url}/healthz`, { ca })).status).toBe(200);
    expect((await request(`${controller.url}/metrics`, { ca })).status).toBe(404);
    expect((await request(`${controller.url}/scheduler/bind`, { method: 'POST', body: '{}', ca })).status).toBe(404);
    expect((await request(`${controller.url}/scheduler/filter`, { method: 'POST', body: '{}', ca })).status).toBe(404);
    expect((await request(`${controller.apiLoopbackUrl!}/healthz`)).status).toBe(200);
  });

  it('the extender listener: /scheduler only; a 60 MB body refused before it is read', async () => {
    const bad = await request(`${controller.extenderUrl}/scheduler/filter`, { method: 'POST', body: '{}' });
    expect(bad.status).toBe(400);
    const big = await request(`${controller.extenderUrl}/scheduler/bind`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'content-length': String(60 * 1024 * 1024) },
    });
    expect(big.status).toBe(413);
    expect((await request(`${controller.extenderUrl}/metrics`)).status).toBe(404);
    expect((await request(`${controller.extenderUrl}/healthz`)).status).toBe(404);
  });

  it('the metrics listener: 401 without a token, 403 for a tenant, metrics for the scraper RBAC allows', async () => {
    const ca = controller.caBundle()!;
    const url = `${controller.metricsUrl}/metrics`;
    expect(await request(url, { ca })).toMatchObject({ status: 401, json: { error: { code: 'UNAUTHENTICATED' } } });
    expect(await request(url, { ca, token: 'tenant-token' })).toMatchObject({ status: 403, json: { error: { code: 'FORBIDDEN' } } });
    const ok = await request(url, { ca, token: 'prom-token' });
    expect(ok.status).toBe(200);
    expect(ok.text).toContain('bettercompute_controller_leader');
    expect(ok.text).toContain('bettercompute_pool_capacity');
    expect(ok.text).toContain('# TYPE bettercompute_usage_month_atom_seconds gauge');
  });

  it('the webhook listener serves the routers passed in, which got the controller’s services', async () => {
    const r = await request(`${controller.webhookUrl}/agent/v1/ping`, { ca: controller.caBundle()! });
    expect(r.json).toEqual({ namespace: NS });
    expect(services).toBeDefined();
    expect(typeof services!.tokens.authenticate).toBe('function');
    expect((await services!.db.query('SELECT 1 AS one')).rows[0].one).toBe(1);
    expect(services!.isLeader()).toBe(false);
    expect((await request(`${controller.webhookUrl}/metrics`, { ca: controller.caBundle()! })).status).toBe(404);
  });
});
