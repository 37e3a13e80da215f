import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import YAML from 'yaml';
import { loadKubeConfig } from '../../src/extender/kube.ts';
import { silentLogger } from '../../src/log.ts';
import { startNamespaceGrants, type NamespaceGrants } from '../../src/controller/namespace-grants.ts';
import { installCrds } from './controller-support.ts';
import { apply, clusterInfo, kubectl, kubectlJson, kubectlResult, uniqueName, waitFor } from './harness.ts';

// deploy/admission/: a pod may use only the Reservations of its own namespace, refused by the API server itself
// (ValidatingAdmissionPolicy, CEL, no webhook). The binding is limited here to this file's namespaces (a label), so
// that other suites on the shared cluster, whose pods draw on reservations without Reservation objects, are unaffected.
const id = uniqueName('adm');
const nsA = `${id}-a`;
const nsB = `${id}-b`;
const POLICY = 'bettercompute-reservation-namespace';
const TEST_LABEL = 'bettercompute.io/admission-test';
// A well-formed reservation resource (rsv-<26 lower-case ULID characters>), as the controller writes it in status.
const resource = `reservations.bettercompute.io/rsv-01k${id.slice(-8).replace(/[^0-9a-hjkmnp-tv-z]/g, '0')}${'0'.repeat(15)}`;
let grants: NamespaceGrants;

function pod(namespace: string, resources: Record<string, string>, initResources?: Record<string, string>) {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name: 'p', namespace },
    spec: {
      restartPolicy: 'Never',
      ...(initResources ? { initContainers: [{ name: 'init', image: clusterInfo().busyboxImage, resources: { limits: initResources } }] } : {}),
      containers: [{ name: 'main', image: clusterInfo().busyboxImage, command: ['true'], resources: { limits: resources } }],
    },
  };
}

/** Server-side dry run of a create: admission runs in full, nothing is stored or scheduled. */
async function tryCreate(obj: object) {
  return kubectlResult(['create', '--dry-run=server', '-f', '-'], { input: JSON.stringify(obj) });
}

const reservationPod = (namespace: string) => pod(namespace, { [resource]: '1', 'bettercompute.io/reservation': '1' });

describe('admission: a pod may not use another namespace\'s reservation', () => {
  beforeAll(async () => {
    await installCrds();
    const objs = YAML.parseAllDocuments(fs.readFileSync(path.join(import.meta.dirname, '../../deploy/admission/policy.yaml'), 'utf8')).map(
      (d) => d.toJS() as { kind: string; spec: Record<string, unknown> },
    );
    for (const o of objs) {
      if (o.kind === 'ValidatingAdmissionPolicyBinding') o.spec = { ...o.spec, matchResources: { namespaceSelector: { matchLabels: { [TEST_LABEL]: id } } } };
    }
    await apply(objs);
    for (const ns of [nsA, nsB]) await apply({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns, labels: { [TEST_LABEL]: id } } });
    // A Reservation of namespace A whose booking the controller made (status written here as the controller would).
    await apply({
      apiVersion: 'bettercompute.io/v1alpha1',
      kind: 'Reservation',
      metadata: { name: 'train', namespace: nsA },
      spec: { pool: 'some-pool', devices: [{ class: 'gpu', count: 1 }], duration: '1h' },
    });
    await kubectl(['-n', nsA, 'patch', 'reservation', 'train', '--subresource=status', '--type=merge', '-p', JSON.stringify({ status: { phase: 'Reserved', resourceName: resource } })]);
    grants = await startNamespaceGrants({ kubeConfig: loadKubeConfig(clusterInfo().kubeconfig), log: silentLogger, everyMs: 1000 });
    await waitFor(`namespace ${nsA} granted ${resource}`, async () => {
      const ns = await kubectlJson<{ metadata: { labels?: Record<string, string> } }>(['get', 'namespace', nsA]);
      return ns.metadata.labels?.[resource] === 'train';
    });
    // The policy takes effect once the API server has loaded it (a few seconds at most).
    await waitFor('the policy to refuse', async () => (await tryCreate(reservationPod(nsB))).code !== 0, { timeoutMs: 30_000, intervalMs: 500 });
  }, 120_000);

  afterAll(async () => {
    await grants?.stop();
    await kubectl(['delete', 'validatingadmissionpolicybinding,validatingadmissionpolicy', POLICY, '--ignore-not-found']).catch(() => undefined);
    await kubectl(['delete', 'namespace', nsA, nsB, '--ignore-not-found', '--wait=false']).catch(() => undefined);
  });

  it('refuses the pod in namespace B with a clear message, and admits it in namespace A', async () => {
    const refused = await tryCreate(reservationPod(nsB));
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toContain(`ValidatingAdmissionPolicy '${POLICY}'`);
    expect(refused.stderr).toContain(`pod ${nsB}/p requests ${resource}, which is not a Reservation of namespace ${nsB}`);
    const admitted = await tryCreate(reservationPod(nsA));
    expect(admitted.stderr).toBe('');
    expect(admitted.code).toBe(0);
  });

  it('checks init containers and requests too; pods without a reservation resource are not concerned', async () => {
    expect((await tryCreate(pod(nsB, { cpu: '100m' }, { [resource]: '1' }))).code).not.toBe(0);
    const viaRequests = pod(nsB, {});
    viaRequests.spec.containers[0]!.resources = { requests: { [resource]: '1' }, limits: { [resource]: '1' } } as never;
    expect((await tryCreate(viaRequests)).code).not.toBe(0);
    expect((await tryCreate(pod(nsB, { 'bettercompute.io/gpu': '1' }))).code).toBe(0);
    expect((await tryCreate(pod(nsB, { cpu: '100m' }))).code).toBe(0);
  });

  it('withdraws the grant when the Reservation goes: then namespace A is refused too', async () => {
    await kubectl(['-n', nsA, 'delete', 'reservation', 'train', '--wait=true']);
    await waitFor('the grant withdrawn', async () => {
      const ns = await kubectlJson<{ metadata: { labels?: Record<string, string> } }>(['get', 'namespace', nsA]);
      return ns.metadata.labels?.[resource] === undefined;
    });
    const r = await tryCreate(reservationPod(nsA));
    expect(r.code).not.toBe(0);
    expect(r.stderr).toContain(`which is not a Reservation of namespace ${nsA}`);
  });
});
