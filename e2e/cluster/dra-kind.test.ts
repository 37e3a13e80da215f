import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { draDeviceName } from '../../src/core/dra-names.ts';
import { apply, clusterInfo, kubectl, kubectlJson, kubectlResult, uniqueName, waitFor, type List } from './harness.ts';
import { applyNodePool, claimTemplate, installProduct, NODE_POOL_LABEL, removeDraSuite, reservationJob, reserveAndWait, SYSTEM_NS } from './install.ts';

// DRA mode's hand-off to containers on kind (ADR 0053): kind's nodes run the tested Kubernetes release with containerd
// 2.1 and CDI (e2e/kind/build.sh), so the installed product with the Component deploy/dra/agent hands devices over to
// real kubelets on two workers: the agent's DRA plugin checks each claim with the controller and writes its CDI spec,
// containerd puts the spec's environment into the container, and the container prints it. A pod got exactly what its
// claim names when the atoms it prints are its claim's allocated devices, on the node the allocation names.
// Only on an external cluster: the process cluster runs the fuller suite of this path (dra-node.test.ts: the refusal at
// NodePrepareResources, the kubelet restarting, MIG, the hand-off rounds), which kind's one test run would repeat.
const external = process.env.BC_EXTERNAL_CLUSTER === '1';
const c = () => clusterInfo();
const NS = uniqueName('dra-kind');
const POOL = uniqueName('dra-kind-pool');
const GPUS_PER_NODE = 2;
const DRIVER = 'gpu.bettercompute.io';
const RESERVATION = 'pair';

interface Allocated {
  metadata: { name: string };
  status?: { allocation?: { devices?: { results?: { request: string; driver: string; pool: string; device: string }[] } } | null };
}

interface ClaimPod {
  metadata: { name: string };
  spec: { nodeName?: string };
  status?: { phase?: string; resourceClaimStatuses?: { resourceClaimName?: string }[] };
}

/** What a pod was handed: the atoms its container was given (CDI's environment), its node, and its claim's devices. */
interface Handed {
  atoms: string[];
  node: string;
  claimDevices: { request: string; driver: string; pool: string; device: string }[];
}


/** A pod spec that prints the atoms CDI gave its container, then waits. */
function printingSpec(template: string) {
  return {
    restartPolicy: 'Never',
    terminationGracePeriodSeconds: 0,
    resourceClaims: [{ name: 'gpu', resourceClaimTemplateName: template }],
    containers: [
      { name: 'main', image: c().busyboxImage, command: ['sh', '-c', 'echo "atoms=$BETTERCOMPUTE_ATOMS"; sleep 3600'], resources: { claims: [{ name: 'gpu' }] } },
    ],
  };
}

/** Waits until the pod runs and printed; returns what it was handed. */
async function handed(pod: string): Promise<Handed> {
  const p = await waitFor(`${pod} Running`, async () => {
    const x = await kubectlJson<ClaimPod>(['-n', NS, 'get', 'pod', pod]);
    if (x.status?.phase === 'Failed' || x.status?.phase === 'Succeeded') throw new Error(`${pod} ended: ${JSON.stringify(x.status)}`);
    return x.status?.phase === 'Running' ? x : undefined;
  }, { timeoutMs: 120_000, intervalMs: 500 });
  const line = await waitFor(`${pod} printed its atoms`, async () => {
    const r = await kubectlResult(['-n', NS, 'logs', pod]);
    return r.code === 0 ? r.stdout.split('\n').find((l) => l.startsWith('atoms=')) : undefined;
  }, { timeoutMs: 30_000, intervalMs: 500 });
  const claimName = p.status?.resourceClaimStatuses?.[0]?.resourceClaimName;
  if (!claimName) throw new Error(`${pod} names no claim`);
  const claim = await kubectlJson<Allocated>(['-n', NS, 'get', 'resourceclaim', claimName]);
  return {
    atoms: line.slice('atoms='.length).split(',').filter(Boolean).sort(),
    node: p.spec.nodeName ?? '',
    claimDevices: claim.status?.allocation?.devices?.results ?? [],
  };
}

/** The container got exactly its claim's one device, from our driver, on the node its pod runs on. */
function expectExactly(h: Handed): void {
  expect(h.atoms).toHaveLength(1);
  expect(h.claimDevices).toEqual([{ request: 'gpu', driver: DRIVER, pool: h.node, device: draDeviceName(h.atoms[0]!) }]);
  expect(c().gpuNodes).toContain(h.node);
}

describe.runIf(external)('DRA mode on kind: the installed product hands claims over through CDI on two workers', () => {
  let reserved: { node: string; atom: string }[] = [];

  beforeAll(async () => {
    const installed = await installProduct({ gpus: GPUS_PER_NODE, draAgent: true });
    process.stderr.write(`[dra-kind] deploy/overlays/trial + deploy/dra/agent to Ready in ${installed.readySeconds.toFixed(1)}s\n`);
    await apply({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: NS, labels: { 'bettercompute.io/tenant': NS } } });
    // One Pool in DRA mode of both workers: the first labelled by applyNodePool, the others beside it.
    const [first, ...others] = c().gpuNodes;
    await applyNodePool(POOL, [{ tenant: NS, quota: { gpu: GPUS_PER_NODE * c().gpuNodes.length } }], first, { handoff: 'dra' });
    if (others.length) await kubectl(['label', 'node', ...others, `${NODE_POOL_LABEL}=${POOL}`, '--overwrite']);
    await apply([claimTemplate(NS, 'gpu', 'gpu.bettercompute.io'), claimTemplate(NS, 'rsv', 'reservation.bettercompute.io')]);
    const st = await reserveAndWait(NS, RESERVATION, POOL, 2, '2h');
    reserved = st.allocations.flatMap((a) => a.atoms.map((atom) => ({ node: a.node, atom })));
    expect(reserved).toHaveLength(2);
    // Every worker's kubelet registered the plugin: each agent says so once it did.
    await waitFor('the DRA plugin registered on every worker', async () => {
      const pods = await kubectlJson<List<{ metadata: { name: string } }>>(['-n', SYSTEM_NS, 'get', 'pods', '-l', 'app.kubernetes.io/name=better-compute-agent']);
      const logs = await Promise.all(pods.items.map((p) => kubectl(['-n', SYSTEM_NS, 'logs', p.metadata.name])));
      return pods.items.length === c().gpuNodes.length && logs.every((l) => l.includes('DRA: the kubelet registered the plugin'));
    }, { timeoutMs: 90_000, intervalMs: 1000 });
  }, 1_800_000);

  afterAll(() => removeDraSuite(NS, POOL), 400_000);

  it("a Job of 2 pods naming the Reservation: each container gets its claim's one device through CDI, on that atom's node; together the Reservation's atoms", async () => {
    await apply(reservationJob(NS, 'pair', RESERVATION, printingSpec('rsv')));
    const pods = await waitFor("the Job's 2 pods", async () => {
      const l = await kubectlJson<List<{ metadata: { name: string } }>>(['-n', NS, 'get', 'pods', '-l', 'job-name=pair']);
      return l.items.length === 2 ? l.items.map((p) => p.metadata.name) : undefined;
    });
    const got = await Promise.all(pods.map(handed));
    for (const h of got) {
      expectExactly(h);
      expect(h.node).toBe(reserved.find((r) => r.atom === h.atoms[0])?.node);
    }
    expect(got.flatMap((h) => h.atoms).sort()).toEqual(reserved.map((r) => r.atom).sort());
  }, 240_000);

  it("two on-demand pods get one atom each through CDI, their claims' devices, two different atoms and none of the Reservation's", async () => {
    await apply(['od-1', 'od-2'].map((name) => ({ apiVersion: 'v1', kind: 'Pod', metadata: { name, namespace: NS }, spec: printingSpec('gpu') })));
    const got = await Promise.all(['od-1', 'od-2'].map(handed));
    for (const h of got) {
      expectExactly(h);
      expect(reserved.map((r) => r.atom)).not.toContain(h.atoms[0]);
    }
    expect(new Set(got.map((h) => h.atoms[0])).size).toBe(2);
  }, 240_000);
});
