// The product as users install it, on the test cluster: the image built offline (`npm run image`) and imported into
// the cluster's containerd, then `kubectl apply -k` of deploy/overlays/trial. Only what cannot be real here is
// changed, by a kustomize overlay around the shipped one (written to a temporary directory): the agent reads simulated
// GPUs from a ConfigMap instead of nvidia-smi, and finds the kubelet's pod-resources socket under the test kubelet's
// root directory. The trial overlay's PersistentVolumeClaim binds to a hostPath PersistentVolume made here (this
// cluster has no StorageClass; kind has one).
import { execFile, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import YAML from 'yaml';
import { writeChart } from '../../scripts/helm/chart.ts';
import { simulatedSpec } from '../../src/agent/discovery.ts';
import { apply, clusterInfo, kubectl, kubectlJson, kubectlResult, waitFor, type Node } from './harness.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
export const SYSTEM_NS = 'better-compute-system';
export const GPU_NODE_LABEL = 'bettercompute.io/gpu-node';
const PV_NAME = 'better-compute-e2e-data';

export interface Installed {
  /** Seconds from `kubectl apply` to the controller Ready and the agent's endpoints advertised. */
  readySeconds: number;
  /** Simulated GPUs the agent serves on each GPU node (clusterInfo().gpuNodes). */
  gpus: number;
  /** The controller pod (one replica in the trial overlay). */
  controllerPod(): Promise<{ name: string; ip: string }>;
}

/** Runs a script of scripts/image/, each line of its output to `progress`; rejects with its last lines on failure. */
function runScript(args: string[], timeoutMs: number, progress: (line: string) => void): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn('bash', args, { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    const tail: string[] = [];
    const onData = (chunk: string) => {
      for (const line of chunk.split('\n')) {
        if (!line.trim()) continue;
        progress(line);
        tail.push(line);
        if (tail.length > 30) tail.shift();
      }
    };
    child.stdout.setEncoding('utf8').on('data', onData);
    child.stderr.setEncoding('utf8').on('data', onData);
    const timer = setTimeout(() => child.kill('SIGTERM'), timeoutMs);
    child.on('error', reject);
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      if (code === 0) resolve();
      else reject(new Error(`${args.join(' ')} exited with ${code ?? signal}:\n${tail.join('\n')}`));
    });
  });
}

/**
 * Builds (or reuses) the image offline (`npm run image`) and imports it into the test cluster's containerd. Each line
 * the scripts print goes to `progress`.
 */
export async function loadImages(progress: (line: string) => void = () => undefined): Promise<void> {
  const c = clusterInfo();
  if (!c.local) return;
  await runScript([path.join(ROOT, 'scripts', 'image', 'build.sh')], 1_800_000, progress);
  await runScript([path.join(ROOT, 'scripts', 'image', 'load.sh'), c.containerdSocket], 600_000, progress);
}

export interface InstallOptions {
  /** Simulated GPUs of the agent on the real node (default 8). */
  gpus?: number;
  /**
   * Install deploy/overlays/external (two replicas) with this DATABASE_URL in Secret better-compute-database, as a
   * platform team with its own PostgreSQL does; without it, deploy/overlays/trial (embedded, on a volume).
   */
  databaseUrl?: string;
  /** Extra environment of the controller container (e.g. shorter periods for tests). */
  controllerEnv?: Record<string, string>;
  /** The caller ran loadImages already. */
  imagesLoaded?: boolean;
  /** With the Component deploy/dra/agent: the agent's DRA plugin on, its slices' RBAC and policy (docs/dra-node.md). */
  draAgent?: boolean;
  /** Extra environment of the agent container. */
  agentEnv?: Record<string, string>;
  /** The last `mig.length` simulated GPUs in MIG mode, the i-th with the instances mig[i] (advertised as no whole GPU). */
  mig?: { gi: number; ci: number; profile: string; memoryGiB: number }[][];
}

/** A node's simulated GPUs: `gpus` of them, the last ones in MIG mode with the instances given. */
function simulatedDevices(node: string, o: InstallOptions) {
  const spec = simulatedSpec(node, o.gpus ?? 8);
  const mig = o.mig ?? [];
  mig.forEach((instances, i) => {
    const g = spec.gpus[spec.gpus.length - mig.length + i]!;
    spec.gpus[spec.gpus.length - mig.length + i] = { ...g, migEnabled: true, mig: instances.map((m) => ({ ...m, healthy: true })) };
  });
  return spec;
}

/**
 * The Component deploy/dra/agent names the kubelet's directories at their usual place; the process cluster's kubelet
 * runs with its own --root-dir, so its plugin watcher looks in <root>/plugins_registry and the plugin's socket must be
 * under <root>/plugins. The plugin directory is mounted at its host path too: the registration names the socket as
 * the agent sees it, and the kubelet dials that path.
 */
function kubeletDirsPatches(kubeletRoot: string): object[] {
  if (kubeletRoot === '/var/lib/kubelet') return [];
  const pluginDir = path.join(kubeletRoot, 'plugins', 'gpu.bettercompute.io');
  return [
    {
      target: { kind: 'DaemonSet', name: 'better-compute-agent' },
      patch: JSON.stringify({
        apiVersion: 'apps/v1',
        kind: 'DaemonSet',
        metadata: { name: 'better-compute-agent' },
        spec: {
          template: {
            spec: {
              volumes: [
                { name: 'dra-plugin', hostPath: { path: pluginDir, type: 'DirectoryOrCreate' } },
                { name: 'plugins-registry', hostPath: { path: path.join(kubeletRoot, 'plugins_registry'), type: 'DirectoryOrCreate' } },
              ],
            },
          },
        },
      }),
    },
    {
      target: { kind: 'DaemonSet', name: 'better-compute-agent' },
      patch: JSON.stringify([
        { op: 'add', path: '/spec/template/spec/containers/0/volumeMounts/-', value: { name: 'dra-plugin', mountPath: pluginDir } },
        { op: 'add', path: '/spec/template/spec/containers/0/env/-', value: { name: 'BETTER_COMPUTE_DRA_PLUGIN_DIR', value: pluginDir } },
      ]),
    },
  ];
}

/** The overlay the tests install: deploy/overlays/trial (or external) plus simulated GPUs. Returns its directory. */
export function writeTestOverlay(o: InstallOptions = {}): string {
  const c = clusterInfo();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bc-install-'));
  // One NodeDevices spec per GPU node, <node>.json; each agent reads its own node's (NODE_NAME, set before it).
  const deviceFiles = c.gpuNodes.map((node) => {
    fs.writeFileSync(path.join(dir, `${node}.json`), JSON.stringify(simulatedDevices(node, o)));
    return `${node}.json`;
  });
  const podResourcesDir = path.dirname(c.podResourcesSocket);
  const base = o.databaseUrl ? 'external' : 'trial';
  const controllerEnv = Object.entries(o.controllerEnv ?? {}).map(([name, value]) => ({
    op: 'add',
    path: '/spec/template/spec/containers/0/env/-',
    value: { name, value },
  }));
  const kustomization = {
    apiVersion: 'kustomize.config.k8s.io/v1beta1',
    kind: 'Kustomization',
    // kustomize takes only relative paths to other kustomizations.
    resources: [path.relative(dir, path.join(ROOT, 'deploy', 'overlays', base))],
    ...(o.draAgent ? { components: [path.relative(dir, path.join(ROOT, 'deploy', 'dra', 'agent'))] } : {}),
    configMapGenerator: [{ name: 'better-compute-simulated-gpus', namespace: SYSTEM_NS, files: deviceFiles }],
    // The product's kube-scheduler at the cluster's own release: deploy/base names the tested one (v1.37.x), kind's
    // smaller suite runs the oldest supported (v1.34.x), and kube-scheduler must not be newer than the API server.
    ...(c.k8sVersion ? { images: [{ name: 'bettercompute.local/kube-scheduler', newTag: c.k8sVersion }] } : {}),
    ...(o.databaseUrl
      ? {
          secretGenerator: [
            { name: 'better-compute-database', namespace: SYSTEM_NS, literals: [`url=${o.databaseUrl}`], options: { disableNameSuffixHash: true } },
          ],
        }
      : {}),
    patches: [
      ...(controllerEnv.length ? [{ target: { kind: 'Deployment', name: 'better-compute-controller' }, patch: JSON.stringify(controllerEnv) }] : []),
      {
        target: { kind: 'DaemonSet', name: 'better-compute-agent' },
        patch: JSON.stringify([
          { op: 'add', path: '/spec/template/spec/containers/0/env/-', value: { name: 'BETTER_COMPUTE_DEVICES_FILE', value: '/etc/better-compute/devices/$(NODE_NAME).json' } },
          { op: 'add', path: '/spec/template/spec/containers/0/volumeMounts/-', value: { name: 'simulated-gpus', mountPath: '/etc/better-compute/devices', readOnly: true } },
          { op: 'add', path: '/spec/template/spec/volumes/-', value: { name: 'simulated-gpus', configMap: { name: 'better-compute-simulated-gpus' } } },
          ...Object.entries(o.agentEnv ?? {}).map(([name, value]) => ({ op: 'add', path: '/spec/template/spec/containers/0/env/-', value: { name, value } })),
        ]),
      },
      // By the volume's name, not its index: the Component deploy/dra/agent adds volumes before it.
      {
        target: { kind: 'DaemonSet', name: 'better-compute-agent' },
        patch: JSON.stringify({
          apiVersion: 'apps/v1',
          kind: 'DaemonSet',
          metadata: { name: 'better-compute-agent' },
          spec: { template: { spec: { volumes: [{ name: 'pod-resources', hostPath: { path: podResourcesDir } }] } } },
        }),
      },
      ...(o.draAgent ? kubeletDirsPatches(c.kubeletRoot) : []),
    ],
  };
  fs.writeFileSync(path.join(dir, 'kustomization.yaml'), JSON.stringify(kustomization, null, 2));
  return dir;
}

async function ensureDataVolume(): Promise<void> {
  const classes = await kubectlJson<{ items: { metadata: { annotations?: Record<string, string> } }[] }>(['get', 'storageclass']);
  if (classes.items.some((s) => s.metadata.annotations?.['storageclass.kubernetes.io/is-default-class'] === 'true')) return;
  const c = clusterInfo();
  const hostDir = path.join(c.dir, 'volumes', PV_NAME);
  fs.mkdirSync(hostDir, { recursive: true });
  fs.chownSync(hostDir, 65532, 65532);
  fs.chmodSync(hostDir, 0o700);
  await apply({
    apiVersion: 'v1',
    kind: 'PersistentVolume',
    metadata: { name: PV_NAME },
    spec: {
      capacity: { storage: '10Gi' },
      accessModes: ['ReadWriteOnce'],
      persistentVolumeReclaimPolicy: 'Retain',
      claimRef: { namespace: SYSTEM_NS, name: 'better-compute-data' },
      hostPath: { path: hostDir, type: 'Directory' },
    },
  });
}

/**
 * Installs the product (idempotent: a second call re-applies and waits). `kubectl apply -k` exactly as the README
 * says, on the overlay above.
 */
export async function installProduct(opts: InstallOptions = {}): Promise<Installed> {
  const gpus = opts.gpus ?? 8;
  const c = clusterInfo();
  if (!opts.imagesLoaded) await loadImages();
  if (!opts.databaseUrl) await ensureDataVolume();
  await kubectl(['label', 'node', ...c.gpuNodes, `${GPU_NODE_LABEL}=true`, '--overwrite']);
  const overlay = writeTestOverlay(opts);
  const t0 = Date.now();
  // CRDs first (their kinds must be known before anything that uses them), then everything.
  const r = await kubectlResult(['apply', '--server-side', '--force-conflicts', '-k', overlay], { timeoutMs: 120_000 });
  if (r.code !== 0) throw new Error(`kubectl apply -k failed:\n${r.stderr}`);
  fs.rmSync(overlay, { recursive: true, force: true });
  return waitInstalled(t0, gpus - (opts.mig?.length ?? 0));
}

/** Waits until an install is Ready: the controller and agent rolled out, the scheduler leading, the GPUs advertised. */
async function waitInstalled(t0: number, gpus: number): Promise<Installed> {
  const c = clusterInfo();
  await kubectl(['-n', SYSTEM_NS, 'rollout', 'status', 'deployment/better-compute-controller', '--timeout=300s'], { timeoutMs: 310_000 });
  await kubectl(['-n', SYSTEM_NS, 'rollout', 'status', 'daemonset/better-compute-agent', '--timeout=180s'], { timeoutMs: 190_000 });
  // kube-scheduler beside the controller schedules only once it holds its Lease.
  await waitFor(
    'Lease better-compute-scheduler held',
    async () => (await kubectlJson<{ spec?: { holderIdentity?: string } }>(['-n', SYSTEM_NS, 'get', 'lease', 'better-compute-scheduler'])).spec?.holderIdentity,
    { timeoutMs: 60_000, intervalMs: 500 },
  );
  for (const node of c.gpuNodes) await waitAdvertised('bettercompute.io/gpu', gpus, node);
  const readySeconds = (Date.now() - t0) / 1000;
  return {
    readySeconds,
    gpus,
    async controllerPod() {
      const pods = await kubectlJson<{ items: { metadata: { name: string }; status: { podIP?: string; phase?: string } }[] }>([
        '-n', SYSTEM_NS, 'get', 'pods', '-l', 'app.kubernetes.io/name=better-compute-controller',
      ]);
      const p = pods.items.find((i) => i.status.phase === 'Running' && i.status.podIP);
      if (!p) throw new Error('no running controller pod');
      return { name: p.metadata.name, ip: p.status.podIP! };
    },
  };
}

/** The pinned Helm (scripts/helm/build.sh builds it once, cached). */
export async function helmBin(): Promise<string> {
  const { stdout } = await promisify(execFile)('bash', [path.join(ROOT, 'scripts/helm/build.sh')], { maxBuffer: 16 * 1024 * 1024 });
  return stdout.trim();
}

/** Runs the pinned Helm against the test cluster; resolves with its stdout, rejects with its stderr. */
export async function helm(args: string[], timeoutMs = 300_000): Promise<string> {
  const bin = await helmBin();
  const c = clusterInfo();
  const { stdout } = await promisify(execFile)(bin, ['--kubeconfig', c.kubeconfig, ...args], { timeout: timeoutMs, maxBuffer: 64 * 1024 * 1024, encoding: 'utf8' }).catch(
    (e: { stderr?: string; message: string }) => {
      throw new Error(`helm ${args.join(' ')}: ${e.stderr?.trim() || e.message}`);
    },
  );
  return stdout;
}

/** The chart, generated from deploy/ (npm run chart) into a temporary directory. */
export function chartDir(): string {
  return writeChart(path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'bc-chart-')), 'better-compute'), clusterInfo().kubectl);
}

export const HELM_RELEASE = 'better-compute';

/**
 * Installs the product with `helm install` of the chart, as a platform team that keeps its releases in the product's
 * namespace does (the namespace made first, with the labels deploy/base/namespace.yaml gives it; namespace.create=false).
 * Only what cannot be real here is set, through the chart's values: the agent reads simulated GPUs from a ConfigMap
 * and finds the test kubelet's pod-resources directory.
 */
export async function installWithHelm(opts: { gpus?: number } = {}): Promise<Installed> {
  const gpus = opts.gpus ?? 8;
  const c = clusterInfo();
  await loadImages();
  await ensureDataVolume();
  await kubectl(['label', 'node', ...c.gpuNodes, `${GPU_NODE_LABEL}=true`, '--overwrite']);
  // The CRDs as `kubectl apply -k` makes them, whatever ran before (a team moving from kustomize to Helm does the
  // same): the install goes over CRDs no release owns, which the chart's crds/ allows (templates did not).
  await kubectl(['apply', '--server-side', '--force-conflicts', '-k', path.join(ROOT, 'crds')]);
  await kubectl(['apply', '-f', path.join(ROOT, 'deploy/base/namespace.yaml')]);
  await apply({
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: { name: 'better-compute-simulated-gpus', namespace: SYSTEM_NS },
    data: Object.fromEntries(c.gpuNodes.map((node) => [`${node}.json`, JSON.stringify(simulatedSpec(node, gpus))])),
  });
  const values = {
    namespace: { create: false },
    agent: {
      podResourcesHostPath: path.dirname(c.podResourcesSocket),
      extraEnv: [{ name: 'BETTER_COMPUTE_DEVICES_FILE', value: '/etc/better-compute/devices/$(NODE_NAME).json' }],
      extraVolumeMounts: [{ name: 'simulated-gpus', mountPath: '/etc/better-compute/devices', readOnly: true }],
      extraVolumes: [{ name: 'simulated-gpus', configMap: { name: 'better-compute-simulated-gpus' } }],
    },
  };
  const dir = chartDir();
  const valuesFile = path.join(path.dirname(dir), 'values.json');
  fs.writeFileSync(valuesFile, JSON.stringify(values));
  const t0 = Date.now();
  try {
    await helm(['install', HELM_RELEASE, dir, '--namespace', SYSTEM_NS, '--values', valuesFile]);
  } finally {
    fs.rmSync(path.dirname(dir), { recursive: true, force: true });
  }
  return waitInstalled(t0, gpus);
}

/** `helm uninstall`, then whatever uninstallProduct removes that the release did not own (namespace, volume, labels). */
export async function uninstallWithHelm(): Promise<void> {
  await helm(['uninstall', HELM_RELEASE, '--namespace', SYSTEM_NS, '--ignore-not-found']);
  await uninstallProduct();
}

/**
 * Removes what installProduct made but the CRDs (deleting a CRD deletes every object of its kind, and the other suites
 * on this cluster keep theirs): the namespace, our cluster-scoped objects, the data volume. Waits until they are gone.
 */
export async function uninstallProduct(o: Pick<InstallOptions, 'draAgent'> = {}): Promise<void> {
  const overlay = writeTestOverlay({ gpus: 1, ...o });
  const rendered = await kubectl(['kustomize', overlay]);
  fs.rmSync(overlay, { recursive: true, force: true });
  const items = YAML.parseAllDocuments(rendered)
    .map((d) => d.toJSON() as { kind: string })
    .filter((o) => o.kind !== 'CustomResourceDefinition');
  await kubectlResult(['delete', '--ignore-not-found', '--wait=true', '--timeout=180s', '-f', '-'], {
    input: JSON.stringify({ apiVersion: 'v1', kind: 'List', items }),
    timeoutMs: 190_000,
  });
  await kubectlResult(['delete', 'pv', PV_NAME, '--ignore-not-found', '--wait=true', '--timeout=60s'], { timeoutMs: 70_000 });
  fs.rmSync(path.join(clusterInfo().dir, 'volumes', PV_NAME), { recursive: true, force: true });
  await kubectlResult(['label', 'node', ...clusterInfo().gpuNodes, `${GPU_NODE_LABEL}-`]);
}

/**
 * The agent's log lines on `node` that match `pattern` (its last 2,000 lines), for a test's error: why it refused an
 * Allocate, or left the kubelet to choose. Never throws: a log that cannot be read says so.
 */
export async function agentLogLines(node: string, pattern: RegExp): Promise<string> {
  const pods = await kubectlResult(['-n', SYSTEM_NS, 'get', 'pods', '-l', 'app.kubernetes.io/name=better-compute-agent', '--field-selector', `spec.nodeName=${node}`, '-o', 'name']);
  const name = pods.stdout.trim().split('\n')[0];
  if (pods.code !== 0 || !name) return `(no agent pod found on ${node}: ${pods.stderr.trim()})`;
  const r = await kubectlResult(['-n', SYSTEM_NS, 'logs', name, '--tail=2000'], { timeoutMs: 30_000 });
  if (r.code !== 0) return `(cannot read ${name}'s log: ${r.stderr.trim()})`;
  return r.stdout.split('\n').filter((l) => pattern.test(l)).slice(-20).join('\n');
}

/** Waits until `node` (default: the real node) advertises `count` of `resource` (the agent registered it). */
export async function waitAdvertised(resource: string, count: number, node = clusterInfo().nodeName): Promise<void> {
  await waitFor(
    `${node} advertising ${count} ${resource}`,
    async () => Number((await kubectlJson<Node>(['get', 'node', node])).status?.allocatable?.[resource] ?? 0) === count,
    { timeoutMs: 120_000, intervalMs: 500 },
  );
}

export const NODE_POOL_LABEL = 'bettercompute.io/e2e-pool';

/** A Pool of one real node alone (default: nodeName; labelled for it), owned by the platform and offered as given. */
export async function applyNodePool(
  pool: string,
  offerings: { tenant: string; quota?: Record<string, number> }[],
  node = clusterInfo().nodeName,
  extra: { stopGraceSeconds?: number; handoff?: 'devicePlugin' | 'dra' } = {},
): Promise<void> {
  await kubectl(['label', 'node', node, `${NODE_POOL_LABEL}=${pool}`, '--overwrite']);
  await apply({
    apiVersion: 'bettercompute.io/v1alpha1',
    kind: 'Pool',
    metadata: { name: pool },
    spec: { nodeSelector: { [NODE_POOL_LABEL]: pool }, ownerTenant: 'platform', gpuModel: 'H100', sharing: 'exclusive', offerings, ...extra },
  });
}

/** Deletes what applyNodePool made. */
export async function removeNodePool(pool: string): Promise<void> {
  await kubectlResult(['delete', 'pool', pool, '--wait=true', '--timeout=60s'], { timeoutMs: 70_000 });
  await kubectlResult(['label', 'nodes', '-l', `${NODE_POOL_LABEL}=${pool}`, `${NODE_POOL_LABEL}-`]);
}

export interface ReservedStatus {
  phase: 'Reserved';
  reservationId: string;
  resourceName: string;
  /** The window, as RFC 3339. */
  start: string;
  end: string;
  allocations: { node: string; atoms: string[] }[];
}

/** A Reservation of `gpus` GPUs, once Reserved: its status (a mirror; tests read it to learn the atoms). */
export async function reserveAndWait(namespace: string, name: string, pool: string, gpus: number, duration: string): Promise<ReservedStatus> {
  await apply({
    apiVersion: 'bettercompute.io/v1alpha1',
    kind: 'Reservation',
    metadata: { name, namespace },
    spec: { pool, devices: [{ class: 'gpu', count: gpus }], duration },
  });
  return waitFor(`Reservation ${namespace}/${name} Reserved`, async () => {
    const r = await kubectlJson<{ status?: { phase?: string } }>(['-n', namespace, 'get', 'reservation', name]);
    return r.status?.phase === 'Reserved' ? (r.status as ReservedStatus) : undefined;
  }, { timeoutMs: 120_000, intervalMs: 500 });
}

/** A Job of `pods` pods at once, each labelled with the Reservation it names, with the given pod spec. */
export function reservationJob(namespace: string, name: string, reservation: string, spec: object, pods = 2) {
  return {
    apiVersion: 'batch/v1',
    kind: 'Job',
    metadata: { name, namespace },
    spec: { parallelism: pods, completions: pods, backoffLimit: 0, template: { metadata: { labels: { 'bettercompute.io/reservation': reservation } }, spec } },
  };
}

/** The end of a suite on the product with the DRA agent: its namespace, its Pool, and the install (unless kept). */
export async function removeDraSuite(namespace: string, pool: string): Promise<void> {
  await kubectlResult(['delete', 'namespace', namespace, '--wait=true', '--timeout=120s'], { timeoutMs: 130_000 });
  await removeNodePool(pool);
  if (process.env.BC_KEEP_INSTALLED !== '1') await uninstallProduct({ draAgent: true });
}

/** A ResourceClaimTemplate of one device (request `gpu`) of the given DeviceClass. */
export function claimTemplate(namespace: string, name: string, deviceClassName: string) {
  return {
    apiVersion: 'resource.k8s.io/v1',
    kind: 'ResourceClaimTemplate',
    metadata: { name, namespace },
    spec: { spec: { devices: { requests: [{ name: 'gpu', exactly: { deviceClassName, count: 1 } }] } } },
  };
}
