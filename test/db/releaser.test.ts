// The pod releaser against a real ledger and a small fake pod API (LIST and WATCH of /api/v1/pods): it releases only on
// evidence (issue 11). A failed LIST at leader start releases nothing; a successful one that has the pods releases
// nothing; a pod missing from two successful lists a grace period apart is released; watch events of a terminated or
// deleted pod release it; a release that fails on a database error is retried and commits later.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { KubeConfig } from '@kubernetes/client-node';
import { afterEach, beforeEach, beforeAll, describe, expect, it } from 'vitest';
import { FakeClock } from '../../src/clock.ts';
import { Ledger } from '../../src/db/ledger.ts';
import { createPool, type Db } from '../../src/db/pool.ts';
import type { ExtenderKube } from '../../src/extender/kube.ts';
import { startPodReleaser, type Releaser } from '../../src/controller/releaser.ts';
import { createLogger } from '../../src/log.ts';
import { makeNode, makePool, reservation } from '../support/builders.ts';
import { useTestDatabase } from '../support/db.ts';

const ctx = useTestDatabase();

interface FakePod {
  apiVersion: 'v1';
  kind: 'Pod';
  metadata: { name: string; namespace: string; uid: string; resourceVersion: string };
  status: { phase: string };
}

/** A pod API: LIST (500 while `listFails`), WATCH streams that stay open until events are sent or the server closes. */
async function startPodApi() {
  let rv = 1;
  const pods = new Map<string, FakePod>();
  const watchers = new Set<http.ServerResponse>();
  const api = {
    listFails: false,
    /** Pods per page at most (the LIST's limit, when smaller, wins), in name order; a page's token is its offset. */
    pageSize: Number.POSITIVE_INFINITY,
    /** A continued page is answered 500 while set. */
    continuedFails: false,
    /** The next this many continued pages are answered 410 Gone (an expired token). */
    expireContinued: 0,
    lists: { ok: 0, failed: 0, pages: 0, expired: 0 },
    watchers,
    pods,
    put(name: string, uid: string, phase = 'Running'): FakePod {
      const p: FakePod = { apiVersion: 'v1', kind: 'Pod', metadata: { name, namespace: 'rel', uid, resourceVersion: String(++rv) }, status: { phase } };
      pods.set(name, p);
      return p;
    },
    /** Changes the pod's phase and tells the watchers. */
    phase(name: string, phase: string) {
      const p = pods.get(name)!;
      p.status.phase = phase;
      p.metadata.resourceVersion = String(++rv);
      api.send('MODIFIED', p);
    },
    /** Deletes the pod; told to the watchers only when `tell`. */
    remove(name: string, tell: boolean) {
      const p = pods.get(name)!;
      pods.delete(name);
      p.metadata.resourceVersion = String(++rv);
      if (tell) api.send('DELETED', p);
    },
    send(type: string, obj: unknown) {
      for (const w of watchers) w.write(`${JSON.stringify({ type, object: obj })}\n`);
    },
  };
  const server = http.createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://fake');
    res.setHeader('content-type', 'application/json');
    if (req.method !== 'GET' || url.pathname !== '/api/v1/pods') {
      res.statusCode = 404;
      res.end(JSON.stringify({ kind: 'Status', code: 404 }));
      return;
    }
    if (url.searchParams.get('watch') === 'true' || url.searchParams.get('watch') === '1') {
      res.statusCode = 200;
      res.flushHeaders();
      watchers.add(res);
      res.on('close', () => watchers.delete(res));
      return;
    }
    if (api.listFails) {
      api.lists.failed++;
      res.statusCode = 500;
      res.end(JSON.stringify({ kind: 'Status', apiVersion: 'v1', status: 'Failure', message: 'etcd is unhappy', code: 500 }));
      return;
    }
    const cont = url.searchParams.get('continue');
    if (cont && (api.continuedFails || api.expireContinued > 0)) {
      const expired = !api.continuedFails;
      if (expired) api.expireContinued--;
      api.lists[expired ? 'expired' : 'failed']++;
      res.statusCode = expired ? 410 : 500;
      res.end(JSON.stringify({ kind: 'Status', apiVersion: 'v1', status: 'Failure', code: res.statusCode, ...(expired ? { reason: 'Expired', metadata: { continue: 'fresh' } } : {}) }));
      return;
    }
    const all = [...pods.values()].sort((a, b) => a.metadata.name.localeCompare(b.metadata.name));
    const from = cont ? Number(cont) : 0;
    const to = Math.min(all.length, from + Math.min(api.pageSize, Number(url.searchParams.get('limit') ?? Infinity)));
    api.lists.pages++;
    if (to >= all.length) api.lists.ok++;
    const meta = { resourceVersion: String(rv), ...(to < all.length ? { continue: String(to) } : {}) };
    res.end(JSON.stringify({ apiVersion: 'v1', kind: 'PodList', metadata: meta, items: all.slice(from, to) }));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: 'fake', server: url, skipTLSVerify: true }],
    users: [{ name: 'releaser', token: 't' }],
    contexts: [{ name: 'fake', cluster: 'fake', user: 'releaser' }],
    currentContext: 'fake',
  });
  return {
    ...api,
    api,
    kc,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

/** A pool whose next `failConnects` transactions fail to get a connection (a database blip). */
function flakyPool(url: string): Db & { failConnects: number; failed: number } {
  const pool = createPool(url, 4) as Db & { failConnects: number; failed: number };
  pool.failConnects = 0;
  pool.failed = 0;
  const real = pool.connect.bind(pool);
  pool.connect = ((...args: unknown[]) => {
    if (args.length === 0 && pool.failConnects > 0) {
      pool.failConnects--;
      pool.failed++;
      return Promise.reject(new Error('Connection terminated unexpectedly'));
    }
    return (real as (...a: unknown[]) => unknown)(...args);
  }) as typeof pool.connect;
  return pool;
}

/** Polls `cond` until true (bounded generously; the events it waits for are asynchronous). */
async function until(what: string, cond: () => boolean | Promise<boolean>, timeoutMs = 15_000): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!(await cond())) {
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const kube: ExtenderKube = {
  getPod: async () => undefined,
  nodeAllocatable: async () => undefined,
  namespaceLabels: async () => ({}),
  annotatePod: async () => undefined,
  bindPod: async () => undefined,
  evictPod: async () => undefined,
  deletePod: async () => undefined,
};

const NODE = 'rel-node';
let poolId: string;
let reservationId: string;
let fake: Awaited<ReturnType<typeof startPodApi>>;
let releaser: Releaser | undefined;
let logs: Record<string, unknown>[];
const log = createLogger({ level: 'debug', write: (l) => logs.push(JSON.parse(l) as Record<string, unknown>) });

beforeAll(async () => {
  poolId = await makePool('rel-pool').owner('acme').create(ctx.db);
  await makeNode(NODE).gpus(8).create(ctx.db, poolId);
  const r = await new Ledger(ctx.db).reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 2 }] }), ctx.clock.now());
  if (!r.ok) throw new Error(r.message);
  reservationId = r.reservation.id;
  await ctx.clock.sync();
});

// Each test starts with no pod holding anything (what the one before left would be an orphan to this one's API).
beforeEach(async () => {
  await ctx.db.query(`SELECT bc_release_allocations(array_agg(id)) FROM allocations WHERE kind = 'pod' AND released_at IS NULL`);
  await ctx.db.query(`UPDATE reservation_pod_assignments SET released_at = compute_now() WHERE released_at IS NULL`);
});

afterEach(async () => {
  await releaser?.stop();
  releaser = undefined;
  await fake?.close();
});

/** An on-demand booking for a pod, as a bind makes it. */
async function book(uid: string) {
  const out = await new Ledger(ctx.db).bookPod(
    { tenantId: 'acme', poolId, podUid: uid, nodeId: NODE, devices: [{ class: 'gpu', count: 1 }], durationSeconds: null },
    ctx.clock.now(),
  );
  if (!out.ok) throw new Error(out.message);
}

/** A reservation assignment for a pod, as a bind makes it. */
async function assign(uid: string) {
  const out = await new Ledger(ctx.db).assignPod({ podUid: uid, reservationId, tenantId: 'acme', nodeId: NODE, namespace: 'rel', podName: uid, count: 1 });
  if (!out.ok) throw new Error(out.reason);
}

async function holds(uid: string): Promise<boolean> {
  const { rows } = await ctx.db.query(
    `SELECT (SELECT count(*) FROM allocations WHERE pod_uid = $1 AND kind = 'pod' AND released_at IS NULL)
          + (SELECT count(*) FROM reservation_pod_assignments WHERE pod_uid = $1 AND released_at IS NULL) AS n`,
    [uid],
  );
  return Number(rows[0].n) > 0;
}

async function start(ledger: Ledger, over: { orphanGraceMs?: number; clock?: FakeClock } = {}) {
  releaser = await startPodReleaser({
    db: ctx.db,
    ledger,
    kube,
    kubeConfig: fake.kc,
    log,
    orphanGraceMs: over.orphanGraceMs ?? 300,
    ...(over.clock ? { clock: over.clock } : {}),
    // Sweeps are called by the test; the timers stay out of the way.
    orphanSweepEveryMs: 3_600_000,
    sweepEveryMs: 3_600_000,
    retryMinMs: 50,
    retryMaxMs: 200,
  });
  return releaser;
}

describe('the pod releaser', () => {
  it('a failed pod LIST at start releases nothing; a pod missing from two successful lists a grace period apart is released', async () => {
    logs = [];
    fake = await startPodApi();
    await book('uid-a');
    await book('uid-b');
    await assign('uid-c');
    fake.api.listFails = true;
    const clock = new FakeClock();
    const r = await start(new Ledger(ctx.db), { clock });
    await until('the pod lists to fail', () => fake.api.lists.failed >= 2);
    for (const uid of ['uid-a', 'uid-b', 'uid-c']) expect(await holds(uid), uid).toBe(true);
    await expect(r.sweepOrphans()).rejects.toThrow();
    for (const uid of ['uid-a', 'uid-b', 'uid-c']) expect(await holds(uid), uid).toBe(true);

    // The API answers again, with the pods.
    fake.put('a', 'uid-a');
    fake.put('b', 'uid-b');
    fake.put('c', 'uid-c');
    fake.api.listFails = false;
    expect(await r.sweepOrphans()).toEqual({ released: [] });
    await until('the informer to list and watch', () => fake.api.watchers.size > 0);
    expect(await r.sweepOrphans()).toEqual({ released: [] });
    for (const uid of ['uid-a', 'uid-b', 'uid-c']) expect(await holds(uid), uid).toBe(true);

    // b and c go while nobody watches: one list lacking them is not enough, nor a second one inside the grace period.
    fake.remove('b', false);
    fake.remove('c', false);
    expect(await r.sweepOrphans()).toEqual({ released: [] });
    // On the releaser's clock (a FakeClock here): the first miss is dated when that list completed; a list that starts
    // a millisecond inside the grace period releases nothing, one that starts at its end releases both.
    expect(await holds('uid-b')).toBe(true);
    await clock.advance(299);
    expect(await r.sweepOrphans()).toEqual({ released: [] });
    await clock.advance(1);
    expect((await r.sweepOrphans()).released.sort()).toEqual(['uid-b', 'uid-c']);
    expect(await holds('uid-b')).toBe(false);
    expect(await holds('uid-c')).toBe(false);
    expect(await holds('uid-a')).toBe(true);
  });

  it('a list is complete only when its last page arrived: a failed later page proves nothing, an expired token restarts it', async () => {
    logs = [];
    fake = await startPodApi();
    fake.api.pageSize = 1;
    await book('uid-a');
    await book('uid-b');
    await book('uid-gone');
    fake.put('a', 'uid-a');
    fake.put('b', 'uid-b');
    fake.put('c', 'uid-c');
    fake.put('g', 'uid-gone');
    const r = await start(new Ledger(ctx.db), { orphanGraceMs: 100 });
    await until('the informer to list and watch', () => fake.api.watchers.size > 0);
    expect(await r.sweepOrphans()).toEqual({ released: [] }); // after the one at start
    fake.remove('g', false);
    // Every page after the first fails: uid-gone is missing from each first page, and never released.
    fake.api.continuedFails = true;
    await expect(r.sweepOrphans()).rejects.toThrow();
    await new Promise((res) => setTimeout(res, 150));
    await expect(r.sweepOrphans()).rejects.toThrow();
    expect(await holds('uid-gone')).toBe(true);
    // Expired tokens: each list starts again from its first page and completes; two complete lists release it.
    fake.api.continuedFails = false;
    fake.api.expireContinued = 2;
    const pagesBefore = fake.api.lists.pages;
    expect(await r.sweepOrphans()).toEqual({ released: [] });
    expect(fake.api.lists.expired).toBe(2);
    // One pod a page: two abandoned first pages, then the three pages of the complete list.
    expect(fake.api.lists.pages - pagesBefore).toBe(5);
    await new Promise((res) => setTimeout(res, 150));
    expect(await r.sweepOrphans()).toEqual({ released: ['uid-gone'] });
    for (const uid of ['uid-a', 'uid-b']) expect(await holds(uid), uid).toBe(true);
  });

  it('a pod that reappears between two lists is not released', async () => {
    logs = [];
    fake = await startPodApi();
    await book('uid-d');
    fake.put('d', 'uid-d');
    const r = await start(new Ledger(ctx.db), { orphanGraceMs: 0 });
    await until('the informer to list and watch', () => fake.api.watchers.size > 0);
    // The pass that start() queued lists too: it must be over before d goes, or it counts as the first of two misses
    // (a sweep queues behind it, so awaiting one with d listed drains it).
    expect(await r.sweepOrphans()).toEqual({ released: [] });
    fake.remove('d', false);
    expect(await r.sweepOrphans()).toEqual({ released: [] });
    fake.put('d', 'uid-d');
    expect(await r.sweepOrphans()).toEqual({ released: [] });
    fake.remove('d', false);
    // Missing again: the count starts over.
    expect(await r.sweepOrphans()).toEqual({ released: [] });
    expect(await holds('uid-d')).toBe(true);
    expect(await r.sweepOrphans()).toEqual({ released: ['uid-d'] });
  });

  it('watch events: a pod that terminated or was deleted gives its atoms back; a running one keeps them', async () => {
    logs = [];
    fake = await startPodApi();
    await book('uid-e');
    await assign('uid-f');
    await book('uid-g');
    fake.put('e', 'uid-e');
    fake.put('f', 'uid-f');
    fake.put('g', 'uid-g');
    await start(new Ledger(ctx.db));
    await until('the informer to list and watch', () => fake.api.watchers.size > 0);
    fake.phase('e', 'Succeeded');
    fake.remove('f', true);
    await until('e and f released', async () => !(await holds('uid-e')) && !(await holds('uid-f')));
    expect(await holds('uid-g')).toBe(true);
  });

  it('a release that fails on a database error is retried and commits when the database answers again', async () => {
    logs = [];
    fake = await startPodApi();
    await book('uid-h');
    fake.put('h', 'uid-h');
    const db = flakyPool(ctx.url);
    try {
      const r = await start(new Ledger(db));
      await until('the informer to list and watch', () => fake.api.watchers.size > 0);
      // The database is down when the pod goes: the release fails, and waits for its retry.
      db.failConnects = Number.MAX_SAFE_INTEGER;
      fake.remove('h', true);
      await until('the release to fail twice', () => db.failed >= 2);
      expect(r.pendingRetries()).toEqual(['uid-h']);
      expect(await holds('uid-h')).toBe(true);
      expect(logs.find((l) => l.msg === 'release failed; retrying')).toMatchObject({ level: 'error', podUid: 'uid-h', attempt: 1 });
      // The database answers again.
      db.failConnects = 0;
      await until('h released', async () => !(await holds('uid-h')));
      await until('the retry to settle', () => r.pendingRetries().length === 0);
      expect(logs.find((l) => l.msg === 'released pod holdings')).toMatchObject({ podUid: 'uid-h', attempts: expect.any(Number) });
      expect(r.pendingRetries()).toEqual([]);
    } finally {
      await releaser?.stop();
      releaser = undefined;
      await db.end();
    }
  });
});
