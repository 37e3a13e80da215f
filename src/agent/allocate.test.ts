// Allocate end to end through the real gRPC server (src/agent/plugin.ts) on a unix socket, for each device-list
// strategy: requests go out as the kubelet marshals them (one ContainerAllocateRequest per call, the device ids in the
// kubelet's own unsorted order), and answers are read by the field numbers of upstream
// k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1/api.proto with a hand decoder, not with our .proto: so the test also
// holds our proto/ to the kubelet's wire format (envs 1, mounts 2, devices 3, annotations 4, cdi_devices 5).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { AgentBackend, NodeState } from '../agentapi/wire.ts';
import { silentLogger } from '../log.ts';
import { fakeNvidiaHost } from '../../test/support/nvidia-host.ts';
import { Agent } from './agent.ts';
import { DEFAULT_DEVICE_LIST_SETTINGS, type DeviceListStrategy } from '../core/device-list.ts';
import type { HostDirs } from './device-nodes.ts';
import { simulatedSpec, type DeviceSource, type NodeDevicesSpec } from './discovery.ts';
import { bindUnix, grpc, podResourcesService } from './grpc.ts';
import { reservationResourceName } from '../core/names.ts';

const G0 = 'GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77';
const G1 = 'GPU-0c8e7b4e-91a8-4a34-8a8e-1a2b3c4d5e6f';
const G2 = 'GPU-9a3e4f5d-6b7c-4d8e-9f0a-1b2c3d4e5f60';
const MIG1 = 'MIG-7d8e3b3a-8f0b-5d6e-9a1b-2c3d4e5f6a7b';
const MIG_ATOM = `${G2}/gi1/ci0`;
const RSV = 'rsv_01k2aaaaaaaaaaaaaaaaaaaaaa';
const HOUR = 3600_000;

// ---- the wire, by hand ---------------------------------------------------------------------------------------------

function varint(n: number): Buffer {
  const out: number[] = [];
  while (n > 127) {
    out.push((n & 127) | 128);
    n >>>= 7;
  }
  out.push(n);
  return Buffer.from(out);
}
const lenField = (no: number, bytes: Buffer) => Buffer.concat([varint((no << 3) | 2), varint(bytes.length), bytes]);

/** AllocateRequest as the kubelet marshals it: container_requests = 1, in each devices_ids = 1. */
function kubeletAllocateRequest(...containers: string[][]): Buffer {
  return Buffer.concat(containers.map((ids) => lenField(1, Buffer.concat(ids.map((id) => lenField(1, Buffer.from(id)))))));
}

/** One message's fields: number → values (a Buffer for length-delimited, a number for a varint). */
function fields(buf: Buffer): Map<number, (Buffer | number)[]> {
  const out = new Map<number, (Buffer | number)[]>();
  let i = 0;
  const readVarint = () => {
    let n = 0;
    let shift = 0;
    for (;;) {
      const b = buf[i++]!;
      n += (b & 127) * 2 ** shift;
      shift += 7;
      if (b < 128) return n;
    }
  };
  while (i < buf.length) {
    const key = readVarint();
    const [no, type] = [Math.floor(key / 8), key % 8];
    let value: Buffer | number;
    if (type === 0) value = readVarint();
    else if (type === 2) {
      const len = readVarint();
      value = buf.subarray(i, i + len);
      i += len;
    } else throw new Error(`unexpected wire type ${type} for field ${no}`);
    out.set(no, [...(out.get(no) ?? []), value]);
  }
  return out;
}

const str = (v: Buffer | number | undefined) => (v === undefined ? '' : (v as Buffer).toString('utf8'));

/** ContainerAllocateResponse by upstream's field numbers; a field we do not know fails the test. */
function decodeContainerResponse(buf: Buffer) {
  const f = fields(buf);
  expect([...f.keys()].filter((k) => ![1, 2, 3, 4, 5].includes(k))).toEqual([]);
  const all = (no: number) => (f.get(no) ?? []).map((v) => fields(v as Buffer));
  const map = (no: number) => Object.fromEntries(all(no).map((kv) => [str(kv.get(1)?.[0]), str(kv.get(2)?.[0])]));
  return {
    envs: map(1),
    mounts: all(2).map((m) => ({ container_path: str(m.get(1)?.[0]), host_path: str(m.get(2)?.[0]), read_only: m.get(3)?.[0] === 1 })),
    devices: all(3).map((d) => ({ container_path: str(d.get(1)?.[0]), host_path: str(d.get(2)?.[0]), permissions: str(d.get(3)?.[0]) })),
    annotations: map(4),
    cdi_devices: all(5).map((c) => ({ name: str(c.get(1)?.[0]) })),
  };
}

/** Sends raw bytes to /v1beta1.DevicePlugin/Allocate and decodes the answer's container responses. */
async function allocate(socket: string, request: Buffer) {
  const client = new grpc.Client(`unix://${socket}`, grpc.credentials.createInsecure());
  try {
    const raw = await new Promise<Buffer>((resolve, reject) =>
      client.makeUnaryRequest(
        '/v1beta1.DevicePlugin/Allocate',
        (b: Buffer) => b,
        (b: Buffer) => b,
        request,
        { deadline: Date.now() + 5000 },
        (e, r) => (e ? reject(e) : resolve(r!)),
      ),
    );
    const top = fields(raw);
    expect([...top.keys()].filter((k) => k !== 1)).toEqual([]);
    return (top.get(1) ?? []).map((c) => decodeContainerResponse(c as Buffer));
  } finally {
    client.close();
  }
}

// ---- the node --------------------------------------------------------------------------------------------------------

/** Three GPUs as nvidia-smi discovers them: G0 and G1 whole, G2 in MIG mode with one instance. */
const spec: NodeDevicesSpec = {
  gpus: [
    { uuid: G0, index: 0, pciBusId: '00000000:17:00.0', model: 'H100', healthy: true },
    { uuid: G1, index: 1, pciBusId: '00000000:2A:00.0', model: 'H100', healthy: true },
    { uuid: G2, index: 2, pciBusId: '00000000:3B:00.0', model: 'H100', healthy: true, mig: [{ gi: 1, ci: 0, profile: '3g.40gb', healthy: true, uuid: MIG1 }] },
  ],
  scalars: {},
};

class Backend implements AgentBackend {
  readonly now = 1_800_000_000_000;
  admission: NodeState['admission'] = null;
  constructor(private readonly atoms: NodeState['atoms']) {}
  async state(): Promise<NodeState> {
    return {
      now: this.now,
      atoms: this.atoms,
      reservations: [{ reservationId: RSV, resourceName: reservationResourceName(RSV), atoms: [G1], start: this.now - HOUR, end: this.now + HOUR }],
      admission: this.admission,
    };
  }
  async admissionDone(): Promise<void> {
    this.admission = null;
  }
}

describe('Allocate over gRPC, as the kubelet asks', () => {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'bc-allocate-'));
  const pluginDir = path.join(root, 'device-plugins');
  fs.mkdirSync(pluginDir);
  // The driver's minors differ from nvidia-smi's indices on purpose; the driver hides G1's UUID (found by bus id).
  const host = fakeNvidiaHost(path.join(root, 'host'), {
    gpus: [
      { uuid: G0, bus: '0000:17:00.0', minor: 2 },
      { uuid: '...', bus: '0000:2a:00.0', minor: 0 },
      { uuid: G2, bus: '0000:3b:00.0', minor: 1 },
    ],
    migMinors: ['gpu1/gi1/access 21', 'gpu1/gi1/ci0/access 22'],
    nodes: ['nvidia0', 'nvidia1', 'nvidia2', 'nvidiactl', 'nvidia-uvm', 'nvidia-uvm-tools', 'nvidia-caps/nvidia-cap21', 'nvidia-caps/nvidia-cap22'],
  });
  const CONTROL = ['/dev/nvidiactl', '/dev/nvidia-uvm', '/dev/nvidia-uvm-tools'];
  const rw = (...paths: string[]) => paths.map((p) => ({ container_path: p, host_path: p, permissions: 'rw' }));
  const socketOf = (resource: string) => path.join(pluginDir, `bettercompute-${resource.replace(/^.*\//, '')}.sock`);
  let podResources: grpc.Server;
  let agent: Agent | undefined;
  let backend: Backend;

  beforeAll(async () => {
    podResources = new grpc.Server();
    // The kubelet lists the pod it admits (with nothing allocated yet).
    podResources.addService(podResourcesService(), {
      List: (_c: unknown, cb: grpc.sendUnaryData<unknown>) => cb(null, { pod_resources: [{ namespace: 'team-a', name: 'trainer', containers: [{ name: 'main', devices: [] }] }] }),
    });
    await bindUnix(podResources, path.join(root, 'pod-resources.sock'));
  });
  afterEach(async () => {
    await agent?.stop();
    agent = undefined;
  });
  afterAll(() => {
    podResources.forceShutdown();
    fs.rmSync(root, { recursive: true, force: true });
  });

  async function startAgent(strategies: DeviceListStrategy[] | undefined, o: { source?: DeviceSource; hostDirs?: HostDirs; atoms?: NodeState['atoms'] } = {}) {
    backend = new Backend(
      o.atoms ?? [
        { id: G0, class: 'gpu', parentId: null, healthy: true },
        { id: G1, class: 'gpu', parentId: null, healthy: true },
        { id: MIG_ATOM, class: 'gpu.mig', parentId: G2, healthy: true },
      ],
    );
    agent = new Agent({
      nodeName: 'node-a',
      devicePluginDir: pluginDir,
      podResourcesSocket: path.join(root, 'pod-resources.sock'),
      source: o.source ?? { kind: 'nvidia-smi', discover: async () => spec },
      backend,
      log: silentLogger,
      reconcileEveryMs: 3_600_000,
      discoverEveryMs: 3_600_000,
      hostDirs: o.hostDirs ?? host,
      cdiSpecDirs: [path.join(root, 'etc-cdi'), path.join(root, 'run-cdi')],
      ...(strategies ? { deviceList: { ...DEFAULT_DEVICE_LIST_SETTINGS, strategies } } : {}),
    });
    await agent.start();
  }
  const admit = (atoms: string[]) => (backend.admission = { podUid: 'uid-1', namespace: 'team-a', podName: 'trainer', atoms });

  it('the request bytes are the kubelet’s: container_requests (1) of devices_ids (1), nothing else', () => {
    expect(kubeletAllocateRequest(['a', 'b']).toString('hex')).toBe('0a060a01610a0162');
  });

  it('auto (the default): volume-mounts without a CDI spec naming the GPU; cdi-cri once one does; a broken spec is left out', async () => {
    await startAgent(undefined);
    admit([G0]);
    const first = await allocate(socketOf('bettercompute.io/gpu'), kubeletAllocateRequest([G0]));
    expect(first[0]).toMatchObject({ envs: { NVIDIA_VISIBLE_DEVICES: '/var/run/nvidia-container-devices' }, cdi_devices: [] });
    expect(first[0]!.mounts).toEqual([{ container_path: `/var/run/nvidia-container-devices/${G0}`, host_path: '/dev/null', read_only: false }]);
    const run = path.join(root, 'run-cdi');
    fs.mkdirSync(run, { recursive: true });
    fs.writeFileSync(path.join(run, 'broken.yaml'), 'kind: nvidia.com/gpu\ndevices: [{ name: "bad name" }]\n');
    fs.writeFileSync(path.join(run, 'other.json'), JSON.stringify({ cdiVersion: '0.6.0', kind: 'nvidia.com/gpu', devices: [{ name: G1, containerEdits: {} }] }));
    admit([G0]);
    expect((await allocate(socketOf('bettercompute.io/gpu'), kubeletAllocateRequest([G0])))[0]!.cdi_devices).toEqual([]);
    fs.writeFileSync(path.join(run, 'nvidia.yaml'), `cdiVersion: 0.6.0\nkind: nvidia.com/gpu\ndevices:\n  - name: all\n  - name: "${G0}"\n    containerEdits: {}\n`);
    try {
      admit([G0]);
      expect(await allocate(socketOf('bettercompute.io/gpu'), kubeletAllocateRequest([G0]))).toEqual([
        { envs: { NVIDIA_VISIBLE_DEVICES: 'void', BETTERCOMPUTE_ATOMS: G0 }, mounts: [], devices: rw('/dev/nvidia2', ...CONTROL), annotations: {}, cdi_devices: [{ name: `nvidia.com/gpu=${G0}` }] },
      ]);
    } finally {
      fs.rmSync(run, { recursive: true, force: true });
    }
  });

  it('envvar: NVIDIA_VISIBLE_DEVICES with the UUID, the GPU’s node by its driver minor, the control nodes', async () => {
    await startAgent(['envvar']);
    admit([G0]);
    expect(await allocate(socketOf('bettercompute.io/gpu'), kubeletAllocateRequest([G0]))).toEqual([
      { envs: { NVIDIA_VISIBLE_DEVICES: G0, BETTERCOMPUTE_ATOMS: G0 }, mounts: [], devices: rw('/dev/nvidia2', ...CONTROL), annotations: {}, cdi_devices: [] },
    ]);
  });

  it('volume-mounts, a reservation’s resource: the list directory, one /dev/null mount, BETTERCOMPUTE_RESERVATION', async () => {
    await startAgent(['volume-mounts']);
    expect(await allocate(socketOf(reservationResourceName(RSV)), kubeletAllocateRequest([G1]))).toEqual([
      {
        envs: { NVIDIA_VISIBLE_DEVICES: '/var/run/nvidia-container-devices', BETTERCOMPUTE_ATOMS: G1, BETTERCOMPUTE_RESERVATION: RSV },
        mounts: [{ container_path: `/var/run/nvidia-container-devices/${G1}`, host_path: '/dev/null', read_only: false }],
        devices: rw('/dev/nvidia0', ...CONTROL),
        annotations: {},
        cdi_devices: [],
      },
    ]);
  });

  it('cdi-annotations, a MIG instance: its CDI name by MIG UUID in our annotation, the variable void, its capability nodes', async () => {
    await startAgent(['cdi-annotations']);
    admit([MIG_ATOM]);
    expect(await allocate(socketOf('bettercompute.io/gpu.mig'), kubeletAllocateRequest([MIG_ATOM]))).toEqual([
      {
        envs: { NVIDIA_VISIBLE_DEVICES: 'void', BETTERCOMPUTE_ATOMS: MIG_ATOM },
        mounts: [],
        devices: rw('/dev/nvidia1', '/dev/nvidia-caps/nvidia-cap21', '/dev/nvidia-caps/nvidia-cap22', ...CONTROL),
        annotations: { 'cdi.k8s.io/bettercompute_gpu.mig': `nvidia.com/gpu=${MIG1}` },
        cdi_devices: [],
      },
    ]);
  });

  it('cdi-cri, two GPUs sent unsorted: CDI devices in field 5, sorted atoms, the variable void', async () => {
    await startAgent(['cdi-cri'], {
      atoms: [
        { id: G0, class: 'gpu', parentId: null, healthy: true },
        { id: G2, class: 'gpu', parentId: null, healthy: true },
      ],
    });
    admit([G0, G2]);
    const [sorted0, sorted1] = [G0, G2].sort() as [string, string];
    expect(await allocate(socketOf('bettercompute.io/gpu'), kubeletAllocateRequest([G2, G0]))).toEqual([
      {
        envs: { NVIDIA_VISIBLE_DEVICES: 'void', BETTERCOMPUTE_ATOMS: `${sorted0},${sorted1}` },
        mounts: [],
        devices: rw(...[sorted0, sorted1].map((g) => (g === G0 ? '/dev/nvidia2' : '/dev/nvidia1')), ...CONTROL),
        annotations: {},
        cdi_devices: [{ name: `nvidia.com/gpu=${sorted0}` }, { name: `nvidia.com/gpu=${sorted1}` }],
      },
    ]);
  });

  it('all four at once: the mounts’ variable, mounts, annotation and CDI devices together', async () => {
    await startAgent(['envvar', 'volume-mounts', 'cdi-annotations', 'cdi-cri']);
    const [r] = await allocate(socketOf(reservationResourceName(RSV)), kubeletAllocateRequest([G1]));
    expect(r!.envs).toEqual({ NVIDIA_VISIBLE_DEVICES: '/var/run/nvidia-container-devices', BETTERCOMPUTE_ATOMS: G1, BETTERCOMPUTE_RESERVATION: RSV });
    expect(r!.mounts).toHaveLength(1);
    expect(r!.annotations).toEqual({ [`cdi.k8s.io/bettercompute_${reservationResourceName(RSV).replace(/^.*\//, '')}`]: `nvidia.com/gpu=${G1}` });
    expect(r!.cdi_devices).toEqual([{ name: `nvidia.com/gpu=${G1}` }]);
  });

  it('a simulated node (file source, no driver): no device specs, the rest as configured', async () => {
    const sim = simulatedSpec('node-a', 1);
    const gpu = sim.gpus[0]!.uuid;
    await startAgent(['envvar', 'cdi-cri'], {
      source: { kind: 'file', discover: async () => sim },
      hostDirs: { dev: path.join(root, 'nothing/dev'), proc: path.join(root, 'nothing/proc') },
      atoms: [{ id: gpu, class: 'gpu', parentId: null, healthy: true }],
    });
    admit([gpu]);
    expect(await allocate(socketOf('bettercompute.io/gpu'), kubeletAllocateRequest([gpu]))).toEqual([
      { envs: { NVIDIA_VISIBLE_DEVICES: gpu, BETTERCOMPUTE_ATOMS: gpu }, mounts: [], devices: [], annotations: {}, cdi_devices: [{ name: `nvidia.com/gpu=${gpu}` }] },
    ]);
  });
});
