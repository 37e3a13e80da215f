// The scheduler extender's filter while the webhook listener is flooded with large bodies (issue 35, ADR 0047, ADR
// 0048): the controller's real extender listener (plain HTTP on loopback) and its real webhook listener (HTTPS on
// loopback: its TLS front in a thread of its own, the admission router with its review pool on the loop) in this
// process, as in the controller; the flood from another process (bench/admission-flood-client.ts), so that its CPU is
// not the controller's.
// Rows, called in turns within one run (each round runs every row once, in a rotated order), so that a busy machine
// weighs on all alike: no flood; 3 MiB bodies with a Content-Length (refused from their headers); 3 MiB bodies chunked
// (refused 411 from their headers, as the controller's front does on /admission); the same read to the cap by a front
// that takes chunked bodies (413); ~1.9 MiB valid reviews decoded in the worker; the same decoded on the event loop (the path before
// ADR 0047, kept mounted here at /admission-loop for the comparison); the two 3 MiB floods again against the same app
// served with its TLS on the event loop (the listener before ADR 0048). On a machine of few cores the flood's own CPU
// (TLS encryption at tens of MiB/s) competes with the controller's, which a cluster's would not: it runs at a lower
// priority (BENCH_FLOOD_NICE).
//   npm run bench:admission-flood      (embedded PostgreSQL in a temporary directory; DATABASE_URL for another server)
// Env: BENCH_NODES (default 1000), BENCH_CALLS (filter calls per row, default 3000), BENCH_ROUNDS (default 10),
//      BENCH_FLOOD_CONNECTIONS (the flood's connections, default 4), BENCH_SETTLE_MS (flood running before a row is
//      timed, default 300), BENCH_FLOOD_NICE (the flood process's nice value, default 10).
// One filter call at a time, as kube-scheduler calls its extender from its scheduling cycle.
import { fork } from 'node:child_process';
import { Agent as HttpAgent, request } from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { createHistogram, type RecordableHistogram } from 'node:perf_hooks';
import { benchDatabase } from './database.ts';
import { inertExtenderKube } from './inert-kube.ts';
import { seedPool } from './seed.ts';
import type { Flood, FloodCounts, FloodMessage, FloodProbe } from './admission-flood-client.ts';
import { createPodAdmissionRouter, MAX_REVIEW_BYTES, type AdmissionLookups } from '../src/admission/pods.ts';
import { ReviewDecoderPool } from '../src/admission/review-pool.ts';
import { listen } from '../src/http/server.ts';
import { issueBundle } from '../src/controller/certs.ts';
import { FRONT_NICE, listenBehindFront } from '../src/http/tls-front.ts';
import { createWebhookApp, WEBHOOK_MAX_BODY_BYTES } from '../src/controller/listeners.ts';
import { loadConfig } from '../src/config.ts';
import { DbClock } from '../src/db/clock.ts';
import { Ledger } from '../src/db/ledger.ts';
import { createExtenderListener } from '../src/extender/listener.ts';
import { DEFAULT_FILTER_NODES, ExtenderService } from '../src/extender/service.ts';
import { ExtenderStateSync } from '../src/extender/state-sync.ts';
import { silentLogger } from '../src/log.ts';
import { setScavenges } from '../src/scavenge.ts';

const NODES = Number(process.env.BENCH_NODES ?? 1000);
const CALLS = Number(process.env.BENCH_CALLS ?? 3000);
const ROUNDS = Math.max(1, Number(process.env.BENCH_ROUNDS ?? 10));
const SETTLE_MS = Number(process.env.BENCH_SETTLE_MS ?? 300);
const FLOOD_NICE = Number(process.env.BENCH_FLOOD_NICE ?? 10);
const TARGET_P99_MS = 5;

/** Which webhook listener a row floods: the controller's (its TLS in a thread of its own), or one with TLS on the loop. */
type Via = 'front' | 'front-chunked-read' | 'loop-tls';

const ROWS: { key: string; flood: Flood; via: Via; what: string }[] = [
  { key: 'none', flood: 'none', via: 'front', what: 'no flood' },
  { key: '3mib', flood: '3mib', via: 'front', what: '3 MiB bodies, Content-Length (413 from headers)' },
  { key: '3mib-chunked', flood: '3mib-chunked', via: 'front', what: '3 MiB bodies, chunked (411 from headers)' },
  { key: '3mib-chunked/read', flood: '3mib-chunked', via: 'front-chunked-read', what: '3 MiB bodies, chunked, read to the cap (413)' },
  { key: 'valid-worker', flood: 'valid-worker', via: 'front', what: '1.9 MiB reviews, decoded in the worker' },
  { key: 'valid-loop', flood: 'valid-loop', via: 'front', what: '1.9 MiB reviews, decoded on the loop (before)' },
  { key: '3mib/loop-tls', flood: '3mib', via: 'loop-tls', what: '3 MiB, Content-Length, TLS on the loop (before)' },
  { key: '3mib-chunked/loop-tls', flood: '3mib-chunked', via: 'loop-tls', what: '3 MiB, chunked, TLS on the loop (before)' },
];

/** Admission's lookups: Reservation bench/train, booked. */
const lookups: AdmissionLookups = {
  reservation: async (namespace, name) => (name === 'train' ? { namespace, name, uid: 'u-train', tenant: 'bench', deleting: false } : undefined),
  reservationsIn: async () => [],
  bookings: {
    byReservationUid: async (tenant, uid) => ({ id: `rsv_01k2${'a'.repeat(22)}`, tenantId: tenant, idempotencyKey: uid, state: 'confirmed', ended: false, start: 0, end: 3_600_000 }),
    byId: async () => undefined,
  },
};

function quantile(sorted: number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? NaN;
}

/** Records the event loop's delay (ns) into `into`: how late each 1 ms timer fires, until the returned stop is called. */
function sampleLoopDelay(into: RecordableHistogram): () => void {
  let last = performance.now();
  let timer = setTimeout(function tick() {
    const now = performance.now();
    into.record(Math.max(1, Math.round((now - last - 1) * 1e6)));
    last = now;
    timer = setTimeout(tick, 1);
  }, 1);
  return () => clearTimeout(timer);
}

async function main() {
  setScavenges(loadConfig().scavenges);
  const bench = await benchDatabase('flood', 8);
  const { db } = bench;
  const { nodeIds } = await seedPool(db, NODES, 'f');
  const sync = new ExtenderStateSync({ db, log: silentLogger });
  sync.start();
  await sync.ready();
  await sync.caughtUp(60_000);
  const service = new ExtenderService({ tenancyByName: true, db, ledger: new Ledger(db), clock: await DbClock.create(db), kube: inertExtenderKube, log: silentLogger, memory: sync });
  const extender = await listen(createExtenderListener({ service }), { host: '127.0.0.1', port: 0 });

  const pool = new ReviewDecoderPool().warm();
  const tls = issueBundle(Date.now(), ['localhost']);
  const webhookApp = createWebhookApp(
    [
      { path: '/admission', router: createPodAdmissionRouter({ ...lookups, log: silentLogger, reviewPool: pool }) },
      { path: '/admission-loop', router: createPodAdmissionRouter({ ...lookups, log: silentLogger, workerAboveBytes: Infinity }) },
    ],
    silentLogger,
  );
  // The controller's webhook listener: its TLS and body reading in a thread of its own, the admission routes' caps and
  // Content-Length required as webhooks.ts gives them (ADR 0048); and the same front reading chunked bodies to the cap.
  const front = (lengthRequired: boolean) =>
    listenBehindFront(webhookApp, {
      host: '127.0.0.1',
      port: 0,
      tls: { cert: tls.cert, key: tls.key },
      maxBodyBytes: WEBHOOK_MAX_BODY_BYTES,
      routes: ['/admission', '/admission-loop'].map((path) => ({ path, maxBodyBytes: MAX_REVIEW_BYTES, lengthRequired })),
    });
  const webhook = await front(true);
  const chunkedRead = await front(false);
  // The same app with its TLS on the event loop, as before ADR 0048 (the rows 'TLS on the loop').
  const loopTls = await listen(webhookApp, { host: '127.0.0.1', port: 0, tls: { cert: tls.cert, key: tls.key } });
  const urls: Record<Via, string> = { front: webhook.url, 'front-chunked-read': chunkedRead.url, 'loop-tls': loopTls.url };

  const client = fork(path.join(import.meta.dirname, 'admission-flood-client.ts'), [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  // In a cluster the flood's CPU is another node's; here it may be told to yield to the controller (BENCH_FLOOD_NICE).
  if (FLOOD_NICE) os.setPriority(client.pid!, FLOOD_NICE);
  const send = (m: FloodMessage) => client.send(m);
  const ask = <T>(m: FloodMessage) =>
    new Promise<T>((resolve) => {
      client.once('message', (answer: T) => resolve(answer));
      send(m);
    });
  const counts = () => ask<FloodCounts>({ type: 'counts' });
  // One body of each flood first: each is answered as it should be (and the review pool's worker is started).
  const probe = await ask<FloodProbe>({ type: 'probe', url: webhook.url });
  const expected = { '3mib': '413', '3mib-chunked': '411', 'valid-worker': '200', 'valid-loop': '200' };
  if (JSON.stringify(probe.statuses) !== JSON.stringify(expected)) throw new Error(`the floods' bodies were answered ${JSON.stringify(probe.statuses)}, not ${JSON.stringify(expected)}`);

  // The extender's caller: node:http on one kept-alive connection, as kube-scheduler calls it; answers checked.
  const agent = new HttpAgent({ keepAlive: true, maxSockets: 1 });
  const body = JSON.stringify({
    Pod: {
      metadata: { name: 'bench-pod', namespace: 'bench', uid: '00000000-0000-0000-0000-000000000002', ownerReferences: [{ apiVersion: 'apps/v1', kind: 'ReplicaSet', name: 'b', uid: 'rs-1', controller: true }] },
      spec: { containers: [{ name: 'main', image: 'x', resources: { limits: { 'bettercompute.io/gpu': '1' } } }] },
    },
    NodeNames: nodeIds,
  });
  const want = Math.min(NODES, DEFAULT_FILTER_NODES);
  const filter = () =>
    new Promise<void>((resolve, reject) => {
      const req = request(
        { host: '127.0.0.1', port: extender.port, path: '/scheduler/filter', method: 'POST', agent, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } },
        (res) => {
          const parts: Buffer[] = [];
          res.on('data', (p: Buffer) => parts.push(p));
          res.on('error', reject);
          res.on('end', () => {
            const r = JSON.parse(Buffer.concat(parts).toString('utf8')) as { NodeNames?: string[]; Error?: string };
            if (res.statusCode !== 200 || r.Error || r.NodeNames?.length !== want) reject(new Error(`filter: HTTP ${res.statusCode} ${JSON.stringify(r).slice(0, 200)}`));
            else resolve();
          });
        },
      );
      req.setTimeout(30_000, () => req.destroy(new Error('filter: no answer in 30 s')));
      req.on('error', reject);
      req.end(body);
    });
  for (let i = 0; i < 20; i++) await filter(); // warm-up

  const times = new Map<string, number[]>(ROWS.map((r) => [r.key, []]));
  // The event loop's delay, per row: each row's histogram runs only while that row is timed.
  // Sampled by a 1 ms timer of our own while the row is timed (perf_hooks' monitor, disabled and enabled again between
  // turns, counted the pause as one delay).
  const loopDelay = new Map<string, RecordableHistogram>(ROWS.map((r) => [r.key, createHistogram()]));
  const answers = new Map<string, { answers: Record<string, number>; bytes: number; seconds: number }>(ROWS.map((r) => [r.key, { answers: {}, bytes: 0, seconds: 0 }]));
  // This process's CPU time (every thread: the review pool's worker included) over the row's wall time.
  const busy = new Map<string, { cpuMs: number; wallMs: number }>(ROWS.map((r) => [r.key, { cpuMs: 0, wallMs: 0 }]));
  const perRound = Math.ceil(CALLS / ROUNDS);
  for (let round = 0; round < ROUNDS; round++) {
    for (let k = 0; k < ROWS.length; k++) {
      const row = ROWS[(k + round) % ROWS.length]!;
      send({ type: 'flood', flood: row.flood, url: urls[row.via] });
      await new Promise((r) => setTimeout(r, SETTLE_MS));
      await counts();
      const stopSampling = sampleLoopDelay(loopDelay.get(row.key)!);
      const cpu0 = process.cpuUsage();
      const wall0 = performance.now();
      const list = times.get(row.key)!;
      for (let i = 0; i < perRound; i++) {
        const t0 = performance.now();
        await filter();
        list.push(performance.now() - t0);
      }
      stopSampling();
      const b = busy.get(row.key)!;
      const cpu = process.cpuUsage(cpu0);
      b.cpuMs += (cpu.user + cpu.system) / 1000;
      b.wallMs += performance.now() - wall0;
      const c = await counts();
      const total = answers.get(row.key)!;
      for (const [status, n] of Object.entries(c.answers)) total.answers[status] = (total.answers[status] ?? 0) + n;
      total.bytes += c.bytes;
      total.seconds += c.seconds;
    }
  }
  send({ type: 'flood', flood: 'none', url: webhook.url });

  console.log(`the extender's filter during a flood of the webhook listener, ${NODES} nodes (best ${want} pass), ${os.cpus().length} CPUs, node ${process.version}`);
  console.log(`${ROUNDS} rounds, rows in turn; the flood: ${process.env.BENCH_FLOOD_CONNECTIONS ?? 4} HTTPS connections from another process (nice ${FLOOD_NICE}); the webhook's TLS in a thread of its own (nice ${FRONT_NICE}); review pool: 1 worker, queue 4`);
  console.log('flood                                              calls   calls/s  ratio    p50 ms    p99 ms  loop delay p99 ms  process CPU  flood MiB/s  flood answers/s (by status)');
  const base = times.get('none')!;
  const perSecond = (l: number[]) => l.length / (l.reduce((a, b) => a + b, 0) / 1000);
  const verdicts: string[] = [];
  for (const row of ROWS) {
    const l = [...times.get(row.key)!].sort((a, b) => a - b);
    const a = answers.get(row.key)!;
    const byStatus = Object.entries(a.answers)
      .sort()
      .map(([s, n]) => `${s}: ${(n / a.seconds).toFixed(1)}`)
      .join(', ');
    const ld = loopDelay.get(row.key)!.percentile(99) / 1e6;
    const b = busy.get(row.key)!;
    console.log(
      `${row.what.padEnd(49)}  ${String(l.length).padStart(5)}  ${perSecond(l).toFixed(0).padStart(8)}  ${`${((perSecond(l) / perSecond(base)) * 100).toFixed(0)}%`.padStart(5)}  ${quantile(l, 0.5).toFixed(2).padStart(8)}  ${quantile(l, 0.99).toFixed(2).padStart(8)}  ${ld.toFixed(2).padStart(17)}  ${`${((b.cpuMs / b.wallMs) * 100).toFixed(0)}%`.padStart(11)}  ${(a.seconds ? a.bytes / 1024 / 1024 / a.seconds : 0).toFixed(0).padStart(12)}  ${byStatus || '-'}`,
    );
    // The floods must have been what they claim: 3 MiB bodies refused with 413 only, valid reviews admitted (200).
    const refusal = row.flood === '3mib-chunked' && row.via === 'front' ? '411' : '413';
    if (row.flood.startsWith('3mib') && Object.keys(a.answers).some((s) => s !== refusal && s !== 'error')) throw new Error(`${row.what}: answers ${JSON.stringify(a.answers)}`);
    if (row.flood.startsWith('valid') && Object.keys(a.answers).some((s) => !['200', '503', 'error'].includes(s))) throw new Error(`${row.what}: answers ${JSON.stringify(a.answers)}`);
    if (row.flood.startsWith('3mib') && row.via !== 'loop-tls') {
      const p99 = quantile(l, 0.99);
      verdicts.push(`filter p99 during the flood of ${row.what}: ${p99.toFixed(2)} ms (target < ${TARGET_P99_MS}: ${p99 < TARGET_P99_MS ? 'met' : 'MISSED'}; no flood ${quantile([...base].sort((x, y) => x - y), 0.99).toFixed(2)} ms)`);
    }
  }
  for (const v of verdicts) console.log(v);
  console.log(`review workers replaced at their deadline: ${pool.replaced}`);

  send({ type: 'stop' });
  agent.destroy();
  await pool.close();
  await Promise.all([extender.close(0), webhook.close(0), chunkedRead.close(0), loopTls.close(0)]);
  await sync.stop();
  await bench.stop();
}

main().catch((e: unknown) => {
  console.error(e);
  process.exit(1);
});
