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
});
