// Helpers for tests against the local test cluster (e2e/cluster/up.sh): where its kubeconfig and scheduler config are,
// kubectl, simulated nodes, and restarting kube-scheduler or the kubelet. Cluster test files import from here; the
// project's globalSetup (global-setup.ts) brings the cluster up before they run.
//
// With BC_EXTERNAL_CLUSTER=1 it works against another cluster (e.g. kind, see e2e/kind/) named by BC_KUBECONFIG, with
// BC_KUBECTL (default: kubectl on PATH) and BC_NODE_NAME (the node that runs test pods); then the functions that
// restart components of the local cluster throw.
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import YAML from 'yaml';

export const CLUSTER_SCRIPTS_DIR = path.dirname(fileURLToPath(import.meta.url));
const UP = path.join(CLUSTER_SCRIPTS_DIR, 'up.sh');
const DOWN = path.join(CLUSTER_SCRIPTS_DIR, 'down.sh');
const CTL = path.join(CLUSTER_SCRIPTS_DIR, 'ctl.sh');

/** The state dir of the local cluster (same default as lib.sh). */
export const CLUSTER_DIR =
  process.env.BC_CLUSTER_DIR ?? path.join(process.env.BC_CACHE ?? path.join(os.homedir(), '.cache', 'better-compute'), 'cluster');

/** Label every simulated node carries; also the key of the taint they get unless asked not to. */
export const SIMULATED_LABEL = 'bettercompute.io/simulated';
/** Toleration a pod needs to land on a simulated node that has the default taint. */
export const SIMULATED_TOLERATION = { key: SIMULATED_LABEL, operator: 'Exists', effect: 'NoSchedule' } as const;

export interface ClusterInfo {
  /** State dir (certificates, configs, logs/<component>.log, pids/). */
  dir: string;
  /** Admin kubeconfig (system:masters). */
  kubeconfig: string;
  /** The kubectl binary built at the pinned release. */
  kubectl: string;
  /**
   * The cluster's Kubernetes release (e.g. v1.37.2): the process cluster's pin (e2e/cluster/versions.env), or on an
   * external cluster BC_K8S_VERSION (the release kind runs, e2e/kind/lib.sh); empty when unknown. The product's kube-scheduler
   * image is installed at this tag (install.ts), as kube-scheduler must not be newer than the API server.
   */
  k8sVersion: string;
  /** The KubeSchedulerConfiguration kube-scheduler runs with. */
  schedulerConfigFile: string;
  /** Name of the one real (kubelet) node, or on an external cluster the first node that runs test pods. */
  nodeName: string;
  /**
   * The real nodes the product's agent serves simulated GPUs on: nodeName alone on the local cluster; on an external
   * one, BC_GPU_NODES (comma-separated; kind's two workers), else nodeName.
   */
  gpuNodes: string[];
  /** The kubelet's --root-dir (pods, volumes, plugins_registry, pod-resources). */
  kubeletRoot: string;
  /**
   * Where the kubelet's device-plugin registration socket (kubelet.sock) is and plugins put theirs. The kubelet fixes
   * it at /var/lib/kubelet/device-plugins whatever its root dir, so there is one per machine.
   */
  devicePluginDir: string;
  podResourcesSocket: string;
  containerdSocket: string;
  /** Locally built images, already in containerd: busybox (sh, echo, sleep, ...) and the sandbox image. */
  busyboxImage: string;
  pauseImage: string;
  /**
   * The host's address where pods reach it: on the pod bridge locally; on an external cluster BC_POD_GATEWAY (kind: its
   * Docker network's gateway), else empty.
   */
  podGateway: string;
  /** true when the cluster is the local one of up.sh (components can be restarted). */
  local: boolean;
}

function readEnvFile(file: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of fs.readFileSync(file, 'utf8').split('\n')) {
    const m = /^export (\w+)='(.*)'$/.exec(line.trim());
    if (m) out[m[1]!] = m[2]!;
  }
  return out;
}

/**
 * The test state of an external cluster (kind): beside its kubeconfig, never the process cluster's CLUSTER_DIR. The
 * two run side by side in `npm test`; when an external run's uninstall removed `CLUSTER_DIR/volumes/...`, it deleted
 * the embedded PostgreSQL of the product installed on the process cluster at that moment.
 */
export function externalStateDir(kubeconfig: string): string {
  const dir = path.join(path.dirname(path.resolve(kubeconfig)), 'test-state');
  fs.mkdirSync(dir, { recursive: true });
  return dir;
}

/** Where everything of the running cluster is. Throws when no cluster is up (and none is named by BC_KUBECONFIG). */
export function clusterInfo(): ClusterInfo {
  const envFile = path.join(CLUSTER_DIR, 'env');
  if (process.env.BC_EXTERNAL_CLUSTER === '1') {
    if (process.env.BC_KUBECONFIG) {
      return {
        dir: externalStateDir(process.env.BC_KUBECONFIG),
        kubeconfig: process.env.BC_KUBECONFIG,
        kubectl: process.env.BC_KUBECTL ?? 'kubectl',
        k8sVersion: process.env.BC_K8S_VERSION ?? '',
        schedulerConfigFile: '',
        nodeName: process.env.BC_NODE_NAME ?? '',
        gpuNodes: (process.env.BC_GPU_NODES ?? process.env.BC_NODE_NAME ?? '').split(',').filter(Boolean),
        kubeletRoot: '/var/lib/kubelet',
        devicePluginDir: '/var/lib/kubelet/device-plugins',
        podResourcesSocket: '/var/lib/kubelet/pod-resources/kubelet.sock',
        containerdSocket: '',
        busyboxImage: process.env.BC_BUSYBOX_IMAGE ?? 'busybox:1.36',
        pauseImage: '',
        // The host's address on the external cluster's network (kind's Docker network gateway), if it has one.
        podGateway: process.env.BC_POD_GATEWAY ?? '',
        local: false,
      };
    }
    throw new Error('BC_EXTERNAL_CLUSTER=1 needs BC_KUBECONFIG');
  }
  if (!fs.existsSync(envFile)) throw new Error(`no test cluster: ${envFile} is missing (npm run cluster:up)`);
  const e = readEnvFile(envFile);
  const kubeletRoot = e.BC_KUBELET_ROOT!;
  return {
    dir: e.BC_CLUSTER_DIR!,
    kubeconfig: e.BC_KUBECONFIG!,
    kubectl: e.BC_KUBECTL!,
    // Clusters brought up before the release was written to env ran the base's scheduler tag.
    k8sVersion: e.BC_CLUSTER_K8S_VERSION ?? '',
    schedulerConfigFile: e.BC_SCHEDULER_CONFIG_FILE!,
    nodeName: e.BC_NODE_NAME!,
    gpuNodes: [e.BC_NODE_NAME!],
    kubeletRoot,
    devicePluginDir: '/var/lib/kubelet/device-plugins',
    podResourcesSocket: path.join(kubeletRoot, 'pod-resources', 'kubelet.sock'),
    containerdSocket: e.BC_CONTAINERD_SOCK!,
    busyboxImage: e.BC_BUSYBOX_IMAGE!,
    pauseImage: e.BC_PAUSE_IMAGE!,
    // Clusters brought up before the gateway was written to env used the default pod CIDR.
    podGateway: e.BC_POD_GATEWAY ?? '10.244.0.1',
    local: true,
  };
}

// Just the fields of Kubernetes objects that the helpers and tests read.
export interface ObjectMeta {
  name: string;
  namespace?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}
export interface Condition {
  type: string;
  status: string;
  reason?: string;
  message?: string;
}
export interface Taint {
  key: string;
  value?: string;
  effect: string;
}
export interface Node {
  metadata: ObjectMeta;
  spec?: { taints?: Taint[]; unschedulable?: boolean };
  status?: { conditions?: Condition[]; capacity?: Record<string, string>; allocatable?: Record<string, string> };
}
export interface Pod {
  metadata: ObjectMeta;
  spec: { nodeName?: string; schedulerName?: string; nodeSelector?: Record<string, string> };
  status?: { phase?: string; reason?: string; message?: string; podIP?: string; conditions?: Condition[] };
}
export interface KubeEvent {
  reason?: string;
  message?: string;
  source?: { component?: string };
  reportingComponent?: string;
}
export interface List<T> {
  items: T[];
}

export interface RunResult {
  code: number;
  stdout: string;
  stderr: string;
}

function run(cmd: string, args: string[], opts: { input?: string; timeoutMs?: number; inheritStderr?: boolean } = {}) {
  return new Promise<RunResult>((resolve, reject) => {
    const child = spawn(cmd, args, { stdio: ['pipe', 'pipe', opts.inheritStderr ? 'inherit' : 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout!.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr?.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    const timer = opts.timeoutMs
      ? setTimeout(() => {
          child.kill('SIGKILL');
        }, opts.timeoutMs)
      : undefined;
    child.on('error', reject);
    child.on('close', (code, signal) => {
      if (timer) clearTimeout(timer);
      resolve({ code: code ?? (signal ? 128 : 1), stdout, stderr });
    });
    // A child that exits before it reads its input (most kubectl commands read none) closes the pipe: the write's EPIPE
    // is no failure of ours, and its exit code says what happened (kind's run once died of it, unhandled).
    child.stdin!.on('error', () => undefined);
    child.stdin!.end(opts.input ?? '');
  });
}

/** Runs kubectl against the test cluster; resolves with its exit code and output whatever the code. */
export async function kubectlResult(args: string[], opts: { input?: string; timeoutMs?: number } = {}): Promise<RunResult> {
  const c = clusterInfo();
  return run(c.kubectl, ['--kubeconfig', c.kubeconfig, ...args], { timeoutMs: opts.timeoutMs ?? 60_000, input: opts.input });
}

/**
 * `kubectl port-forward` as a user runs it (`-n NS port-forward TARGET :REMOTE`, a free local port on 127.0.0.1),
 * resolved once kubectl says where it forwards from; `close()` stops it.
 */
export async function portForward(namespace: string, target: string, remotePort: number): Promise<{ port: number; close: () => void }> {
  const c = clusterInfo();
  const child = spawn(c.kubectl, ['--kubeconfig', c.kubeconfig, '-n', namespace, 'port-forward', '--address', '127.0.0.1', target, `:${remotePort}`], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let said = '';
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`kubectl port-forward ${target}: no forwarding after 30 s: ${said.trim()}`)), 30_000);
    const hear = (d: Buffer) => {
      said += d.toString('utf8');
      const m = /Forwarding from 127\.0\.0\.1:(\d+) ->/.exec(said);
      if (m) {
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    };
    child.stdout!.on('data', hear);
    child.stderr!.on('data', hear);
    child.on('error', (e) => (clearTimeout(timer), reject(e)));
    child.on('exit', (code) => (clearTimeout(timer), reject(new Error(`kubectl port-forward ${target} exited ${code}: ${said.trim()}`))));
  }).catch((e: unknown) => {
    child.kill('SIGKILL');
    throw e;
  });
  return { port, close: () => child.kill('SIGTERM') };
}

/** Runs kubectl against the test cluster and resolves with its stdout; rejects when it exits non-zero. */
export async function kubectl(args: string[], opts: { input?: string; timeoutMs?: number } = {}): Promise<string> {
  const r = await kubectlResult(args, opts);
  if (r.code !== 0) throw new Error(`kubectl ${args.join(' ')} exited ${r.code}: ${r.stderr.trim() || r.stdout.trim()}`);
  return r.stdout;
}

/** kubectl ... -o json, parsed (e.g. `kubectlJson<Pod>(['-n', ns, 'get', 'pod', name])`). */
export async function kubectlJson<T = unknown>(args: string[]): Promise<T> {
  return JSON.parse(await kubectl([...args, '-o', 'json'])) as T;
}

/** `kubectl apply -f -` of objects (as JSON) or of a YAML/JSON text. */
export async function apply(manifest: string | object | object[]): Promise<string> {
  const input =
    typeof manifest === 'string'
      ? manifest
      : JSON.stringify(Array.isArray(manifest) ? { apiVersion: 'v1', kind: 'List', items: manifest } : manifest);
  return kubectl(['apply', '-f', '-'], { input });
}

/** Polls fn until it returns a value other than undefined/false, or throws after timeoutMs. */
export async function waitFor<T>(
  what: string,
  fn: () => Promise<T | undefined | false> | T | undefined | false,
  opts: { timeoutMs?: number; intervalMs?: number } = {},
): Promise<T> {
  const deadline = Date.now() + (opts.timeoutMs ?? 60_000);
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v !== undefined && v !== false) return v as T;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}${last ? `: ${String(last)}` : ''}`);
    await new Promise((r) => setTimeout(r, opts.intervalMs ?? 250));
  }
}

/**
 * Waits until each object (`kind/name`, e.g. `crd/pools.bettercompute.io`) has the condition `type` True, polling with
 * a deadline. Not `kubectl wait`: on an object made a moment ago with no status yet, that exits 1 (".status.conditions
 * accessor error: <nil> is of the type <nil>") instead of waiting.
 */
export async function waitCondition(
  objects: string[],
  type: string,
  opts: { namespace?: string; timeoutMs?: number } = {},
): Promise<void> {
  const ns = opts.namespace ? ['-n', opts.namespace] : [];
  for (const o of objects) {
    await waitFor(
      `${o} ${type}`,
      async () => {
        const got = await kubectlJson<{ status?: { conditions?: Condition[] | null } | null }>([...ns, 'get', o]);
        return (got.status?.conditions ?? []).some((c) => c.type === type && c.status === 'True');
      },
      { timeoutMs: opts.timeoutMs ?? 60_000, intervalMs: 200 },
    );
  }
}

/** Waits until the pod reaches one of the phases; resolves with the pod object. */
export async function waitForPodPhase(namespace: string, name: string, phases: string[], timeoutMs = 90_000): Promise<Pod> {
  return waitFor(
    `pod ${namespace}/${name} in ${phases.join('|')}`,
    async () => {
      const pod = await kubectlJson<Pod>(['-n', namespace, 'get', 'pod', name]);
      return phases.includes(pod.status?.phase ?? '') ? pod : undefined;
    },
    { timeoutMs },
  );
}

/** A name unique to this run: prefix-<8 hex>. */
export function uniqueName(prefix: string): string {
  return `${prefix}-${randomBytes(4).toString('hex')}`;
}

export interface SimulatedNodeOptions {
  /** Name prefix (default "sim"); names are `${prefix}-${random}-${i}`. */
  prefix?: string;
  /** Add the taint `bettercompute.io/simulated:NoSchedule` so that no stray pod lands there (default true). */
  taint?: boolean;
  /** Extra taints. */
  taints?: { key: string; value?: string; effect: string }[];
}

/**
 * Creates n Node objects without a kubelet, Ready, with the given labels and capacity (allocatable = capacity;
 * cpu 32, memory 256Gi and pods 110 unless given), e.g. `addSimulatedNodes(4, {pool: 'a'}, {'bettercompute.io/gpu': '8'})`.
 * They stay Ready: the controller manager runs with a node-monitor grace period of hours (BC_NODE_MONITOR_GRACE), so
 * they need no heartbeat. Pods bound to them are never run; delete such pods with `deletePodsNow`.
 * Resolves with the node names once the node lifecycle controller has taken off its not-ready taint.
 */
export async function addSimulatedNodes(
  n: number,
  labels: Record<string, string> = {},
  capacity: Record<string, string> = {},
  opts: SimulatedNodeOptions = {},
): Promise<string[]> {
  const base = uniqueName(opts.prefix ?? 'sim');
  const names = Array.from({ length: n }, (_, i) => `${base}-${i}`);
  const cap = { cpu: '32', memory: '256Gi', pods: '110', 'ephemeral-storage': '100Gi', ...capacity };
  const taints = [
    ...(opts.taint === false ? [] : [{ key: SIMULATED_LABEL, value: 'true', effect: 'NoSchedule' }]),
    ...(opts.taints ?? []),
  ];
  const now = new Date().toISOString().replace(/\.\d+Z$/, 'Z');
  const nodes = names.map((name) => ({
    apiVersion: 'v1',
    kind: 'Node',
    metadata: {
      name,
      labels: {
        'kubernetes.io/hostname': name,
        'kubernetes.io/os': 'linux',
        'kubernetes.io/arch': 'amd64',
        [SIMULATED_LABEL]: 'true',
        ...labels,
      },
    },
    spec: { taints },
    status: {
      capacity: cap,
      allocatable: cap,
      conditions: [
        { type: 'Ready', status: 'True', reason: 'SimulatedNode', message: 'simulated by the test harness', lastHeartbeatTime: now, lastTransitionTime: now },
        { type: 'MemoryPressure', status: 'False', reason: 'SimulatedNode', lastHeartbeatTime: now, lastTransitionTime: now },
        { type: 'DiskPressure', status: 'False', reason: 'SimulatedNode', lastHeartbeatTime: now, lastTransitionTime: now },
        { type: 'PIDPressure', status: 'False', reason: 'SimulatedNode', lastHeartbeatTime: now, lastTransitionTime: now },
      ],
      nodeInfo: {
        architecture: 'amd64',
        operatingSystem: 'linux',
        kubeletVersion: 'simulated',
        containerRuntimeVersion: 'simulated://0',
        kernelVersion: '',
        osImage: 'simulated',
        kubeProxyVersion: '',
        machineID: '',
        systemUUID: '',
        bootID: '',
      },
    },
  }));
  // A Node's status is kept on create (that is how the kubelet registers), so one call makes them Ready.
  // Thousands of nodes (bench/scheduler.bench.ts) take minutes to create and to list: the limits grow with n.
  await kubectl(['create', '-f', '-'], { input: JSON.stringify({ apiVersion: 'v1', kind: 'List', items: nodes }), timeoutMs: Math.max(120_000, n * 100) });
  await waitFor(
    `${n} simulated nodes Ready without not-ready taints`,
    async () => {
      const list = await kubectlJson<List<Node>>(['get', 'nodes', '-l', `${SIMULATED_LABEL}=true`]);
      const ready = new Set(
        list.items
          .filter(
            (node) =>
              isReady(node) && !(node.spec?.taints ?? []).some((t) => t.key.startsWith('node.kubernetes.io/')),
          )
          .map((node) => node.metadata.name),
      );
      return names.every((name) => ready.has(name));
    },
    { timeoutMs: Math.max(60_000, n * 100), ...(n > 100 ? { intervalMs: 5000 } : {}) },
  );
  return names;
}

/** Deletes simulated nodes (all of them when no names are given) and, first, the pods bound to them. */
export async function removeSimulatedNodes(names?: string[]): Promise<void> {
  const targets =
    names ?? (await kubectlJson<List<Node>>(['get', 'nodes', '-l', `${SIMULATED_LABEL}=true`])).items.map((x) => x.metadata.name);
  if (targets.length === 0) return;
  const pods = (await kubectlJson<List<Pod>>(['get', 'pods', '-A'])).items;
  const set = new Set(targets);
  const bound = pods.filter((p) => p.spec.nodeName !== undefined && set.has(p.spec.nodeName));
  for (const p of bound) await deletePodsNow(p.metadata.namespace ?? 'default', [p.metadata.name]);
  await kubectl(['delete', 'node', '--ignore-not-found', '--wait=false', ...targets], { timeoutMs: Math.max(120_000, targets.length * 100) });
}

/** The node's Ready condition is True. */
export function isReady(node: Node): boolean {
  return node.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;
}

/** Sets a (simulated) node's Ready condition; the node lifecycle controller then taints or untaints it. */
export async function setNodeReady(name: string, ready: boolean): Promise<void> {
  const now = new Date().toISOString().replace(/\.\d+Z$/, 'Z');
  const patch = {
    status: {
      conditions: [
        { type: 'Ready', status: ready ? 'True' : 'False', reason: ready ? 'SimulatedNode' : 'SimulatedNotReady', lastHeartbeatTime: now, lastTransitionTime: now },
      ],
    },
  };
  await kubectl(['patch', 'node', name, '--subresource=status', '--type=strategic', '-p', JSON.stringify(patch)]);
}

/** Deletes pods at once (grace period 0, force): pods on simulated nodes have no kubelet to confirm a deletion. */
export async function deletePodsNow(namespace: string, names: string[]): Promise<void> {
  if (names.length === 0) return;
  await kubectl(['-n', namespace, 'delete', 'pod', '--ignore-not-found', '--grace-period=0', '--force', '--wait=false', ...names]);
}

/** The scheduler's KubeSchedulerConfiguration now (YAML text). */
export function readSchedulerConfig(): string {
  return fs.readFileSync(clusterInfo().schedulerConfigFile, 'utf8');
}

/** The KubeSchedulerConfiguration up.sh starts with (YAML, `__KUBECONFIG__` placeholder in clientConnection). */
export function defaultSchedulerConfig(): string {
  return fs.readFileSync(path.join(clusterInfo().dir, 'scheduler', 'default-config.yaml'), 'utf8');
}

function ctl(args: string[], timeoutMs = 180_000): Promise<void> {
  const c = clusterInfo();
  if (!c.local) throw new Error('restarting components works on the local test cluster only');
  return new Promise((resolve, reject) => {
    execFile('bash', [CTL, ...args], { timeout: timeoutMs, env: { ...process.env, BC_CLUSTER_DIR: c.dir } }, (err, _out, stderr) =>
      err ? reject(new Error(`ctl.sh ${args.join(' ')} failed: ${stderr}`)) : resolve(),
    );
  });
}

/**
 * Restarts kube-scheduler, with a new KubeSchedulerConfiguration when given (YAML text; `__KUBECONFIG__` stands for the
 * scheduler's kubeconfig; clientConnection and leaderElection are added when missing). Resolves once it is ready.
 * Tests that change the config should restore it afterwards: `restartScheduler(defaultSchedulerConfig())`.
 */
export async function restartScheduler(configYaml?: string): Promise<void> {
  if (configYaml === undefined) return ctl(['restart', 'kube-scheduler']);
  const tmp = path.join(os.tmpdir(), `bc-scheduler-${randomBytes(4).toString('hex')}.yaml`);
  fs.writeFileSync(tmp, configYaml);
  try {
    await ctl(['restart', 'kube-scheduler', tmp]);
  } finally {
    fs.rmSync(tmp, { force: true });
  }
}

/** Restarts the real node's kubelet (e.g. after a device plugin change) and waits for its healthz and Ready. */
export async function restartKubelet(): Promise<void> {
  await ctl(['restart', 'kubelet']);
  const node = clusterInfo().nodeName;
  await waitFor(`node ${node} Ready after kubelet restart`, async () => isReady(await kubectlJson<Node>(['get', 'node', node])));
}

/**
 * Freezes a component of the local cluster (SIGSTOP) until resumeComponent: it keeps its sockets, registrations and
 * watches, and does nothing meanwhile (a kubelet admits no pod, answers no probe and calls no plugin).
 */
export async function pauseComponent(component: string): Promise<void> {
  return ctl(['pause', component]);
}

export async function resumeComponent(component: string): Promise<void> {
  return ctl(['resume', component]);
}

/** Restarts any component of the local cluster: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd, kubelet. */
export async function restartComponent(component: string): Promise<void> {
  return ctl(['restart', component]);
}

/** true when the local cluster's API server answers /readyz. */
export async function isClusterUp(): Promise<boolean> {
  if (process.env.BC_EXTERNAL_CLUSTER !== '1' && !fs.existsSync(path.join(CLUSTER_DIR, 'env'))) return false;
  const r = await kubectlResult(['get', '--raw', '/readyz'], { timeoutMs: 10_000 }).catch(() => undefined);
  return r?.code === 0;
}

let runLock: ChildProcess | undefined;

/**
 * Takes the cluster for this test run (global setup): waits until no other test run on this machine has it (tests
 * change the scheduler's configuration and restart the kubelet, so runs take turns), then brings it up unless it is,
 * and records this process as its user. The turn is held by a `flock` child process that ends with this process.
 */
export async function acquireCluster(): Promise<void> {
  const cache = process.env.BC_CACHE ?? path.join(os.homedir(), '.cache', 'better-compute');
  fs.mkdirSync(cache, { recursive: true });
  const lockFile = path.join(cache, 'cluster-run.lock');
  const child = spawn('flock', [lockFile, 'sh', '-c', 'echo locked; exec cat >/dev/null'], { stdio: ['pipe', 'pipe', 'inherit'] });
  const waiting = setTimeout(() => process.stderr.write('[cluster] waiting for another test run to finish with the cluster\n'), 2000);
  await new Promise<void>((resolve, reject) => {
    child.on('error', reject);
    child.on('exit', (code) => reject(new Error(`flock ${lockFile} exited ${code}`)));
    child.stdout!.once('data', () => resolve());
  }).finally(() => clearTimeout(waiting));
  child.removeAllListeners('exit');
  child.unref();
  runLock = child;
  const r = await run('bash', [CTL, 'acquire', String(process.pid)], { inheritStderr: true });
  if (r.code !== 0) {
    await releaseCluster();
    throw new Error(`e2e/cluster/ctl.sh acquire exited ${r.code}; logs in ${path.join(CLUSTER_DIR, 'logs')}`);
  }
}

/** Ends this run's use: the last user takes down a cluster that a test run started; then the next run may have it. */
export async function releaseCluster(): Promise<void> {
  try {
    const r = await run('bash', [CTL, 'release', String(process.pid)], { inheritStderr: true });
    if (r.code !== 0) throw new Error(`e2e/cluster/ctl.sh release exited ${r.code}`);
  } finally {
    runLock?.stdin?.end();
    runLock = undefined;
  }
}

/** Runs up.sh (builds the components first if they are not cached: ~40 minutes cold). Progress goes to stderr. */
export async function clusterUp(): Promise<void> {
  const r = await run('bash', [UP], { inheritStderr: true });
  if (r.code !== 0) throw new Error(`e2e/cluster/up.sh exited ${r.code}; logs in ${path.join(CLUSTER_DIR, 'logs')}`);
}

/** Runs down.sh: stops everything and removes the state dir. */
export async function clusterDown(): Promise<void> {
  const r = await run('bash', [DOWN], { inheritStderr: true });
  if (r.code !== 0) throw new Error(`e2e/cluster/down.sh exited ${r.code}`);
}

/** The node agent's user (its ServiceAccount in the installed namespace). */
export const AGENT_USER = 'system:serviceaccount:better-compute-system:better-compute-agent';

/**
 * A kubeconfig in `dir` that impersonates the node agent of `node`: its ServiceAccount with the extra its projected
 * token carries (authentication.kubernetes.io/node-name), or without that extra when `node` is undefined. kubectl has
 * no flag for user extras; a kubeconfig's `as-user-extra` does it.
 */
export function agentKubeconfig(dir: string, node: string | undefined): string {
  type Obj = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
  const kc = YAML.parse(fs.readFileSync(clusterInfo().kubeconfig, 'utf8')) as Obj;
  const ctx = (kc.contexts as Obj[]).find((c) => c.name === kc['current-context'])!.context as Obj;
  const u = (kc.users as Obj[]).find((x) => x.name === ctx.user)!;
  u.user = { ...u.user, as: AGENT_USER, 'as-groups': ['system:serviceaccounts', 'system:serviceaccounts:better-compute-system', 'system:authenticated'] };
  if (node) u.user['as-user-extra'] = { 'authentication.kubernetes.io/node-name': [node] };
  const file = path.join(dir, `agent-${node ?? 'none'}.kubeconfig`);
  fs.writeFileSync(file, YAML.stringify(kc), { mode: 0o600 });
  return file;
}
