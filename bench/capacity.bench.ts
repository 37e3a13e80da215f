// Capacity reads with 100 pools of 5 resources each (gpu, gpu.mig, vcpu, memoryGiB, hugepages1Gi): summary and byPool
// latency over HTTP (keep-alive, loopback, static token) beside the same calls on the service alone, and the /metrics
// scrape (10 gauges × 500 rows, plus the process metrics) beside the capacity gauges' registry alone.
//   npm run bench:capacity      (embedded PostgreSQL in a temporary directory; DATABASE_URL for another server)
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { createApp } from '../src/api/app.ts';
import { StaticTokenAuthorizer } from '../src/api/authz.ts';
import { createCapacityService } from '../src/api/capacity-service.ts';
import { listen } from '../src/http/server.ts';
import { rebuildRollup } from '../src/db/capacity.ts';
import { startEmbedded } from '../src/db/embedded.ts';
import { Ledger } from '../src/db/ledger.ts';
import { migrate } from '../src/db/migrate.ts';
import { createPool } from '../src/db/pool.ts';
import { silentLogger } from '../src/log.ts';
import { registerCapacityGauges } from '../src/metrics/capacity.ts';
import { ledgerMetrics } from '../src/metrics/ledger.ts';
import { createRegistry, httpMetrics } from '../src/metrics/registry.ts';
import { HttpClient } from '../test/support/http.ts';
import { makeNode, makePool, reservation } from '../test/support/builders.ts';

const POOLS = Number(process.env.BENCH_POOLS ?? 100);
const REQUESTS = Number(process.env.BENCH_REQUESTS ?? 500);
const SCRAPES = Number(process.env.BENCH_SCRAPES ?? 100);
const TOKEN = 'bench-token-0123456789';

function quantile(sorted: number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? NaN;
}

/** Runs `fn` `n` times one after the other (after a warm-up); latencies in ms. */
async function timed(n: number, fn: (i: number) => Promise<unknown>) {
  for (let i = 0; i < Math.min(20, n); i++) await fn(i);
  const ms: number[] = [];
  const started = performance.now();
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    await fn(i);
    ms.push(performance.now() - t0);
  }
  const wall = performance.now() - started;
  ms.sort((a, b) => a - b);
  return { n, p50: quantile(ms, 0.5), p99: quantile(ms, 0.99), perSecond: (n / wall) * 1000 };
}

async function main() {
  let url = process.env.DATABASE_URL;
  let stop = async () => undefined as void;
  let dir: string | undefined;
  if (!url) {
    dir = await fs.mkdtemp(path.join(os.tmpdir(), 'bc-bench-capacity-'));
    const server = await startEmbedded({ dataDir: path.join(dir, 'pg') });
    url = server.url;
    stop = () => server.stop();
  }
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  await admin.query('DROP DATABASE IF EXISTS bc_bench_capacity');
  await admin.query('CREATE DATABASE bc_bench_capacity');
  await admin.end();
  const benchUrl = new URL(url);
  benchUrl.pathname = '/bc_bench_capacity';
  const db = createPool(benchUrl.toString(), 10);
  const c = await db.connect();
  await migrate(c);
  c.release();

  // 100 pools: 3 nodes of 8 GPUs with host scalars, 1 node of 2 GPUs in MIG mode; a few bookings in each.
  const seeded = performance.now();
  const poolIds: string[] = [];
  for (let p = 0; p < POOLS; p++) {
    const name = `bench-${String(p).padStart(3, '0')}`;
    const poolId = await makePool(name).owner('bench').model(p % 3 === 0 ? 'A100' : 'H100').create(db);
    for (let n = 0; n < 3; n++) {
      await makeNode(`${name}-n${n}`).gpus(8).scalars({ vcpu: 128, memoryGiB: 1024, hugepages1Gi: 64 }).create(db, poolId);
    }
    await makeNode(`${name}-mig`).gpus(2).mig(3).create(db, poolId);
    poolIds.push(poolId);
  }
  const registry = createRegistry();
  const metrics = ledgerMetrics(registry);
  const { service, clock } = await createCapacityService(db, { metrics });
  const ledger = new Ledger(db, { metrics });
  for (const poolId of poolIds) {
    await ledger.reserve(reservation(poolId, { tenantId: 'bench', devices: [{ class: 'gpu', count: 4 }], resources: { vcpu: 16 } }), clock.now());
    await ledger.reserve(reservation(poolId, { tenantId: 'bench', devices: [{ class: 'gpu', count: 8 }], start: clock.now() + 3_600_000 }), clock.now());
  }
  await rebuildRollup(db);
  await db.query('ANALYZE');
  const rows = (await db.query<{ n: number }>('SELECT count(*)::int AS n FROM pool_capacity')).rows[0]!.n;
  const seedSeconds = (performance.now() - seeded) / 1000;

  registerCapacityGauges(registry, db);
  const app = createApp({
    service,
    authorizer: new StaticTokenAuthorizer({ tokens: [{ token: TOKEN, subject: 'bench', tenants: ['*'] }] }),
    registry,
    log: silentLogger,
    http: httpMetrics(registry),
    ready: async () => undefined,
  });
  const server = await listen(app, { host: '127.0.0.1', port: 0 });
  const client = new HttpClient(server.url, TOKEN, 1);
  const gaugesOnly = createRegistry({ defaultMetrics: false });
  registerCapacityGauges(gaugesOnly, db);

  const post = async (p: string, body: unknown) => {
    const r = await client.post(p, body);
    if (r.status !== 200) throw new Error(`${p}: ${r.status} ${r.text}`);
    return r;
  };
  let scrapeBytes = 0;
  const results: [string, Awaited<ReturnType<typeof timed>>][] = [
    ['summary, HTTP (every pool)', await timed(REQUESTS, () => post('/api/compute/capacity/summary', { tenantId: 'bench' }))],
    ['summary, service only', await timed(REQUESTS, () => service.summary({ tenantId: 'bench' }))],
    ['byPool, HTTP', await timed(REQUESTS, (i) => post('/api/compute/capacity/byPool', { tenantId: 'bench', poolId: poolIds[i % POOLS]! }))],
    ['byPool, service only', await timed(REQUESTS, (i) => service.byPool({ tenantId: 'bench', poolId: poolIds[i % POOLS]! }))],
    [
      '/metrics scrape, HTTP (all metrics)',
      await timed(SCRAPES, async () => {
        const r = await client.request({ method: 'GET', path: '/metrics' });
        scrapeBytes = r.text.length;
      }),
    ],
    ['capacity gauges only (registry.metrics())', await timed(SCRAPES, () => gaugesOnly.metrics())],
  ];
  const scrape = await gaugesOnly.metrics();
  const series = scrape.split('\n').filter((l) => l && !l.startsWith('#')).length;

  console.log(`# ${POOLS} pools, ${rows} rollup rows (${(rows / POOLS).toFixed(1)} resources per pool), seeded in ${seedSeconds.toFixed(1)} s; ${os.cpus().length} cores`);
  console.log(`# capacity gauges: ${series} samples; a full /metrics scrape is ${(scrapeBytes / 1024).toFixed(0)} KiB`);
  const head = ['what', 'n', 'p50 ms', 'p99 ms', 'per second'];
  const table = results.map(([what, r]) => [what, String(r.n), r.p50.toFixed(2), r.p99.toFixed(2), r.perSecond.toFixed(0)]);
  const widths = head.map((h, i) => Math.max(h.length, ...table.map((r) => r[i]!.length)));
  const line = (r: string[]) => r.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ');
  console.log(line(head));
  for (const r of table) console.log(line(r));

  client.close();
  await server.close();
  await db.end();
  await stop();
  if (dir) await fs.rm(dir, { recursive: true, force: true });
}

await main();
