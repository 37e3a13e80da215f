// Every benchmark that needs only PostgreSQL, run to its end at a small size, so that none can rot unnoticed: a bench
// that throws, or whose own checks of the answers fail, fails here. The figures of these runs mean nothing (they are
// too small, and measured beside other tests); docs/performance.md has the full runs'. bench:scheduler's smoke run is
// in the cluster project (e2e/cluster/bench-smoke.test.ts). Each bench starts its own embedded PostgreSQL.
import { execFile } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const ROOT = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const execFileP = promisify(execFile);

/** Runs `bench/<name>.bench.ts` with the small sizes in `env`; resolves to its output, rejects on a non-zero exit. */
export async function runBench(name: string, env: Record<string, string>): Promise<string> {
  const { DATABASE_URL: _ignored, ...rest } = process.env;
  const { stdout } = await execFileP(process.execPath, ['--import', 'tsx', path.join(ROOT, 'bench', `${name}.bench.ts`)], {
    cwd: ROOT,
    env: { ...rest, ...env },
    timeout: 240_000,
    maxBuffer: 16 * 1024 * 1024,
  });
  return stdout;
}

describe('benchmarks at a small size', () => {
  it('bench:placer runs to its end', async () => {
    const out = await runBench('placer', { BENCH_NODES: '20', BENCH_PLACEMENTS: '40', BENCH_WARMUP: '10', BENCH_ROUNDS: '2', BENCH_CONCURRENCY: '4', BENCH_CONTENTION: '8' });
    // One row per caller count at the one size: nodes, callers, placements/s ...
    expect(out).toMatch(/^20\t4\t/m);
    expect(out).toMatch(/^20\t8\t/m);
  }, 250_000);

  it('bench:capacity runs to its end', async () => {
    const out = await runBench('capacity', { BENCH_POOLS: '4', BENCH_REQUESTS: '20', BENCH_SCRAPES: '5' });
    expect(out).toMatch(/^# 4 pools, /m);
    expect(out).toMatch(/^summary, HTTP \(every pool\)/m);
  }, 250_000);

  it('bench:extender runs to its end, with both filter shapes (the best node alone, and the best 32)', async () => {
    const out = await runBench('extender', { BENCH_NODES: '50', BENCH_CALLS: '20', BENCH_UNCACHED_CALLS: '5', BENCH_WRITER_RATE: '20' });
    expect(out).toMatch(/filter, in-memory state \(best 32 pass\)/);
    expect(out).toMatch(/filter, in-memory state \(best node alone\)/);
    expect(out).toMatch(/^50 nodes: filter p99/m);
  }, 250_000);

  it('bench:admission-flood runs to its end: every flood row, its bodies answered as they should be (413, 411, 200)', async () => {
    const out = await runBench('admission-flood', { BENCH_NODES: '50', BENCH_CALLS: '20', BENCH_ROUNDS: '1', BENCH_FLOOD_CONNECTIONS: '2', BENCH_SETTLE_MS: '100' });
    for (const row of ['no flood', '3 MiB bodies, Content-Length', '3 MiB bodies, chunked \\(411', '3 MiB bodies, chunked, read to the cap', '3 MiB, Content-Length, TLS on the loop', '3 MiB, chunked, TLS on the loop', '1.9 MiB reviews, decoded in the worker', '1.9 MiB reviews, decoded on the loop']) {
      expect(out).toMatch(new RegExp(`^${row}[^\\n]*\\s20\\s`, 'm'));
    }
    expect(out).toMatch(/^filter p99 during the flood of 3 MiB bodies, Content-Length .*: [0-9.]+ ms/m);
  }, 250_000);

  it('bench:scale runs to its end: every Reservation booked, every phase reported with RSS and reconcile times', async () => {
    const out = await runBench('scale', { BENCH_NODES: '12', BENCH_RESERVATIONS: '30', BENCH_PODS: '1200', BENCH_POOLS: '2', BENCH_TENANTS: '3', BENCH_SETTLE_S: '200' });
    expect(out).toMatch(/^# 12 nodes x 8 GPUs in 2 pools, 30 Reservations of 3 tenants, 1200 pods/m);
    expect(out).toMatch(/"Reserved\/Reserved":30\}/);
    for (const phase of ['informers: first list', 'releaser: orphan pass', 'leader: first pass', 'leader: full resync', 'extender: in-memory state']) {
      expect(out).toMatch(new RegExp(`^${phase}[^\t]*\t[0-9.]+\t[0-9]+\t`, 'm'));
    }
    expect(out).toMatch(/^# RSS per 1,000 objects/m);
    expect(out).toMatch(/^# peak RSS \d+ MiB .*reconcile p99 [0-9.]+ ms over \d+ reconciles/m);
  }, 250_000);
});
