// The webhook listener with WEBHOOK_CLIENT_CA_FILE (ADR 0034), wired as runController wires it: the bundle read by
// readClientCaBundle, startListeners given it, the product's routers (productWebhookRouters) built with the setting.
// Real TLS handshakes on loopback: the API server's client certificate gets an AdmissionReview answer; no certificate,
// or one another CA signed, gets 403 with no lookup; the agents send none and are still answered on their token; a
// rotated serving certificate keeps the verification. Without the setting, the webhook answers anyone, as before.
import { createHash, X509Certificate } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { RequestListener } from 'node:http';
import { KubeConfig } from '@kubernetes/client-node';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { issueClientCert, labelledPodReview } from '../../test/support/webhook-caller.ts';
import { request } from '../../test/support/http.ts';
import { agentUsernameFor, NODE_NAME_CLAIM } from '../agentapi/router.ts';
import { unauthenticated } from '../http/errors.ts';
import type { Config } from '../config.ts';
import type { Db } from '../db/pool.ts';
import { silentLogger } from '../log.ts';
import { generateCa, issueBundle, type KeyPairPem, type TlsBundle } from './certs.ts';
import { createWebhookApp, startListeners, type ControllerListeners } from './listeners.ts';
import type { ControllerServices } from './services.ts';
import { readClientCaBundle } from './tls.ts';
import { productWebhookRouters } from './webhooks.ts';

const NS = 'better-compute-system';
const POD_UID = '6f1c2a4e-9b1d-4c55-8a0e-2f3b4c5d6e7f';

let dir: string;
let tlsA: TlsBundle;
let tlsB: TlsBundle;
let apiServer: KeyPairPem;
let stranger: KeyPairPem;
let verifying: ControllerListeners;
let plain: ControllerListeners;
/** Reads of the Reservation and Namespace caches by the admission webhook. */
let lookups = 0;
/** Queries the routers made. */
let queries = 0;

function services(webhookClientCaFile: string | undefined): ControllerServices {
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: 'none', server: 'https://127.0.0.1:1', skipTLSVerify: true }],
    users: [{ name: 'none' }],
    contexts: [{ name: 'none', cluster: 'none', user: 'none' }],
    currentContext: 'none',
  });
  const cache = { get: () => (lookups++, undefined), list: () => (lookups++, []), hasSynced: true };
  return {
    config: { controllerNamespace: NS, tenancyByName: false, ...(webhookClientCaFile ? { webhookClientCaFile } : {}) } as Config,
    db: { query: async () => (queries++, { rows: [], rowCount: 0 }) } as unknown as Db,
    clock: { now: () => 0 },
    kc,
    log: silentLogger,
    informers: { reservations: cache, namespaces: cache },
    tokens: {
      authenticate: async (token: string) => {
        if (token !== 'agent-token') throw unauthenticated('not a token the API server knows');
        return { subject: agentUsernameFor(NS), extra: { [NODE_NAME_CLAIM]: ['gpu-1'] } };
      },
    },
  } as unknown as ControllerServices;
}

async function start(o: { clientCa?: string; caFile?: string }): Promise<ControllerListeners> {
  const none: RequestListener = (_req, res) => res.end();
  return startListeners({
    addresses: { httpHost: '127.0.0.1', httpPort: 0, extenderHost: '127.0.0.1', extenderPort: 0, metricsHost: '127.0.0.1', metricsPort: 0, webhookHost: '127.0.0.1', webhookPort: 0 },
    api: none,
    extender: none,
    metrics: none,
    webhook: createWebhookApp(productWebhookRouters(services(o.caFile)), silentLogger),
    tls: { cert: tlsA.cert, key: tlsA.key, ca: tlsA.caCert },
    webhookClientCa: o.clientCa,
  });
}

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bc-client-ca-'));
  tlsA = issueBundle(Date.now(), ['localhost', '127.0.0.1']);
  tlsB = issueBundle(Date.now(), ['localhost', '127.0.0.1']);
  const clientCa = generateCa(Date.now(), { commonName: 'kube-apiserver-webhook-client-ca' });
  apiServer = issueClientCert(clientCa, 'kube-apiserver');
  stranger = issueClientCert(generateCa(Date.now(), { commonName: 'someone-else-ca' }), 'kube-apiserver');
  const caFile = path.join(dir, 'client-ca.crt');
  fs.writeFileSync(caFile, clientCa.cert);
  const bundle = await readClientCaBundle(caFile);
  verifying = await start({ clientCa: bundle.pem, caFile });
  plain = await start({});
}, 60_000);

afterAll(async () => {
  await verifying?.close(0);
  await plain?.close(0);
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

beforeEach(() => {
  lookups = 0;
  queries = 0;
});

const REVIEW = labelledPodReview('team-b');

function admit(l: ControllerListeners, o: { ca: string; clientCert?: KeyPairPem }) {
  return request(`${l.webhook.url}/admission/pods?timeout=5s`, { method: 'POST', body: REVIEW, ca: o.ca, ...(o.clientCert ? { clientCert: o.clientCert } : {}) });
}

function agentCall(l: ControllerListeners, ca: string, token?: string) {
  return request(`${l.webhook.url}/agent/v1/nodes/gpu-1/admissions/${POD_UID}/done`, { method: 'POST', ca, ...(token ? { token } : {}) });
}

const fingerprint = (raw: Buffer) => createHash('sha256').update(raw).digest('hex');

describe('WEBHOOK_CLIENT_CA_FILE set', () => {
  it('the API server’s client certificate: an AdmissionReview answer, after the lookup', async () => {
    const r = await admit(verifying, { ca: tlsA.caCert, clientCert: apiServer });
    expect(r.status).toBe(200);
    expect(r.json).toMatchObject({ apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', response: { uid: 'review-1', allowed: false } });
    expect(lookups).toBeGreaterThan(0);
  });

  it('no client certificate: 403, no lookup, no query, and no AdmissionReview', async () => {
    const r = await admit(verifying, { ca: tlsA.caCert });
    expect(r.status).toBe(403);
    expect(r.json).toEqual({ error: { code: 'FORBIDDEN', message: expect.stringContaining('client certificate') } });
    expect(r.text).not.toContain('AdmissionReview');
    expect([lookups, queries]).toEqual([0, 0]);
  });

  it('a client certificate another CA signed: 403, no lookup', async () => {
    const r = await admit(verifying, { ca: tlsA.caCert, clientCert: stranger });
    expect(r.status).toBe(403);
    expect(r.json).toMatchObject({ error: { code: 'FORBIDDEN' } });
    expect([lookups, queries]).toEqual([0, 0]);
  });

  it('the agents send no certificate and are answered on their token (and refused without one)', async () => {
    const ok = await agentCall(verifying, tlsA.caCert, 'agent-token');
    expect(ok.status).toBe(200);
    expect(ok.json).toEqual({ dropped: false });
    expect(queries).toBe(1);
    expect((await agentCall(verifying, tlsA.caCert)).json).toMatchObject({ error: { code: 'UNAUTHENTICATED' } });
  });

  it('after setTls, the new serving certificate and the same verification', async () => {
    await verifying.setTls({ cert: tlsB.cert, key: tlsB.key, ca: tlsB.caCert });
    try {
      const ok = await admit(verifying, { ca: tlsB.caCert, clientCert: apiServer });
      expect(fingerprint(ok.peer!.raw)).toBe(fingerprint(new X509Certificate(tlsB.cert).raw));
      expect(ok.json).toMatchObject({ kind: 'AdmissionReview', response: { uid: 'review-1' } });
      expect((await admit(verifying, { ca: tlsB.caCert })).status).toBe(403);
      expect((await admit(verifying, { ca: tlsB.caCert, clientCert: stranger })).status).toBe(403);
      expect((await agentCall(verifying, tlsB.caCert, 'agent-token')).status).toBe(200);
    } finally {
      await verifying.setTls({ cert: tlsA.cert, key: tlsA.key, ca: tlsA.caCert });
    }
  });
});

describe('WEBHOOK_CLIENT_CA_FILE unset (as before)', () => {
  it('the admission webhook answers a caller without a certificate, and one with any', async () => {
    for (const clientCert of [undefined, stranger]) {
      const r = await admit(plain, { ca: tlsA.caCert, ...(clientCert ? { clientCert } : {}) });
      expect(r.json).toMatchObject({ kind: 'AdmissionReview', response: { uid: 'review-1', allowed: false } });
    }
    expect(lookups).toBeGreaterThan(0);
    expect((await agentCall(plain, tlsA.caCert, 'agent-token')).status).toBe(200);
  });
});
