// Placement throughput and latency at 1,000 and 10,000 nodes (8 GPUs each), beside the raw floor: plain INSERTs into
// device_bookings under the same exclusion constraint, one per transaction, no placer. Both run in this process, on the
// same server, with the same number of concurrent callers, so the ratio compares like with like. One row per size with
// BENCH_CONCURRENCY callers, and one more at the largest size with BENCH_CONTENTION (64) callers: its p99 is the
// latency under 64-way contention. The placer group-commits: callers that wait at the same time share one statement.
// Before each size, BENCH_WARMUP (300) unmeasured placements and an ANALYZE, so that neither side pays for cold plans
// or for statistics taken on empty booking tables (the row measured first had been a third slower on both sides).
//   npm run bench:placer     (embedded PostgreSQL in a temporary directory; DATABASE_URL for another server)
//   BENCH_NODES=1000 BENCH_PLACEMENTS=500 npm run bench:placer     (a short run)
//   BENCH_IN_FLIGHT=1 npm run bench:placer     (one placement batch at a time, as before ADR 0021)
// Each row runs the placer and the floor in BENCH_ROUNDS (5) turns, alternating, a fifth of the placements each.
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { DbClock } from '../src/db/clock.ts';
import { startEmbedded } from '../src/db/embedded.ts';
import { Ledger } from '../src/db/ledger.ts';
import { migrate } from '../src/db/migrate.ts';
import { createPool } from '../src/db/pool.ts';
import { seedPool } from './seed.ts';

const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 16);
const CONTENTION = Number(process.env.BENCH_CONTENTION ?? 64);
const PLACEMENTS = Number(process.env.BENCH_PLACEMENTS ?? 3000);
const WARMUP = Number(process.env.BENCH_WARMUP ?? 300);
const SIZES = (process.env.BENCH_NODES ?? '1000,10000').split(',').map(Number);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
/** Placement batches written at once (the ledger's default, 3, unless set; ADR 0021). */
const IN_FLIGHT = process.env.BENCH_IN_FLIGHT ? Number(process.env.BENCH_IN_FLIGHT) : undefined;

function quantile(sorted: number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? NaN;
}

interface Run {
  latencies: number[];
  seconds: number;
  cpuSeconds: number;
}

const newRun = (): Run => ({ latencies: [], seconds: 0, cpuSeconds: 0 });

/** Calls `fn` for indices [from, to), `callers` at a time; adds the latencies, the wall time and this process's CPU to `run`. */
async function runConcurrent(run: Run, from: number, to: number, callers: number, fn: (i: number) => Promise<void>) {
  let next = from;
  const cpu0 = process.cpuUsage();
  const started = performance.now();
  await Promise.all(
    Array.from({ length: callers }, async () => {
      while (next < to) {
        const i = next++;
        const t0 = performance.now();
        await fn(i);
        run.latencies.push(performance.now() - t0);
      }
    }),
  );
  run.seconds += (performance.now() - started) / 1000;
  const cpu = process.cpuUsage(cpu0);
  run.cpuSeconds += (cpu.user + cpu.system) / 1e6;
}

function summary(run: Run) {
  const sorted = [...run.latencies].sort((a, b) => a - b);
  return {
    perSecond: run.latencies.length / run.seconds,
    p50: quantile(sorted, 0.5),
    p99: quantile(sorted, 0.99),
    /** Share of one core this process used: the rest of the machine went to PostgreSQL. */
    clientCpu: run.cpuSeconds / run.seconds,
  };
}

async function main() {
  let url = process.env.DATABASE_URL;
  let stop = async () => undefined as void;
  let dir: string | undefined;
  if (!url) {
    dir = await fs.mkdtemp(path.join(os.tmpdir(), 'bc-bench-'));
    const server = await startEmbedded({ dataDir: path.join(dir, 'pg') });
    url = server.url;
    stop = () => server.stop();
  }
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  await admin.query('DROP DATABASE IF EXISTS bc_bench');
  await admin.query('CREATE DATABASE bc_bench');
  await admin.end();
  const benchUrl = new URL(url);
  benchUrl.pathname = '/bc_bench';
  const db = createPool(benchUrl.toString(), Math.max(CONCURRENCY, CONTENTION) + 4);
  const c = await db.connect();
  await migrate(c);
  c.release();
  const clock = await DbClock.create(db);

  console.log(`# ${PLACEMENTS} single-GPU placements per row, ${os.cpus().length} cores`);
  console.log('nodes\tcallers\tplacer/s\tp50 ms\tp99 ms\treplans\tclient cpu\tfloor/s\tfloor p50\tfloor p99\tclient cpu\tratio');
  const largest = Math.max(...SIZES);
  let row = 0;
  for (const nodes of SIZES) {
    const { poolId } = await seedPool(db, nodes, 'b');
    const ledger = new Ledger(db, IN_FLIGHT ? { groupCommit: { maxInFlight: IN_FLIGHT } } : {});
    await ledger.preview(
      { tenantId: 'bench', poolId, devices: [{ class: 'gpu', count: 1 }], duration: 3600, binding: 'hold', idempotencyKey: 'warm' },
      clock.now(),
    );
    // Warm-up, not measured: the planner's code compiled, the server's plans cached and its statistics taken with
    // bookings in the tables (as autovacuum would after the first ones), on both sides alike.
    await runConcurrent(newRun(), 0, WARMUP, CONCURRENCY, async (i) => {
      const r = await ledger.reserve(
        { tenantId: 'bench', poolId, devices: [{ class: 'gpu', count: 1 }], duration: 3600, binding: 'hold', idempotencyKey: `w${nodes}-${i}` },
        clock.now(),
      );
      if (!r.ok) throw new Error(r.message);
    });
    await db.query('ANALYZE');
    const { rows: devices } = await db.query<{ id: string }>(
      `SELECT id FROM devices WHERE node_id LIKE 'b${nodes}-%' ORDER BY id DESC LIMIT $1`,
      [PLACEMENTS],
    );
    for (const callers of nodes === largest && CONTENTION !== CONCURRENCY ? [CONCURRENCY, CONTENTION] : [CONCURRENCY]) {
      row++;
      let failures = 0;
      let replans = 0;
      const placing = newRun();
      const place = async (i: number) => {
        const r = await ledger.reserve(
          { tenantId: 'bench', poolId, devices: [{ class: 'gpu', count: 1 }], duration: 3600, binding: 'hold', idempotencyKey: `b${row}-${i}` },
          clock.now(),
        );
        replans += r.replans ?? 0;
        if (!r.ok) {
          failures++;
          if (failures <= 3) console.error(r);
        }
      };
      // The floor: the same number of bookings, one INSERT each, on atoms nobody else books, a year out (a later hour
      // for each row, so that rows do not collide).
      const alloc = `alloc_floor_${row}`;
      await db.query(
        `INSERT INTO allocations (id, kind, pod_uid, node_id, during) VALUES ($1, 'pod', $1, 'b${nodes}-1', tstzrange(compute_now(), 'infinity'))`,
        [alloc],
      );
      const flooring = newRun();
      const insert = async (i: number) => {
        await db.query(
          `WITH w AS (SELECT tstzrange(compute_now() + interval '1 year' + make_interval(hours => $3),
                                       compute_now() + interval '1 year' + make_interval(hours => $3 + 1)) AS r)
           INSERT INTO device_bookings (device_id, allocation_id, during, planned) SELECT $1, $2, r, r FROM w`,
          [devices[i % devices.length]!.id, alloc, row],
        );
      };
      // In turns, a share of each side at a time, so that both meet the same moments of the machine (checkpoints,
      // autovacuum, other load) and the ratio compares like with like.
      for (let t = 0; t < ROUNDS; t++) {
        const from = Math.floor((PLACEMENTS * t) / ROUNDS);
        const to = Math.floor((PLACEMENTS * (t + 1)) / ROUNDS);
        await runConcurrent(placing, from, to, callers, place);
        await runConcurrent(flooring, from, to, callers, insert);
      }
      if (failures) throw new Error(`${failures} placements failed`);
      const placer = summary(placing);
      const floor = summary(flooring);
      console.log(
        [nodes, callers, placer.perSecond.toFixed(0), placer.p50.toFixed(2), placer.p99.toFixed(2), replans, placer.clientCpu.toFixed(2),
          floor.perSecond.toFixed(0), floor.p50.toFixed(2), floor.p99.toFixed(2), floor.clientCpu.toFixed(2),
          `${((100 * placer.perSecond) / floor.perSecond).toFixed(0)}%`].join('\t'),
      );
    }
  }
  await db.end();
  await stop();
  if (dir) await fs.rm(dir, { recursive: true, force: true });
}

await main();
