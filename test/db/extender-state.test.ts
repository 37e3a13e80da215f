// The extender's in-memory state (ADR 0010): it follows every kind of ledger change through the notifications of
// migrations/0006, filter and prioritize answer from it without a database read while it is fresh, a state it cannot
// vouch for (LISTEN connection lost, staleness bound passed) sends them back to the database, the full resync repairs
// a notification that never came, a bind's writes are in it when the bind answers, and a booked node's remembered
// verdict ends when time passes one of its bookings (ADR 0027). Its quota peak is bc_quota_peak's, on random charges and
// windows.
import { once } from 'node:events';
import fc from 'fast-check';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { advanceClock } from '../../src/db/clock.ts';
import { Ledger } from '../../src/db/ledger.ts';
import { setDeviceHealth, setNodeState, setQuota, upsertPool } from '../../src/db/inventory.ts';
import type { ExtenderKube } from '../../src/extender/kube.ts';
import { StatePreviewer } from '../../src/extender/preview.ts';
import { ExtenderService } from '../../src/extender/service.ts';
import { ExtenderState, quotaPeak, type QuotaCharge } from '../../src/extender/state.ts';
import { ExtenderStateSync, LOAD_NODES_BATCH, loadAll } from '../../src/extender/state-sync.ts';
import { silentLogger } from '../../src/log.ts';
import { makeNode, makePool, reservation } from '../support/builders.ts';
import { useTestDatabase } from '../support/db.ts';
import { countingDb } from '../support/counting-db.ts';
import { TENANT_LABEL, reservationResourceName } from '../../src/core/names.ts';

const ctx = useTestDatabase();
const LISTENER = 'bc-extender-state-test';

class FakeKube implements ExtenderKube {
  allocatable: Record<string, string> = {};
  bound: { name: string; node: string }[] = [];
  pods = new Map<string, unknown>();
  async getPod(namespace: string, name: string) {
    return this.pods.get(`${namespace}/${name}`);
  }
  async nodeAllocatable() {
    return this.allocatable;
  }
  async namespaceLabels(name: string): Promise<Record<string, string>> {
    return name === 'acme-train' ? { [TENANT_LABEL]: 'acme' } : {};
  }
  async annotatePod() {}
  async bindPod(_ns: string, name: string, _uid: string, node: string) {
    this.bound.push({ name, node });
  }
  async evictPod() {}
  async deletePod() {}
}


let seq = 0;
function pod(limits: Record<string, string>) {
  const n = ++seq;
  return { metadata: { name: `st-${n}`, namespace: 'acme-train', uid: `st-uid-${n}` }, spec: { containers: [{ name: 'main', resources: { limits } }] } };
}

function startSync(o: Partial<ConstructorParameters<typeof ExtenderStateSync>[0]> = {}): ExtenderStateSync {
  const sync = new ExtenderStateSync({
    db: ctx.db,
    listenClient: () => new pg.Client({ connectionString: ctx.url, application_name: LISTENER }),
    log: silentLogger,
    ...o,
  });
  syncs.push(sync);
  sync.start();
  return sync;
}

/** The state describes exactly what a full load from the ledger now describes. */
async function expectMirrors(sync: ExtenderStateSync) {
  await sync.caughtUp();
  const fresh = new ExtenderState();
  fresh.replaceAll(await loadAll(ctx.db));
  expect(sync.state.describe()).toEqual(fresh.describe());
}

const syncs: ExtenderStateSync[] = [];
let poolId: string;
const A = 'st-node-a';
const B = 'st-node-b';

beforeAll(async () => {
  poolId = await makePool('st-pool').owner('acme').offer('beta').create(ctx.db);
  await makeNode(A).gpus(2).create(ctx.db, poolId);
  await makeNode(B).gpus(2).create(ctx.db, poolId);
});

afterEach(async () => {
  for (const s of syncs.splice(0)) await s.stop();
});

afterAll(async () => {
  for (const s of syncs.splice(0)) await s.stop();
});

describe('the state follows the ledger through its notifications', () => {
  it('each kind of change: node and pool, booking and release, reservation and its state, assignment, quota', async () => {
    const sync = startSync({ resyncEveryMs: 3_600_000 });
    await sync.ready();
    await expectMirrors(sync);
    const ledger = new Ledger(ctx.db);
    const s = sync.state;

    // A new node in the pool (inventory), then a pool with its node.
    await makeNode('st-node-c').gpus(1).create(ctx.db, poolId);
    await expectMirrors(sync);
    expect(s.poolOfNode('st-node-c')).toBe(poolId);
    const other = await makePool('st-other').owner('acme').create(ctx.db);
    await makeNode('st-node-d').gpus(1).create(ctx.db, other);
    await expectMirrors(sync);
    expect([...s.pool(other)!.byId.keys()]).toEqual(['st-node-d']);

    // An on-demand booking, and its release.
    const booked = await ledger.bookPod({ tenantId: 'acme', poolId, podUid: 'st-pod-1', nodeId: A, devices: [{ class: 'gpu', count: 1 }], durationSeconds: 600 }, ctx.clock.now());
    expect(booked.ok).toBe(true);
    await expectMirrors(sync);
    expect(s.podHolding('st-pod-1')).toBe(A);
    expect(s.pool(poolId)!.byId.get(A)!.atoms.filter((a) => a.bookings.length).length).toBe(1);
    await ledger.releasePod('st-pod-1');
    await expectMirrors(sync);
    expect(s.podHolding('st-pod-1')).toBeUndefined();
    expect(s.pool(poolId)!.byId.get(A)!.atoms.filter((a) => a.bookings.length).length).toBe(0);

    // A reservation, a pod's assignment, the reservation's release.
    const out = await ledger.reserve(reservation(poolId, { tenantId: 'acme', devices: [{ class: 'gpu', count: 2 }] }), ctx.clock.now());
    if (!out.ok) throw new Error(out.message);
    const id = out.reservation.id;
    await expectMirrors(sync);
    const node = out.reservation.allocations[0]!.nodeId;
    expect(s.reservation(id)).toMatchObject({ state: 'confirmed', tenantId: 'acme', poolId });
    expect(s.reservation(id)!.atoms.get(node)).toHaveLength(2);
    await ctx.clock.sync();
    const assigned = await ledger.assignPod({ podUid: 'st-pod-2', reservationId: id, tenantId: 'acme', nodeId: node, namespace: 'acme-train', podName: 'p2', count: 1 });
    expect(assigned.ok).toBe(true);
    await expectMirrors(sync);
    expect(s.reservation(id)!.assigned.get(node)).toBe(1);
    expect(s.podHolding('st-pod-2')).toBe(node);
    await ledger.release(id);
    await expectMirrors(sync);
    expect(s.reservation(id)!.state).toBe('released');
    // Its pod still holds its atoms: they stay booked until it is gone.
    expect(s.reservation(id)!.atoms.get(node)).toHaveLength(2);
    await ledger.releasePod('st-pod-2');
    await expectMirrors(sync);
    expect(s.reservation(id)!.atoms.get(node)).toBeUndefined();

    // A node cordoned, a GPU unhealthy; a pool archived and offered to another tenant.
    await setNodeState(ctx.db, B, { cordoned: true });
    const gpu = s.pool(poolId)!.byId.get(A)!.atoms[0]!.id;
    await setDeviceHealth(ctx.db, gpu, false);
    await expectMirrors(sync);
    expect(s.pool(poolId)!.byId.get(B)!.schedulable).toBe(false);
    expect(s.pool(poolId)!.byId.get(A)!.atoms.find((a) => a.id === gpu)!.healthy).toBe(false);
    await upsertPool(ctx.db, { name: 'st-other', ownerTenant: 'acme', archived: true, offerings: [{ tenantId: 'gamma' }] });
    await expectMirrors(sync);
    expect(s.pool(other)!.info.archived).toBe(true);
    expect([...s.pool(other)!.info.offeredTo]).toEqual(['gamma']);
    expect(s.pool(other)!.byId.get('st-node-d')!.schedulable).toBe(false);

    // A quota limit, then a booking charged against it.
    await setQuota(ctx.db, 'beta', poolId, 'gpu', 3);
    await expectMirrors(sync);
    expect(s.quotaHeadroom('beta', poolId, ['gpu'], ctx.clock.now(), null).get('gpu')).toEqual({ max: 3, peak: 0 });
    const charged = await ledger.bookPod({ tenantId: 'beta', poolId, podUid: 'st-pod-3', nodeId: 'st-node-c', devices: [{ class: 'gpu', count: 1 }], durationSeconds: 600 }, ctx.clock.now());
    expect(charged.ok).toBe(true);
    await expectMirrors(sync);
    expect(s.quotaHeadroom('beta', poolId, ['gpu'], ctx.clock.now(), null).get('gpu')).toEqual({ max: 3, peak: 1 });

    // Everything put back for the next tests.
    await ledger.releasePod('st-pod-3');
    await setNodeState(ctx.db, B, { cordoned: false });
    await setDeviceHealth(ctx.db, gpu, true);
    await setQuota(ctx.db, 'beta', poolId, 'gpu', null);
    await expectMirrors(sync);
  });

  it('the full resync repairs a change whose notification never came', async () => {
    const sync = startSync({ resyncEveryMs: 3_600_000 });
    await sync.ready();
    // The cordon commits without its notification.
    await ctx.db.query('ALTER TABLE nodes DISABLE TRIGGER "trigger$nodes$extender"');
    try {
      await setNodeState(ctx.db, B, { cordoned: true });
    } finally {
      await ctx.db.query('ALTER TABLE nodes ENABLE TRIGGER "trigger$nodes$extender"');
    }
    await sync.caughtUp();
    expect(sync.state.pool(poolId)!.byId.get(B)!.schedulable).toBe(true);
    await sync.resyncNow();
    expect(sync.state.pool(poolId)!.byId.get(B)!.schedulable).toBe(false);
    await setNodeState(ctx.db, B, { cordoned: false });
    await expectMirrors(sync);
  });
});

describe('the full load', () => {
  it('reads a pool’s nodes a batch at a time: all of them, in order, equal summaries as one object', async () => {
    const pool = await makePool('st-batched').owner('acme').create(ctx.db);
    for (const [i, g] of [1, 2, 1, 2, 1].entries()) await makeNode(`st-batch-${i}`).gpus(g).create(ctx.db, pool);
    const whole = await loadAll(ctx.db);
    const counted = countingDb(ctx.db);
    await loadAll(counted);
    const oneStatement = counted.calls;
    const small = await loadAll(counted, 2);
    expect(small).toEqual(whole);
    expect(small.pools.find((p) => p.info.id === pool)!.nodes.map((n) => n.id)).toEqual([0, 1, 2, 3, 4].map((i) => `st-batch-${i}`));
    // One statement more per batch of two beyond the first: three for this pool's five nodes, one for each other pool's two.
    const extra = whole.pools.reduce((sum, p) => sum + Math.ceil(p.nodes.length / 2) - Math.ceil(p.nodes.length / LOAD_NODES_BATCH), 0);
    expect(extra).toBeGreaterThanOrEqual(2);
    expect(counted.calls - 2 * oneStatement).toBe(extra);
    const used = new Set(small.pools.flatMap((p) => p.nodes.map((n) => n.summary)));
    expect([...used].every((x) => x !== undefined && [...small.summaries!.values()].includes(x))).toBe(true);
    const batched = small.pools.find((p) => p.info.id === pool)!.nodes;
    expect(batched[0]!.summary).toBe(batched[4]!.summary);
    expect(batched[1]!.summary).toBe(batched[3]!.summary);
    expect(batched[0]!.summary).not.toBe(batched[1]!.summary);
    const state = new ExtenderState();
    state.replaceAll(small);
    const reference = new ExtenderState();
    reference.replaceAll({ ...whole, summaries: undefined });
    expect(state.describe()).toEqual(reference.describe());
  });
});

describe('filter and prioritize from memory', () => {
  function services(sync: ExtenderStateSync) {
    const kube = new FakeKube();
    const db = countingDb(ctx.db);
    // Every node that fits passes (ADR 0022): the two answers are compared node by node.
    const memory = new ExtenderService({ tenancyByName: true, db, ledger: new Ledger(db), clock: ctx.clock, kube, log: silentLogger, memory: sync, bestNodeOnly: false });
    const database = new ExtenderService({ tenancyByName: true, db: ctx.db, ledger: new Ledger(ctx.db), clock: ctx.clock, kube, log: silentLogger, snapshotTtlMs: 0, bestNodeOnly: false });
    return { kube, db, memory, database };
  }

  it('answers with no database read while fresh, exactly as the database reads answer', async () => {
    const sync = startSync();
    await sync.ready();
    const { kube, db, memory, database } = services(sync);
    const out = await new Ledger(ctx.db).reserve(reservation(poolId, { tenantId: 'acme', devices: [{ class: 'gpu', count: 1 }] }), ctx.clock.now());
    if (!out.ok) throw new Error(out.message);
    await ctx.clock.sync();
    const resource = reservationResourceName(out.reservation.id);
    kube.allocatable = { [resource]: '1' };
    await setQuota(ctx.db, 'acme', poolId, 'gpu', 3);
    await sync.caughtUp();
    const names = [A, B, 'st-node-c', 'st-node-d', 'not-a-node'];
    const pods = [
      pod({ 'bettercompute.io/gpu': '1' }),
      pod({ 'bettercompute.io/gpu': '2' }),
      pod({ 'bettercompute.io/gpu': '4' }),
      pod({ [resource]: '1' }),
      pod({ 'reservations.bettercompute.io/rsv_00000000000000000000000000': '1' }),
      pod({ cpu: '1' }),
    ];
    for (const p of pods) {
      const args = { Pod: p, NodeNames: names } as never;
      expect(sync.fresh()).toBe(true);
      const before = db.calls;
      const [f, pr] = [await memory.filter(args), await memory.prioritize(args)];
      expect(db.calls - before, JSON.stringify(p.spec.containers[0]!.resources)).toBe(p === pods[4] ? 2 : 0);
      expect(f).toEqual(await database.filter(args));
      expect(pr).toEqual(await database.prioritize(args));
    }
    await new Ledger(ctx.db).release(out.reservation.id);
    await setQuota(ctx.db, 'acme', poolId, 'gpu', null);
  });

  it('judges each pool of a call apart, its names interleaved with the others’: refusals name only its own nodes', async () => {
    const sync = startSync();
    await sync.ready();
    const { db, memory, database } = services(sync);
    const hidden = await makePool('st-hidden').owner('beta').create(ctx.db);
    const archived = await makePool('st-archived').owner('acme').create(ctx.db);
    const capped = await makePool('st-capped').owner('acme').create(ctx.db);
    const open = await makePool('st-open').owner('acme').create(ctx.db);
    const pools = [hidden, archived, capped, open];
    // Two nodes per pool, in turn: st-mix-0 (hidden), st-mix-1 (archived), ..., st-mix-7 (open).
    const names = Array.from({ length: 8 }, (_, i) => `st-mix-${i}`);
    for (const [i, n] of names.entries()) await makeNode(n).gpus(1).create(ctx.db, pools[i % 4]!);
    await makePool('st-archived').owner('acme').archived().create(ctx.db);
    await setQuota(ctx.db, 'acme', capped, 'gpu', 0);
    await sync.caughtUp();
    const args = { Pod: pod({ 'bettercompute.io/gpu': '1' }), NodeNames: [...names, 'st-mix-none'] } as never;
    const before = db.calls;
    const f = await memory.filter(args);
    expect(db.calls - before).toBe(0);
    expect(f).toEqual(await database.filter(args));
    expect(f.NodeNames).toEqual(['st-mix-3', 'st-mix-7']);
    expect(f.FailedAndUnresolvableNodes).toEqual({
      'st-mix-0': 'pool st-hidden is not offered to tenant acme',
      'st-mix-4': 'pool st-hidden is not offered to tenant acme',
      'st-mix-1': 'pool st-archived is archived',
      'st-mix-5': 'pool st-archived is archived',
      'st-mix-none': 'not a GPU node of any pool in the ledger',
    });
    expect(Object.keys(f.FailedNodes).sort()).toEqual(['st-mix-2', 'st-mix-6']);
    expect(f.FailedNodes['st-mix-2']).toMatch(/^QuotaExceeded: tenant acme would exceed its gpu quota in pool st-capped \(0 of 0 in use/);
    await setQuota(ctx.db, 'acme', capped, 'gpu', null);
  });

  it('a bind’s booking is in the state when the bind answers: the next filter sees the node taken', async () => {
    const sync = startSync();
    await sync.ready();
    const kube = new FakeKube();
    // The service's own reads counted apart from the ledger's (the booking is the ledger's write).
    const db = countingDb(ctx.db);
    const memory = new ExtenderService({ tenancyByName: true, db, ledger: new Ledger(ctx.db), clock: ctx.clock, kube, log: silentLogger, memory: sync, bestNodeOnly: false });
    const first = pod({ 'bettercompute.io/gpu': '2' });
    kube.pods.set(`acme-train/${first.metadata.name}`, first);
    expect((await memory.filter({ Pod: first, NodeNames: [A] } as never)).NodeNames).toEqual([A]);
    expect(await memory.bind({ PodName: first.metadata.name, PodNamespace: 'acme-train', PodUID: first.metadata.uid, Node: A })).toEqual({ Error: '' });
    // The node's pool and the pod's holding came from the state: the bind read nothing of its own.
    expect(db.calls).toBe(0);
    expect(sync.state.podHolding(first.metadata.uid)).toBe(A);
    // Applied by the bind itself (ADR 0023): what a full load describes, before any notification is waited for.
    const fresh = new ExtenderState();
    fresh.replaceAll(await loadAll(ctx.db));
    expect(sync.state.describe()).toEqual(fresh.describe());
    const second = pod({ 'bettercompute.io/gpu': '1' });
    expect(sync.fresh()).toBe(true);
    const f = await memory.filter({ Pod: second, NodeNames: [A] } as never);
    expect(f.NodeNames).toEqual([]);
    expect(f.FailedNodes[A]).toMatch(/without enough free gpu atoms/);
    await new Ledger(ctx.db).releasePod(first.metadata.uid);
  });

  it('a node judged once is judged again when the window stops overlapping one of its bookings, with nothing written', async () => {
    const sync = startSync();
    await sync.ready();
    const { memory, database } = services(sync);
    const ledger = new Ledger(ctx.db);
    // One GPU of node A booked for a minute, the other for ten (two pods' bookings): a one-GPU pod fits there once the
    // minute is over, while the node is still busy (so its summary does not decide, and its remembered verdict would).
    const uids = ['st-judged-short', 'st-judged-long'];
    for (const [i, durationSeconds] of [60, 600].entries()) {
      const out = await ledger.bookPod({ tenantId: 'acme', poolId, podUid: uids[i]!, nodeId: A, devices: [{ class: 'gpu', count: 1 }], durationSeconds }, ctx.clock.now());
      if (!out.ok) throw new Error(out.message);
    }
    try {
      await ctx.clock.sync();
      await sync.caughtUp();
      const args = () => ({ Pod: pod({ 'bettercompute.io/gpu': '1' }), NodeNames: [A] }) as never;
      const before = await memory.filter(args());
      expect(before.NodeNames).toEqual([]);
      expect(before.FailedNodes[A]).toMatch(/without enough free gpu atoms/);
      expect((await memory.filter(args())).NodeNames).toEqual([]);
      await advanceClock(ctx.db, 61_000);
      await ctx.clock.sync();
      const later = args();
      expect((await memory.filter(later)).NodeNames).toEqual([A]);
      expect(await memory.filter(later)).toEqual(await database.filter(later));
      // Another request shape is judged on its own: two GPUs do not fit where one does.
      const two = { Pod: pod({ 'bettercompute.io/gpu': '2' }), NodeNames: [A] } as never;
      expect((await memory.filter(two)).NodeNames).toEqual([]);
      expect((await memory.filter(later)).NodeNames).toEqual([A]);
    } finally {
      for (const uid of uids) await ledger.releasePod(uid);
    }
  });

  it('the LISTEN connection lost: filter reads the database at once, and memory serves again after the reload', async () => {
    const sync = startSync();
    await sync.ready();
    const { db, memory } = services(sync);
    const lost = once(sync, 'lost');
    await ctx.db.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1', [LISTENER]);
    await lost;
    expect(sync.fresh()).toBe(false);
    const reloaded = once(sync, 'loaded');
    const p = pod({ 'bettercompute.io/gpu': '1' });
    const before = db.calls;
    expect((await memory.filter({ Pod: p, NodeNames: [A, B] } as never)).NodeNames).toEqual([A, B]);
    expect(db.calls).toBeGreaterThan(before);
    await reloaded;
    expect(sync.fresh()).toBe(true);
    const again = db.calls;
    expect((await memory.filter({ Pod: p, NodeNames: [A, B] } as never)).NodeNames).toEqual([A, B]);
    expect(db.calls).toBe(again);
  });

  it('past the staleness bound without a ping answered: filter reads the database, and sees what changed', async () => {
    let now = 0;
    // No ping and no periodic resync run in this test: only the clock moves.
    const sync = startSync({ monotonic: () => now, maxStalenessMs: 5000, pingEveryMs: 3_600_000, resyncEveryMs: 3_600_000 });
    await sync.ready();
    const { db, memory } = services(sync);
    now += 5001;
    expect(sync.fresh()).toBe(false);
    // A change the state never hears of.
    await ctx.db.query('ALTER TABLE nodes DISABLE TRIGGER "trigger$nodes$extender"');
    try {
      await setNodeState(ctx.db, B, { cordoned: true });
    } finally {
      await ctx.db.query('ALTER TABLE nodes ENABLE TRIGGER "trigger$nodes$extender"');
    }
    const p = pod({ 'bettercompute.io/gpu': '1' });
    const before = db.calls;
    const f = await memory.filter({ Pod: p, NodeNames: [A, B] } as never);
    expect(f.NodeNames).toEqual([A]);
    expect(db.calls).toBeGreaterThan(before);
    await setNodeState(ctx.db, B, { cordoned: false });
  });
});

describe('a bind’s own booking applied in memory (ADR 0023)', () => {
  /** A booking the state is told of and the ledger does not hold: it shows whether a reload replaced the node. */
  async function phantom(sync: ExtenderStateSync, tx: string) {
    const atom = sync.state.node(A)!.snap!.atoms[0]!.id;
    expect(sync.applyPodBooking({ podUid: `phantom-${tx}`, nodeId: A, atoms: [atom], start: ctx.clock.now(), end: Infinity, tx })).toBe(true);
    return () => sync.state.node(A)!.snap!.atoms[0]!.bookings.length;
  }
  const notify = (payload: unknown[]) => ctx.db.query('SELECT pg_notify($1, $2)', ['bc_extender', JSON.stringify(payload)]);

  it('a bind’s notifications carry its transaction; those of an applied transaction are not reloaded, any other is', async () => {
    const sync = startSync();
    await sync.ready();
    // The ledger's own notifications name the booking's transaction, as bc_place_batch's caller reads it.
    const listener = new pg.Client({ connectionString: ctx.url });
    await listener.connect();
    try {
      const heard: string[] = [];
      listener.on('notification', (m) => heard.push(m.payload ?? ''));
      await listener.query('LISTEN bc_extender');
      const out = await new Ledger(ctx.db).bookPod({ tenantId: 'acme', poolId, podUid: 'st-tx-pod', nodeId: A, devices: [{ class: 'gpu', count: 1 }], durationSeconds: null }, ctx.clock.now());
      if (!out.ok) throw new Error(out.message);
      const tx = out.written!.tx;
      expect(tx).toMatch(/^\d+$/);
      await expect.poll(() => heard.map((h) => JSON.parse(h) as string[]).filter((m) => m.at(-1) === tx).map((m) => m[0]).sort()).toEqual(['n', 'u']);
      expect(out.written!.end).toBe(Infinity);
      await new Ledger(ctx.db).releasePod('st-tx-pod');
    } finally {
      await listener.end();
    }
    await expectMirrors(sync);

    const bookings = await phantom(sync, '1');
    const { nodes, skipped } = sync.reloads;
    await notify(['n', A, '1']);
    await notify(['u', 'phantom-1', '1']);
    await sync.caughtUp();
    expect(sync.reloads).toMatchObject({ nodes, skipped: skipped + 2 });
    expect(bookings()).toBe(1);
    // Another transaction's change on the node, or one without a transaction: the node is reloaded.
    await notify(['n', A, '1']);
    await notify(['n', A, '2']);
    await notify(['u', 'phantom-1', '2']);
    await sync.caughtUp();
    expect(sync.reloads.nodes).toBe(nodes + 1);
    await expectMirrors(sync);
    await phantom(sync, '3');
    await notify(['n', A]);
    await sync.caughtUp();
    expect(sync.reloads.nodes).toBe(nodes + 2);
    await notify(['u', 'phantom-3']);
    await expectMirrors(sync);
  });

  it('a node load that began before an apply overwrites it only when it began after that booking’s notification', async () => {
    // Loads of nodes wait at a gate while it is closed.
    let gate: Promise<void> | undefined;
    let open = () => undefined as void;
    let waiting = 0;
    const db = new Proxy(ctx.db, {
      get(target, prop, receiver) {
        const v = Reflect.get(target, prop, receiver) as unknown;
        if (prop !== 'query' || typeof v !== 'function') return v;
        return async (...args: unknown[]) => {
          const q = args[0] as { name?: string };
          if (gate && q?.name === 'bc_node_pools_of') {
            waiting++;
            await gate;
          }
          return (v as (...a: unknown[]) => unknown).apply(target, args);
        };
      },
    });
    const close = () => {
      waiting = 0;
      gate = new Promise<void>((r) => (open = () => { gate = undefined; r(); }));
    };
    const sync = startSync({ db });
    await sync.ready();

    // The booking's notification came first: the load began after its commit and holds it, so it replaces the node.
    close();
    await notify(['n', A, '11']);
    await expect.poll(() => waiting).toBe(1);
    const bookings = await phantom(sync, '11');
    const { nodes } = sync.reloads;
    open();
    await sync.caughtUp();
    expect(sync.reloads.nodes).toBe(nodes);
    expect(bookings()).toBe(0);

    // Its notification had not come when the load began: the load may miss it, so the node is loaded again.
    close();
    await notify(['n', A, '12']);
    await expect.poll(() => waiting).toBe(1);
    await phantom(sync, '13');
    open();
    await sync.caughtUp();
    // The load that may miss it, and the one after it.
    expect(sync.reloads.nodes).toBe(nodes + 2);
    await notify(['u', 'phantom-11']);
    await notify(['u', 'phantom-13']);
    await expectMirrors(sync);
  });
});

describe('capacity.preview from memory', () => {
  it('answers as the ledger’s preview does, with no database read while fresh; stale, it asks the ledger', async () => {
    let now = 0;
    const sync = startSync({ monotonic: () => now, pingEveryMs: 3_600_000, resyncEveryMs: 3_600_000 });
    await sync.ready();
    const db = countingDb(ctx.db);
    const previewer = new StatePreviewer(sync, new Ledger(db));
    const ledger = new Ledger(ctx.db);
    const spot = await ledger.reserve(reservation(poolId, { tenantId: 'acme', devices: [{ class: 'gpu', count: 2 }], spot: true }), ctx.clock.now());
    if (!spot.ok) throw new Error(spot.message);
    await sync.caughtUp();
    const inputs = [
      reservation(poolId, { devices: [{ class: 'gpu', count: 1 }] }),
      reservation(poolId, { devices: [{ class: 'gpu', count: 2 }], gang: { size: 2 } }),
      reservation(poolId, { devices: [{ class: 'gpu', count: 2 }], gang: { size: 3 } }),
      reservation(poolId, { devices: [{ class: 'gpu', count: 2 }], start: ctx.clock.now() + 7200_000, duration: 600 }),
      reservation(poolId, { devices: [{ class: 'gpu', count: 9 }] }),
    ];
    for (const input of inputs) {
      const t = ctx.clock.now();
      expect(await previewer.preview(input, t)).toEqual(await ledger.preview(input, t));
    }
    expect(db.calls).toBe(0);
    now += 10_000;
    expect(sync.fresh()).toBe(false);
    const t = ctx.clock.now();
    expect(await previewer.preview(inputs[0]!, t)).toEqual(await ledger.preview(inputs[0]!, t));
    expect(db.calls).toBeGreaterThan(0);
    await ledger.release(spot.reservation.id);
  });
});

describe('quotaPeak', () => {
  it('equals bc_quota_peak on random charges and windows (bounded, unbounded and infinite)', async () => {
    const base = 1_900_000_000_000;
    const step = 1000;
    const { rows } = await ctx.db.query(
      `INSERT INTO allocations (id, kind, node_id, during) VALUES ('st-quota-alloc', 'layout', $1, tstzrange(compute_now(), NULL)) RETURNING id`,
      [A],
    );
    expect(rows).toHaveLength(1);
    await ctx.db.query(`INSERT INTO quotas (tenant_id, pool_id, resource, max) VALUES ('st-peak', $1, 'gpu', NULL)`, [poolId]);
    const charge = fc.record({ start: fc.integer({ min: 0, max: 40 }), length: fc.option(fc.integer({ min: 0, max: 20 }), { nil: null }), amount: fc.integer({ min: 1, max: 4 }) });
    const window = fc.record({ start: fc.integer({ min: 0, max: 50 }), length: fc.oneof(fc.constant(null), fc.constant(Infinity), fc.integer({ min: 1, max: 30 })) });
    await fc.assert(
      fc.asyncProperty(fc.array(charge, { maxLength: 12 }), fc.array(window, { minLength: 1, maxLength: 6 }), async (cs, ws) => {
        await ctx.db.query(`DELETE FROM quota_charges WHERE tenant_id = 'st-peak'`);
        const charges: QuotaCharge[] = cs.map((c) => ({
          start: base + c.start * step,
          end: c.length === null ? Infinity : base + (c.start + c.length) * step,
          amount: c.amount,
        }));
        if (charges.length) {
          await ctx.db.query(
            `INSERT INTO quota_charges (tenant_id, pool_id, resource, allocation_id, amount, during)
             SELECT 'st-peak', $1, 'gpu', 'st-quota-alloc', c.amount,
                    tstzrange(to_timestamp(c.s / 1000.0), CASE WHEN c.e IS NULL THEN 'infinity' ELSE to_timestamp(c.e / 1000.0) END)
             FROM json_to_recordset($2::json) AS c(s float8, e float8, amount int)`,
            [poolId, JSON.stringify(charges.map((c) => ({ s: c.start, e: c.end === Infinity ? null : c.end, amount: c.amount })))],
          );
        }
        for (const w of ws) {
          const start = base + w.start * step;
          const end = w.length === null ? null : w.length === Infinity ? Infinity : start + w.length * step;
          const { rows: r } = await ctx.db.query(
            `SELECT bc_quota_peak('st-peak', $1, 'gpu',
                      tstzrange(to_timestamp($2 / 1000.0), CASE WHEN $3::text IS NULL THEN NULL WHEN $3 = 'inf' THEN 'infinity'
                                                                ELSE to_timestamp($3::float8 / 1000.0) END)) AS peak`,
            [poolId, start, end === null ? null : end === Infinity ? 'inf' : String(end)],
          );
          expect(quotaPeak(charges, start, end), JSON.stringify({ charges, start, end })).toBe(r[0].peak);
        }
      }),
      { numRuns: 150 },
    );
  });
});
