// The real kube-scheduler of the test cluster (e2e/cluster), with and without our extender, side by side in one run:
// at 1,000 and 5,000 simulated nodes (8 GPUs each), 1,000 pods that request `bettercompute.io/gpu: 1` scheduled through
// the extender (filter, prioritize and bind, deploy/scheduler/'s configuration, the ledger in PostgreSQL), against the
// same 1,000 pods requesting a plain extended resource (`example.com/gpu: 1`) that kube-scheduler places alone.
// Each row first schedules BENCH_WARMUP (32) pods of its kind, not measured, so that both rows measure a running
// system (the extender's first bind loads the pool into its ledger's cache once per process, as in the controller).
// Prints pods per second (first create to last binding) and the p50/p99 of each pod's time from its create call to its
// binding seen on a watch; the ratio is extender pods/s ÷ plain pods/s. The extender runs in a process of its own
// (bench/extender-process.ts), as in the controller's pod: this process's client work is not on its event loop, nor in
// its scheduling group (startExtenderProcess). Both rows run kube-scheduler with its own API client unthrottled
// (unthrottled() below). Under each size: the CPU time per pod of kube-scheduler, kube-apiserver, etcd and PostgreSQL
// in each row, and of the extender process in its row.
//   npm run bench:scheduler   (root; brings the test cluster up, or takes its turn on it, like the cluster tests)
// Env: BENCH_NODES (default 1000,5000), BENCH_PODS (default 1000), BENCH_CREATE_CONCURRENCY (default 16), BENCH_WARMUP,
//      BENCH_EXTENDER_CPU_PROF (a directory: the extender process writes a V8 CPU profile of each row there),
//      BENCH_CLUSTER_HELD=1 (the calling test run holds the cluster: take no turn on it),
//      BENCH_FILTER_NODES (the most nodes the extender's filter passes; default the product's, ADR 0022),
//      BENCH_PERF (a directory: `perf record -g` of the processes of CPU_OF over each measured row, <row>.perf.data).
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
import type { ExtenderProcessMessage } from './extender-process.ts';
import { seedNodes } from './seed.ts';

const SIZES = (process.env.BENCH_NODES ?? '1000,5000').split(',').map(Number);
const PODS = Number(process.env.BENCH_PODS ?? 1000);
const CREATE_CONCURRENCY = Number(process.env.BENCH_CREATE_CONCURRENCY ?? 16);
const WARMUP = Number(process.env.BENCH_WARMUP ?? 32);
const NAMESPACE = 'bench-scheduler';
const TENANT = 'bench';
const BENCH_LABEL = 'bettercompute.io/bench-scheduler';
const PLAIN_RESOURCE = 'example.com/gpu';

interface Stats {
  podsPerSecond: number;
  p50: number;
  p99: number;
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
const CPU_OF = ['kube-scheduler', 'kube-apiserver', 'etcd', 'postgres'] as const;

/** pid → a process of CPU_OF and the CPU seconds (user + system) it has spent so far. */
type CpuReading = Map<string, { comm: string; seconds: number }>;

async function cpuSeconds(): Promise<CpuReading> {
  const out: CpuReading = new Map();
  for (const pid of await fs.readdir('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    const stat = await fs.readFile(`/proc/${pid}/stat`, 'utf8').catch(() => '');
    const comm = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
    if (!(CPU_OF as readonly string[]).includes(comm)) continue;
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // utime and stime, fields 14 and 15 of proc(5), in clock ticks (USER_HZ, 100 on Linux).
    out.set(pid, { comm, seconds: (Number(fields[11]) + Number(fields[12])) / 100 });
  }
  return out;
}

/**
 * What each of CPU_OF spent per pod between two cpuSeconds() readings, in ms: a process started in between counts from
 * its start, one that exited in between is missed (the scheduler restarted before a row has started already).
 */
function cpuPerPod(before: CpuReading, after: CpuReading, pods: number): string {
  const spent = new Map<string, number>(CPU_OF.map((c) => [c, 0]));
  for (const [pid, p] of after) spent.set(p.comm, spent.get(p.comm)! + p.seconds - (before.get(pid)?.seconds ?? 0));
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

function quantile(sorted: number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? NaN;
}

function podManifest(name: string, resource: string) {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: NAMESPACE },
    spec: {
      nodeSelector: { [BENCH_LABEL]: 'true' },
      tolerations: [{ key: 'bettercompute.io/simulated', operator: 'Exists', effect: 'NoSchedule' }],
      containers: [{ name: 'main', image: 'bettercompute.local/busybox:v1', resources: { limits: { [resource]: '1' } } }],
    },
  };
}

/**
 * Creates `count` pods (CREATE_CONCURRENCY calls at a time) and waits until a watch has seen every one bound.
 * `onBound` runs for each binding seen.
 */
async function schedulePods(kc: k8s.KubeConfig, run: string, resource: string, count: number, onBound?: (pod: k8s.V1Pod) => void): Promise<Stats> {
  const core = kc.makeApiClient(k8s.CoreV1Api);
  const created = new Map<string, number>();
  const bound = new Map<string, number>();
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
        const name = `${run}-${next++}`;
        created.set(name, performance.now());
        await core.createNamespacedPod({ namespace: NAMESPACE, body: podManifest(name, resource) as k8s.V1Pod });
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
  return { podsPerSecond: count / ((last - started) / 1000), p50: quantile(latencies, 0.5), p99: quantile(latencies, 0.99) };
}

/**
 * The run's pods in one deletecollection call, at once (no kubelet to wait for; kubectl deletes a thousand one by one
 * behind its own rate limiter, which has taken over five minutes), then waits until none is listed.
 */
async function deletePods(kc: k8s.KubeConfig): Promise<void> {
  const core = kc.makeApiClient(k8s.CoreV1Api);
  await core.deleteCollectionNamespacedPod({ namespace: NAMESPACE, gracePeriodSeconds: 0 });
  const deadline = performance.now() + 300_000;
  while ((await core.listNamespacedPod({ namespace: NAMESPACE, limit: 1 })).items.length > 0) {
    if (performance.now() > deadline) throw new Error(`pods of namespace ${NAMESPACE} are still listed 5 minutes after their deletion`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

/** The bench's nodes in one deletecollection call (kubectl deletes thousands one by one, minutes). Its pods are gone. */
async function removeBenchNodes(kc: k8s.KubeConfig): Promise<void> {
  await kc.makeApiClient(k8s.CoreV1Api).deleteCollectionNode({ labelSelector: `${BENCH_LABEL}=true` });
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
  const child = fork(path.join(import.meta.dirname, 'extender-process.ts'), [databaseUrl, kubeconfig], {
    detached: true,
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const next = (type: ExtenderProcessMessage['type']) =>
    new Promise<ExtenderProcessMessage>((resolve, reject) => {
      const onMessage = (m: ExtenderProcessMessage) => {
        if (m.type !== type && m.type !== 'error') return;
        child.off('message', onMessage);
        child.off('exit', onExit);
        if (m.type === 'error') reject(new Error(`the extender process failed: ${m.message}`));
        else resolve(m);
      };
      const onExit = (code: number | null) => reject(new Error(`the extender process exited (${code})`));
      child.on('message', onMessage);
      child.once('exit', onExit);
    });
  const ready = await next('ready');
  return {
    url: (ready as Extract<ExtenderProcessMessage, { type: 'ready' }>).url,
    async calls() {
      const answer = next('calls');
      child.send({ type: 'calls' });
      return (await answer) as Extract<ExtenderProcessMessage, { type: 'calls' }>;
    },
    async stop() {
      const exited = new Promise((r) => child.once('exit', r));
      child.send({ type: 'stop' });
      await Promise.race([exited, new Promise((r) => setTimeout(r, 10_000))]);
      child.kill();
    },
  };
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
  let nodes: string[] = [];
  try {
    await kubectl(['create', 'namespace', NAMESPACE]).catch(() => undefined);
    await kubectl(['label', 'namespace', NAMESPACE, `bettercompute.io/tenant=${TENANT}`, '--overwrite']);
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
      await seedNodes(db, nodes, TENANT);
      process.stderr.write(`[bench] ${n} simulated nodes and their ledger rows in ${((performance.now() - t0) / 1000).toFixed(0)}s\n`);

      await restartScheduler(unthrottled(defaultSchedulerConfig()));
      await schedulePods(kc, `warm-plain${n}`, PLAIN_RESOURCE, WARMUP);
      const plainCpu = await cpuSeconds();
      const stopPlainPerf = await perfRecord(`plain${n}`, plainCpu);
      const plain = await schedulePods(kc, `plain${n}`, PLAIN_RESOURCE, PODS);
      await stopPlainPerf();
      const plainCpuPerPod = cpuPerPod(plainCpu, await cpuSeconds(), PODS);
      await deletePods(kc);

      await restartScheduler(unthrottled(schedulerConfigWithExtender(extender.url)));
      const admitted = (pod: k8s.V1Pod) =>
        void ledger.dropAdmission(pod.spec!.nodeName!, pod.metadata!.uid!).catch((e: unknown) => console.error(`dropAdmission: ${String(e)}`));
      await schedulePods(kc, `warm-ext${n}`, 'bettercompute.io/gpu', WARMUP, admitted);
      // A warm-up bind answers kube-scheduler just after its Binding is seen: let the last ones finish uncounted.
      await new Promise((r) => setTimeout(r, 500));
      await extender.calls(); // counted from here
      const extCpu = await cpuSeconds();
      const stopExtPerf = await perfRecord(`ext${n}`, extCpu);
      const viaExtender = await schedulePods(kc, `ext${n}`, 'bettercompute.io/gpu', PODS, admitted);
      await stopExtPerf();
      const extCpuPerPod = cpuPerPod(extCpu, await cpuSeconds(), PODS);
      const { calls, eventLoopUtilization, cpuSeconds: extenderCpu, reloads } = await extender.calls();
      await deletePods(kc);

      row(n, 'kube-scheduler alone (example.com/gpu)', plain);
      row(n, 'kube-scheduler + extender (bettercompute.io/gpu)', viaExtender, viaExtender.podsPerSecond / plain.podsPerSecond);
      console.log(
        `       extender calls: ${calls.sort().map(([k, c]) => `${k} ${c.n} (mean ${((c.seconds / c.n) * 1000).toFixed(1)} ms)`).join(', ')}; ` +
          `its event loop busy ${(eventLoopUtilization * 100).toFixed(0)}% of the run; ` +
          `its state reloaded ${reloads.nodes} nodes and ${reloads.pods} pods after notifications, ${reloads.skipped} not (a bind applied them)`,
      );
      console.log(`       CPU ms per pod alone: ${plainCpuPerPod}`);
      console.log(`       CPU ms per pod + extender: ${extCpuPerPod}, extender ${((extenderCpu * 1000) / PODS).toFixed(1)}`);
      await removeBenchNodes(kc);
      nodes = [];
    }
  } finally {
    await restartScheduler(defaultSchedulerConfig()).catch((e: unknown) => console.error(`restoring the scheduler: ${String(e)}`));
    if (nodes.length) await removeBenchNodes(kc).catch(() => undefined);
    await kubectl(['delete', 'namespace', NAMESPACE, '--ignore-not-found', '--wait=false']).catch(() => undefined);
    await extender.stop();
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
