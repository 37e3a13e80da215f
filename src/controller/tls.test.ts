// Where the HTTPS listeners' certificate comes from: the Secret (created by the first replica, 409 → the winner's,
// renewed by the leader, repaired by anyone when unusable), the CA published to a ConfigMap and the webhook's
// caBundle; or files. The Kubernetes calls go to the in-process fake API server.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startFakeKubeApi, type FakeKubeApi } from '../../test/support/fake-kube-api.ts';
import { silentLogger } from '../log.ts';
import { DAY_MS, generateCa, issueBundle, issueServingCert, SERVING_VALIDITY_MS, serviceSans, splitPem, type TlsBundle } from './certs.ts';
import { ClientNodeTlsKube, FileTlsSource, ProvidedSecretTlsSource, readClientCaBundle, SecretTlsSource, type ServingTls, type TlsKube } from './tls.ts';

const NS = 'better-compute-system';
const SECRET_PATH = `/api/v1/namespaces/${NS}/secrets/better-compute-tls`;
const CM_PATH = `/api/v1/namespaces/${NS}/configmaps/better-compute-ca`;
const MWC_PATH = '/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/better-compute';
const SANS = serviceSans(NS);

let fake: FakeKubeApi;
beforeAll(async () => {
  fake = await startFakeKubeApi({ users: {}, allowed: () => false, objects: true });
});
afterAll(async () => fake.close());
beforeEach(() => {
  fake.objects.clear();
  fake.seen.length = 0;
});

const sources: SecretTlsSource[] = [];
afterEach(() => {
  for (const s of sources.splice(0)) s.stop();
});

function source(o: { leader?: () => boolean; now?: () => number; kube?: TlsKube; caOverlapMs?: number } = {}): SecretTlsSource {
  const s = new SecretTlsSource({
    kube: o.kube ?? new ClientNodeTlsKube(fake.kubeConfig()),
    namespace: NS,
    secretName: 'better-compute-tls',
    sans: SANS,
    isLeader: o.leader ?? (() => false),
    log: silentLogger,
    reloadEveryMs: 3_600_000,
    ...(o.now ? { now: o.now } : {}),
    ...(o.caOverlapMs !== undefined ? { caOverlapMs: o.caOverlapMs } : {}),
  });
  sources.push(s);
  return s;
}

const b64 = (s: string) => Buffer.from(s, 'utf8').toString('base64');
const unb64 = (s: string | undefined) => Buffer.from(s ?? '', 'base64').toString('utf8');
const secretData = () => fake.objects.get(SECRET_PATH)?.data as Record<string, string>;
const posts = (p: string) => fake.seen.filter((r) => r.method === 'POST' && r.path.startsWith(p)).length;

function seedWebhookConfiguration() {
  fake.objects.set(MWC_PATH, {
    apiVersion: 'admissionregistration.k8s.io/v1',
    kind: 'MutatingWebhookConfiguration',
    metadata: { name: 'better-compute', resourceVersion: '1' },
    webhooks: [
      { name: 'pods.bettercompute.io', clientConfig: { service: { name: 'better-compute-controller', namespace: NS, path: '/admission/pods' } } },
      { name: 'other.bettercompute.io', clientConfig: { service: { name: 'better-compute-controller', namespace: NS }, caBundle: b64('stale') } },
    ],
  });
}

function seedSecret(b: Partial<TlsBundle>) {
  const data: Record<string, string> = {};
  if (b.caCert) data['ca.crt'] = b64(b.caCert);
  if (b.caKey) data['ca.key'] = b64(b.caKey);
  if (b.cert) data['tls.crt'] = b64(b.cert);
  if (b.key) data['tls.key'] = b64(b.key);
  fake.objects.set(SECRET_PATH, { apiVersion: 'v1', kind: 'Secret', metadata: { name: 'better-compute-tls', namespace: NS, resourceVersion: '5' }, data });
}

describe('SecretTlsSource', () => {
  it('the first replica creates the Secret (type kubernetes.io/tls), the CA ConfigMap, and the webhook caBundle', async () => {
    seedWebhookConfiguration();
    const tls = await source().start(() => undefined);
    const secret = fake.objects.get(SECRET_PATH)!;
    expect(secret.type).toBe('kubernetes.io/tls');
    expect(Object.keys(secret.data).sort()).toEqual(['ca.crt', 'ca.key', 'tls.crt', 'tls.key']);
    expect(unb64(secret.data['tls.crt'])).toBe(tls.cert);
    expect(unb64(secret.data['tls.key'])).toBe(tls.key);
    expect(unb64(secret.data['ca.crt'])).toBe(tls.ca);
    expect(fake.objects.get(CM_PATH)!.data).toEqual({ 'ca.crt': tls.ca });
    const mwc = fake.objects.get(MWC_PATH)!;
    expect(mwc.webhooks.map((w: { clientConfig: { caBundle?: string } }) => w.clientConfig.caBundle)).toEqual([b64(tls.ca!), b64(tls.ca!)]);
    expect(mwc.webhooks[0].clientConfig.service.path).toBe('/admission/pods');
  }, 30_000);

  it('no MutatingWebhookConfiguration (404) is not an error; a second replica serves the same Secret and creates nothing', async () => {
    const first = await source().start(() => undefined);
    expect(fake.objects.has(MWC_PATH)).toBe(false);
    fake.seen.length = 0;
    const second = await source().start(() => undefined);
    expect(second).toEqual(first);
    expect(posts('/api/v1')).toBe(0);
    expect(fake.seen.filter((r) => r.method === 'PUT')).toEqual([]);
  }, 30_000);

  it('two replicas starting together: one Secret; the loser of the create (409) serves the winner’s', async () => {
    // The second replica's first read happens before the first one's create: it creates too, gets 409, reads again.
    const real = new ClientNodeTlsKube(fake.kubeConfig());
    let gate!: () => void;
    const readDone = new Promise<void>((r) => (gate = r));
    let reads = 0;
    const slow: TlsKube = {
      ...Object.fromEntries((['createSecret', 'replaceSecret', 'ensureConfigMap', 'patchWebhookCaBundle'] as const).map((k) => [k, real[k].bind(real)])),
      async readSecret(ns, name) {
        const r = await real.readSecret(ns, name);
        if (reads++ === 0) {
          gate();
          await new Promise((res) => setTimeout(res, 50));
          while (!fake.objects.has(SECRET_PATH)) await new Promise((res) => setTimeout(res, 20));
        }
        return r;
      },
    } as TlsKube;
    const loser = source({ kube: slow }).start(() => undefined);
    await readDone;
    const winner = await source().start(() => undefined);
    const lost = await loser;
    expect(lost).toEqual(winner);
    expect(fake.seen.filter((r) => r.method === 'POST' && r.path.endsWith('/secrets')).length).toBe(2);
    expect(unb64(secretData()['tls.crt'])).toBe(winner.cert);
  }, 60_000);

  it('the leader renews a serving certificate within 30 days of its end from the same CA; followers pick it up', async () => {
    let now = Date.now();
    const leaderChanges: ServingTls[] = [];
    const followerChanges: ServingTls[] = [];
    const leader = source({ leader: () => true, now: () => now });
    const follower = source({ now: () => now });
    const first = await leader.start((t) => leaderChanges.push(t));
    await follower.start((t) => followerChanges.push(t));

    now += SERVING_VALIDITY_MS - 20 * DAY_MS;
    await follower.poll(); // not the leader: serves what is there
    expect(followerChanges).toEqual([]);
    expect(unb64(secretData()['tls.crt'])).toBe(first.cert);

    await leader.poll();
    expect(leaderChanges).toHaveLength(1);
    const renewed = leaderChanges[0]!;
    expect(renewed.cert).not.toBe(first.cert);
    expect(renewed.ca).toBe(first.ca);
    expect(unb64(secretData()['tls.crt'])).toBe(renewed.cert);
    await follower.poll();
    expect(followerChanges).toEqual([renewed]);
    // The CA did not change: the ConfigMap was not written again.
    expect(fake.seen.filter((r) => r.method === 'PUT' && r.path.startsWith(CM_PATH))).toEqual([]);
  }, 60_000);

  it('an unusable Secret is replaced by any replica (under its resourceVersion); a usable one within renewal is left to the leader', async () => {
    const good = issueBundle(Date.now(), SANS);
    const other = issueBundle(Date.now(), SANS);
    seedSecret({ ...good, key: other.key }); // key of another certificate
    const tls = await source().start(() => undefined);
    expect(tls.ca).toBe(good.caCert); // the CA was sound: kept
    expect(tls.cert).not.toBe(good.cert);
    const put = fake.seen.find((r) => r.method === 'PUT' && r.path === SECRET_PATH)!;
    expect(put.body.metadata.resourceVersion).toBe('5');
    // The writer publishes the CA even when not the leader.
    expect(fake.objects.get(CM_PATH)!.data['ca.crt']).toBe(good.caCert);

    fake.seen.length = 0;
    seedSecret(good);
    const later = Date.now() + SERVING_VALIDITY_MS - 10 * DAY_MS;
    const kept = await source({ now: () => later }).start(() => undefined);
    expect(kept.cert).toBe(good.cert);
    expect(fake.seen.filter((r) => r.method === 'PUT')).toEqual([]);
  }, 60_000);

  it('a replace that loses to another writer (409) reads again and serves the other’s', async () => {
    const good = issueBundle(Date.now(), SANS);
    seedSecret({ caCert: good.caCert, caKey: good.caKey }); // no serving certificate yet
    const real = new ClientNodeTlsKube(fake.kubeConfig());
    let raced = false;
    const racing: TlsKube = {
      readSecret: real.readSecret.bind(real),
      createSecret: real.createSecret.bind(real),
      ensureConfigMap: real.ensureConfigMap.bind(real),
      patchWebhookCaBundle: real.patchWebhookCaBundle.bind(real),
      async replaceSecret(ns, name, b, rv) {
        if (!raced) {
          raced = true;
          seedSecret(good); // someone else wrote first (resourceVersion is now current, ours is stale)
          fake.objects.get(SECRET_PATH)!.metadata.resourceVersion = '6';
        }
        return real.replaceSecret(ns, name, b, rv);
      },
    };
    const tls = await source({ kube: racing }).start(() => undefined);
    expect(tls.cert).toBe(good.cert);
    expect(fake.seen.filter((r) => r.method === 'PUT' && r.path === SECRET_PATH)).toHaveLength(1);
  }, 60_000);

  it('a failing API server at reload keeps the loaded certificate', async () => {
    const s = source({ leader: () => true });
    const changes: ServingTls[] = [];
    const first = await s.start((t) => changes.push(t));
    fake.failNext(10);
    await s.poll();
    fake.failNext(0);
    expect(changes).toEqual([]);
    await s.poll();
    expect(changes).toEqual([]);
    expect(first.cert).toBe(unb64(secretData()['tls.crt']));
  }, 30_000);

  it('a CA renewal overlaps (ADR 0040): both CAs published to the ConfigMap and the webhook, the old leaf served until the overlap ends', async () => {
    seedWebhookConfiguration();
    const t0 = Date.now() - 2 * 3_600_000;
    const ca0 = generateCa(t0, { validityMs: 20 * DAY_MS }); // inside the 30-day renewal window
    const leaf0 = issueServingCert(ca0, SANS, t0);
    seedSecret({ caCert: ca0.cert, caKey: ca0.key, cert: leaf0.cert, key: leaf0.key });
    let now = t0;
    const changes: ServingTls[] = [];
    const leader = source({ leader: () => true, now: () => now, caOverlapMs: 3_600_000 });
    const follower = source({ now: () => now, caOverlapMs: 3_600_000 });
    const first = await leader.start((t) => changes.push(t));
    await follower.start(() => undefined);
    // The new CA joined; the serving certificate is the old one.
    expect(first.cert).toBe(leaf0.cert);
    const cas = splitPem(first.ca!);
    expect(cas).toHaveLength(2);
    expect(cas[1]!.trim()).toBe(ca0.cert.trim());
    expect(fake.objects.get(CM_PATH)!.data['ca.crt']).toBe(first.ca);
    for (const w of fake.objects.get(MWC_PATH)!.webhooks) expect(unb64(w.clientConfig.caBundle)).toBe(first.ca);
    // Within the overlap: nothing changes.
    now = t0 + 30 * 60_000;
    await leader.poll();
    expect(changes).toEqual([]);
    // After it: a serving certificate from the new CA, the bundle (both CAs) unchanged.
    now = t0 + 61 * 60_000;
    await leader.poll();
    expect(changes).toHaveLength(1);
    expect(changes[0]!.cert).not.toBe(leaf0.cert);
    expect(changes[0]!.ca).toBe(first.ca);
    expect(unb64(secretData()['tls.crt'])).toBe(changes[0]!.cert);
  }, 60_000);

  it('ProvidedSecretTlsSource: the user’s Secret is served and re-read; a missing one stops the start', async () => {
    const kube = new ClientNodeTlsKube(fake.kubeConfig());
    const provided = (name: string) => new ProvidedSecretTlsSource({ kube, namespace: NS, secretName: name, log: silentLogger, reloadEveryMs: 3_600_000 });
    await expect(provided('better-compute-api-tls').start(() => undefined)).rejects.toThrow(/does not exist/);
    const mine = issueBundle(Date.now(), ['capacity.example.com']);
    const put = (b: TlsBundle) =>
      fake.objects.set(`/api/v1/namespaces/${NS}/secrets/better-compute-api-tls`, {
        apiVersion: 'v1',
        kind: 'Secret',
        metadata: { name: 'better-compute-api-tls', namespace: NS, resourceVersion: '9' },
        type: 'kubernetes.io/tls',
        data: { 'tls.crt': b64(b.cert), 'tls.key': b64(b.key) },
      });
    put(mine);
    const changes: ServingTls[] = [];
    const s = provided('better-compute-api-tls');
    expect(await s.start((t) => changes.push(t))).toEqual({ cert: mine.cert, key: mine.key });
    const renewed = issueBundle(Date.now(), ['capacity.example.com']);
    put(renewed);
    await s.poll();
    s.stop();
    expect(changes).toEqual([{ cert: renewed.cert, key: renewed.key }]);
    // Nothing written: not the Secret, no ConfigMap, no webhook.
    expect(fake.seen.filter((r) => r.method !== 'GET')).toEqual([]);
  }, 60_000);

  it('the CA ConfigMap and the webhook caBundle are repaired by the leader when someone changed them', async () => {
    seedWebhookConfiguration();
    const s = source({ leader: () => true });
    const tls = await s.start(() => undefined);
    fake.objects.get(CM_PATH)!.data['ca.crt'] = 'tampered';
    fake.objects.get(MWC_PATH)!.webhooks[1].clientConfig.caBundle = b64('tampered');
    await s.poll();
    expect(fake.objects.get(CM_PATH)!.data['ca.crt']).toBe(tls.ca);
    expect(fake.objects.get(MWC_PATH)!.webhooks[1].clientConfig.caBundle).toBe(b64(tls.ca!));
    const patches = fake.seen.filter((r) => r.method === 'PATCH');
    expect(patches.at(-1)!.body).toEqual([
      { op: 'test', path: '/webhooks/1/name', value: 'other.bettercompute.io' },
      { op: 'add', path: '/webhooks/1/clientConfig/caBundle', value: b64(tls.ca!) },
    ]);
  }, 30_000);
});

describe('FileTlsSource', () => {
  it('reads the files, and hands a changed certificate over at the next poll', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bc-tls-'));
    try {
      const a = issueBundle(Date.now(), ['localhost']);
      const b = issueBundle(Date.now(), ['localhost']);
      const files = { cert: path.join(dir, 'tls.crt'), key: path.join(dir, 'tls.key'), ca: path.join(dir, 'ca.crt') };
      fs.writeFileSync(files.cert, a.cert);
      fs.writeFileSync(files.key, a.key);
      fs.writeFileSync(files.ca, a.caCert);
      const s = new FileTlsSource(files, silentLogger, 3_600_000);
      const changes: ServingTls[] = [];
      expect(await s.start((t) => changes.push(t))).toEqual({ cert: a.cert, key: a.key, ca: a.caCert });
      await s.poll();
      expect(changes).toEqual([]);
      fs.writeFileSync(files.cert, b.cert);
      fs.writeFileSync(files.key, b.key);
      await s.poll();
      expect(changes).toEqual([{ cert: b.cert, key: b.key, ca: a.caCert }]);
      s.stop();
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }, 30_000);
});

describe('readClientCaBundle (WEBHOOK_CLIENT_CA_FILE)', () => {
  it('takes one or more CAs; refuses a missing file, no certificate, an unparsable one, and a certificate that is no CA', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bc-client-ca-'));
    const file = (name: string, text: string) => {
      fs.writeFileSync(path.join(dir, name), text);
      return path.join(dir, name);
    };
    try {
      const old = generateCa(Date.now(), { commonName: 'apiserver-client-ca-old' });
      const next = generateCa(Date.now(), { commonName: 'apiserver-client-ca-new' });
      const both = await readClientCaBundle(file('both.crt', `# renewal: old and new\n${old.cert}\n${next.cert}`));
      expect(both.subjects).toEqual(['CN=apiserver-client-ca-old', 'CN=apiserver-client-ca-new']);
      expect(splitPem(both.pem)).toEqual([...splitPem(old.cert), ...splitPem(next.cert)]);
      await expect(readClientCaBundle(path.join(dir, 'absent.crt'))).rejects.toThrow(/cannot be read: ENOENT/);
      await expect(readClientCaBundle(file('empty.crt', ''))).rejects.toThrow(/holds no PEM certificate/);
      await expect(readClientCaBundle(file('key.pem', old.key))).rejects.toThrow(/holds no PEM certificate/);
      const garbled = old.cert.replace(/\n[A-Za-z0-9+/]{20}/, '\nAAAAAAAAAAAAAAAAAAAA');
      await expect(readClientCaBundle(file('garbled.crt', garbled))).rejects.toThrow(/certificate 1 does not parse/);
      const leaf = issueServingCert(old, ['kube-apiserver'], Date.now());
      await expect(readClientCaBundle(file('leaf.crt', `${next.cert}${leaf.cert}`))).rejects.toThrow(/certificate 2 \(CN=kube-apiserver\) is not a CA/);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }, 30_000);
});
