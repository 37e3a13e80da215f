// The real kube-scheduler of the test cluster (e2e/cluster), with and without our extender, side by side in one run:
// at 1,000 and 5,000 simulated nodes (8 GPUs each), 1,000 pods that request `bettercompute.io/gpu: 1` scheduled through
// the extender (filter, prioritize and bind, deploy/scheduler/'s configuration, the ledger in PostgreSQL), against the
// same 1,000 pods requesting a plain extended resource (`example.com/gpu: 1`) that kube-scheduler places alone.
// Each row first schedules BENCH_WARMUP (32) pods of its kind, not measured, so that both rows measure a running
// system (the extender's first bind loads the pool into its ledger's cache once per process, as in the controller).
// Two rows through Dynamic Resource Allocation (ADR 0043: the ledger allocates, the default kube-scheduler follows, no
// extender), on the same nodes after the extender's row, their ledger Pool switched to `handoff: dra`: pods that claim
// one GPU through a ResourceClaimTemplate of class gpu.bettercompute.io (on demand), and pods of Reservations booked in
// the ledger before the first row (Reservation objects of 8 nodes × 8 GPUs each, BENCH_RESERVATION_NODES), labelled
// bettercompute.io/reservation and claiming through a template of class reservation.bettercompute.io. Each pod's claim
// is made by kube-controller-manager's resourceclaim controller, allocated by the product's claim allocator
// (src/controller/dra/, the ledger fence taken, in a process of its own: bench/dra-allocator-process.ts), and the pod
// bound by the default kube-scheduler. Each DRA pod passes the product's pod admission webhook (deploy/admission/
// webhook.yaml's dra-pods webhook, served by the allocator's process as the controller serves it, for the bench's
// namespace only), which gives it the scheduling gate bettercompute.io/allocation (ADR 0049): kube-scheduler does not
// try it until the allocator has allocated its claim and lifted the gate. The bench applies the product's
// DeviceClasses (deploy/dra/deviceclasses.yaml) and CRDs; it refuses to run while the product's allocation policy is
// installed (it allocates as the cluster's admin).
// Beside them, upstream DRA, what a user would run instead (issue 47): the same nodes publishing a ResourceSlice each
// for a driver that does nothing (NOOP below: 8 devices per node), a DeviceClass selecting them by driver, pods claiming
// one device through a ResourceClaimTemplate, and kube-scheduler allocating; no process of the product in the path (the
// bench's webhook is removed for that row). Our DRA rows print their pods/s as a share of that row's too.
// Prints pods per second (first create to last binding) and the p50/p99 of each pod's time from its create call to its
// binding seen on a watch; the ratio is the row's pods/s ÷ the plain row's pods/s. Under the DRA rows: each pod's time
// from its create call to its claim seen on a watch (made by kube-controller-manager), from that to its allocation
// seen, and from that to its binding (p50/p99); how many pods the webhook gated; the allocator's reconciles (mean,
// p50, p99 ms per claim key) and CPU (the webhook's included).
// The extender runs in a process of its own (bench/extender-process.ts), as in the controller's pod: this process's
// client work is not on its event loop, nor in its scheduling group (startExtenderProcess). Every row runs
// kube-scheduler with its own API client unthrottled (unthrottled() below). Under each size: the CPU time per pod of
// kube-scheduler, kube-apiserver, etcd, PostgreSQL and kube-controller-manager in each row, and of the extender
// process and the allocator process in theirs; and the API server's requests per pod in the plain and the DRA rows
// (apiserver_request_total, every client's, by verb and resource).
//   npm run bench:scheduler   (root; brings the test cluster up, or takes its turn on it, like the cluster tests)
// Env: BENCH_NODES (default 1000,5000), BENCH_PODS (default 1000), BENCH_CREATE_CONCURRENCY (default 16), BENCH_WARMUP,
//      BENCH_EXTENDER_CPU_PROF (a directory: the extender process writes a V8 CPU profile of each row there),
//      BENCH_CLUSTER_HELD=1 (the calling test run holds the cluster: take no turn on it),
//      BENCH_FILTER_NODES (the most nodes the extender's filter passes; default the product's, ADR 0022),
//      BENCH_PERF (a directory: `perf record -g` of the processes of CPU_OF over each measured row, <row>.perf.data),
//      BENCH_RESERVATION_NODES (default 8: the nodes of each Reservation of the Reservation row, 8 GPUs each),
//      BENCH_ALLOCATOR_WORKERS (the claims the allocator reconciles at once; default the product's, 4),
//      BENCH_ALLOCATOR_CPU_PROF (a directory: the allocator process writes a V8 CPU profile of its whole life there).
// Simulated nodes have no kubelet, so no agent completes an on-demand pod's admission: the bench does what the agent
// does once the kubelet admitted the pod (it drops the node's admission lease when it sees the pod bound), so that the
// next bind on that node is not held up waiting for an admission that no kubelet will ever make.
import { fork, spawn } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import * as k8s from '@kubernetes/client-node';
import YAML from 'yaml';
import { startEmbedded } from '../src/db/embedded.ts';
import { Ledger } from '../src/db/ledger.ts';
import { migrate } from '../src/db/migrate.ts';
import { createPool } from '../src/db/pool.ts';
import { kubeConfigFrom } from '../src/kube/client.ts';
import { schedulerConfigWithExtender } from '../e2e/cluster/controller-support.ts';
import {
  acquireCluster,
  addSimulatedNodes,
  clusterInfo,
  defaultSchedulerConfig,
  kubectl,
  releaseCluster,
  restartScheduler,
} from '../e2e/cluster/harness.ts';
import type { AllocatorProcessMessage } from './dra-allocator-process.ts';
import type { ExtenderProcessMessage } from './extender-process.ts';
import { seedNodes } from './seed.ts';
import { ALLOCATION_GATE } from '../src/core/names.ts';

const SIZES = (process.env.BENCH_NODES ?? '1000,5000').split(',').map(Number);
const PODS = Number(process.env.BENCH_PODS ?? 1000);
const CREATE_CONCURRENCY = Number(process.env.BENCH_CREATE_CONCURRENCY ?? 16);
const WARMUP = Number(process.env.BENCH_WARMUP ?? 32);
const NAMESPACE = 'bench-scheduler';
const TENANT = 'bench';
const BENCH_LABEL = 'bettercompute.io/bench-scheduler';
const PLAIN_RESOURCE = 'example.com/gpu';
const RESERVATION_NODES = Number(process.env.BENCH_RESERVATION_NODES ?? 8);
const GPUS_PER_NODE = 8;
/**
 * Upstream DRA's row (issue 47): a driver that does nothing, whose ResourceSlices (one per node, its 8 GPUs) the bench
 * publishes as a node's DRA driver would; a DeviceClass selecting its devices by driver, a template claiming one;
 * kube-scheduler allocates, and no process of the product is in the path (the bench's webhook is removed for the row).
 */
const NOOP = { driver: 'noop.bench.bettercompute.io', template: 'noop' } as const;
/** The DRA rows' ResourceClaimTemplates: one GPU on demand, one atom of the pod's Reservation. */
const TEMPLATES = { onDemand: ['gpu', 'gpu.bettercompute.io'], reservation: ['rsv', 'reservation.bettercompute.io'] } as const;
const ROOT = path.join(import.meta.dirname, '..');

interface Stats {
  podsPerSecond: number;
  p50: number;
  p99: number;
  /** Pod name → when its create call was made, and when its binding was seen (performance.now()). */
  created: Map<string, number>;
  bound: Map<string, number>;
  /** Pods that admission gave the scheduling gate bettercompute.io/allocation (as the create call's answer shows). */
  gated: number;
}

/**
 * The configuration with kube-scheduler's own API client unthrottled (its default, 50 requests/s with a burst of 100,
 * caps the plain row's Bindings at about 50 pods/s once 100 are spent, while the extender's row binds through the
 * extender; scheduler_perf runs upstream's scheduler unthrottled too): both rows measure scheduling, not the limiter.
 */
function unthrottled(config: string): string {
  const c = YAML.parse(config) as { clientConnection?: Record<string, unknown> };
  return YAML.stringify({ ...c, clientConnection: { ...c.clientConnection, qps: 5000, burst: 5000 } });
}

/** The processes whose CPU time the bench reports per pod, by their /proc comm (15 characters at most). */
const CPU_OF = ['kube-scheduler', 'kube-apiserver', 'etcd', 'postgres', 'kube-controller'] as const;

/** pid → a process of CPU_OF and the CPU seconds (user + system) it has spent so far. */
type CpuReading = Map<string, { comm: string; ppid: string; seconds: number }>;

async function cpuSeconds(): Promise<CpuReading> {
  const out: CpuReading = new Map();
  for (const pid of await fs.readdir('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    const stat = await fs.readFile(`/proc/${pid}/stat`, 'utf8').catch(() => '');
    const comm = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
    if (!(CPU_OF as readonly string[]).includes(comm)) continue;
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // utime, stime, cutime and cstime, fields 14 to 17 of proc(5), in clock ticks (USER_HZ, 100 on Linux): with its
    // children's, so that PostgreSQL's backends that exit during a row (a pool's idle connections are closed after 10 s)
    // still count, in the postmaster that reaps them.
    out.set(pid, { comm, ppid: fields[1]!, seconds: (Number(fields[11]) + Number(fields[12]) + Number(fields[13]) + Number(fields[14])) / 100 });
  }
  return out;
}

/**
 * What each of CPU_OF spent per pod between two cpuSeconds() readings, in ms: a process started in between counts from
 * its start, one that exited in between counts in its parent's children's time when its parent is one of CPU_OF (a
 * PostgreSQL backend, in its postmaster; the scheduler restarted before a row has started already).
 */
function cpuPerPod(before: CpuReading, after: CpuReading, pods: number): string {
  const spent = new Map<string, number>(CPU_OF.map((c) => [c, 0]));
  for (const [pid, p] of after) spent.set(p.comm, spent.get(p.comm)! + p.seconds - (before.get(pid)?.seconds ?? 0));
  // One that exited counts whole in its parent's children's time when its parent is one of CPU_OF (a PostgreSQL
  // backend): what it had spent before is not the row's. Others that exited (a kube-scheduler restarted just before
  // the row, still going at the first reading) are missed, and their time before is not taken off.
  for (const [pid, p] of before) if (!after.has(pid) && after.has(p.ppid)) spent.set(p.comm, spent.get(p.comm)! - p.seconds);
  return CPU_OF.map((c) => `${c} ${((spent.get(c)! * 1000) / pods).toFixed(1)}`).join(', ');
}

/**
 * With BENCH_PERF, starts `perf record -g` of the processes of CPU_OF found by the row's first cpuSeconds() reading
 * (their call stacks, 499 samples a second) into BENCH_PERF/<run>.perf.data; the function returned stops it. Without,
 * a function that does nothing.
 */
async function perfRecord(run: string, processes: CpuReading): Promise<() => Promise<void>> {
  const dir = process.env.BENCH_PERF;
  if (!dir) return async () => undefined;
  const pids = [...processes.keys()].join(',');
  const perf = spawn('perf', ['record', '-F', '499', '-g', '-o', path.join(dir, `${run}.perf.data`), '-p', pids], { stdio: ['ignore', 'ignore', 'inherit'] });
  const exited = once(perf, 'exit');
  await new Promise((r) => setTimeout(r, 500)); // attached by then
  return async () => {
    perf.kill('SIGINT');
    await exited;
  };
}

/** The API server's requests so far (apiserver_request_total), by `verb resource[/subresource]`, every client's. */
async function apiRequests(): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  for (const line of (await kubectl(['get', '--raw', '/metrics'])).split('\n')) {
    if (!line.startsWith('apiserver_request_total{')) continue;
    const label = (k: string) => line.match(new RegExp(`[{,]${k}="([^"]*)"`))?.[1] ?? '';
    const key = `${label('verb')} ${label('resource')}${label('subresource') ? `/${label('subresource')}` : ''}`;
    out.set(key, (out.get(key) ?? 0) + Number(line.slice(line.lastIndexOf(' ') + 1)));
  }
  return out;
}

/** The requests per pod between two apiRequests() readings, the most frequent first (those under 0.05 a pod left out). */
function requestsPerPod(before: Map<string, number>, after: Map<string, number>, pods: number): string {
  const per = [...after].map(([k, n]): [string, number] => [k, (n - (before.get(k) ?? 0)) / pods]).filter(([, x]) => x >= 0.05);
  const total = per.reduce((a, [, x]) => a + x, 0);
  return `${total.toFixed(1)}: ${per.sort((a, b) => b[1] - a[1]).map(([k, x]) => `${k} ${x.toFixed(2)}`).join(', ')}`;
}

function quantile(sorted: number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? NaN;
}

type Manifest = (name: string, i: number) => object;

const podSpec = {
  nodeSelector: { [BENCH_LABEL]: 'true' },
  tolerations: [{ key: 'bettercompute.io/simulated', operator: 'Exists', effect: 'NoSchedule' }],
};

/** A pod that asks for one of an extended resource. */
const resourcePod =
  (resource: string): Manifest =>
  (name) => ({
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: NAMESPACE },
    spec: { ...podSpec, containers: [{ name: 'main', image: 'bettercompute.local/busybox:v1', resources: { limits: { [resource]: '1' } } }] },
  });

/** A pod of one claim made from `template`; `labels(i)` for the i-th pod of the run. */
const claimPod =
  (template: string, labels: (i: number) => Record<string, string> = () => ({})): Manifest =>
  (name, i) => ({
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: NAMESPACE, labels: labels(i) },
    spec: {
      ...podSpec,
      resourceClaims: [{ name: 'gpu', resourceClaimTemplateName: template }],
      containers: [{ name: 'main', image: 'bettercompute.local/busybox:v1', resources: { claims: [{ name: 'gpu' }] } }],
    },
  });

/**
 * Creates `count` pods (CREATE_CONCURRENCY calls at a time) and waits until a watch has seen every one bound.
 * `onBound` runs for each binding seen.
 */
async function schedulePods(kc: k8s.KubeConfig, run: string, manifest: Manifest, count: number, onBound?: (pod: k8s.V1Pod) => void): Promise<Stats> {
  const core = kc.makeApiClient(k8s.CoreV1Api);
  const created = new Map<string, number>();
  const bound = new Map<string, number>();
  let gated = 0;
  let allBound!: () => void;
  const done = new Promise<void>((r) => (allBound = r));
  const seen = (pod: k8s.V1Pod, at: number) => {
    const name = pod.metadata?.name ?? '';
    if (pod.spec?.nodeName && name.startsWith(run) && !bound.has(name)) {
      bound.set(name, at);
      onBound?.(pod);
      if (bound.size === count) allBound();
    }
  };
  // The watch starts at the list's resourceVersion, so it sees every pod created after the list even if it connects
  // late (its promise settles only once the first event arrives: not awaited before the creates). Two runs at 1,000
  // nodes once waited forever on a watch that had gone quiet with no error and no connection left (cause not found),
  // so a watch that ends, or sends nothing for 10 s while pods are still unbound, is started again from a new list,
  // whose bound pods count as bound when listed (a later time than the binding: it can only make the bench slower).
  let current: Promise<AbortController> | undefined;
  let generation = 0;
  let lastEvent = performance.now();
  const rewatch = (why: string) => {
    process.stderr.write(`[bench] ${run}: watch ${why} at ${bound.size}/${count} bound; watching again\n`);
    generation++; // the old watch's end, when the abort below causes it, is not another reason to watch again
    const old = current;
    void old?.then((c) => c.abort()).catch(() => undefined);
    setTimeout(() => void watchFrom().catch((e: unknown) => console.error(`re-watch: ${String(e)}`)), 200);
  };
  const watchFrom = async (): Promise<void> => {
    const mine = generation;
    lastEvent = performance.now();
    const list = await core.listNamespacedPod({ namespace: NAMESPACE });
    for (const pod of list.items) seen(pod, performance.now());
    if (bound.size >= count) return;
    current = new k8s.Watch(kc).watch(
      `/api/v1/namespaces/${NAMESPACE}/pods`,
      { resourceVersion: list.metadata?.resourceVersion, allowWatchBookmarks: true },
      (type: string, obj: k8s.V1Pod) => {
        lastEvent = performance.now();
        if (type === 'ADDED' || type === 'MODIFIED') seen(obj, performance.now());
        else if (type === 'ERROR') process.stderr.write(`[bench] ${run}: watch error event ${JSON.stringify(obj)}\n`);
      },
      (err: unknown) => {
        if (bound.size >= count || mine !== generation) return;
        rewatch(`ended (${err ? String(err) : 'closed'})`);
      },
    );
  };
  const quiet = setInterval(() => {
    if (bound.size < count && performance.now() - lastEvent > 10_000) rewatch('quiet for 10 s');
  }, 1000);
  await watchFrom();
  process.stderr.write(`[bench] ${run}: creating ${count} pods\n`);
  const started = performance.now();
  let next = 0;
  await Promise.all(
    Array.from({ length: CREATE_CONCURRENCY }, async () => {
      while (next < count) {
        const i = next++;
        const name = `${run}-${i}`;
        created.set(name, performance.now());
        const made = await core.createNamespacedPod({ namespace: NAMESPACE, body: manifest(name, i) as k8s.V1Pod });
        if (made.spec?.schedulingGates?.some((g) => g.name === ALLOCATION_GATE)) gated++;
      }
    }),
  );
  const timeout = setTimeout(() => allBound(), 600_000);
  await done;
  clearTimeout(timeout);
  clearInterval(quiet);
  (await current)?.abort();
  if (bound.size < count) throw new Error(`${run}: only ${bound.size} of ${count} pods bound within 10 minutes`);
  const latencies = [...bound].map(([name, t]) => t - (created.get(name) ?? t)).sort((a, b) => a - b);
  const last = Math.max(...bound.values());
  return { podsPerSecond: count / ((last - started) / 1000), p50: quantile(latencies, 0.5), p99: quantile(latencies, 0.99), created, bound, gated };
}

/**
 * The run's pods in one deletecollection call, at once (no kubelet to wait for; kubectl deletes a thousand one by one
 * behind its own rate limiter, which has taken over five minutes), then waits until none is listed.
 */
async function deletePods(kc: k8s.KubeConfig): Promise<void> {
  const core = kc.makeApiClient(k8s.CoreV1Api);
  // A thousand DRA pods (their claims deleted and released meanwhile) once took the call past the client's 30 s
  // timeout on the loaded machine: the call is made again until it answers (what it deleted stays deleted).
  const deleteAll = () =>
    core.deleteCollectionNamespacedPod({ namespace: NAMESPACE, gracePeriodSeconds: 0 }).then(
      () => true,
      (e: unknown) => {
        process.stderr.write(`[bench] deleting the pods: ${String(e)}; again\n`);
        return false;
      },
    );
  const deadline = performance.now() + 300_000;
  let deleted = await deleteAll();
  while ((await core.listNamespacedPod({ namespace: NAMESPACE, limit: 1 })).items.length > 0) {
    if (performance.now() > deadline) throw new Error(`pods of namespace ${NAMESPACE} are still listed 5 minutes after their deletion`);
    if (!deleted) deleted = await deleteAll();
    else await new Promise((r) => setTimeout(r, 500));
  }
}

/**
 * The bench's nodes and their no-op driver's ResourceSlices, each in one deletecollection call (kubectl deletes
 * thousands one by one, minutes). Its pods are gone.
 */
async function removeBenchNodes(kc: k8s.KubeConfig): Promise<void> {
  await kc.makeApiClient(k8s.ResourceV1Api).deleteCollectionResourceSlice({ labelSelector: `${BENCH_LABEL}=true` });
  await kc.makeApiClient(k8s.CoreV1Api).deleteCollectionNode({ labelSelector: `${BENCH_LABEL}=true` });
}

/** A ResourceSlice of the no-op driver for each node (its GPUS_PER_NODE devices), CREATE_CONCURRENCY calls at a time. */
async function publishNoopSlices(kc: k8s.KubeConfig, nodes: readonly string[]): Promise<void> {
  const resource = kc.makeApiClient(k8s.ResourceV1Api);
  let next = 0;
  await Promise.all(
    Array.from({ length: CREATE_CONCURRENCY }, async () => {
      while (next < nodes.length) {
        const node = nodes[next++]!;
        await resource.createResourceSlice({
          body: {
            apiVersion: 'resource.k8s.io/v1',
            kind: 'ResourceSlice',
            metadata: { name: `${NOOP.template}-${node}`, labels: { [BENCH_LABEL]: 'true' } },
            spec: {
              driver: NOOP.driver,
              nodeName: node,
              pool: { name: node, generation: 1, resourceSliceCount: 1 },
              devices: Array.from({ length: GPUS_PER_NODE }, (_, i) => ({ name: `gpu-${i}` })),
            },
          },
        });
      }
    }),
  );
}

/**
 * Forks bench/extender-process.ts in a session of its own and waits for its listener. With the kernel's autogroup
 * scheduling (on here), a session is a scheduling group: a busy machine shares its CPUs between groups first, then
 * between the threads within each. The cluster's components each run in a session of their own (e2e/cluster/lib.sh
 * starts them with setsid), and so does each PostgreSQL backend (postgres calls setsid in every child), as a cluster's
 * pods run in cgroups of their own. The extender, forked without `detached`, ran in the bench's session: it shared one
 * group's share with the bench's client, and waited for a CPU 2.6 times as long as it ran.
 */
async function startExtenderProcess(databaseUrl: string, kubeconfig: string) {
  const { child, next } = forkInSession<ExtenderProcessMessage>('extender-process.ts', [databaseUrl, kubeconfig], 'the extender process');
  const ready = await next('ready');
  return {
    url: (ready as Extract<ExtenderProcessMessage, { type: 'ready' }>).url,
    async calls() {
      const answer = next('calls');
      child.send({ type: 'calls' });
      return (await answer) as Extract<ExtenderProcessMessage, { type: 'calls' }>;
    },
    stop: () => stopChild(child),
  };
}

/**
 * Forks `file` (of bench/) in a session of its own (see startExtenderProcess) with an IPC channel; `next(type)` waits for
 * its next message of that type, and fails on its 'error' message or its exit.
 */
function forkInSession<M extends { type: string }>(file: string, args: string[], what: string, execArgv: string[] = []) {
  const child = fork(path.join(import.meta.dirname, file), args, {
    detached: true,
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    ...(execArgv.length ? { execArgv: [...process.execArgv, ...execArgv] } : {}),
  });
  const next = (type: M['type']) =>
    new Promise<M>((resolve, reject) => {
      const onMessage = (m: M) => {
        if (m.type !== type && m.type !== 'error') return;
        child.off('message', onMessage);
        child.off('exit', onExit);
        if (m.type === 'error') reject(new Error(`${what} failed: ${(m as { message?: string }).message}`));
        else resolve(m);
      };
      const onExit = (code: number | null) => reject(new Error(`${what} exited (${code})`));
      child.on('message', onMessage);
      child.once('exit', onExit);
    });
  return { child, next };
}

async function stopChild(child: ReturnType<typeof fork>): Promise<void> {
  const exited = new Promise((r) => child.once('exit', r));
  child.send({ type: 'stop' });
  await Promise.race([exited, new Promise((r) => setTimeout(r, 10_000))]);
  child.kill();
}

/** The product's claim allocator in a process of its own (bench/dra-allocator-process.ts), once its informers listed. */
async function startAllocatorProcess(databaseUrl: string, kubeconfig: string) {
  const profiles = process.env.BENCH_ALLOCATOR_CPU_PROF;
  const { child, next } = forkInSession<AllocatorProcessMessage>('dra-allocator-process.ts', [databaseUrl, kubeconfig], 'the allocator process', profiles ? ['--cpu-prof', '--cpu-prof-dir', profiles] : []);
  const ready = (await next('ready')) as Extract<AllocatorProcessMessage, { type: 'ready' }>;
  return {
    webhookUrl: ready.webhookUrl,
    caBundle: ready.caBundle,
    async stats() {
      const answer = next('stats');
      child.send({ type: 'stats' });
      return (await answer) as Extract<AllocatorProcessMessage, { type: 'stats' }>;
    },
    stop: () => stopChild(child),
  };
}

/**
 * What the DRA rows need on the cluster: the product's CRDs (the allocator reads Reservations) and DeviceClasses, and
 * no allocation policy of an installed product (it refuses the admin's allocations, which are the bench's). Returns
 * whether the DeviceClasses were made here (removed again at the end).
 */
async function prepareDra(): Promise<boolean> {
  const policy = await kubectl(['get', 'validatingadmissionpolicy', 'bettercompute-dra-allocation-controller-only', '--ignore-not-found', '-o', 'name']);
  if (policy.trim()) throw new Error('the product is installed (its policy bettercompute-dra-allocation-controller-only refuses the bench\'s allocations): uninstall it first');
  const hadClasses = (await kubectl(['get', 'deviceclass', TEMPLATES.onDemand[1], '--ignore-not-found', '-o', 'name'])).trim() !== '';
  await kubectl(['apply', '--server-side', '--force-conflicts', '-k', path.join(ROOT, 'crds')]);
  await kubectl(['apply', '-f', path.join(ROOT, 'deploy', 'dra', 'deviceclasses.yaml')]);
  await kubectl(['apply', '-f', '-'], {
    input: JSON.stringify({
      apiVersion: 'resource.k8s.io/v1',
      kind: 'DeviceClass',
      metadata: { name: NOOP.driver },
      spec: { selectors: [{ cel: { expression: `device.driver == "${NOOP.driver}"` } }] },
    }),
  });
  for (const [name, deviceClassName] of [...Object.values(TEMPLATES), [NOOP.template, NOOP.driver] as const]) {
    await kubectl(['apply', '-f', '-'], {
      input: JSON.stringify({
        apiVersion: 'resource.k8s.io/v1',
        kind: 'ResourceClaimTemplate',
        metadata: { name, namespace: NAMESPACE },
        spec: { spec: { devices: { requests: [{ name: 'gpu', exactly: { deviceClassName, count: 1 } }] } } },
      }),
    });
  }
  return !hadClasses;
}

const BENCH_WEBHOOK = 'better-compute-bench-scheduler';

/**
 * The product's dra-pods webhook (deploy/admission/webhook.yaml, ADR 0049) as a configuration of the bench's own,
 * pointed at the allocator process's listener and bound to the bench's namespace only.
 */
async function applyBenchWebhook(url: string, caBundle: string): Promise<void> {
  const docs = YAML.parseAllDocuments(await fs.readFile(path.join(ROOT, 'deploy', 'admission', 'webhook.yaml'), 'utf8')).map((d) => d.toJS() as { webhooks: Record<string, unknown>[] });
  const dra = docs[0]!.webhooks.find((w) => w.name === 'dra-pods.admission.bettercompute.io');
  if (!dra) throw new Error('deploy/admission/webhook.yaml has no dra-pods webhook');
  await kubectl(['apply', '-f', '-'], {
    input: JSON.stringify({
      apiVersion: 'admissionregistration.k8s.io/v1',
      kind: 'MutatingWebhookConfiguration',
      metadata: { name: BENCH_WEBHOOK },
      webhooks: [{ ...dra, clientConfig: { url, caBundle }, namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': NAMESPACE } } }],
    }),
  });
}

/**
 * Books Reservations of RESERVATION_NODES whole nodes each (fewer for the last) covering `pods` pods of one GPU, in the
 * ledger on `poolId`, each behind a Reservation object of the bench's namespace (its uid the booking's key, as the
 * controller books them): the claim allocator reads the object and finds its booking. Returns their names in order.
 */
async function bookReservations(ledger: Ledger, poolId: string, n: number, pods: number): Promise<string[]> {
  const nodesNeeded = Math.ceil(pods / GPUS_PER_NODE);
  const names: string[] = [];
  for (let k = 0, left = nodesNeeded; left > 0; k++, left -= RESERVATION_NODES) {
    const size = Math.min(RESERVATION_NODES, left);
    const name = `rsv${n}-${k}`;
    const cr = {
      apiVersion: 'bettercompute.io/v1alpha1',
      kind: 'Reservation',
      metadata: { name, namespace: NAMESPACE },
      spec: { pool: 'bench', devices: [{ class: 'gpu', count: GPUS_PER_NODE }], duration: '2h', ...(size > 1 ? { gang: { size } } : {}) },
    };
    const uid = (await kubectl(['create', '-f', '-', '-o', 'jsonpath={.metadata.uid}'], { input: JSON.stringify(cr) })).trim();
    const out = await ledger.reserve(
      {
        tenantId: TENANT,
        poolId,
        devices: [{ class: 'gpu', count: GPUS_PER_NODE }],
        duration: 7200,
        binding: 'hold',
        idempotencyKey: uid,
        // One placement domain: every bench node carries the label.
        ...(size > 1 ? { gang: { size, topologyKey: BENCH_LABEL } } : {}),
      },
      Date.now(),
    );
    if (!out.ok) throw new Error(`booking Reservation ${name} (${size} nodes): ${out.code} ${out.message}`);
    if (out.reservation.state === 'held') await ledger.confirm(out.reservation.id);
    names.push(name);
  }
  return names;
}

/**
 * Watches the namespace's ResourceClaims and notes, per pod (the claim's owner), when its claim was first seen (made by
 * kube-controller-manager) and first seen allocated (performance.now()); `stop()` ends the watch.
 */
function watchClaims(kc: k8s.KubeConfig) {
  const madeAt = new Map<string, number>();
  const allocatedAt = new Map<string, number>();
  // Not awaited: the watch's promise settles only once its first event arrives.
  const watch = new k8s.Watch(kc).watch(
    `/apis/resource.k8s.io/v1/namespaces/${NAMESPACE}/resourceclaims`,
    {},
    (_type: string, claim: k8s.ResourceV1ResourceClaim) => {
      const pod = claim.metadata?.ownerReferences?.find((o) => o.kind === 'Pod')?.name;
      if (!pod) return;
      const now = performance.now();
      if (!madeAt.has(pod)) madeAt.set(pod, now);
      if (claim.status?.allocation && !allocatedAt.has(pod)) allocatedAt.set(pod, now);
    },
    () => undefined,
  );
  return { madeAt, allocatedAt, stop: () => void watch.then((c) => c.abort()).catch(() => undefined) };
}

/**
 * Makes the bench's namespace, after waiting for one that an earlier run deleted (without waiting) to be gone: an
 * earlier run's namespace still terminating took the Reservations' create calls of the next run with it.
 */
async function freshNamespace(): Promise<void> {
  const deadline = performance.now() + 120_000;
  for (;;) {
    const phase = (await kubectl(['get', 'namespace', NAMESPACE, '--ignore-not-found', '-o', 'jsonpath={.status.phase}'])).trim();
    if (phase === 'Active') return;
    if (phase === '' && (await kubectl(['create', 'namespace', NAMESPACE]).then(() => true, () => false))) return;
    if (performance.now() > deadline) throw new Error(`namespace ${NAMESPACE} is still ${phase || 'not made'} after 2 minutes`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

/** Removes every finalizer from the namespace's claims (the allocator stopped: the bench's ledger goes with it). */
async function stripClaimFinalizers(): Promise<void> {
  const names = (await kubectl(['-n', NAMESPACE, 'get', 'resourceclaims', '-o', 'name'])).split('\n').filter(Boolean);
  for (const name of names) await kubectl(['-n', NAMESPACE, 'patch', name, '--type=merge', '-p', '{"metadata":{"finalizers":null}}']).catch(() => undefined);
}

/** p50/p99 ms of `to - from` over the pods that have both. */
function between(from: Map<string, number>, to: Map<string, number>): string {
  const d = [...to].flatMap(([pod, t]) => (from.has(pod) ? [t - from.get(pod)!] : [])).sort((a, b) => a - b);
  return d.length ? `${quantile(d, 0.5).toFixed(0)}/${quantile(d, 0.99).toFixed(0)} ms (${d.length} pods)` : 'none seen';
}

/** Waits until the namespace holds no ResourceClaim (the allocator released each and removed its finalizer). */
async function waitClaimsGone(kc: k8s.KubeConfig): Promise<void> {
  const resource = kc.makeApiClient(k8s.ResourceV1Api);
  const deadline = performance.now() + 300_000;
  while ((await resource.listNamespacedResourceClaim({ namespace: NAMESPACE, limit: 1 })).items.length > 0) {
    if (performance.now() > deadline) throw new Error(`claims of namespace ${NAMESPACE} are still listed 5 minutes after their pods' deletion`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

// Inside a cluster test run (the benchmarks' smoke run, e2e/cluster/bench-smoke.test.ts) the run holds the cluster:
// taking a turn on it would wait for that run forever.
const CLUSTER_HELD = process.env.BENCH_CLUSTER_HELD === '1';

async function main() {
  if (!CLUSTER_HELD) await acquireCluster();
  const c = clusterInfo();
  const kc = kubeConfigFrom(c.kubeconfig);
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'bc-bench-sched-'));
  await fs.chmod(dir, 0o755);
  const pgServer = await startEmbedded({ dataDir: path.join(dir, 'pg'), fast: true });
  const db = createPool(pgServer.url, 8);
  const client = await db.connect();
  await migrate(client);
  client.release();
  // The bench's stand-in for the agent (it drops admissions), on its own pool.
  const ledger = new Ledger(db);
  // The extender in its own process, as the controller runs it (bench/extender-process.ts).
  const extender = await startExtenderProcess(pgServer.url, c.kubeconfig);
  let allocator: Awaited<ReturnType<typeof startAllocatorProcess>> | undefined;
  let madeClasses = false;
  let nodes: string[] = [];
  try {
    await freshNamespace();
    await kubectl(['label', 'namespace', NAMESPACE, `bettercompute.io/tenant=${TENANT}`, '--overwrite']);
    madeClasses = await prepareDra();
    // The claim allocator in its own process, as the controller's leader runs it (bench/dra-allocator-process.ts).
    allocator = await startAllocatorProcess(pgServer.url, c.kubeconfig);
    await applyBenchWebhook(allocator.webhookUrl, allocator.caBundle);
    console.log(`kube-scheduler ${path.basename(path.dirname(path.dirname(c.kubectl)))} on the test cluster, ${os.cpus().length} CPUs, node ${process.version}`);
    console.log(`${PODS} pods per run, created ${CREATE_CONCURRENCY} at a time; latency = create call made -> binding seen on a watch`);
    console.log('nodes  scheduler                                   pods/s     p50 ms     p99 ms   ratio');
    const row = (n: number, what: string, s: Stats, ratio?: number) =>
      console.log(
        `${String(n).padStart(5)}  ${what.padEnd(40)}  ${s.podsPerSecond.toFixed(1).padStart(8)}  ${s.p50.toFixed(0).padStart(9)}  ${s.p99.toFixed(0).padStart(9)}  ${ratio === undefined ? '' : `${(ratio * 100).toFixed(0).padStart(5)}%`}`,
      );
    for (const n of SIZES) {
      const t0 = performance.now();
      nodes = await addSimulatedNodes(n, { [BENCH_LABEL]: 'true' }, { 'bettercompute.io/gpu': '8', [PLAIN_RESOURCE]: '8' }, { prefix: `bench${n}` });
      const poolId = await seedNodes(db, nodes, TENANT, { [BENCH_LABEL]: 'true' });
      // The Reservation row's bookings first, while every node is whole (the other rows book single GPUs).
      const reservations = await bookReservations(ledger, poolId, n, WARMUP + PODS);
      process.stderr.write(`[bench] ${n} simulated nodes, their ledger rows and ${reservations.length} Reservations in ${((performance.now() - t0) / 1000).toFixed(0)}s\n`);

      await restartScheduler(unthrottled(defaultSchedulerConfig()));
      await schedulePods(kc, `warm-plain${n}`, resourcePod(PLAIN_RESOURCE), WARMUP);
      const plainRequests = await apiRequests();
      const plainCpu = await cpuSeconds();
      const stopPlainPerf = await perfRecord(`plain${n}`, plainCpu);
      const plain = await schedulePods(kc, `plain${n}`, resourcePod(PLAIN_RESOURCE), PODS);
      await stopPlainPerf();
      const plainCpuPerPod = cpuPerPod(plainCpu, await cpuSeconds(), PODS);
      const plainRequestsPerPod = requestsPerPod(plainRequests, await apiRequests(), PODS);
      await deletePods(kc);

      await restartScheduler(unthrottled(schedulerConfigWithExtender(extender.url)));
      const admitted = (pod: k8s.V1Pod) =>
        void ledger.dropAdmission(pod.spec!.nodeName!, pod.metadata!.uid!).catch((e: unknown) => console.error(`dropAdmission: ${String(e)}`));
      await schedulePods(kc, `warm-ext${n}`, resourcePod('bettercompute.io/gpu'), WARMUP, admitted);
      // A warm-up bind answers kube-scheduler just after its Binding is seen: let the last ones finish uncounted.
      await new Promise((r) => setTimeout(r, 500));
      await extender.calls(); // counted from here
      const extCpu = await cpuSeconds();
      const stopExtPerf = await perfRecord(`ext${n}`, extCpu);
      const viaExtender = await schedulePods(kc, `ext${n}`, resourcePod('bettercompute.io/gpu'), PODS, admitted);
      await stopExtPerf();
      const extCpuPerPod = cpuPerPod(extCpu, await cpuSeconds(), PODS);
      const { calls, eventLoopUtilization, cpuSeconds: extenderCpu, reloads } = await extender.calls();
      await deletePods(kc);

      // DRA: the same nodes, their Pool's atoms handed over through claims; the default kube-scheduler, no extender.
      await db.query(`UPDATE pools SET handoff = 'dra' WHERE id = $1`, [poolId]);
      await restartScheduler(unthrottled(defaultSchedulerConfig()));
      // `manifest(offset)`: the pods of a run whose first pod is the row's offset-th (the warm-up's first, then the run's).
      // `ours`: the product's allocator allocates (its figures are read); else kube-scheduler does (upstream DRA).
      const draRow = async (run: string, manifest: (offset: number) => Manifest, ours = true) => {
        await schedulePods(kc, `warm-${run}`, manifest(0), WARMUP);
        await new Promise((r) => setTimeout(r, 500));
        if (ours) await allocator!.stats(); // counted from here
        const claims = watchClaims(kc);
        const requests = await apiRequests();
        const cpu = await cpuSeconds();
        const stopPerf = await perfRecord(run, cpu);
        const stats = await schedulePods(kc, run, manifest(WARMUP), PODS);
        await stopPerf();
        const cpuMs = cpuPerPod(cpu, await cpuSeconds(), PODS);
        const requestCounts = requestsPerPod(requests, await apiRequests(), PODS);
        claims.stop();
        const allocatorStats = ours ? await allocator!.stats() : undefined;
        await deletePods(kc);
        await waitClaimsGone(kc);
        return { stats, cpuMs, requests: requestCounts, madeAt: claims.madeAt, allocatedAt: claims.allocatedAt, allocatorStats };
      };
      // Upstream DRA first: the no-op driver's slices published, the product's webhook out of the pods' path.
      const t1 = performance.now();
      await publishNoopSlices(kc, nodes);
      process.stderr.write(`[bench] ${n} ResourceSlices of ${NOOP.driver} in ${((performance.now() - t1) / 1000).toFixed(0)}s\n`);
      await kubectl(['delete', 'mutatingwebhookconfiguration', BENCH_WEBHOOK, '--ignore-not-found']);
      const upstream = await draRow(`dra-up${n}`, () => claimPod(NOOP.template), false);
      await applyBenchWebhook(allocator!.webhookUrl, allocator!.caBundle);
      const onDemand = await draRow(`dra-od${n}`, () => claimPod(TEMPLATES.onDemand[0]));
      // The row's k-th pod belongs to Reservation floor(k / its GPUs).
      const viaReservation = await draRow(`dra-rsv${n}`, (offset) =>
        claimPod(TEMPLATES.reservation[0], (i) => ({ 'bettercompute.io/reservation': reservations[Math.floor((offset + i) / (RESERVATION_NODES * GPUS_PER_NODE))]! })),
      );
      await db.query('UPDATE pools SET archived = true WHERE id = $1', [poolId]); // no later size's claims book here

      row(n, 'kube-scheduler alone (example.com/gpu)', plain);
      row(n, 'kube-scheduler + extender (bettercompute.io/gpu)', viaExtender, viaExtender.podsPerSecond / plain.podsPerSecond);
      console.log(
        `       extender calls: ${calls.sort().map(([k, c]) => `${k} ${c.n} (mean ${((c.seconds / c.n) * 1000).toFixed(1)} ms)`).join(', ')}; ` +
          `its event loop busy ${(eventLoopUtilization * 100).toFixed(0)}% of the run; ` +
          `its state reloaded ${reloads.nodes} nodes and ${reloads.pods} pods after notifications, ${reloads.skipped} not (a bind applied them)`,
      );
      console.log(`       CPU ms per pod alone: ${plainCpuPerPod}`);
      console.log(`       API requests per pod alone: ${plainRequestsPerPod}`);
      console.log(`       CPU ms per pod + extender: ${extCpuPerPod}, extender ${((extenderCpu * 1000) / PODS).toFixed(1)}`);
      row(n, 'upstream DRA (kube-scheduler allocates)', upstream.stats, upstream.stats.podsPerSecond / plain.podsPerSecond);
      console.log(`       p50/p99: pod create call -> its claim seen ${between(upstream.stats.created, upstream.madeAt)}, -> allocated ${between(upstream.madeAt, upstream.allocatedAt)}, -> pod bound ${between(upstream.allocatedAt, upstream.stats.bound)}`);
      console.log(`       CPU ms per pod: ${upstream.cpuMs}`);
      console.log(`       API requests per pod: ${upstream.requests}`);
      for (const [what, r] of [['DRA on demand (gpu.bettercompute.io)', onDemand], ['DRA Reservation (reservation.bettercompute.io)', viaReservation]] as const) {
        row(n, what, r.stats, r.stats.podsPerSecond / plain.podsPerSecond);
        const a = r.allocatorStats!;
        console.log(`       of upstream DRA's pods/s: ${((r.stats.podsPerSecond / upstream.stats.podsPerSecond) * 100).toFixed(0)}%`);
        console.log(
          `       p50/p99: pod create call -> its claim seen ${between(r.stats.created, r.madeAt)}, -> allocated ${between(r.madeAt, r.allocatedAt)}, -> pod bound ${between(r.allocatedAt, r.stats.bound)}\n` +
            `       allocator: ${a.allocated} claims allocated, reconciles ${a.reconciles.map(([o, x]) => `${o} ${x.n} (mean ${x.meanMs.toFixed(1)}, p50 ${x.p50Ms.toFixed(1)}, p99 ${x.p99Ms.toFixed(1)} ms)`).join(', ')}` +
            `${a.warnings.length ? `, warnings ${a.warnings.map(([m, k]) => `${m} ×${k}`).join(', ')}` : ''}; its event loop busy ${(a.eventLoopUtilization * 100).toFixed(0)}%`,
        );
        console.log(`       CPU ms per pod: ${r.cpuMs}, allocator and webhook ${((a.cpuSeconds * 1000) / PODS).toFixed(1)}; pods gated at create ${r.stats.gated} of ${PODS}`);
        console.log(`       API requests per pod: ${r.requests}`);
      }
      await removeBenchNodes(kc);
      nodes = [];
    }
  } finally {
    await restartScheduler(defaultSchedulerConfig()).catch((e: unknown) => console.error(`restoring the scheduler: ${String(e)}`));
    if (nodes.length) await removeBenchNodes(kc).catch(() => undefined);
    await kubectl(['delete', 'mutatingwebhookconfiguration', BENCH_WEBHOOK, '--ignore-not-found']).catch(() => undefined);
    await extender.stop();
    await allocator?.stop();
    // Claims left by a row that failed keep the allocator's finalizer, and would keep the namespace terminating.
    await stripClaimFinalizers().catch((e: unknown) => console.error(`removing the claims' finalizers: ${String(e)}`));
    await kubectl(['delete', 'namespace', NAMESPACE, '--ignore-not-found', '--wait=false']).catch(() => undefined);
    if (madeClasses) await kubectl(['delete', '-f', path.join(ROOT, 'deploy', 'dra', 'deviceclasses.yaml'), '--ignore-not-found']).catch(() => undefined);
    await kubectl(['delete', 'deviceclass', NOOP.driver, '--ignore-not-found']).catch(() => undefined);
    await db.end();
    await pgServer.stop();
    await fs.rm(dir, { recursive: true, force: true });
    if (!CLUSTER_HELD) await releaseCluster();
  }
}

main().then(
  () => process.exit(0),
  (e: unknown) => {
    // Said even when what was thrown is not an Error (once it was `undefined`, and the output was that word alone).
    console.error('bench:scheduler failed:', e instanceof Error ? (e.stack ?? e.message) : e);
    process.exit(1);
  },
);
