import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { draDeviceName } from '../../src/core/dra-names.ts';
import { agentKubeconfig, apply, clusterInfo, deletePodsNow, kubectl, kubectlJson, kubectlResult, uniqueName, waitFor, type KubeEvent, type List } from './harness.ts';
import { installProduct, uninstallProduct } from './install.ts';

// The agent's ResourceSlices (docs/dra-node.md, ADR 0043 node-side notes) on the installed product with the Component
// deploy/dra/agent: the agent's DRA plugin on, its RBAC on resourceslices, and the policy bettercompute-dra-slices-own-node.
// The real agent publishes with its own projected token, so its slices appearing shows that the API server puts the
// node's name in the token's user.extra (the policy refuses a token without it). The policy's refusals are checked as
// the agent's ServiceAccount impersonated with that extra (kubectl cannot send another ServiceAccount's token bound to
// a pod of the agent's node; impersonation sends the same username and extra the policy reads). The install points the
// plugin's directories at the process cluster's kubelet root (install.ts), so the kubelet registers the plugin here;
// no pod of this suite claims a device, so nothing calls it (dra-node.test.ts does).
const c = () => clusterInfo();
/** Whole simulated GPUs, and one more in MIG mode with two instances (memory not a whole GiB: 39.5 and 9.75). */
const GPUS = 2;
const MIG = [[{ gi: 1, ci: 0, profile: '3g.40gb', memoryGiB: 39.5 }, { gi: 2, ci: 0, profile: '1g.10gb', memoryGiB: 9.75 }]];
const DRIVER = 'gpu.bettercompute.io';
const NS = uniqueName('dra-slices');
const OTHER_NODE = uniqueName('no-such-node');
let dir: string;

interface Slice {
  metadata: { name: string; resourceVersion: string; ownerReferences?: { kind: string; name: string; uid: string }[] };
  spec: {
    driver: string;
    nodeName?: string;
    pool: { name: string; generation: number; resourceSliceCount: number };
    devices?: { name: string; attributes?: Record<string, { string?: string; bool?: boolean; int?: number }>; capacity?: Record<string, { value: string }> }[];
  };
}

const slicesOfNode = async (node = c().nodeName) =>
  (await kubectlJson<List<Slice>>(['get', 'resourceslices', '--field-selector', `spec.nodeName=${node},spec.driver=${DRIVER}`])).items;

function sliceBody(name: string, node: string | undefined, driver = DRIVER, pool = node ?? 'x') {
  return {
    apiVersion: 'resource.k8s.io/v1',
    kind: 'ResourceSlice',
    metadata: { name },
    spec: { driver, ...(node ? { nodeName: node } : { allNodes: true }), pool: { name: pool, generation: 1, resourceSliceCount: 1 }, devices: [{ name: 'gpu-0' }] },
  };
}

/** kubectl as the node agent of `node` (its ServiceAccount with the node-name extra), or without the extra. */
const asAgent = (node: string | undefined, args: string[], input?: string) =>
  kubectlResult(['--kubeconfig', agentKubeconfig(dir, node), ...args], input === undefined ? {} : { input });

describe('the DRA agent publishes its node\'s atoms as ResourceSlices, only its own node\'s', () => {
  beforeAll(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bc-dra-slices-'));
    // The slices checked every 5 s here (60 s by default), so that a deleted slice comes back within the test.
    const installed = await installProduct({ gpus: GPUS + MIG.length, mig: MIG, draAgent: true, agentEnv: { BETTER_COMPUTE_DRA_SLICE_RESYNC: '5s' } });
    process.stderr.write(`[dra-slices] deploy/overlays/trial + deploy/dra/agent to Ready in ${installed.readySeconds.toFixed(1)}s\n`);
    await apply({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: NS, labels: { 'bettercompute.io/tenant': NS } } });
  }, 1_800_000);

  afterAll(async () => {
    await kubectlResult(['delete', 'namespace', NS, '--wait=true', '--timeout=120s'], { timeoutMs: 130_000 });
    await kubectlResult(['delete', 'deviceclass', `${NS}-grabs-ours`, '--ignore-not-found']);
    await kubectlResult(['delete', 'resourceslice', `${OTHER_NODE}-${DRIVER}-0`, '--ignore-not-found']);
    if (process.env.BC_KEEP_INSTALLED !== '1') {
      await uninstallProduct({ draAgent: true });
      // The slices left by the agent, without waiting for the kubelet to delete them (30 s after the plugin is gone).
      await kubectlResult(['delete', 'resourceslices', '--field-selector', `spec.nodeName=${c().nodeName},spec.driver=${DRIVER}`]);
    }
    fs.rmSync(dir, { recursive: true, force: true });
  }, 400_000);

  it('one slice of our driver for the node: its pool, one device per healthy atom named as allocations name it, typed attributes and memory, owned by the Node; left alone while nothing changes', async () => {
    const node = c().nodeName;
    type SpecGpu = { uuid: string; numaNode: number; migEnabled?: boolean; mig?: { gi: number; ci: number }[] };
    const specGpus = (await kubectlJson<{ spec: { gpus: SpecGpu[] } }>(['get', 'nodedevices', node])).spec.gpus;
    const gpus = specGpus.filter((g) => !g.migEnabled).map((g) => g.uuid);
    const migGpu = specGpus.find((g) => g.migEnabled)!;
    const migs = MIG[0]!.map((m) => `${migGpu.uuid}/gi${m.gi}/ci${m.ci}`);
    expect(gpus).toHaveLength(GPUS);
    const [slice, ...rest] = await waitFor('the agent\'s slice', async () => {
      const s = await slicesOfNode();
      return s.length && s[0]!.spec.devices?.length === GPUS + migs.length ? s : undefined;
    }, { timeoutMs: 60_000, intervalMs: 500 });
    expect(rest).toEqual([]);
    const nodeUid = (await kubectlJson<{ metadata: { uid: string } }>(['get', 'node', node])).metadata.uid;
    expect(slice!.metadata.name).toBe(`${node}-${DRIVER}-0`);
    expect(slice!.metadata.ownerReferences).toEqual([expect.objectContaining({ kind: 'Node', name: node, uid: nodeUid })]);
    expect(slice!.spec).toMatchObject({ driver: DRIVER, nodeName: node, pool: { name: node, resourceSliceCount: 1 } });
    expect(slice!.spec.pool.generation).toBeGreaterThanOrEqual(1);
    expect(slice!.spec.devices!.map((d) => d.name).sort()).toEqual([...gpus, ...migs].map(draDeviceName).sort());
    // As the API server keeps them (docs/dra.md, "What the slices say"): the simulated GPUs' product, 80 GiB, NUMA
    // node and NVLink domain; a MIG instance's own memory and profile, and no NVLink domain.
    for (const uuid of gpus) {
      const d = slice!.spec.devices!.find((x) => x.name === draDeviceName(uuid))!;
      const numaNode = specGpus.find((g) => g.uuid === uuid)!.numaNode;
      expect(d.attributes).toEqual({
        class: { string: 'gpu' },
        atomId: { string: uuid },
        gpu: { string: uuid },
        uuid: { string: uuid },
        healthy: { bool: true },
        product: { string: 'NVIDIA H100 80GB HBM3' },
        model: { string: 'H100' },
        vramGiB: { int: 80 },
        numaNode: { int: numaNode },
        nvlinkDomain: { string: `${node}-nvl0` },
      });
      expect(d.capacity).toEqual({ memory: { value: '80Gi' } });
    }
    const migDevices = migs.map((id) => slice!.spec.devices!.find((x) => x.name === draDeviceName(id))!);
    expect(migDevices.map((d) => [d.attributes!.class, d.attributes!.atomId, d.attributes!.gpu, d.attributes!.migProfile, d.attributes!.vramGiB, d.capacity])).toEqual([
      [{ string: 'gpu.mig' }, { string: migs[0] }, { string: migGpu.uuid }, { string: '3g.40gb' }, { int: 40 }, { memory: { value: '40448Mi' } }],
      [{ string: 'gpu.mig' }, { string: migs[1] }, { string: migGpu.uuid }, { string: '1g.10gb' }, { int: 10 }, { memory: { value: '9984Mi' } }],
    ]);
    expect(migDevices.map((d) => d.attributes!.nvlinkDomain)).toEqual([undefined, undefined]);
    // Two resyncs later (every 5 s here) nothing was written: the API server's slice is what the agent wants.
    await new Promise((r) => setTimeout(r, 12_000));
    const again = await slicesOfNode();
    expect(again.map((s) => [s.metadata.name, s.metadata.resourceVersion, s.spec.pool.generation])).toEqual([[slice!.metadata.name, slice!.metadata.resourceVersion, slice!.spec.pool.generation]]);
  }, 120_000);

  it('a slice someone deletes comes back, at a higher generation', async () => {
    const [before] = await slicesOfNode();
    await kubectl(['delete', 'resourceslice', before!.metadata.name, '--wait=true']);
    const after = await waitFor('the slice made again', async () => (await slicesOfNode())[0], { timeoutMs: 60_000, intervalMs: 500 });
    expect(after.metadata.name).toBe(before!.metadata.name);
    expect(after.spec.pool.generation).toBeGreaterThan(before!.spec.pool.generation);
    expect(after.spec.devices).toEqual(before!.spec.devices);
  }, 90_000);

  it('the policy: the agent of a node may write that node\'s slices of our driver, never another node\'s nor another driver\'s; a token naming no node writes none', async () => {
    const node = c().nodeName;
    const own = JSON.stringify(sliceBody(`${node}-${NS}`, node));
    const allowed = await asAgent(node, ['create', '--dry-run=server', '-f', '-'], own);
    expect(allowed.code, allowed.stderr).toBe(0);

    const refused = async (r: Promise<{ code: number; stderr: string }>, message: RegExp) => {
      const x = await r;
      expect(x.code).not.toBe(0);
      expect(x.stderr).toMatch(/bettercompute-dra-slices-own-node/);
      expect(x.stderr).toMatch(message);
    };
    await refused(asAgent(node, ['create', '--dry-run=server', '-f', '-'], JSON.stringify(sliceBody(`${OTHER_NODE}-${NS}`, OTHER_NODE))), new RegExp(`may write only ResourceSlices of node ${node}, not of ${OTHER_NODE}`));
    await refused(asAgent(node, ['create', '--dry-run=server', '-f', '-'], JSON.stringify(sliceBody(`${node}-other-driver`, node, 'gpu.example.com'))), /only ResourceSlices of driver gpu\.bettercompute\.io, not of gpu\.example\.com/);
    await refused(asAgent(node, ['create', '--dry-run=server', '-f', '-'], JSON.stringify(sliceBody(`${node}-all-nodes`, undefined, DRIVER, node))), /not of <none>/);
    await refused(asAgent(undefined, ['create', '--dry-run=server', '-f', '-'], own), /token names no node/);

    // Another node's slice of our driver (made by the admin): the agent may neither take it over, nor change it (a
    // PUT: it has no patch), nor delete it. Taking it over is refused by the API server's own validation, before any
    // policy (a slice's node and pool are immutable); changing its devices is refused by the policy.
    const other = `${OTHER_NODE}-${DRIVER}-0`;
    await apply(sliceBody(other, OTHER_NODE));
    const theirs = await kubectlJson<Slice>(['get', 'resourceslice', other]);
    const taken = { ...theirs, spec: { ...theirs.spec, nodeName: node, pool: { ...theirs.spec.pool, name: node } } };
    const takeover = await asAgent(node, ['replace', '--dry-run=server', '-f', '-'], JSON.stringify(taken));
    expect(takeover.code).not.toBe(0);
    expect(takeover.stderr).toMatch(/field is immutable/);
    const changed = { ...theirs, spec: { ...theirs.spec, devices: [{ name: 'gpu-0' }, { name: 'gpu-1' }] } };
    await refused(asAgent(node, ['replace', '--dry-run=server', '-f', '-'], JSON.stringify(changed)), new RegExp(`not of ${OTHER_NODE}`));
    await refused(asAgent(node, ['delete', 'resourceslice', other, '--dry-run=server']), new RegExp(`not of ${OTHER_NODE}`));
    // Its own node's real slice it may delete (dry run: the slice stays).
    const mine = await asAgent(node, ['delete', 'resourceslice', `${node}-${DRIVER}-0`, '--dry-run=server']);
    expect(mine.code, mine.stderr).toBe(0);
    await kubectl(['delete', 'resourceslice', other]);
  }, 90_000);

  it('the slices stay inert: even a DeviceClass that selects our driver\'s devices gets none, since only the controller may write such an allocation', async () => {
    // Our DeviceClasses select nothing; a cluster admin's own class could select the published devices, and then
    // kube-scheduler would allocate one: its status write is refused by bettercompute-dra-allocation-controller-only.
    await apply({ apiVersion: 'resource.k8s.io/v1', kind: 'DeviceClass', metadata: { name: `${NS}-grabs-ours` }, spec: { selectors: [{ cel: { expression: `device.driver == '${DRIVER}'` } }] } });
    await apply({
      apiVersion: 'resource.k8s.io/v1',
      kind: 'ResourceClaim',
      metadata: { name: 'grab', namespace: NS },
      spec: { devices: { requests: [{ name: 'gpu', exactly: { deviceClassName: `${NS}-grabs-ours`, count: 1 } }] } },
    });
    await apply({
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'grab', namespace: NS },
      spec: {
        terminationGracePeriodSeconds: 1,
        resourceClaims: [{ name: 'gpu', resourceClaimName: 'grab' }],
        containers: [{ name: 'main', image: c().busyboxImage, command: ['sleep', '3600'], resources: { claims: [{ name: 'gpu' }] } }],
      },
    });
    const failed = await waitFor('kube-scheduler\'s allocation refused', async () => {
      const events = (await kubectlJson<List<KubeEvent>>(['-n', NS, 'get', 'events', '--field-selector', 'involvedObject.kind=Pod,involvedObject.name=grab'])).items;
      return events.find((e) => e.reason === 'FailedScheduling' && /bettercompute-dra-allocation-controller-only/.test(e.message ?? ''));
    }, { timeoutMs: 60_000, intervalMs: 500 });
    process.stderr.write(`[dra-slices] ${failed.message}\n`);
    const claim = await kubectlJson<{ status?: { allocation?: unknown } }>(['-n', NS, 'get', 'resourceclaim', 'grab']);
    expect(claim.status?.allocation ?? undefined).toBeUndefined();
    expect((await kubectlJson<{ spec: { nodeName?: string } }>(['-n', NS, 'get', 'pod', 'grab'])).spec.nodeName).toBeUndefined();
    await deletePodsNow(NS, ['grab']);
  }, 120_000);
});
