import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import * as k8s from '@kubernetes/client-node';
import express from 'express';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import YAML from 'yaml';
import { ledgerBookings } from '../../src/admission/bookings.ts';
import { createPodAdmissionRouter, reservationRef, type AdmissionLookups } from '../../src/admission/pods.ts';
import type { NamespaceCR, Reservation } from '../../src/kube/types.ts';
import { Ledger } from '../../src/db/ledger.ts';
import { kubeConfigFrom } from '../../src/kube/client.ts';
import { silentLogger } from '../../src/log.ts';
import { makeNode, makePool, reservation as reservationInput } from '../../test/support/builders.ts';
import { createTestDatabase, type TestDatabase } from '../../test/support/db.ts';
import { installCrds } from './controller-support.ts';
import { agentKubeconfig, apply, clusterInfo, kubectl, kubectlJson, kubectlResult, uniqueName, waitFor, type List, type Pod } from './harness.ts';
import { reservationResourceName } from '../../src/core/names.ts';

// deploy/admission/ on the real API server (the process cluster's release, v1.37):
// - the ValidatingAdmissionPolicies (CEL, compiled and run by the API server): a pod requesting our resources that
//   sets spec.nodeName or names another scheduler is refused; the node agent's identity may write only its own node's
//   NodeDevices (impersonated: the agent ServiceAccount with user.extra authentication.kubernetes.io/node-name);
// - the mutating webhook (src/admission/pods.ts) served from this process over HTTPS on loopback: a Job of 2 pods
//   that only carries the reservation label and asks for bettercompute.io/gpu gets the Reservation's own resource
//   (id from the ledger by the Reservation's uid) and better-compute-scheduler.
// Copies of the policies and of the webhook, named for this file and bound to its namespaces only, so that other
// suites on the shared cluster are unaffected. (Where the product is installed from deploy/, its own objects do the
// same; the policy tests then pass either way.)
const id = uniqueName('adm');
const nsA = `${id}-a`;
const nsB = `${id}-b`;
const TEST_LABEL = 'bettercompute.io/admission-test';
const DIR = path.join(import.meta.dirname, '../../deploy/admission');
const external = process.env.BC_EXTERNAL_CLUSTER === '1';

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Obj = Record<string, any>;
const manifests = (file: string): Obj[] => YAML.parseAllDocuments(fs.readFileSync(path.join(DIR, file), 'utf8')).map((d) => d.toJS() as Obj);
const created: { kind: string; name: string }[] = [];
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'bc-adm-'));

function pod(namespace: string, spec: Obj, labels: Record<string, string> = {}) {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name: 'p', namespace, labels },
    spec: { restartPolicy: 'Never', containers: [{ name: 'main', image: clusterInfo().busyboxImage, command: ['true'] }], ...spec },
  };
}
const gpuContainers = (n = '1') => [{ name: 'main', image: clusterInfo().busyboxImage, command: ['true'], resources: { limits: { 'bettercompute.io/gpu': n } } }];

/** Server-side dry run of a create: admission runs in full, nothing is stored or scheduled. */
async function tryCreate(obj: object, extraArgs: string[] = []) {
  return kubectlResult([...extraArgs, 'create', '--dry-run=server', '-f', '-'], { input: JSON.stringify(obj) });
}

beforeAll(async () => {
  await installCrds();
  for (const ns of [nsA, nsB]) await apply({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns, labels: { [TEST_LABEL]: id } } });
}, 120_000);

afterAll(async () => {
  for (const o of created.reverse()) await kubectl(['delete', o.kind, o.name, '--ignore-not-found']).catch(() => undefined);
  await kubectl(['delete', 'nodedevices', `${id}-node-a`, '--ignore-not-found']).catch(() => undefined);
  await kubectl(['delete', 'namespace', nsA, nsB, '--ignore-not-found', '--wait=false']).catch(() => undefined);
  fs.rmSync(tmp, { recursive: true, force: true });
});

describe('admission policies (CEL) on the API server', () => {
  beforeAll(async () => {
    const objs = manifests('policies.yaml');
    for (const o of objs) {
      if (o.kind === 'ValidatingAdmissionPolicy') o.metadata.name = `${o.metadata.name}-${id}`;
      if (o.kind === 'ValidatingAdmissionPolicyBinding') {
        o.metadata.name = `${o.metadata.name}-${id}`;
        o.spec.policyName = `${o.spec.policyName}-${id}`;
        // Pods: only this file's namespaces (NodeDevices are cluster-scoped: a namespaceSelector does not narrow them,
        // and the policy concerns the agent's identity only).
        if (o.metadata.name.startsWith('bettercompute-scheduler-only')) o.spec.matchResources = { namespaceSelector: { matchLabels: { [TEST_LABEL]: id } } };
      }
      created.push({ kind: o.kind, name: o.metadata.name });
    }
    await apply(objs);
    // The agent's RBAC (deploy/agent/daemonset.yaml), so that what refuses below is the policy, not RBAC.
    await apply([
      { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRole', metadata: { name: id }, rules: [{ apiGroups: ['bettercompute.io'], resources: ['nodedevices'], verbs: ['get', 'create', 'patch', 'update', 'delete'] }] },
      {
        apiVersion: 'rbac.authorization.k8s.io/v1',
        kind: 'ClusterRoleBinding',
        metadata: { name: id },
        roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: id },
        subjects: [{ kind: 'ServiceAccount', name: 'better-compute-agent', namespace: 'better-compute-system' }],
      },
    ]);
    created.push({ kind: 'ClusterRole', name: id }, { kind: 'ClusterRoleBinding', name: id });
    // The policies take effect once the API server has loaded them (a few seconds at most).
    await waitFor('the scheduler policy to refuse', async () => (await tryCreate(pod(nsA, { containers: gpuContainers(), nodeName: 'x' }))).code !== 0, {
      timeoutMs: 30_000,
      intervalMs: 500,
    });
    await waitFor('the NodeDevices policy to refuse', async () => {
      const r = await tryCreate({ apiVersion: 'bettercompute.io/v1alpha1', kind: 'NodeDevices', metadata: { name: `${id}-node-b` }, spec: { gpus: [] } }, ['--kubeconfig', agentKubeconfig(tmp, `${id}-node-a`)]);
      return r.code !== 0 && r.stderr.includes('ValidatingAdmissionPolicy');
    }, { timeoutMs: 30_000, intervalMs: 500 });
  }, 120_000);

  it('refuses a pod requesting bettercompute.io/gpu that sets spec.nodeName, and says what to do', async () => {
    const r = await tryCreate(pod(nsA, { containers: gpuContainers(), nodeName: 'node-1', schedulerName: 'better-compute-scheduler' }));
    expect(r.code).not.toBe(0);
    expect(r.stderr).toContain(`pod ${nsA}/p requests a bettercompute.io resource and sets spec.nodeName (node-1)`);
    expect(r.stderr).toContain('Remove spec.nodeName');
    // Init containers count too.
    const viaInit = pod(nsA, { initContainers: gpuContainers(), nodeName: 'node-1', schedulerName: 'better-compute-scheduler' });
    expect((await tryCreate(viaInit)).code).not.toBe(0);
  });

  it('refuses a pod naming another scheduler; admits it on better-compute-scheduler; pods without our resources are not concerned', async () => {
    const r = await tryCreate(pod(nsA, { containers: gpuContainers(), schedulerName: 'volcano' }));
    expect(r.code).not.toBe(0);
    expect(r.stderr).toContain('names scheduler volcano: GPUs are handed out only through better-compute-scheduler');
    const ok = await tryCreate(pod(nsA, { containers: gpuContainers(), schedulerName: 'better-compute-scheduler' }));
    expect([ok.code, ok.stderr]).toEqual([0, '']);
    const plain = await tryCreate(pod(nsA, { nodeName: 'node-1', schedulerName: 'volcano' }));
    expect([plain.code, plain.stderr]).toEqual([0, '']);
  });

  it('node A’s agent may write NodeDevices A, not B; a token without a node is refused', async () => {
    const a = `${id}-node-a`;
    const b = `${id}-node-b`;
    const nd = (name: string) => ({ apiVersion: 'bettercompute.io/v1alpha1', kind: 'NodeDevices', metadata: { name }, spec: { gpus: [] } });
    const asA = ['--kubeconfig', agentKubeconfig(tmp, a)];
    const refused = await kubectlResult([...asA, 'create', '-f', '-'], { input: JSON.stringify(nd(b)) });
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toContain(`the node agent of node ${a} may write only NodeDevices ${a}, not ${b}`);
    const own = await kubectlResult([...asA, 'create', '-f', '-'], { input: JSON.stringify(nd(a)) });
    expect([own.code, own.stderr]).toEqual([0, '']);
    // Patch and delete of its own object pass; of another node's object they are refused.
    await kubectl(['create', '-f', '-'], { input: JSON.stringify(nd(b)) });
    created.push({ kind: 'nodedevices', name: b });
    const patchB = await kubectlResult([...asA, 'patch', 'nodedevices', b, '--type=merge', '-p', '{"metadata":{"labels":{"x":"y"}}}']);
    expect(patchB.code).not.toBe(0);
    expect(patchB.stderr).toContain(`not ${b}`);
    const deleteB = await kubectlResult([...asA, 'delete', 'nodedevices', b]);
    expect(deleteB.code).not.toBe(0);
    expect((await kubectlResult([...asA, 'patch', 'nodedevices', a, '--type=merge', '-p', '{"metadata":{"labels":{"x":"y"}}}'])).code).toBe(0);
    expect((await kubectlResult([...asA, 'delete', 'nodedevices', a])).code).toBe(0);
    const none = await tryCreate(nd(a), ['--kubeconfig', agentKubeconfig(tmp, undefined)]);
    expect(none.code).not.toBe(0);
    expect(none.stderr).toContain('names no node');
  });
});

describe.skipIf(external)('the mutating webhook: a Job that names a reservation by label', () => {
  let server: https.Server;
  let tdb: TestDatabase;
  const WEBHOOK = `better-compute-${id}`;
  let rsvResource: string;

  beforeAll(async () => {
    // A serving certificate for 127.0.0.1, which is also its own CA.
    execFileSync('openssl', [
      'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '1',
      '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1',
      '-keyout', path.join(tmp, 'tls.key'), '-out', path.join(tmp, 'tls.crt'),
    ], { stdio: 'ignore' });
    const cert = fs.readFileSync(path.join(tmp, 'tls.crt'));

    // The ledger: a pool with a node, and the booking the reconciler would make for Reservation nsA/train (idempotency
    // key = its metadata.uid, tenant = its namespace, which has no tenant label).
    tdb = await createTestDatabase(4);
    const poolId = await makePool(`adm-${id}`).owner(nsA).create(tdb.db);
    await makeNode(`${id}-n0`).scalars({ vcpu: 64, memoryGiB: 512 }).create(tdb.db, poolId);
    await apply({ apiVersion: 'bettercompute.io/v1alpha1', kind: 'Reservation', metadata: { name: 'train', namespace: nsA }, spec: { pool: 'p', devices: [{ class: 'gpu', count: 2 }], duration: '1h' } });
    const r = await kubectlJson<Reservation>(['-n', nsA, 'get', 'reservation', 'train']);
    const booked = await new Ledger(tdb.db).reserve(reservationInput(poolId, { tenantId: nsA, devices: [{ class: 'gpu', count: 2 }], idempotencyKey: r.metadata.uid! }), Date.now());
    if (!booked.ok) throw new Error(`booking failed: ${booked.message}`);
    rsvResource = reservationResourceName(booked.reservation.id);

    // The webhook's lookups straight from the API server (the controller uses its informer caches).
    const kc = kubeConfigFrom(clusterInfo().kubeconfig);
    const custom = kc.makeApiClient(k8s.CustomObjectsApi);
    const core = kc.makeApiClient(k8s.CoreV1Api);
    const nsOf = async (n: string) => (await core.readNamespace({ name: n })) as NamespaceCR;
    const lookups: AdmissionLookups = {
      bookings: ledgerBookings(tdb.db),
      async reservation(namespace, name) {
        try {
          const o = (await custom.getNamespacedCustomObject({ group: 'bettercompute.io', version: 'v1alpha1', namespace, plural: 'reservations', name })) as Reservation;
          return reservationRef(o, await nsOf(namespace), true);
        } catch {
          return undefined;
        }
      },
      async reservationsIn(namespace) {
        const l = (await custom.listNamespacedCustomObject({ group: 'bettercompute.io', version: 'v1alpha1', namespace, plural: 'reservations' })) as List<Reservation>;
        const ns = await nsOf(namespace);
        return l.items.map((o) => reservationRef(o, ns, true)!).filter(Boolean);
      },
    };
    const app = express();
    app.use('/admission', createPodAdmissionRouter({ ...lookups, log: silentLogger }));
    server = https.createServer({ key: fs.readFileSync(path.join(tmp, 'tls.key')), cert }, app);
    await new Promise<void>((res) => server.listen(0, '127.0.0.1', res));
    const port = (server.address() as AddressInfo).port;

    const [w] = manifests('webhook.yaml');
    w!.metadata.name = WEBHOOK;
    // Both webhooks (pods, and dra-pods of ADR 0049) to this process, for the test's namespaces only.
    for (const h of w!.webhooks) {
      h.clientConfig = { url: `https://127.0.0.1:${port}/admission/pods`, caBundle: cert.toString('base64') };
      h.namespaceSelector = { matchLabels: { [TEST_LABEL]: id } };
    }
    await apply(w!);
    created.push({ kind: 'mutatingwebhookconfiguration', name: WEBHOOK });
    await waitFor('the webhook to answer', async () => {
      const r = await tryCreate(pod(nsA, { containers: gpuContainers() }, { 'bettercompute.io/reservation': 'nope' }));
      return r.code !== 0 && r.stderr.includes('has no Reservation nope');
    }, { timeoutMs: 30_000, intervalMs: 500 });
  }, 120_000);

  afterAll(async () => {
    await kubectl(['delete', 'mutatingwebhookconfiguration', WEBHOOK, '--ignore-not-found']).catch(() => undefined);
    await new Promise<void>((r) => (server ? server.close(() => r()) : r()));
    await tdb?.drop();
  });

  it('a Job of 2 pods with only the label and bettercompute.io/gpu: both get the Reservation’s resource and our scheduler', async () => {
    await apply({
      apiVersion: 'batch/v1',
      kind: 'Job',
      metadata: { name: 'train', namespace: nsA },
      spec: {
        parallelism: 2,
        completions: 2,
        template: {
          metadata: { labels: { 'bettercompute.io/reservation': 'train' } },
          spec: { restartPolicy: 'Never', containers: gpuContainers() },
        },
      },
    });
    const pods = await waitFor('the Job’s 2 pods', async () => {
      const l = await kubectlJson<List<Pod & { spec: Obj }>>(['-n', nsA, 'get', 'pods', '-l', 'job-name=train']);
      return l.items.length === 2 ? l.items : undefined;
    });
    for (const p of pods) {
      expect(p.spec.schedulerName).toBe('better-compute-scheduler');
      expect(p.spec.containers[0].resources.limits).toEqual({ [rsvResource]: '1' });
      expect(p.spec.containers[0].resources.requests).toEqual({ [rsvResource]: '1' });
    }
    await kubectl(['-n', nsA, 'delete', 'job', 'train', '--cascade=foreground', '--wait=false']);
  });

  it('a Reservation of another namespace, or none, is refused with a clear message', async () => {
    const other = await tryCreate(pod(nsB, { containers: gpuContainers() }, { 'bettercompute.io/reservation': 'train' }));
    expect(other.code).not.toBe(0);
    expect(other.stderr).toContain(`namespace ${nsB} has no Reservation train`);
    const foreign = await tryCreate(pod(nsB, { containers: [{ name: 'main', image: clusterInfo().busyboxImage, resources: { limits: { [rsvResource]: '1' } } }] }));
    expect(foreign.code).not.toBe(0);
    expect(foreign.stderr).toContain(`which is not a Reservation of namespace ${nsB}`);
  });
});
