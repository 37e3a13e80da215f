// bench:scheduler run to its end at a small size on the test cluster this run holds, so that it cannot rot unnoticed
// (the other benchmarks' smoke runs: test/db/bench-smoke.test.ts). Its figures at this size mean nothing.
import { execFile } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { expect, it } from 'vitest';

const ROOT = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const execFileP = promisify(execFile);

it('bench:scheduler runs to its end (20 nodes, 20 pods)', async () => {
  const { DATABASE_URL: _ignored, ...env } = process.env;
  const { stdout } = await execFileP(process.execPath, ['--import', 'tsx', path.join(ROOT, 'bench', 'scheduler.bench.ts')], {
    cwd: ROOT,
    env: { ...env, BENCH_CLUSTER_HELD: '1', BENCH_NODES: '20', BENCH_PODS: '20', BENCH_WARMUP: '4', BENCH_CREATE_CONCURRENCY: '4' },
    timeout: 290_000,
    maxBuffer: 16 * 1024 * 1024,
  });
  expect(stdout).toMatch(/^nodes\s+scheduler/m);
  expect(stdout).toMatch(/^\s*20\s+/m);
  // The DRA rows ran too: upstream DRA's (kube-scheduler allocates from a no-op driver's slices) and ours (claims
  // allocated by the product's allocator, pods bound by the default kube-scheduler).
  expect(stdout).toMatch(/^\s*20\s+upstream DRA \(kube-scheduler allocates\) .*%$/m);
  expect(stdout).toMatch(/of upstream DRA's pods\/s: \d+%/);
  expect(stdout).toMatch(/^\s*20\s+DRA on demand .*%$/m);
  expect(stdout).toMatch(/^\s*20\s+DRA Reservation .*%$/m);
}, 300_000);
