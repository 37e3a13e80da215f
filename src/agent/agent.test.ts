// The agent against a fake backend (what the controller's agent API answers) and a fake PodResources API: it serves
// what the ledger says, sees a new admission at once, and refuses on-demand Allocate when the controller is away.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { AgentBackend, NodeState } from '../agentapi/wire.ts';
import { silentLogger } from '../log.ts';
import { activeReservations, Agent, atomsFromSpec } from './agent.ts';
import { startFakeKubeApi, type FakeKubeApi } from '../../test/support/fake-kube-api.ts';
import { simulatedSpec, type DeviceSource, type NodeDevicesSpec } from './discovery.ts';
import { bindUnix, devicePluginClient, grpc, podResourcesService, unary } from './grpc.ts';
import { DISCOVERY_STALE_ANNOTATION, reservationResourceName } from '../core/names.ts';

const NODE = 'node-a';
const spec = simulatedSpec(NODE, 3);
const [G0, G1, G2] = spec.gpus.map((g) => g.uuid) as [string, string, string];
const RSV = 'rsv_' + '0'.repeat(26);
const RSV_LATER = 'rsv_' + '1'.repeat(26);
const HOUR = 3600_000;

class FakeBackend implements AgentBackend {
  now = 1_800_000_000_000;
  down = false;
  /** Calls to fail before answering again (a controller that does not answer for a moment). */
  failNext = 0;
  admission: NodeState['admission'] = null;
  done: string[] = [];
  calls = 0;
  reservations: NodeState['reservations'] = [
    { reservationId: RSV, resourceName: reservationResourceName(RSV), atoms: [G2], start: this.now - HOUR, end: this.now + HOUR },
    { reservationId: RSV_LATER, resourceName: reservationResourceName(RSV_LATER), atoms: [G1], start: this.now + HOUR, end: this.now + 2 * HOUR },
  ];
  async state(): Promise<NodeState> {
    this.calls++;
    if (this.down) throw new Error('connect ECONNREFUSED');
    if (this.failNext > 0 && this.failNext--) throw new Error('no answer within 5000 ms');
    return {
      now: this.now,
      atoms: [G0, G1, G2].map((id) => ({ id, class: 'gpu' as const, parentId: null, healthy: true })),
      reservations: this.reservations,
      admission: this.admission,
    };
  }
  async admissionDone(podUid: string): Promise<void> {
    if (this.down) throw new Error('connect ECONNREFUSED');
    this.done.push(podUid);
    this.admission = null;
  }
}

describe('atomsFromSpec (no ledger rows yet)', () => {
  it('a GPU in MIG mode is no atom itself, even with no instances', () => {
    const atoms = atomsFromSpec({
      gpus: [{ uuid: 'GPU-a' }, { uuid: 'GPU-b', migEnabled: true, mig: [] }, { uuid: 'GPU-c', migEnabled: true, mig: [{ gi: 1, ci: 0 }] }],
      scalars: {},
    });
    expect(atoms.map((a) => [a.id, a.class])).toEqual([
      ['GPU-a', 'gpu'],
      ['GPU-c/gi1/ci0', 'gpu.mig'],
    ]);
  });

  it('each atom with what its ResourceSlice device says: the GPU\'s product, NUMA node and NVLink domain, its own memory', () => {
    const g = { uuid: 'GPU-a', product: 'NVIDIA H100 80GB HBM3', model: 'H100', vramGiB: 80, memoryMiB: 81559, numaNode: 1, nvlinkDomain: 'n1-nvl0', healthy: true };
    const migGpu = { ...g, uuid: 'GPU-m', migEnabled: true, mig: [{ gi: 1, ci: 0, profile: '3g.40gb', memoryGiB: 39.5, memoryMiB: 40448, uuid: 'MIG-x' }, { gi: 2, ci: 0, profile: '1g.10gb', memoryGiB: 9.75 }] };
    const spec = { gpus: [g, migGpu, { ...g, uuid: 'GPU-s', memoryMiB: undefined, vramGiB: 40 }], scalars: {} };
    const ledger = [
      { id: 'GPU-a', class: 'gpu' as const, parentId: null, healthy: true },
      { id: 'GPU-m/gi1/ci0', class: 'gpu.mig' as const, parentId: 'GPU-m', healthy: true },
      { id: 'GPU-m/gi2/ci0', class: 'gpu.mig' as const, parentId: 'GPU-m', healthy: true },
      { id: 'GPU-s/s0', class: 'gpu.slot' as const, parentId: 'GPU-s', healthy: true },
    ];
    const common = { product: 'NVIDIA H100 80GB HBM3', model: 'H100', numaNode: 1, healthy: true };
    expect(atomsFromSpec(spec, ledger)).toEqual([
      { id: 'GPU-a', class: 'gpu', gpu: 'GPU-a', visible: 'GPU-a', ...common, vramGiB: 80, memoryMiB: 81559, nvlinkDomain: 'n1-nvl0' },
      // A MIG instance: its own memory (MiB from the MIG table, else its GiB), its profile, no NVLink.
      { id: 'GPU-m/gi1/ci0', class: 'gpu.mig', gpu: 'GPU-m', visible: 'MIG-x', ...common, vramGiB: 39.5, memoryMiB: 40448, migProfile: '3g.40gb' },
      { id: 'GPU-m/gi2/ci0', class: 'gpu.mig', gpu: 'GPU-m', visible: 'MIG-GPU-m/2/0', ...common, vramGiB: 9.75, memoryMiB: 9984, migProfile: '1g.10gb' },
      // A slot: its GPU's vramGiB and NVLink domain, no memory of its own.
      { id: 'GPU-s/s0', class: 'gpu.slot', gpu: 'GPU-s', visible: 'GPU-s', ...common, vramGiB: 40, nvlinkDomain: 'n1-nvl0' },
    ]);
  });
});

describe('activeReservations', () => {
  it('only windows that hold now, with a resource name that is the reservation’s own', () => {
    const b = new FakeBackend();
    const base: NodeState = { now: b.now, atoms: [], admission: null, reservations: b.reservations };
    expect([...activeReservations(base)]).toEqual([[reservationResourceName(RSV), { id: RSV, atoms: [G2] }]]);
    expect([...activeReservations({ ...base, now: b.now + HOUR + 1 })]).toEqual([[reservationResourceName(RSV_LATER), { id: RSV_LATER, atoms: [G1] }]]);
    const forged = { ...b.reservations[0]!, resourceName: reservationResourceName(RSV_LATER) };
    expect(activeReservations({ ...base, reservations: [forged] }).size).toBe(0);
  });
});

describe('Agent with a backend', () => {
  let dir: string;
  let podResources: grpc.Server;
  /** What the fake PodResources API says live containers hold. */
  let held: { namespace: string; name: string; resource: string; ids: string[] }[] = [];
  /** Pods it lists with nothing allocated yet (`namespace/name`): the pod the kubelet admits is among them. */
  let admitting: string[] = [];
  let backend: FakeBackend;
  let agent: Agent;
  const socketOf = (resource: string) => path.join(dir, `bettercompute-${resource.replace(/^.*\//, '')}.sock`);
  const allocate = async (resource: string, ids: string[]) => {
    const client = devicePluginClient(socketOf(resource));
    try {
      return await unary<object, { container_responses: { envs: Record<string, string> }[] }>(client, 'Allocate', { container_requests: [{ devices_ids: ids }] });
    } finally {
      client.close();
    }
  };

  const preferred = async (available: string[]) => {
    const client = devicePluginClient(socketOf('bettercompute.io/gpu'));
    try {
      const r = await unary<object, { container_responses: { deviceIDs: string[] }[] }>(client, 'GetPreferredAllocation', {
        container_requests: [{ available_deviceIDs: available, must_include_deviceIDs: [], allocation_size: 1 }],
      });
      return r.container_responses[0]!.deviceIDs;
    } finally {
      client.close();
    }
  };

  beforeAll(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bc-agent-'));
    podResources = new grpc.Server();
    podResources.addService(podResourcesService(), {
      List: (_c: unknown, cb: grpc.sendUnaryData<unknown>) =>
        cb(null, {
          pod_resources: [
            ...held.map((h) => ({
              name: h.name,
              namespace: h.namespace,
              containers: [{ name: 'main', devices: [{ resource_name: h.resource, device_ids: h.ids }] }],
            })),
            ...admitting.map((p) => ({ namespace: p.split('/')[0], name: p.split('/')[1], containers: [{ name: 'main', devices: [] }] })),
          ],
        }),
    });
    await bindUnix(podResources, path.join(dir, 'pod-resources.sock'));
  });
  afterAll(async () => {
    podResources.forceShutdown();
    fs.rmSync(dir, { recursive: true, force: true });
  });
  beforeEach(async () => {
    held = [];
    // The pods the tests admit on demand: the kubelet lists a pod while it admits it.
    admitting = ['ns/p', 'ns/q'];
    backend = new FakeBackend();
    const source: DeviceSource = { kind: 'file', discover: async () => spec };
    agent = new Agent({
      nodeName: NODE,
      devicePluginDir: path.join(dir),
      podResourcesSocket: path.join(dir, 'pod-resources.sock'),
      source,
      backend,
      log: silentLogger,
      reconcileEveryMs: 3_600_000,
      discoverEveryMs: 3_600_000,
      readyFile: path.join(dir, 'ready'),
      callRetryMs: 500,
    });
    await agent.start();
    return () => agent.stop();
  });

  it("serves the generic resource and the reservations active now, from the backend's state", () => {
    expect(Object.keys(agent.status()).sort()).toEqual(['bettercompute.io/gpu', reservationResourceName(RSV)]);
  });

  it('Allocate reads the admission at call time: one taken after the last reconcile is served, then ended', async () => {
    const calls = backend.calls;
    await expect(allocate('bettercompute.io/gpu', [G0])).rejects.toMatchObject({ code: grpc.status.FAILED_PRECONDITION });
    backend.admission = { podUid: 'uid-1', namespace: 'ns', podName: 'p', atoms: [G0] };
    const res = await allocate('bettercompute.io/gpu', [G0]);
    expect(res.container_responses[0]!.envs).toMatchObject({ NVIDIA_VISIBLE_DEVICES: '/var/run/nvidia-container-devices', BETTERCOMPUTE_ATOMS: G0 });
    expect(backend.done).toEqual(['uid-1']);
    expect(backend.calls).toBeGreaterThan(calls);
    // Atoms the pod was not booked are refused.
    backend.admission = { podUid: 'uid-2', namespace: 'ns', podName: 'q', atoms: [G1] };
    await expect(allocate('bettercompute.io/gpu', [G0])).rejects.toMatchObject({ code: grpc.status.FAILED_PRECONDITION });
  });

  it('the readiness file exists while the controller answers, and goes when it does not', async () => {
    const ready = path.join(dir, 'ready');
    expect(fs.existsSync(ready)).toBe(true);
    backend.down = true;
    await agent.reconcile();
    expect(fs.existsSync(ready)).toBe(false);
    backend.down = false;
    await agent.reconcile();
    expect(fs.existsSync(ready)).toBe(true);
  });

  it('the controller away: endpoints stay as last known, on-demand Allocate refuses, reservation atoms still serve', async () => {
    backend.admission = { podUid: 'uid-1', namespace: 'ns', podName: 'p', atoms: [G0] };
    backend.down = true;
    await agent.reconcile();
    expect(Object.keys(agent.status()).sort()).toEqual(['bettercompute.io/gpu', reservationResourceName(RSV)]);
    const e = await allocate('bettercompute.io/gpu', [G0]).catch((x: unknown) => x as grpc.ServiceError);
    expect(e).toMatchObject({ code: grpc.status.FAILED_PRECONDITION });
    expect((e as grpc.ServiceError).details).toMatch(/cannot ask the controller/);
    const r = await allocate(reservationResourceName(RSV), [G2]);
    expect(r.container_responses[0]!.envs).toMatchObject({ BETTERCOMPUTE_RESERVATION: RSV, BETTERCOMPUTE_ATOMS: G2 });
    await expect(allocate(reservationResourceName(RSV), [G0])).rejects.toMatchObject({ code: grpc.status.FAILED_PRECONDITION });
    backend.down = false;
  });

  it('a reservation whose window ends (the state moves on) is no longer served', async () => {
    backend.now += HOUR + 1;
    await agent.reconcile();
    expect(Object.keys(agent.status()).sort()).toEqual(['bettercompute.io/gpu', reservationResourceName(RSV_LATER)]);
  });

  it('an admission belongs to one pod: a late Allocate while the kubelet does not list the admission’s pod is refused, then that pod gets its own atoms', async () => {
    // A pod whose admission ran out (its kubelet came back late) is admitted while the node's admission is another's.
    backend.admission = { podUid: 'uid-next', namespace: 'ns', podName: 'next', atoms: [G0] };
    admitting = ['ns/late'];
    // No preference for the next pod's atoms, and its atoms refused to the late pod.
    expect(await preferred([G0, G1])).toEqual([]);
    const e = await allocate('bettercompute.io/gpu', [G0]).catch((x: unknown) => x as grpc.ServiceError);
    expect(e).toMatchObject({ code: grpc.status.FAILED_PRECONDITION });
    expect((e as grpc.ServiceError).details).toContain('is for pod ns/next, which the kubelet is not admitting');
    expect(backend.done).toEqual([]);
    // The kubelet admits the next pod: it is preferred and handed exactly its atoms.
    admitting = ['ns/next'];
    expect(await preferred([G0, G1])).toEqual([G0]);
    const r = await allocate('bettercompute.io/gpu', [G0]);
    expect(r.container_responses[0]!.envs).toMatchObject({ BETTERCOMPUTE_ATOMS: G0 });
    expect(backend.done).toEqual(['uid-next']);
  });

  it('a controller that misses a few calls: the preference and Allocate ask again, and the pod gets its booked atom', async () => {
    backend.admission = { podUid: 'uid-1', namespace: 'ns', podName: 'p', atoms: [G1] };
    backend.failNext = 2;
    expect(await preferred([G0, G1])).toEqual([G1]);
    backend.failNext = 2;
    const r = await allocate('bettercompute.io/gpu', [G1]);
    expect(r.container_responses[0]!.envs).toMatchObject({ BETTERCOMPUTE_ATOMS: G1 });
    expect(backend.done).toEqual(['uid-1']);
  });

  it('a preference that could not be given is named in the refusal of what the kubelet then chose', async () => {
    backend.admission = { podUid: 'uid-1', namespace: 'ns', podName: 'p', atoms: [G1] };
    // The kubelet does not offer the booked atom (it counts it as another pod's): no preference, and Allocate says why.
    expect(await preferred([G0])).toEqual([]);
    const e = await allocate('bettercompute.io/gpu', [G0]).catch((x: unknown) => x as grpc.ServiceError);
    expect(e).toMatchObject({ code: grpc.status.FAILED_PRECONDITION });
    expect((e as grpc.ServiceError).details).toContain(`was booked ${G1} (no preference was given: the kubelet does not offer booked atoms ${G1})`);
    // The controller away through the retry budget: no preference either, named the same way.
    backend.failNext = 1_000;
    expect(await preferred([G0, G1])).toEqual([]);
    backend.failNext = 0;
    const e2 = await allocate('bettercompute.io/gpu', [G0]).catch((x: unknown) => x as grpc.ServiceError);
    expect((e2 as grpc.ServiceError).details).toContain('(no preference was given: cannot ask the controller which pod is admitted on node-a: no answer within 5000 ms)');
  });

  describe('guard 6: an atom, its GPU, or a part of it that a live container holds is refused, with the holder named', () => {
    const RSV_RESOURCE = reservationResourceName(RSV);
    const mig = (gpu: string, gi: number) => `${gpu}/gi${gi}/ci0`;

    it('the same atom, held through a reservation resource', async () => {
      held = [{ namespace: 'team-a', name: 'trainer', resource: RSV_RESOURCE, ids: [G2] }];
      const e = await allocate(RSV_RESOURCE, [G2]).catch((x: unknown) => x as grpc.ServiceError);
      expect(e).toMatchObject({ code: grpc.status.FAILED_PRECONDITION });
      expect((e as grpc.ServiceError).details).toContain(`atom ${G2} is held by team-a/trainer (container main, ${RSV_RESOURCE})`);
    });

    it('the same atom, booked on demand but held by another pod', async () => {
      held = [{ namespace: 'team-b', name: 'stale', resource: 'bettercompute.io/gpu', ids: [G0] }];
      backend.admission = { podUid: 'uid-1', namespace: 'ns', podName: 'p', atoms: [G0] };
      const e = await allocate('bettercompute.io/gpu', [G0]).catch((x: unknown) => x as grpc.ServiceError);
      expect((e as grpc.ServiceError).details).toContain(`atom ${G0} is held by team-b/stale`);
      expect(backend.done).toEqual([]);
    });

    it('a whole GPU while a MIG instance of it is held, and a MIG instance while its whole GPU is held', async () => {
      held = [{ namespace: 'team-b', name: 'notebook', resource: 'bettercompute.io/gpu.mig', ids: [mig(G2, 1)] }];
      const whole = await allocate(RSV_RESOURCE, [G2]).catch((x: unknown) => x as grpc.ServiceError);
      expect((whole as grpc.ServiceError).details).toContain(`atom ${G2} overlaps ${mig(G2, 1)}, held by team-b/notebook`);
      // The reservation now holds a MIG instance of G2 (a layout change), and a container still holds all of G2.
      held = [{ namespace: 'team-b', name: 'big', resource: 'bettercompute.io/gpu', ids: [G2] }];
      backend.reservations = [{ ...backend.reservations[0]!, atoms: [mig(G2, 1)] }];
      await agent.reconcile();
      const part = await allocate(RSV_RESOURCE, [mig(G2, 1)]).catch((x: unknown) => x as grpc.ServiceError);
      expect((part as grpc.ServiceError).details).toContain(`atom ${mig(G2, 1)} overlaps ${G2}, held by team-b/big`);
    });

    it('what no live container holds, and containers of other resources, do not block', async () => {
      held = [
        { namespace: 'team-b', name: 'other-gpu', resource: 'bettercompute.io/gpu', ids: [G0] },
        { namespace: 'team-b', name: 'nvidia', resource: 'nvidia.com/gpu', ids: [G2] },
      ];
      const r = await allocate(RSV_RESOURCE, [G2]);
      expect(r.container_responses[0]!.envs).toMatchObject({ BETTERCOMPUTE_ATOMS: G2 });
    });

    it('without an answer from the PodResources API nothing is handed out', async () => {
      podResources.forceShutdown();
      try {
        const e = await allocate(RSV_RESOURCE, [G2]).catch((x: unknown) => x as grpc.ServiceError);
        expect((e as grpc.ServiceError).details).toMatch(/cannot check which atoms live containers hold/);
      } finally {
        podResources = new grpc.Server();
      }
    });
  });
});

describe('Agent discovery failures', () => {
  const MIG_GPU = 'GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77';
  const good: NodeDevicesSpec = {
    gpus: [{ uuid: MIG_GPU, model: 'A100', healthy: true, mig: [{ gi: 1, ci: 0, profile: '3g.20gb', healthy: true }, { gi: 5, ci: 0, profile: '2g.10gb', healthy: true }] }],
    scalars: {},
  };
  let kube: FakeKubeApi;
  let dir: string;
  afterAll(() => kube?.close());

  it('keeps the last good layout, marked stale; after 3 failures in a row its GPUs are unhealthy; a success clears both', async () => {
    kube = await startFakeKubeApi({ users: {}, allowed: () => false });
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bc-agent-disc-'));
    let failing = false;
    const source: DeviceSource = {
      kind: 'nvidia-smi',
      discover: async () => {
        if (failing) throw new Error('nvidia-smi -L failed: Command failed (Unable to determine the device handle)');
        return good;
      },
    };
    const agent = new Agent({
      nodeName: NODE,
      devicePluginDir: dir,
      podResourcesSocket: path.join(dir, 'pod-resources.sock'),
      source,
      backend: new FakeBackend(),
      log: silentLogger,
      kubeConfig: kube.kubeConfig(),
      reconcileEveryMs: 3_600_000,
      discoverEveryMs: 3_600_000,
    });
    // The fake API server keeps no NodeDevices (404): every discovery patches again, so each one's report is seen.
    const published = () => {
      const patches = kube.seen.filter((r) => r.method === 'PATCH' && r.path.includes('/nodedevices/'));
      const last = patches[patches.length - 1]!.body;
      return { spec: last.spec as NodeDevicesSpec, stale: last.metadata?.annotations?.[DISCOVERY_STALE_ANNOTATION] as string | null | undefined };
    };
    const layout = (s: NodeDevicesSpec) => s.gpus.flatMap((g) => [g.uuid, ...(g.mig ?? []).map((m) => `${g.uuid}/gi${m.gi}/ci${m.ci}`)]);
    const unhealthy = (s: NodeDevicesSpec) => s.gpus.flatMap((g) => [g.healthy, ...(g.mig ?? []).map((m) => m.healthy)]).filter((h) => h === false).length;
    await agent.start();
    try {
      expect(published()).toMatchObject({ spec: good, stale: null });
      failing = true;
      for (const n of [1, 2]) {
        await agent.discoverNow();
        const p = published();
        expect(layout(p.spec), `failure ${n}`).toEqual(layout(good));
        expect(unhealthy(p.spec), `failure ${n}`).toBe(0);
        expect(p.stale).toMatch(/^since \S+: nvidia-smi -L failed/);
      }
      await agent.discoverNow();
      expect(layout(published().spec)).toEqual(layout(good));
      expect(unhealthy(published().spec)).toBe(3);
      expect(published().stale).toMatch(/nvidia-smi -L failed/);
      failing = false;
      await agent.discoverNow();
      expect(published()).toMatchObject({ spec: good, stale: null });
    } finally {
      await agent.stop();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
