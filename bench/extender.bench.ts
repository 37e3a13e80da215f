// Scheduler extender filter latency and calls per second at 1,000 and 5,000 nodes (8 GPUs each, seeded in the ledger
// with bulk SQL), over HTTP the way kube-scheduler calls it (nodeCacheCapable: the Pod and the NodeNames of every node),
// beside empty express handlers on the same server, called the same way in the same run; the ratio is filter / empty.
//   npm run bench:extender      (embedded PostgreSQL in a temporary directory; DATABASE_URL for another server)
// Env: BENCH_NODES (default 1000,5000), BENCH_CALLS (default 300), BENCH_UNCACHED_CALLS (default 40).
// One call at a time: kube-scheduler calls the extender from its scheduling cycle, one pod after another.
import fs from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import os from 'node:os';
import path from 'node:path';
import express from 'express';
import pg from 'pg';
import { DbClock } from '../src/db/clock.ts';
import { startEmbedded } from '../src/db/embedded.ts';
import { Ledger } from '../src/db/ledger.ts';
import { migrate } from '../src/db/migrate.ts';
import { createPool } from '../src/db/pool.ts';
import { seedPool } from './seed.ts';
import type { ExtenderKube } from '../src/extender/kube.ts';
import { createExtenderRouter } from '../src/extender/router.ts';
import { ExtenderService } from '../src/extender/service.ts';
import { silentLogger } from '../src/log.ts';

const SIZES = (process.env.BENCH_NODES ?? '1000,5000').split(',').map(Number);
const CALLS = Number(process.env.BENCH_CALLS ?? 300);
const UNCACHED_CALLS = Number(process.env.BENCH_UNCACHED_CALLS ?? 40);

function quantile(sorted: number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? NaN;
}

interface Stats {
  perSecond: number;
  p50: number;
  p99: number;
}

async function measure(n: number, call: () => Promise<void>): Promise<Stats> {
  for (let i = 0; i < Math.min(10, n); i++) await call(); // warm-up
  const latencies: number[] = [];
  const started = performance.now();
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    await call();
    latencies.push(performance.now() - t0);
  }
  const seconds = (performance.now() - started) / 1000;
  latencies.sort((a, b) => a - b);
  return { perSecond: n / seconds, p50: quantile(latencies, 0.5), p99: quantile(latencies, 0.99) };
}

// The filter reads no pod or node from the API server for an on-demand pod; the namespace's labels come from here.
const kube: ExtenderKube = {
  getPod: async () => undefined,
  nodeAllocatable: async () => ({}),
  namespaceLabels: async () => ({}),
  annotatePod: async () => undefined,
  bindPod: async () => undefined,
  evictPod: async () => undefined,
};

const pod = {
  metadata: { name: 'bench-pod', namespace: 'bench', uid: '00000000-0000-0000-0000-000000000001' },
  spec: { containers: [{ name: 'main', image: 'x', resources: { limits: { 'bettercompute.io/gpu': '1' } } }] },
};

async function main() {
  let url = process.env.DATABASE_URL;
  let stop = async () => undefined as void;
  let dir: string | undefined;
  if (!url) {
    dir = await fs.mkdtemp(path.join(os.tmpdir(), 'bc-bench-ext-'));
    await fs.chmod(dir, 0o755);
    const server = await startEmbedded({ dataDir: path.join(dir, 'pg'), port: 40000 + Math.floor(Math.random() * 10000), fast: true });
    url = server.url;
    stop = () => server.stop();
  }
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  const dbName = `bench_ext_${process.pid}`;
  await admin.query(`CREATE DATABASE ${dbName}`);
  const dbUrl = new URL(url);
  dbUrl.pathname = `/${dbName}`;
  const db = createPool(dbUrl.toString(), 8);
  const client = await db.connect();
  await migrate(client);
  client.release();
  const clock = await DbClock.create(db);
  const ledger = new Ledger(db);
  const cached = new ExtenderService({ db, ledger, clock, kube, log: silentLogger });
  const uncached = new ExtenderService({ db, ledger, clock, kube, log: silentLogger, snapshotTtlMs: 0 });

  const app = express();
  app.use('/cached', createExtenderRouter({ service: cached }));
  app.use('/uncached', createExtenderRouter({ service: uncached }));
  app.post('/empty-raw', (_req, res) => void res.json({}));
  app.post('/empty-json', express.json({ limit: '64mb' }), (_req, res) => void res.json({}));
  const server: Server = createServer(app);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const addr = server.address();
  const base = `http://127.0.0.1:${typeof addr === 'object' && addr ? addr.port : 0}`;

  const post = async (p: string, body: string, check?: (json: unknown) => void) => {
    const res = await fetch(`${base}${p}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
    const json = (await res.json()) as unknown;
    if (!res.ok) throw new Error(`${p}: HTTP ${res.status} ${JSON.stringify(json).slice(0, 200)}`);
    check?.(json);
  };

  console.log(`extender filter over HTTP, ${os.cpus().length} CPUs, node ${process.version}; one call at a time`);
  console.log('nodes  what                                  calls   calls/s     p50 ms     p99 ms   p50 ratio');
  const row = (nodes: number, what: string, calls: number, s: Stats, ratio?: number) =>
    console.log(
      `${String(nodes).padStart(5)}  ${what.padEnd(36)}  ${String(calls).padStart(5)}  ${s.perSecond.toFixed(1).padStart(8)}  ${s.p50.toFixed(2).padStart(9)}  ${s.p99.toFixed(2).padStart(9)}  ${ratio === undefined ? '' : `${ratio.toFixed(1).padStart(8)}x`}`,
    );
  for (const n of SIZES) {
    const { nodeIds: names } = await seedPool(db, n, 'x');
    const body = JSON.stringify({ Pod: pod, NodeNames: names });
    const passAll = (json: unknown) => {
      const r = json as { NodeNames?: string[]; Error?: string };
      if (r.Error || r.NodeNames?.length !== n) throw new Error(`filter: ${r.Error || `${r.NodeNames?.length} of ${n} nodes pass`}`);
    };
    await post('/cached/filter', body, passAll); // correctness, and the first snapshot load
    const raw = await measure(CALLS, () => post('/empty-raw', body));
    const parsed = await measure(CALLS, () => post('/empty-json', body));
    const filter = await measure(CALLS, () => post('/cached/filter', body));
    const reload = await measure(UNCACHED_CALLS, () => post('/uncached/filter', body, passAll));
    row(n, 'empty handler (body not read)', CALLS, raw);
    row(n, 'empty handler (same JSON body parsed)', CALLS, parsed);
    row(n, 'filter, snapshot cached (TTL 1 s)', CALLS, filter, filter.p50 / parsed.p50);
    row(n, 'filter, snapshot reloaded every call', UNCACHED_CALLS, reload, reload.p50 / parsed.p50);
    console.log(`       (${(body.length / 1024).toFixed(0)} KiB request; ratio = filter p50 / empty handler with parsed body p50)`);
  }

  server.close();
  server.closeAllConnections();
  await db.end();
  await admin.query(`DROP DATABASE ${dbName}`);
  await admin.end();
  await stop();
  if (dir) await fs.rm(dir, { recursive: true, force: true });
}

main().catch((e: unknown) => {
  console.error(e);
  process.exit(1);
});
