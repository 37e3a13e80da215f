import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { simulatedSpec } from '../../src/agent/discovery.ts';
import { apply, clusterInfo, deletePodsNow, kubectl, kubectlJson, kubectlResult, uniqueName, waitFor, waitForPodPhase, type Pod } from './harness.ts';
import { applyNodePool, installProduct, removeNodePool, SYSTEM_NS, uninstallProduct, waitAdvertised } from './install.ts';

// The device-list strategies on the installed product, through containerd 2.1's own CDI (docs/node-isolation.md,
// ADR 0055): the default `auto` hands the GPUs over as mounts while no CDI spec of the node names them, and through
// CDI once one does; `cdi-annotations` the same through the kubelet's annotations. The node's CDI spec is one a test
// pod writes into the node's /etc/cdi, as `nvidia-ctk cdi generate` would, for the simulated GPUs: each device a
// device node (/dev/bc-gpu-<i>, made from /dev/null) and a variable, so a container shows exactly what CDI gave it.
// A pod that asks for the GPUs another way (the variable, an envFrom, CUDA_VERSION alone) is refused, and one that
// sets the variable where admission lets it (an exempt namespace) gets no device node.
// Only on an external cluster (kind, e2e/kind/test.sh: containerd 2.1 with CDI on, e2e/kind/build.sh): the process
// cluster's node is this host, whose /etc/cdi the test would write; it runs there too with BC_CDI_LOCAL=1.
const external = process.env.BC_EXTERNAL_CLUSTER === '1' || process.env.BC_CDI_LOCAL === '1';
const c = () => clusterInfo();
const GPUS = 4;
const NS = uniqueName('cdi');
const EXEMPT_NS = uniqueName('cdi-exempt');
const POOL = uniqueName('cdi-pool');
const SPEC_FILE = 'bc-e2e-nvidia.yaml';
const WRITER = 'cdi-spec-writer';
const node = () => c().nodeName;
const uuids = () => simulatedSpec(node(), GPUS).gpus.map((g) => g.uuid);

/** The node's CDI spec for its simulated GPUs, by UUID as the agent names them (nvidia.com/gpu=<UUID>). */
function nodeCdiSpec(): string {
  return JSON.stringify({
    cdiVersion: '0.6.0',
    kind: 'nvidia.com/gpu',
    devices: uuids().map((uuid, i) => ({
      name: uuid,
      containerEdits: { env: [`BC_CDI_GPU_${i}=${uuid}`], deviceNodes: [{ path: `/dev/bc-gpu-${i}`, hostPath: '/dev/null' }] },
    })),
  });
}

/** A pod in the system namespace that keeps the spec in the node's /etc/cdi while it runs and removes it when stopped. */
async function writeNodeSpec(): Promise<void> {
  await apply({
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name: WRITER, namespace: SYSTEM_NS },
    spec: {
      nodeName: node(),
      restartPolicy: 'Never',
      terminationGracePeriodSeconds: 10,
      containers: [
        {
          name: 'main',
          image: c().busyboxImage,
          env: [{ name: 'SPEC', value: nodeCdiSpec() }],
          command: ['sh', '-c', `trap 'rm -f /cdi/${SPEC_FILE}; exit 0' TERM; printf '%s' "$SPEC" > /cdi/${SPEC_FILE}.tmp && mv /cdi/${SPEC_FILE}.tmp /cdi/${SPEC_FILE} && touch /tmp/written; while true; do sleep 1; done`],
          readinessProbe: { exec: { command: ['test', '-f', '/tmp/written'] }, periodSeconds: 1 },
          volumeMounts: [{ name: 'cdi', mountPath: '/cdi' }],
        },
      ],
      volumes: [{ name: 'cdi', hostPath: { path: '/etc/cdi', type: 'DirectoryOrCreate' } }],
    },
  });
  await kubectl(['-n', SYSTEM_NS, 'wait', `pod/${WRITER}`, '--for=condition=Ready', '--timeout=90s'], { timeoutMs: 100_000 });
}

async function removeNodeSpec(): Promise<void> {
  await kubectlResult(['-n', SYSTEM_NS, 'delete', 'pod', WRITER, '--ignore-not-found', '--wait=true', '--timeout=60s'], { timeoutMs: 70_000 });
}

/** What a container saw: its atoms, the variable, the list directory, the CDI variables and the GPU device nodes. */
interface Seen {
  atoms: string[];
  visibleDevices: string;
  listDir: string[];
  cdiEnv: string[];
  devNodes: string[];
}

const PRINT = [
  'echo "atoms=$BETTERCOMPUTE_ATOMS"',
  'echo "visible=$NVIDIA_VISIBLE_DEVICES"',
  'echo "listdir=$(ls /var/run/nvidia-container-devices 2>/dev/null | tr "\\n" " ")"',
  'echo "cdienv=$(env | grep ^BC_CDI_GPU_ | sort | tr "\\n" " ")"',
  'echo "devnodes=$(cd /dev && ls -d bc-gpu-* 2>/dev/null | tr "\\n" " ")"',
].join('; ');

const words = (s: string | undefined) => (s ?? '').split(/[\s,]+/).filter(Boolean).sort();

async function run(namespace: string, name: string, gpus: number, env: { name: string; value: string }[] = []): Promise<Seen> {
  await apply({
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace },
    spec: {
      restartPolicy: 'Never',
      terminationGracePeriodSeconds: 0,
      // A pod without a GPU is placed by the default scheduler: on the node with the spec, to see that it gets nothing.
      ...(gpus ? {} : { nodeSelector: { 'kubernetes.io/hostname': node() } }),
      containers: [
        {
          name: 'main',
          image: c().busyboxImage,
          command: ['sh', '-c', PRINT],
          env,
          ...(gpus ? { resources: { limits: { 'bettercompute.io/gpu': String(gpus) } } } : {}),
        },
      ],
    },
  });
  const p = await waitForPodPhase(namespace, name, ['Succeeded', 'Failed'], 240_000);
  if (p.status?.phase !== 'Succeeded') throw new Error(`pod ${name} ${p.status?.phase}: ${JSON.stringify(p.status)}`);
  const out = await kubectl(['-n', namespace, 'logs', name]);
  const field = (k: string) => out.split('\n').find((l) => l.startsWith(`${k}=`))?.slice(k.length + 1);
  await deletePodsNow(namespace, [name]);
  return { atoms: words(field('atoms')), visibleDevices: field('visible') ?? '', listDir: words(field('listdir')), cdiEnv: words(field('cdienv')), devNodes: words(field('devnodes')) };
}

/** What CDI gives for these atoms: their variables and device nodes by the spec's index. */
function cdiOf(atoms: string[]): { cdiEnv: string[]; devNodes: string[] } {
  const index = atoms.map((a) => uuids().indexOf(a));
  expect(index.every((i) => i >= 0)).toBe(true);
  return { cdiEnv: index.map((i) => `BC_CDI_GPU_${i}=${uuids()[i]}`).sort(), devNodes: index.map((i) => `bc-gpu-${i}`).sort() };
}

async function setStrategy(strategy: string): Promise<void> {
  await kubectl(['-n', SYSTEM_NS, 'set', 'env', 'daemonset/better-compute-agent', `DEVICE_LIST_STRATEGY=${strategy}`]);
  await kubectl(['-n', SYSTEM_NS, 'rollout', 'status', 'daemonset/better-compute-agent', '--timeout=180s'], { timeoutMs: 190_000 });
  await waitAdvertised('bettercompute.io/gpu', GPUS, node());
}

async function refused(name: string, container: object, extra: object[] = []): Promise<string> {
  const pod = { apiVersion: 'v1', kind: 'Pod', metadata: { name, namespace: NS }, spec: { restartPolicy: 'Never', containers: [{ name: 'main', image: c().busyboxImage, command: ['true'], ...container }] } };
  const r = await kubectlResult(['create', '-f', '-'], { input: JSON.stringify({ apiVersion: 'v1', kind: 'List', items: [...extra, pod] }) });
  expect(r.code).not.toBe(0);
  return r.stderr;
}

// Each test writes the node's spec (a pod), runs up to three pods one after the other and may roll the agent out twice:
// beside the cluster project on two cores (npm test) that can take longer than the project's 180 s default.
describe.skipIf(!external)('device-list strategies through the runtime’s CDI', { timeout: 600_000 }, () => {
  beforeAll(async () => {
    await removeNodeSpec();
    await installProduct({ gpus: GPUS });
    await apply({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: NS, labels: { 'bettercompute.io/tenant': NS } } });
    await apply({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: EXEMPT_NS, labels: { 'bettercompute.io/allow-visible-devices': 'true' } } });
    await applyNodePool(POOL, [{ tenant: NS }], node());
  }, 1_800_000);

  afterAll(async () => {
    await removeNodeSpec();
    await kubectlResult(['delete', 'namespace', NS, EXEMPT_NS, '--wait=true', '--timeout=120s'], { timeoutMs: 130_000 });
    await removeNodePool(POOL);
    if (process.env.BC_KEEP_INSTALLED !== '1') await uninstallProduct();
  }, 300_000);

  it('auto, no CDI spec naming the GPUs: the device list as mounts, the variable naming their directory, nothing from CDI', async () => {
    const agent = await kubectlJson<{ spec: { template: { spec: { containers: { env: { name: string; value?: string }[] }[] } } } }>([
      '-n', SYSTEM_NS, 'get', 'daemonset', 'better-compute-agent',
    ]);
    expect(agent.spec.template.spec.containers[0]!.env.find((e) => e.name === 'DEVICE_LIST_STRATEGY')?.value).toBe('auto');
    const seen = await run(NS, 'mounts', 2);
    expect(seen.atoms).toHaveLength(2);
    expect(seen.visibleDevices).toBe('/var/run/nvidia-container-devices');
    expect(seen.listDir).toEqual(seen.atoms);
    expect(seen.cdiEnv).toEqual([]);
    expect(seen.devNodes).toEqual([]);
  });

  it('auto, once the node’s CDI spec names them: exactly the booked GPUs’ device nodes through CDI, the variable void', async () => {
    await writeNodeSpec();
    const seen = await run(NS, 'cdi-cri', 2);
    expect(seen.atoms).toHaveLength(2);
    expect(seen).toMatchObject({ visibleDevices: 'void', listDir: [], ...cdiOf(seen.atoms) });
    const one = await run(NS, 'cdi-cri-one', 1);
    expect(one).toMatchObject({ visibleDevices: 'void', listDir: [], ...cdiOf(one.atoms) });
    // A pod without a GPU on the same node: no device node, no variable of a GPU.
    expect(await run(NS, 'no-gpu', 0)).toMatchObject({ atoms: [], cdiEnv: [], devNodes: [], listDir: [] });
  });

  it('cdi-annotations: the same devices through the kubelet’s CDI annotation', async () => {
    await writeNodeSpec();
    await setStrategy('cdi-annotations');
    try {
      const seen = await run(NS, 'cdi-annotations', 3);
      expect(seen.atoms).toHaveLength(3);
      expect(seen).toMatchObject({ visibleDevices: 'void', listDir: [], ...cdiOf(seen.atoms) });
    } finally {
      await setStrategy('auto');
    }
  });

  it('a pod that asks for GPUs another way is refused, or where admission lets it, gets no device node', async () => {
    await writeNodeSpec();
    expect(await refused('visible', { env: [{ name: 'NVIDIA_VISIBLE_DEVICES', value: 'all' }] })).toMatch(/bettercompute-no-visible-devices-env/);
    expect(await refused('cuda', { env: [{ name: 'CUDA_VERSION', value: '9.0' }] })).toMatch(/bettercompute-no-visible-devices-env/);
    const cm = { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'gpus', namespace: NS }, data: { NVIDIA_VISIBLE_DEVICES: 'all' } };
    expect(await refused('from', { envFrom: [{ configMapRef: { name: 'gpus' } }] }, [cm])).toMatch(/bettercompute-no-visible-devices-env/);
    const pods = await kubectlJson<{ items: Pod[] }>(['-n', NS, 'get', 'pods']);
    expect(pods.items.map((p) => p.metadata.name).filter((n) => ['visible', 'cuda', 'from'].includes(n))).toEqual([]);
    // The exempt namespace (the GPU operator's) may set it; the runtime then hands over nothing for it.
    const exempt = await run(EXEMPT_NS, 'visible-all', 0, [{ name: 'NVIDIA_VISIBLE_DEVICES', value: 'all' }]);
    expect(exempt).toMatchObject({ visibleDevices: 'all', cdiEnv: [], devNodes: [], listDir: [] });
    await waitFor('the spec writer still running', async () => (await kubectlJson<Pod>(['-n', SYSTEM_NS, 'get', 'pod', WRITER])).status?.phase === 'Running', { timeoutMs: 10_000 });
  });
});
