// `better-compute controller` (runController, the product's webhook routers) with WEBHOOK_CLIENT_CA_FILE (ADR 0034),
// against a test database and the in-process fake API server, its serving certificate from files (TLS_CERT_FILE) so
// that a rotation is a write and a reload. Real TLS handshakes: the API server's client certificate gets an
// AdmissionReview; a caller without one, or with another CA's, gets 403 before its body is sent; the node agent's
// client (ControllerClient), without a certificate, reads its node's state with its token; all of it again after the
// certificate is rotated.
import { createHash, X509Certificate } from 'node:crypto';
import fs from 'node:fs';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ControllerClient } from '../../src/agent/controller-client.ts';
import { agentUsernameFor, NODE_NAME_CLAIM } from '../../src/agentapi/router.ts';
import { loadConfig } from '../../src/config.ts';
import { generateCa, issueBundle, type KeyPairPem, type TlsBundle } from '../../src/controller/certs.ts';
import { runController, type RunningController } from '../../src/controller/run.ts';
import { silentLogger } from '../../src/log.ts';
import { issueClientCert, labelledPodReview } from '../support/webhook-caller.ts';
import { useTestDatabase } from '../support/db.ts';
import { startFakeKubeApi, type FakeKubeApi } from '../support/fake-kube-api.ts';
import { request } from '../support/http.ts';

const ctx = useTestDatabase();
const NS = 'bc-client-ca-test';

let fake: FakeKubeApi;
let dir: string;
let controller: RunningController;
let tlsA: TlsBundle;
let tlsB: TlsBundle;
let apiServer: KeyPairPem;
let stranger: KeyPairPem;

function writeServing(b: TlsBundle): void {
  fs.writeFileSync(path.join(dir, 'tls.crt'), b.cert);
  fs.writeFileSync(path.join(dir, 'tls.key'), b.key);
  fs.writeFileSync(path.join(dir, 'ca.crt'), b.caCert);
}

beforeAll(async () => {
  fake = await startFakeKubeApi({
    users: { 'agent-token': { username: agentUsernameFor(NS), extra: { [NODE_NAME_CLAIM]: ['gpu-1'] } } },
    allowed: () => false,
    objects: true,
  });
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bc-client-ca-'));
  tlsA = issueBundle(Date.now(), ['localhost', '127.0.0.1']);
  tlsB = issueBundle(Date.now(), ['localhost', '127.0.0.1']);
  writeServing(tlsA);
  const clientCa = generateCa(Date.now(), { commonName: 'kube-apiserver-webhook-client-ca' });
  apiServer = issueClientCert(clientCa, 'kube-apiserver');
  stranger = issueClientCert(generateCa(Date.now(), { commonName: 'someone-else-ca' }), 'kube-apiserver');
  fs.writeFileSync(path.join(dir, 'client-ca.crt'), clientCa.cert);
  const config = loadConfig({
    DATABASE_URL: ctx.url,
    KUBECONFIG: fake.kubeconfigFile(dir),
    BETTER_COMPUTE_NAMESPACE: NS,
    POD_NAME: 'client-ca-test',
    HOST: '127.0.0.1',
    PORT: '0',
    BETTER_COMPUTE_AUTH: 'kubernetes',
    EXTENDER_PORT: '0',
    METRICS_PORT: '0',
    WEBHOOK_PORT: '0',
    TLS_CERT_FILE: path.join(dir, 'tls.crt'),
    TLS_KEY_FILE: path.join(dir, 'tls.key'),
    TLS_CA_FILE: path.join(dir, 'ca.crt'),
    WEBHOOK_CLIENT_CA_FILE: path.join(dir, 'client-ca.crt'),
    LOG_LEVEL: 'error',
  });
  controller = await runController(config, silentLogger);
}, 120_000);

afterAll(async () => {
  await controller?.stop();
  await fake?.close();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

const REVIEW = labelledPodReview('team-a');

const admissionUrl = () => `${controller.webhookUrl}/admission/pods?timeout=5s`;

function admit(ca: string, clientCert?: KeyPairPem) {
  return request(admissionUrl(), { method: 'POST', body: REVIEW, ca, ...(clientCert ? { clientCert } : {}) });
}

/**
 * A POST that declares a 1 MiB body and sends none (or, chunked, sends 64 KiB of one): answered only by a server that
 * does not wait for the body.
 */
function withheldBody(ca: string, clientCert?: KeyPairPem, chunked = false): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = https.request(
      admissionUrl(),
      {
        method: 'POST',
        agent: false,
        ca,
        servername: 'localhost',
        ...(clientCert ? { cert: clientCert.cert, key: clientCert.key } : {}),
        headers: { 'content-type': 'application/json', ...(chunked ? {} : { 'content-length': String(1024 * 1024) }) },
      },
      (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
        req.destroy();
      },
    );
    req.on('error', reject);
    req.setTimeout(5_000, () => req.destroy(new Error('no answer while the body was withheld')));
    if (chunked) req.write(Buffer.alloc(64 * 1024, ' '));
    else req.flushHeaders();
  });
}

const fingerprint = (pem: string) => createHash('sha256').update(new X509Certificate(pem).raw).digest('hex');

async function expectVerification(serving: TlsBundle): Promise<void> {
  const ca = serving.caCert;
  const ok = await admit(ca, apiServer);
  expect(ok.status).toBe(200);
  expect(createHash('sha256').update(ok.peer!.raw).digest('hex')).toBe(fingerprint(serving.cert));
  // Caches not synced (the fake API server lists no Reservations): the webhook's answer, not the listener's refusal.
  expect(ok.json).toMatchObject({ apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', response: { uid: 'review-1', allowed: false } });
  // The API server sends a Content-Length: a chunked body, even from its certificate, is refused from its headers (ADR 0048).
  expect(await withheldBody(ca, apiServer, true)).toBe(411);
  for (const clientCert of [undefined, stranger]) {
    const refused = await admit(ca, clientCert);
    expect(refused.status).toBe(403);
    expect(refused.json).toMatchObject({ error: { code: 'FORBIDDEN' } });
    expect(refused.text).not.toContain('AdmissionReview');
    expect(await withheldBody(ca, clientCert)).toBe(403);
  }
  // The agent's own client (a fresh one: its keep-alive connections would outlive the rotation), no certificate.
  fs.writeFileSync(path.join(dir, 'agent-token'), 'agent-token');
  const agent = new ControllerClient({
    url: controller.webhookUrl,
    nodeName: 'gpu-1',
    caFile: path.join(dir, 'ca.crt'),
    serverName: 'localhost',
    tokenFile: path.join(dir, 'agent-token'),
  });
  try {
    expect(await agent.state()).toMatchObject({ admission: null });
  } finally {
    agent.close();
  }
  expect((await request(`${controller.webhookUrl}/agent/v1/nodes/gpu-1/state`, { ca })).status).toBe(401);
}

describe('runController with WEBHOOK_CLIENT_CA_FILE', () => {
  it('admission answers only the client CA’s certificate; the agents keep their tokens', async () => {
    await expectVerification(tlsA);
  });

  it('after the serving certificate is rotated (files rewritten, reloaded), the verification holds', async () => {
    writeServing(tlsB);
    await controller.reloadTls();
    await expectVerification(tlsB);
  });
});
