// Scheduler extender filter and prioritize at 1,000 and 5,000 nodes (8 GPUs each, seeded in the ledger with bulk SQL),
// over HTTP the way kube-scheduler calls it (nodeCacheCapable: the Pod and the NodeNames of every node), beside empty
// express handlers on the same server, called the same way in the same run. Filter and prioritize answer from the
// extender's in-memory state (ADR 0010); one row measures filter while a writer books and releases in the background
// (the state follows through its notifications), one the database reads it falls back to when the state is stale, and
// one with a pod's booking on every fourth node (those are judged atom by atom, not by a shared summary).
// The ratio is calls/s of the row ÷ calls/s of the empty handler that parses the same body, called in turn with the
// row (each call of the row follows one of the empty handler), so that a busy machine weighs on both alike.
//   npm run bench:extender      (embedded PostgreSQL in a temporary directory; DATABASE_URL for another server)
// Env: BENCH_NODES (default 1000,5000), BENCH_CALLS (default 300), BENCH_UNCACHED_CALLS (default 40),
//      BENCH_WRITER_RATE (bookings and releases per second in the background row, default 50),
//      BETTER_COMPUTE_SCAVENGES (main-thread or parallel: where young collections run, as in the controller; ADR 0029).
// One call at a time: kube-scheduler calls the extender from its scheduling cycle, one pod after another.
import { benchDatabase } from './database.ts';
import { inertExtenderKube } from './inert-kube.ts';
import { Agent as HttpAgent, createServer, request, type RequestListener, type Server } from 'node:http';
import os from 'node:os';
import express from 'express';
import { DbClock } from '../src/db/clock.ts';
import { Ledger } from '../src/db/ledger.ts';
import { newAllocationId } from '../src/ids.ts';
import { seedPool } from './seed.ts';
import { createExtenderListener } from '../src/extender/listener.ts';
import { DEFAULT_FILTER_NODES, ExtenderService } from '../src/extender/service.ts';
import { setScavenges } from '../src/scavenge.ts';
import { ExtenderStateSync } from '../src/extender/state-sync.ts';
import { loadConfig } from '../src/config.ts';
import type { Db } from '../src/db/pool.ts';
import { silentLogger } from '../src/log.ts';
import { countingDb } from '../test/support/counting-db.ts';

const SIZES = (process.env.BENCH_NODES ?? '1000,5000').split(',').map(Number);
const CALLS = Number(process.env.BENCH_CALLS ?? 300);
const UNCACHED_CALLS = Number(process.env.BENCH_UNCACHED_CALLS ?? 40);
const WRITER_RATE = Number(process.env.BENCH_WRITER_RATE ?? 50);
const TARGET_P99_MS = 2;
const TARGET_RATIO = 0.5;


/** GPU `gpu` of `node` booked open-ended for pod `podUid` with bc_place, the ledger's own function, in one statement. */
async function bookGpu(db: Db, poolId: string, podUid: string, node: string, gpu: number): Promise<{ ok: boolean; id: string; answer: unknown }> {
  const id = newAllocationId();
  const { rows } = await db.query('SELECT bc_place($1::jsonb) AS r', [
    JSON.stringify({ tenantId: 'bench', poolId, podUid, durationSeconds: null, allocations: [{ id, nodeId: node, atoms: [`GPU-${node}-${gpu}`] }] }),
  ]);
  return { ok: (rows[0].r as { ok: boolean }).ok, id, answer: rows[0].r };
}

/**
 * Books one GPU for a new pod on a random node, or releases the oldest booking, WRITER_RATE times a second, until
 * stopped: bc_place and bc_release_allocations straight (the ledger's own functions, one statement each), so that this
 * process spends its time on what the extender's state does with the notifications, not on planning the writes.
 */
function startWriter(db: Db, poolId: string, nodes: string[]): { stop(): Promise<number> } {
  let stopped = false;
  let writes = 0;
  const live: string[] = [];
  let seq = 0;
  const run = (async () => {
    const every = 1000 / WRITER_RATE;
    let next = performance.now();
    while (!stopped) {
      if (live.length >= 32 || (live.length > 0 && seq % 2 === 1)) {
        await db.query('SELECT bc_release_allocations($1)', [[live.shift()!]]);
      } else {
        const node = nodes[Math.floor(Math.random() * nodes.length)]!;
        const placed = await bookGpu(db, poolId, `bench-writer-${process.pid}-${seq}`, node, Math.floor(Math.random() * 8));
        if (placed.ok) live.push(placed.id);
      }
      seq++;
      writes++;
      next += every;
      const wait = next - performance.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    }
    if (live.length) await db.query('SELECT bc_release_allocations($1)', [live]);
  })();
  return {
    async stop() {
      stopped = true;
      await run;
      return writes;
    },
  };
}

/** GPU 0 booked open-ended for a pod on every fourth node (bookGpu, 8 at a time); the allocations' ids. */
async function bookQuarter(db: Db, poolId: string, nodes: string[]): Promise<string[]> {
  const ids: string[] = [];
  const todo = nodes.filter((_, i) => i % 4 === 0);
  await Promise.all(
    Array.from({ length: 8 }, async () => {
      for (let node = todo.pop(); node; node = todo.pop()) {
        const placed = await bookGpu(db, poolId, `bench-quarter-${node}`, node, 0);
        if (!placed.ok) throw new Error(`booking on ${node}: ${JSON.stringify(placed.answer)}`);
        ids.push(placed.id);
      }
    }),
  );
  return ids;
}

function quantile(sorted: number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? NaN;
}

interface Stats {
  perSecond: number;
  /** The round trip, client included. */
  p50: number;
  p99: number;
  /** In the server: from the request's arrival to the answer handed to the socket (body read, parsed, answered). */
  serverP50: number;
  serverP99: number;
}

/** Server-side times of the calls being measured, by path (one call at a time). */
const serverTimes = new Map<string, number[]>();
/** The in-memory service's own time per filter call (judging, without the body's parse and the answer's encoding). */
const serviceTimes: number[] = [];

function stats(latencies: number[], server: number[]): Stats {
  const sorted = [...latencies].sort((a, b) => a - b);
  const s = [...server].sort((a, b) => a - b);
  return {
    // Calls per second of this kind of call alone: the interleaved baseline's time is not counted.
    perSecond: latencies.length / (latencies.reduce((a, b) => a + b, 0) / 1000),
    p50: quantile(sorted, 0.5),
    p99: quantile(sorted, 0.99),
    serverP50: quantile(s, 0.5),
    serverP99: quantile(s, 0.99),
  };
}

/**
 * `n` calls of `path`, one at a time; with a baseline path, each call follows one call of the baseline, so that both
 * meet the same moments of a busy machine and their ratio stays honest.
 */
async function measure(n: number, post: (path: string) => Promise<void>, path: string, baseline?: string): Promise<{ row: Stats; base?: Stats }> {
  for (let i = 0; i < Math.min(10, n); i++) {
    if (baseline) await post(baseline);
    await post(path); // warm-up
  }
  serverTimes.clear();
  serviceTimes.length = 0;
  const rowTimes: number[] = [];
  const baseTimes: number[] = [];
  for (let i = 0; i < n; i++) {
    if (baseline) {
      const b0 = performance.now();
      await post(baseline);
      baseTimes.push(performance.now() - b0);
    }
    const t0 = performance.now();
    await post(path);
    rowTimes.push(performance.now() - t0);
  }
  const row = stats(rowTimes, serverTimes.get(path) ?? []);
  return baseline ? { row, base: stats(baseTimes, serverTimes.get(baseline) ?? []) } : { row };
}

const kube = inertExtenderKube;

// Two shapes of on-demand pod: one without scheduling preferences, which filter passes its best node alone (ADR 0030),
// and one of a ReplicaSet (spread by default, so it has preferences), which filter passes the best DEFAULT_FILTER_NODES.
const pod = {
  metadata: { name: 'bench-pod', namespace: 'bench', uid: '00000000-0000-0000-0000-000000000001' },
  spec: { containers: [{ name: 'main', image: 'x', resources: { limits: { 'bettercompute.io/gpu': '1' } } }] },
};
const replicaPod = {
  ...pod,
  metadata: { ...pod.metadata, uid: '00000000-0000-0000-0000-000000000002', ownerReferences: [{ apiVersion: 'apps/v1', kind: 'ReplicaSet', name: 'bench', uid: 'rs-1', controller: true }] },
};

async function main() {
  // Young collections where the controller has them (BETTER_COMPUTE_SCAVENGES, ADR 0029).
  const scavenges = loadConfig().scavenges;
  setScavenges(scavenges);
  const bench = await benchDatabase('ext', 8);
  const { db } = bench;
  const clock = await DbClock.create(db);
  const ledger = new Ledger(db);
  const sync = new ExtenderStateSync({ db, log: silentLogger });
  sync.start();
  await sync.ready();
  const memoryDb = countingDb(db);
  const memory = new ExtenderService({
    tenancyByName: true,
    db: memoryDb,
    ledger,
    clock,
    kube,
    log: silentLogger,
    memory: sync,
    metrics: { onCall: (verb, seconds) => void (verb === 'filter' && serviceTimes.push(seconds * 1000)) },
  });
  const database = new ExtenderService({ tenancyByName: true, db, ledger, clock, kube, log: silentLogger });

  // The empty handlers of the baseline: express, as the issue's baseline defines them. The extenders: the controller's
  // extender listener (plain node:http, ADR 0025), served here under /memory/ and /database/ for /scheduler/.
  const baseline = express();
  baseline.set('etag', false);
  baseline.post('/empty-raw', (_req, res) => void res.json({}));
  baseline.post('/empty-json', express.json({ limit: '64mb' }), (_req, res) => void res.json({}));
  const extenders = new Map([
    ['/memory/', createExtenderListener({ service: memory })],
    ['/database/', createExtenderListener({ service: database })],
  ]);
  // In the server: from the request's arrival to the answer handed to the socket (body read, parsed, answered).
  const app: RequestListener = (req, res) => {
    const url = req.url ?? '';
    const t0 = performance.now();
    res.on('finish', () => {
      const list = serverTimes.get(url) ?? [];
      list.push(performance.now() - t0);
      serverTimes.set(url, list);
    });
    for (const [prefix, listener] of extenders) {
      if (url.startsWith(prefix)) {
        req.url = `/scheduler/${url.slice(prefix.length)}`;
        return listener(req, res);
      }
    }
    baseline(req, res);
  };
  const server: Server = createServer(app);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const addr = server.address();
  const port = typeof addr === 'object' && addr ? addr.port : 0;

  // The client: node:http on one kept-alive connection, as kube-scheduler's Go client calls its extender. Not fetch:
  // undici's objects of every call (streams, weak references, finalization registrations, resource timings) outlive
  // young collections and made each about three times as long, a pause that fell in the server's time since the client
  // shares its heap here; kube-scheduler's garbage is never the extender's. Timed calls read the answer's bytes without
  // parsing them (kube-scheduler decodes them in its own process); the answers are checked, parsed, before and after
  // each timed row.
  const agent = new HttpAgent({ keepAlive: true, maxSockets: 1 });
  const post = (p: string, body: string, check?: (json: unknown) => void) =>
    new Promise<void>((resolve, reject) => {
      const req = request(
        { host: '127.0.0.1', port, path: p, method: 'POST', agent, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } },
        (res) => {
          const read = check !== undefined || res.statusCode !== 200;
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => void (read && chunks.push(c)));
          res.on('error', reject);
          res.on('end', () => {
            if (!read) return resolve();
            try {
              const json = JSON.parse(Buffer.concat(chunks).toString('utf8')) as unknown;
              if (res.statusCode !== 200) throw new Error(`${p}: HTTP ${res.statusCode} ${JSON.stringify(json).slice(0, 200)}`);
              check?.(json);
              resolve();
            } catch (e) {
              reject(e as Error);
            }
          });
        },
      );
      req.setTimeout(60_000, () => req.destroy(new Error(`${p}: no answer in 60 s`)));
      req.on('error', reject);
      req.end(body);
    });

  console.log(`extender filter and prioritize over HTTP, ${os.cpus().length} CPUs, node ${process.version}, young collections ${scavenges}; one call at a time`);
  console.log('                                                                           round trip          in the server');
  console.log('nodes  what                                              calls   calls/s     p50 ms     p99 ms     p50 ms     p99 ms   calls/s ratio');
  const ms = (x: number) => x.toFixed(2).padStart(9);
  const row = (nodes: number, what: string, calls: number, s: Stats, ratio?: number) =>
    console.log(
      `${String(nodes).padStart(5)}  ${what.padEnd(48)}  ${String(calls).padStart(5)}  ${s.perSecond.toFixed(1).padStart(8)}  ${ms(s.p50)}  ${ms(s.p99)}  ${ms(s.serverP50)}  ${ms(s.serverP99)}  ${ratio === undefined ? '' : `${(ratio * 100).toFixed(0).padStart(10)}%`}`,
    );
  const verdicts: string[] = [];
  for (const n of SIZES) {
    const { poolId, nodeIds: names } = await seedPool(db, n, 'x');
    await sync.caughtUp(60_000);
    if (!sync.fresh()) throw new Error('the extender state is not fresh after seeding');
    // The pod with preferences: every node fits and filter passes the best DEFAULT_FILTER_NODES (ADR 0022); the rows
    // after the first two are of this shape (prioritize is called only for it). The pod without: its best node alone.
    const body = JSON.stringify({ Pod: replicaPod, NodeNames: names });
    const aloneBody = JSON.stringify({ Pod: pod, NodeNames: names });
    const passing = (want: number) => (json: unknown) => {
      const r = json as { NodeNames?: string[]; Error?: string };
      if (r.Error || r.NodeNames?.length !== want) throw new Error(`filter: ${r.Error || `${r.NodeNames?.length} of ${n} nodes pass, not ${want}`}`);
    };
    const passAll = passing(Math.min(n, DEFAULT_FILTER_NODES));
    const passOne = passing(1);
    const scored = (json: unknown) => {
      const r = json as { Host: string; Score: number }[];
      if (!Array.isArray(r) || r.length !== n) throw new Error(`prioritize: ${JSON.stringify(json).slice(0, 200)}`);
    };
    await post('/memory/filter', body, passAll); // correctness
    await post('/database/filter', body, passAll);
    await post('/memory/filter', aloneBody, passOne);
    const call = (p: string) => post(p, body);
    const callAlone = (p: string) => post(p, aloneBody);
    const raw = (await measure(CALLS, call, '/empty-raw')).row;
    const parsed = (await measure(CALLS, call, '/empty-json')).row;
    const readsBefore = memoryDb.calls;
    const f = await measure(CALLS, call, '/memory/filter', '/empty-json');
    const filter = f.row;
    const own = [...serviceTimes].sort((a, b) => a - b);
    await post('/memory/filter', body, passAll);
    const fAlone = await measure(CALLS, callAlone, '/memory/filter', '/empty-json');
    await post('/memory/filter', aloneBody, passOne);
    await post('/memory/prioritize', body, scored);
    const p = await measure(CALLS, call, '/memory/prioritize', '/empty-json');
    await post('/memory/prioritize', body, scored);
    const reads = memoryDb.calls - readsBefore;
    if (reads !== 0) throw new Error(`the in-memory filter and prioritize read the database ${reads} times`);
    const writer = startWriter(db, poolId, names);
    const writeStarted = performance.now();
    const busy = await measure(CALLS, call, '/memory/filter', '/empty-json');
    await post('/memory/filter', body, passAll);
    const writes = await writer.stop();
    const writesPerSecond = writes / ((performance.now() - writeStarted) / 1000);
    const fallback = await measure(UNCACHED_CALLS, call, '/database/filter', '/empty-json');
    await post('/database/filter', body, passAll);
    // A quarter of the nodes with a pod's open-ended booking of one GPU: judged atom by atom, not by a shared summary.
    const booked = await bookQuarter(db, poolId, names);
    await sync.caughtUp(60_000);
    await post('/memory/filter', body, passAll);
    const partly = await measure(CALLS, call, '/memory/filter', '/empty-json');
    await post('/memory/filter', body, passAll);
    await db.query('SELECT bc_release_allocations($1)', [booked]);
    const ratioOf = (m: { row: Stats; base?: Stats }) => m.row.perSecond / m.base!.perSecond;
    row(n, 'empty handler (body not read)', CALLS, raw);
    row(n, 'empty handler (same JSON body parsed)', CALLS, parsed, 1);
    row(n, `filter, in-memory state (best ${Math.min(n, DEFAULT_FILTER_NODES)} pass)`, CALLS, filter, ratioOf(f));
    row(n, 'filter, in-memory state (best node alone)', CALLS, fAlone.row, ratioOf(fAlone));
    row(n, 'prioritize, in-memory state', CALLS, p.row, ratioOf(p));
    row(n, `filter, in-memory, writer ${writesPerSecond.toFixed(0)} writes/s behind`, CALLS, busy.row, ratioOf(busy));
    row(n, 'filter, database reads (the stale-state path)', UNCACHED_CALLS, fallback.row, ratioOf(fallback));
    row(n, `filter, in-memory, ${booked.length} nodes with a booking`, CALLS, partly.row, ratioOf(partly));
    console.log(`       filter's own work from memory (judging, without parsing the body or encoding the answer): p50 ${quantile(own, 0.5).toFixed(2)} ms, p99 ${quantile(own, 0.99).toFixed(2)} ms`);
    console.log(
      `       (${(body.length / 1024).toFixed(0)} KiB request; ratio = calls/s ÷ calls/s of the empty handler with parsed body, called in turn with the row; database reads during the in-memory rows: ${reads})`,
    );
    const ratio = ratioOf(f);
    const own99 = quantile(own, 0.99);
    verdicts.push(
      `${n} nodes: filter p99 in the server ${filter.serverP99.toFixed(2)} ms (target ≤ ${TARGET_P99_MS}: ${filter.serverP99 <= TARGET_P99_MS ? 'met' : 'MISSED'}; ` +
        `the empty handler's own ${f.base!.serverP99.toFixed(2)} ms; round trip ${filter.p99.toFixed(2)} ms; judging alone ${own99.toFixed(2)} ms), ` +
        `${(ratio * 100).toFixed(0)}% of the empty handler's calls/s (target ≥ ${TARGET_RATIO * 100}%: ${ratio >= TARGET_RATIO ? 'met' : 'MISSED'})`,
    );
  }
  for (const v of verdicts) console.log(v);

  await sync.stop();
  agent.destroy();
  server.close();
  server.closeAllConnections();
  await bench.stop();
}

main().catch((e: unknown) => {
  console.error(e);
  process.exit(1);
});
