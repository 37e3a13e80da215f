// The controller at the sizes big GPU clusters reach (issue 35, item 4; docs/adr/0042): 5,000 nodes × 8 GPUs in 10
// Pools, 20,000 Reservations of 20 tenants, 50,000 pods. Everything of the controller is real (its informers and
// queues, the Pool, Node, NodeDevices and Reservation reconcilers booking into the ledger on an embedded PostgreSQL,
// the pod releaser, the extender's in-memory state); the one simulated part is the Kubernetes API: objects only, served
// by bench/sim-kube-api.ts in its own process (LIST paged, WATCH, merge patches), so that its memory is not counted here.
// Measured: the first list of every informer; the first leader pass (every Pool, Node and NodeDevices applied to the
// ledger, every Reservation booked); a full resync of the converged cluster (what a new leader or the periodic resync
// does); the releaser's orphan pass (a LIST of every pod, in pages); the extender state's full load. Reported: each
// phase's time, the reconcile latency (p50, p99) per controller, RSS and heap after each phase and their peak, and RSS
// per 1,000 objects. Targets: RSS at most 1 GiB, reconcile p99 at most 1 s.
//   npm run bench:scale   (embedded PostgreSQL in a temporary directory; DATABASE_URL for another server)
// Env: BENCH_NODES (5000), BENCH_RESERVATIONS (20000), BENCH_PODS (50000), BENCH_POOLS (10), BENCH_TENANTS (20),
//      BENCH_LEADER=0 (the caches only: no leader phases; the extender's state then loads a ledger seeded directly with
//      the nodes and their GPUs, bench/seed.ts), BENCH_WORKERS (Reservation workers, 8), BENCH_SETTLE_S (how long a phase may take, 3600), BENCH_PROGRESS (a line
//      on stderr now and then while a leader phase runs), BENCH_SQL_TIMING=1 (after each phase, the statements that took
//      the most time and the event loop's delay: bench/sql-timing.ts).
import { benchDatabase } from './database.ts';
import { inertExtenderKube } from './inert-kube.ts';
import { spawn } from 'node:child_process';
import os from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { DbClock } from '../src/db/clock.ts';
import { Ledger } from '../src/db/ledger.ts';
import { FenceHolder } from '../src/controller/fence.ts';
import { startPodReleaser } from '../src/controller/releaser.ts';
import { setupControllers } from '../src/controller/setup.ts';
import { ExtenderStateSync } from '../src/extender/state-sync.ts';
import { KubeClient, TimedKubeConfig } from '../src/kube/client.ts';
import { findCondition } from '../src/kube/types.ts';
import { silentLogger } from '../src/log.ts';
import { seedNodes } from './seed.ts';
import { sqlTimingReport, startSqlTiming } from './sql-timing.ts';

const num = (k: string, d: number) => Number(process.env[k] ?? d);
const NODES = num('BENCH_NODES', 5000);
const RESERVATIONS = num('BENCH_RESERVATIONS', 20_000);
const PODS = num('BENCH_PODS', 50_000);
const POOLS = num('BENCH_POOLS', 10);
const TENANTS = num('BENCH_TENANTS', 20);
const WORKERS = num('BENCH_WORKERS', 8);
const SETTLE_MS = num('BENCH_SETTLE_S', 3600) * 1000;
const LEADER = process.env.BENCH_LEADER !== '0';
const TARGET_RSS_MIB = 1024;
const TARGET_P99_MS = 1000;
const MiB = 2 ** 20;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const quantile = (sorted: number[], q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? NaN;

/** Reconcile times (ms) per controller since the last take(), and a count of every reconcile. */
class Reconciles {
  times = new Map<string, number[]>();
  count = 0;
  reconciled(controller: string, seconds: number) {
    this.count++;
    const l = this.times.get(controller) ?? [];
    l.push(seconds * 1000);
    this.times.set(controller, l);
  }
  take(): Map<string, number[]> {
    const t = this.times;
    this.times = new Map();
    return t;
  }
}

/** RSS sampled every 100 ms: the peak is reported beside each phase's end. */
function rssSampler() {
  let peak = 0;
  const t = setInterval(() => void (peak = Math.max(peak, process.memoryUsage().rss)), 100);
  t.unref();
  return { peak: () => Math.max(peak, process.memoryUsage().rss), stop: () => clearInterval(t) };
}

async function startSim(): Promise<{ url: string; stats(): Promise<string>; stop(): void }> {
  const file = path.join(path.dirname(fileURLToPath(import.meta.url)), 'sim-kube-api.ts');
  const env = { ...process.env, SIM_NODES: String(NODES), SIM_POOLS: String(POOLS), SIM_TENANTS: String(TENANTS), SIM_RESERVATIONS: String(RESERVATIONS), SIM_PODS: String(PODS) };
  const child = spawn(process.execPath, ['--max-old-space-size=4096', '--import', 'tsx', file], { env, stdio: ['pipe', 'pipe', 'inherit'] });
  const lines = createInterface({ input: child.stdout! });
  const waiting: ((l: string) => void)[] = [];
  lines.on('line', (l) => waiting.shift()?.(l));
  const next = () => new Promise<string>((r) => waiting.push(r));
  const first = await next();
  const port = /^listening (\d+)$/.exec(first)?.[1];
  if (!port) throw new Error(`the simulated API said ${first}`);
  return {
    url: `http://127.0.0.1:${port}`,
    async stats() {
      const l = next();
      child.stdin!.write('\n');
      return l;
    },
    stop: () => child.stdin!.end(),
  };
}

const kube = inertExtenderKube;

interface Phase {
  name: string;
  seconds: number;
  rssMiB: number;
  heapMiB: number;
  peakMiB: number;
  reconciles: Map<string, number[]>;
}

function row(p: Phase): string {
  const all = [...p.reconciles.values()].flat().sort((a, b) => a - b);
  const per = [...p.reconciles].map(([c, t]) => {
    const s = [...t].sort((a, b) => a - b);
    return `${c} ${s.length} p50 ${quantile(s, 0.5).toFixed(1)} p99 ${quantile(s, 0.99).toFixed(1)}`;
  });
  return [p.name, p.seconds.toFixed(1), p.rssMiB.toFixed(0), p.heapMiB.toFixed(0), p.peakMiB.toFixed(0), all.length, all.length ? quantile(all, 0.99).toFixed(1) : '-', per.join('; ') || '-'].join('\t');
}

async function main() {
  const sqlTiming = process.env.BENCH_SQL_TIMING === '1';
  if (sqlTiming) startSqlTiming();
  const { db, stop: stopDb } = await benchDatabase('scale', 12);
  const sim = await startSim();
  const kc = new TimedKubeConfig(120_000);
  kc.loadFromOptions({
    clusters: [{ name: 'sim', server: sim.url, skipTLSVerify: true }],
    users: [{ name: 'controller', token: 'bench' }],
    contexts: [{ name: 'sim', cluster: 'sim', user: 'controller' }],
    currentContext: 'sim',
  });
  const clock = await DbClock.create(db);
  const fence = new FenceHolder(`bench-scale-${process.pid}`);
  await fence.take(db, 'bench');
  const ledger = new Ledger(db, { fence: fence.fence });
  const rec = new Reconciles();
  const controllers = setupControllers({
    kc,
    kube: new KubeClient(kc),
    db,
    ledger,
    clock,
    log: silentLogger,
    fence: fence.fence,
    metrics: { reconciled: (c, s) => rec.reconciled(c, s), watchRestarted() {}, setLeader() {} },
    tuning: { capacityRefreshMs: 3_600_000, pendingMaxBackoffMs: 30_000, reservationWorkers: WORKERS, recurrenceHorizonMs: 7 * 86_400_000, tenancyByName: false },
    watchTimeoutSeconds: 300,
    watchLivenessMs: 600_000,
  });
  const { informers, queues } = controllers.ctx;
  const sampler = rssSampler();
  const phases: Phase[] = [];
  const phase = async (name: string, run: () => Promise<void>) => {
    rec.take();
    const t0 = performance.now();
    await run();
    const seconds = (performance.now() - t0) / 1000;
    const m = process.memoryUsage();
    const p = { name, seconds, rssMiB: m.rss / MiB, heapMiB: m.heapUsed / MiB, peakMiB: sampler.peak() / MiB, reconciles: rec.take() };
    phases.push(p);
    console.log(row(p));
    if (sqlTiming) console.log(sqlTimingReport());
  };
  const idle = () => Object.values(queues).every((q) => q.length === 0);
  /** Until `done()` holds and the queues stay empty with no reconcile for 1 s. */
  const settled = async (done: () => boolean, limitMs: number) => {
    const deadline = performance.now() + limitMs;
    let quietSince = performance.now();
    let last = rec.count;
    for (;;) {
      await sleep(100);
      if (rec.count !== last || !idle()) {
        last = rec.count;
        quietSince = performance.now();
      }
      if (done() && idle() && performance.now() - quietSince >= 1000) return;
      if (process.env.BENCH_PROGRESS && rec.count % 50 === 0) process.stderr.write(`${new Date().toISOString()} ${rec.count} reconciles, ${JSON.stringify(outcomes())}, queued ${Object.values(queues).map((q) => q.length).join('/')}\n`);
      if (performance.now() > deadline) throw new Error(`not settled after ${limitMs} ms: ${JSON.stringify(outcomes())}`);
    }
  };
  const outcomes = () => {
    const by: Record<string, number> = {};
    for (const r of informers.reservations.list()) {
      const k = `${r.status?.phase ?? 'none'}/${findCondition(r.status?.conditions, 'Reserved')?.reason ?? '-'}`;
      by[k] = (by[k] ?? 0) + 1;
    }
    return by;
  };
  const booked = () => informers.reservations.list().every((r) => r.status?.phase === 'Reserved');

  console.log(`# ${NODES} nodes x 8 GPUs in ${POOLS} pools, ${RESERVATIONS} Reservations of ${TENANTS} tenants, ${PODS} pods; ${os.cpus().length} CPUs, Node ${process.version}`);
  const m0 = process.memoryUsage();
  console.log(`# before: RSS ${(m0.rss / MiB).toFixed(0)} MiB, heap ${(m0.heapUsed / MiB).toFixed(0)} MiB`);
  console.log(['phase', 'seconds', 'RSS MiB', 'heap MiB', 'peak RSS MiB', 'reconciles', 'p99 ms', 'per controller (count, p50 and p99 ms)'].join('\t'));
  await phase('informers: first list (paged) of every kind', async () => {
    controllers.startInformers();
    await controllers.synced();
  });
  const releaser = await startPodReleaser({ db, ledger, kube, kubeConfig: kc, log: silentLogger, orphanSweepEveryMs: 3_600_000, sweepEveryMs: 3_600_000, watchTimeoutSeconds: 300, watchLivenessMs: 600_000 });
  await phase(`releaser: orphan pass (a LIST of ${PODS} pods in pages)`, async () => {
    await releaser.sweepOrphans();
  });
  if (LEADER) {
    await phase('leader: first pass (ledger built, every Reservation booked)', async () => {
      await controllers.startLeading();
      await settled(booked, SETTLE_MS);
    });
    const resyncs = NODES + NODES + POOLS + RESERVATIONS;
    await phase('leader: full resync of the converged cluster', async () => {
      const from = rec.count;
      controllers.resync();
      await settled(() => rec.count - from >= resyncs, SETTLE_MS);
    });
  } else {
    const perPool = Math.ceil(NODES / POOLS);
    for (let p = 0; p < POOLS; p++) await seedNodes(db, Array.from({ length: Math.min(perPool, NODES - p * perPool) }, (_, i) => `n${p * perPool + i}`));
  }
  const sync = new ExtenderStateSync({ db, log: silentLogger });
  await phase(`extender: in-memory state, full load${LEADER ? '' : ' (ledger seeded directly, no bookings)'}`, async () => {
    sync.start();
    await sync.ready();
  });
  await phase('releaser: orphan pass again (everything loaded)', async () => {
    await releaser.sweepOrphans();
  });
  sampler.stop();

  const objects = NODES * 2 + RESERVATIONS + PODS + POOLS + TENANTS;
  const peak = Math.max(...phases.map((p) => p.peakMiB));
  const final = phases[phases.length - 1]!;
  const p99s = phases.flatMap((p) => [...p.reconciles.values()].flat()).sort((a, b) => a - b);
  const p99 = quantile(p99s, 0.99);
  const base = m0.rss / MiB;
  console.log(
    `# RSS per 1,000 objects (${objects} objects; above the ${base.toFixed(0)} MiB before the first list): ${((1000 * (final.rssMiB - base)) / objects).toFixed(2)} MiB at the end, ${((1000 * (peak - base)) / objects).toFixed(2)} MiB at the peak`,
  );
  console.log(`# reservations: ${JSON.stringify(outcomes())}; simulated API: ${await sim.stats()}`);
  if (LEADER && !booked()) throw new Error('not every Reservation was booked');
  console.log(`# peak RSS ${peak.toFixed(0)} MiB (target <= ${TARGET_RSS_MIB}): ${peak <= TARGET_RSS_MIB ? 'met' : 'MISSED'}; ${p99s.length ? `reconcile p99 ${p99.toFixed(1)} ms over ${p99s.length} reconciles (target <= ${TARGET_P99_MS}): ${p99 <= TARGET_P99_MS ? 'met' : 'MISSED'}` : 'no reconciles (BENCH_LEADER=0)'}`);

  await sync.stop();
  await releaser.stop();
  await controllers.stop();
  sim.stop();
  await stopDb();
}

await main();
