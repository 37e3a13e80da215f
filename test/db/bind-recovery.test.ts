// The bind that stops between booking and Binding (issue 11): the Binding fails, and the undo fails too, or the process
// dies before the Binding. The pod's booking must not wedge it: filter passes the node that holds it, bind there
// honours it (no second booking), bind elsewhere (that node not offered) moves it in one transaction; a failed undo is
// logged as an error and retried. And the bind's one write (issue 14): the booking and the node's admission lease
// together, and the pod taken from filter unless it holds atoms already.
import { beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { Ledger } from '../../src/db/ledger.ts';
import { createPool, type Db } from '../../src/db/pool.ts';
import { KubeStatusError, type ExtenderKube } from '../../src/extender/kube.ts';
import { KubeCallTimeoutError } from '../../src/kube/client.ts';
import { ExtenderService } from '../../src/extender/service.ts';
import { createLogger } from '../../src/log.ts';
import { makeNode, makePool, reservation } from '../support/builders.ts';
import { useTestDatabase } from '../support/db.ts';
import { TENANT_LABEL, reservationResourceName } from '../../src/core/names.ts';

const ctx = useTestDatabase();

interface FakePod {
  metadata: { name: string; namespace: string; uid: string };
  spec: { containers: { name: string; resources?: { limits?: Record<string, string> } }[] };
}

/** A pool whose next `failConnects` transactions fail to get a connection (a database blip). */
function flakyPool(url: string): Db & { failConnects: number } {
  const pool = createPool(url, 4) as Db & { failConnects: number };
  pool.failConnects = 0;
  const real = pool.connect.bind(pool);
  pool.connect = ((...args: unknown[]) => {
    // Promise-style connects are our transactions; the pool's own query() connects with a callback.
    if (args.length === 0 && pool.failConnects > 0) {
      pool.failConnects--;
      return Promise.reject(new Error('Connection terminated unexpectedly'));
    }
    return (real as (...a: unknown[]) => unknown)(...args);
  }) as typeof pool.connect;
  return pool;
}

class FakeKube implements ExtenderKube {
  pods = new Map<string, FakePod>();
  bound: { name: string; node: string }[] = [];
  allocatable: Record<string, string> = {};
  /** The next bindPod calls that throw, and what each does to the database first. */
  failBinds = 0;
  onFailedBind: () => void = () => undefined;
  /** The next bindPod calls that time out; with `timeoutLands`, the API server wrote the Binding all the same. */
  timeoutBinds = 0;
  timeoutLands = false;
  /** getPod calls. */
  reads = 0;
  async getPod(namespace: string, name: string) {
    this.reads++;
    return this.pods.get(`${namespace}/${name}`);
  }
  async nodeAllocatable() {
    return this.allocatable;
  }
  async namespaceLabels(name: string): Promise<Record<string, string>> {
    return name === 'acme-train' ? { [TENANT_LABEL]: 'acme' } : {};
  }
  async annotatePod() {}
  async bindPod(_namespace: string, name: string, _uid: string, node: string) {
    if (this.failBinds > 0) {
      this.failBinds--;
      this.onFailedBind();
      throw new KubeStatusError(503, 'the API server is unavailable');
    }
    if (this.timeoutBinds > 0) {
      this.timeoutBinds--;
      if (this.timeoutLands) this.bound.push({ name, node });
      throw new KubeCallTimeoutError(5000);
    }
    this.bound.push({ name, node });
  }
  async evictPod() {}
  async deletePod() {}
}

const A = 'rec-node-a';
const B = 'rec-node-b';
let poolId: string;
let seq = 0;
let kube: FakeKube;
let db: Db & { failConnects: number };
let ledger: Ledger;
let service: ExtenderService;
let logs: Record<string, unknown>[];

function pod(limits: Record<string, string> = { 'bettercompute.io/gpu': '1' }): FakePod {
  const n = ++seq;
  const p = { metadata: { name: `rec-${n}`, namespace: 'acme-train', uid: `rec-uid-${n}` }, spec: { containers: [{ name: 'main', resources: { limits } }] } };
  kube.pods.set(`acme-train/${p.metadata.name}`, p);
  return p;
}

const filter = (p: FakePod, names: string[]) => service.filter({ Pod: p, NodeNames: names } as never);
const bind = (p: FakePod, node: string) => service.bind({ PodName: p.metadata.name, PodNamespace: 'acme-train', PodUID: p.metadata.uid, Node: node });

async function liveBookings(uid: string): Promise<{ id: string; node_id: string }[]> {
  const { rows } = await ctx.db.query(`SELECT id, node_id FROM allocations WHERE pod_uid = $1 AND kind = 'pod' AND released_at IS NULL`, [uid]);
  return rows;
}

/** What a bind that died after its booking leaves: the pod's booking on `node`, no Binding. */
async function bookedThenDied(p: FakePod, node: string) {
  const out = await new Ledger(ctx.db).bookPod(
    { tenantId: 'acme', poolId, podUid: p.metadata.uid, nodeId: node, devices: [{ class: 'gpu', count: 1 }], durationSeconds: null },
    ctx.clock.now(),
  );
  if (!out.ok) throw new Error(out.message);
  return out;
}

beforeAll(async () => {
  poolId = await makePool('rec-pool').owner('acme').create(ctx.db);
  // One GPU each: a node whose GPU the pod's own booking holds is full for anyone else.
  await makeNode(A).gpus(1).domain('z1').create(ctx.db, poolId);
  await makeNode(B).gpus(1).domain('z1').create(ctx.db, poolId);
  db = flakyPool(ctx.url);
});

beforeEach(async () => {
  await ctx.db.query(`SELECT bc_release_allocations(array_agg(id)) FROM allocations WHERE released_at IS NULL`);
  await ctx.db.query(`UPDATE reservation_pod_assignments SET released_at = compute_now() WHERE released_at IS NULL`);
  await ctx.db.query(`DELETE FROM ondemand_admissions`);
  kube = new FakeKube();
  logs = [];
  ledger = new Ledger(db);
  const log = createLogger({ level: 'debug', write: (l) => logs.push(JSON.parse(l) as Record<string, unknown>) });
  // Every node that fits passes (ADR 0022), so that filter's answers show each node's verdict.
  service = new ExtenderService({ tenancyByName: true, db, ledger, clock: ctx.clock, kube, log, admissionWaitMs: 500, snapshotTtlMs: 0, undoRetryMs: 2000, bestNodeOnly: false });
});

describe('a bind that stopped between booking and Binding', () => {
  it('the process died: filter passes only the node holding the pod’s booking, and bind there honours it (no second booking)', async () => {
    const p = pod();
    const booked = await bookedThenDied(p, A);
    const f = await filter(p, [A, B]);
    expect(f.NodeNames).toEqual([A]);
    expect(f.FailedNodes[B]).toMatch(new RegExp(`holds atoms on node ${A}`));
    const scores = await service.prioritize({ Pod: p, NodeNames: [A, B] } as never);
    expect(scores).toEqual([{ Host: A, Score: 10 }, { Host: B, Score: 0 }]);
    expect(await bind(p, A)).toEqual({ Error: '' });
    expect(kube.bound).toEqual([{ name: p.metadata.name, node: A }]);
    expect(await liveBookings(p.metadata.uid)).toEqual([{ id: booked.allocationId, node_id: A }]);
  });

  it('the node holding it is not offered (cordoned): bind elsewhere moves the booking in one transaction', async () => {
    const p = pod();
    const old = await bookedThenDied(p, A);
    const f = await filter(p, [B]);
    expect(f.NodeNames).toEqual([B]);
    expect(await bind(p, B)).toEqual({ Error: '' });
    expect(kube.bound).toEqual([{ name: p.metadata.name, node: B }]);
    const live = await liveBookings(p.metadata.uid);
    expect(live).toHaveLength(1);
    expect(live[0]!.node_id).toBe(B);
    const { rows } = await ctx.db.query(`SELECT released_at IS NOT NULL AS released FROM allocations WHERE id = $1`, [old.allocationId]);
    expect(rows[0].released).toBe(true);
    // A is free again.
    expect((await filter(pod(), [A])).NodeNames).toEqual([A]);
  });

  it('a pod bound already is refused (its holding is never moved)', async () => {
    const p = pod();
    await bookedThenDied(p, A);
    (p.spec as Record<string, unknown>).nodeName = A;
    const r = await bind(p, B);
    expect(r.Error).toMatch(/is bound to rec-node-a already/);
    expect((await liveBookings(p.metadata.uid)).map((b) => b.node_id)).toEqual([A]);
  });

  it('the Binding fails once and so does the undo: the undo is an error in the log, retried, and commits; the next bind books again', async () => {
    const p = pod();
    kube.failBinds = 1;
    kube.onFailedBind = () => (db.failConnects = 1);
    const r = await bind(p, A);
    expect(r.Error).toBe('the API server is unavailable');
    expect(logs.find((l) => l.msg === 'undo of a failed bind failed; retrying')).toMatchObject({ level: 'error', uid: p.metadata.uid, node: A });
    expect(logs.find((l) => l.msg === 'undo of a failed bind committed')).toMatchObject({ uid: p.metadata.uid, attempt: 2 });
    expect(await liveBookings(p.metadata.uid)).toEqual([]);
    const { rows } = await ctx.db.query(`SELECT count(*)::int AS n FROM ondemand_admissions WHERE pod_uid = $1`, [p.metadata.uid]);
    expect(rows[0].n).toBe(0);
    // The scheduler tries again, on B this time: nothing of A is held.
    expect((await filter(p, [A, B])).NodeNames).toEqual([A, B]);
    expect(await bind(p, B)).toEqual({ Error: '' });
    expect((await liveBookings(p.metadata.uid)).map((b) => b.node_id)).toEqual([B]);
  });

  it('the Binding fails and the undo keeps failing: the pod keeps its booking, and its next bind honours it', async () => {
    const p = pod();
    kube.failBinds = 1;
    kube.onFailedBind = () => (db.failConnects = 1000);
    expect((await bind(p, A)).Error).toBe('the API server is unavailable');
    db.failConnects = 0;
    expect(logs.filter((l) => l.level === 'error' && String(l.msg).startsWith('undo of a failed bind failed')).length).toBeGreaterThan(1);
    const [held] = await liveBookings(p.metadata.uid);
    expect(held!.node_id).toBe(A);
    expect((await filter(p, [A, B])).NodeNames).toEqual([A]);
    expect(await bind(p, A)).toEqual({ Error: '' });
    expect(await liveBookings(p.metadata.uid)).toEqual([held]);
  });

  it('the Binding times out and landed: the pod keeps its booking and the admission lease (the kubelet admits it with them)', async () => {
    const p = pod();
    kube.timeoutBinds = 1;
    kube.timeoutLands = true;
    expect((await bind(p, A)).Error).toMatch(/did not answer within 5000 ms/);
    expect(kube.bound).toEqual([{ name: p.metadata.name, node: A }]);
    expect(logs.find((l) => String(l.msg).startsWith('the Binding may have landed'))).toMatchObject({ level: 'warn', uid: p.metadata.uid, node: A });
    const [held] = await liveBookings(p.metadata.uid);
    expect(held!.node_id).toBe(A);
    const { rows } = await ctx.db.query(`SELECT pod_uid FROM ondemand_admissions WHERE node_id = $1`, [A]);
    expect(rows).toEqual([{ pod_uid: p.metadata.uid }]);
  });

  it('the Binding times out and did not land: its next bind is honoured on the same node, with the same booking', async () => {
    const p = pod();
    kube.timeoutBinds = 1;
    expect((await bind(p, A)).Error).toMatch(/did not answer within 5000 ms/);
    const [held] = await liveBookings(p.metadata.uid);
    expect(held!.node_id).toBe(A);
    expect((await filter(p, [A, B])).NodeNames).toEqual([A]);
    expect(await bind(p, A)).toEqual({ Error: '' });
    expect(kube.bound).toEqual([{ name: p.metadata.name, node: A }]);
    expect(await liveBookings(p.metadata.uid)).toEqual([held]);
  });

  it('a reservation’s pod: filter passes the node of its assignment, bind elsewhere moves the assignment', async () => {
    const out = await new Ledger(ctx.db).reserve(reservation(poolId, { tenantId: 'acme', devices: [{ class: 'gpu', count: 1 }], gang: { size: 2 } }), ctx.clock.now());
    if (!out.ok) throw new Error(out.message);
    await ctx.clock.sync();
    const resource = reservationResourceName(out.reservation.id);
    kube.allocatable = { [resource]: '1' };
    const p = pod({ [resource]: '1' });
    const assigned = await new Ledger(ctx.db).assignPod({
      podUid: p.metadata.uid,
      reservationId: out.reservation.id,
      tenantId: 'acme',
      nodeId: A,
      namespace: 'acme-train',
      podName: p.metadata.name,
      count: 1,
    });
    expect(assigned).toEqual({ ok: true, existing: false });
    expect((await filter(p, [A, B])).NodeNames).toEqual([A]);
    expect(await bind(p, B)).toEqual({ Error: '' });
    const { rows } = await ctx.db.query(
      `SELECT node_id, released_at IS NULL AS live FROM reservation_pod_assignments WHERE pod_uid = $1 ORDER BY created_at, live`,
      [p.metadata.uid],
    );
    expect(rows.filter((r) => r.live).map((r) => r.node_id)).toEqual([B]);
    expect(rows).toHaveLength(2);
  });
});

async function admissionsOf(uid: string): Promise<{ node_id: string; atoms: string[] }[]> {
  const { rows } = await ctx.db.query(`SELECT node_id, atoms FROM ondemand_admissions WHERE pod_uid = $1 ORDER BY node_id`, [uid]);
  return rows;
}

async function bookedAtoms(uid: string): Promise<string[]> {
  const { rows } = await ctx.db.query(
    `SELECT b.device_id FROM device_bookings b JOIN allocations a ON a.id = b.allocation_id
     WHERE a.pod_uid = $1 AND a.kind = 'pod' AND a.released_at IS NULL ORDER BY b.device_id`,
    [uid],
  );
  return rows.map((r) => r.device_id as string);
}

describe('the booking and the node’s admission lease are one write', () => {
  it('the lease carries the atoms booked for the pod', async () => {
    const p = pod();
    expect(await bind(p, A)).toEqual({ Error: '' });
    const atoms = await bookedAtoms(p.metadata.uid);
    expect(atoms).toHaveLength(1);
    expect(await admissionsOf(p.metadata.uid)).toEqual([{ node_id: A, atoms }]);
  });

  it('while another pod’s admission is in flight on the node, nothing is booked; the bind waits for it, then answers', async () => {
    const other = pod();
    expect(await ledger.takeAdmission({ nodeId: A, podUid: other.metadata.uid, namespace: 'acme-train', podName: other.metadata.name, ttlSeconds: 60, atoms: [] })).toBe(true);
    const p = pod();
    const t0 = performance.now();
    const r = await bind(p, A);
    expect(r.Error).toBe(`another on-demand admission is in flight on node ${A}; retry`);
    expect(performance.now() - t0).toBeGreaterThanOrEqual(500); // admissionWaitMs
    expect(await liveBookings(p.metadata.uid)).toEqual([]);
    expect(await admissionsOf(p.metadata.uid)).toEqual([]);
    expect(await admissionsOf(other.metadata.uid)).toEqual([{ node_id: A, atoms: [] }]);
    expect(kube.bound).toEqual([]);

    // The other pod's admission ends during the wait: the bind books then, with the lease.
    setTimeout(() => void ledger.dropAdmission(A, other.metadata.uid), 150);
    expect(await bind(p, A)).toEqual({ Error: '' });
    expect(await admissionsOf(p.metadata.uid)).toEqual([{ node_id: A, atoms: await bookedAtoms(p.metadata.uid) }]);
  });

  it('a booking moved to another node takes the lease there, in the same transaction', async () => {
    const p = pod();
    await bookedThenDied(p, A);
    expect(await bind(p, B)).toEqual({ Error: '' });
    expect((await liveBookings(p.metadata.uid)).map((b) => b.node_id)).toEqual([B]);
    expect(await admissionsOf(p.metadata.uid)).toEqual([{ node_id: B, atoms: await bookedAtoms(p.metadata.uid) }]);
  });

  it('a pod’s existing booking on the node takes the lease with its atoms; busy, it is kept and the bind answers', async () => {
    const p = pod();
    const held = await bookedThenDied(p, A);
    const other = pod();
    await ledger.takeAdmission({ nodeId: A, podUid: other.metadata.uid, namespace: 'acme-train', podName: other.metadata.name, ttlSeconds: 60, atoms: [] });
    expect((await bind(p, A)).Error).toMatch(/another on-demand admission is in flight/);
    expect(await liveBookings(p.metadata.uid)).toEqual([{ id: held.allocationId, node_id: A }]);
    await ledger.dropAdmission(A, other.metadata.uid);
    expect(await bind(p, A)).toEqual({ Error: '' });
    expect(await admissionsOf(p.metadata.uid)).toEqual([{ node_id: A, atoms: held.atoms }]);
  });
});

describe('a booking told the pod holds nothing', () => {
  it('skips its look; when that was wrong, the unique live booking refuses a second one and it looks after all', async () => {
    const p = pod();
    const held = await bookedThenDied(p, A);
    const book = (node: string) =>
      ledger.bookPod(
        { tenantId: 'acme', poolId, podUid: p.metadata.uid, nodeId: node, devices: [{ class: 'gpu', count: 1 }], durationSeconds: null, holdsNothing: true },
        ctx.clock.now(),
      );
    expect(await book(A)).toEqual({ ok: true, allocationId: held.allocationId, nodeId: A, atoms: held.atoms, existing: true });
    const moved = await book(B);
    expect(moved).toMatchObject({ ok: true, nodeId: B, existing: false });
    expect((await liveBookings(p.metadata.uid)).map((b) => b.node_id)).toEqual([B]);
  });
});

describe('the pod bind takes from filter', () => {
  it('a pod filter just saw is bound without reading it from the API server', async () => {
    const p = pod();
    expect((await filter(structuredClone(p), [A, B])).NodeNames).toEqual([A, B]);
    expect(await bind(p, A)).toEqual({ Error: '' });
    expect(kube.reads).toBe(0);
    // Filter's copy serves one bind: another bind of the pod (now bound, as the API server has it) reads it.
    (p.spec as Record<string, unknown>).nodeName = A;
    expect((await bind(p, B)).Error).toMatch(/is bound to rec-node-a already/);
    expect(kube.reads).toBe(1);
  });

  it('a filtered pod that holds atoms is read again: bound meanwhile, it is refused and its holding stays', async () => {
    const p = pod();
    expect((await filter(structuredClone(p), [A, B])).NodeNames).toEqual([A, B]);
    // Its bind on A committed and the Binding landed, but the scheduler never got the answer.
    await bookedThenDied(p, A);
    (p.spec as Record<string, unknown>).nodeName = A;
    const r = await bind(p, B);
    expect(r.Error).toMatch(/is bound to rec-node-a already/);
    expect(kube.reads).toBe(1);
    expect((await liveBookings(p.metadata.uid)).map((b) => b.node_id)).toEqual([A]);
  });

  it('a pod filter never saw (another replica filtered it, or this one restarted) is read', async () => {
    const p = pod();
    expect(await bind(p, A)).toEqual({ Error: '' });
    expect(kube.reads).toBe(1);
  });
});
