// The end of a booking is the end of its containers (docs/booking-end.md), against a real ledger and its clock: the
// stopper tells a Reservation's pods to stop the pool's stop grace plus the slack before the window's end, caps the
// grace a pod names, deletes a pod whose eviction is refused (a booking outranks a PodDisruptionBudget), leaves alone a
// successor that took the pod's name, and stops each pod once. Back to back on the same GPUs, the first pod's grace ends
// before the second booking begins.
import { beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createStopper } from '../../src/controller/stopper.ts';
import { advanceClock } from '../../src/db/clock.ts';
import { setNodeState, upsertPool } from '../../src/db/inventory.ts';
import { Ledger } from '../../src/db/ledger.ts';
import type { ExtenderKube } from '../../src/extender/kube.ts';
import { silentLogger } from '../../src/log.ts';
import { makeNode, makePool, reservation } from '../support/builders.ts';
import { useTestDatabase } from '../support/db.ts';

const t = useTestDatabase();
const NODE = 'end-node';

type Kube = Pick<ExtenderKube, 'getPod' | 'evictPod' | 'deletePod'>;

/** Pods by name with their uid and grace; records evictions and deletes; `refuse` answers evictions with 429 (a PDB). */
function fakeKube() {
  const pods = new Map<string, { uid: string; grace?: number }>();
  const calls: string[] = [];
  const state = { refuse: false };
  const kube: Kube = {
    getPod: async (_ns, name) => {
      const p = pods.get(name);
      return p && { metadata: { uid: p.uid }, spec: p.grace === undefined ? {} : { terminationGracePeriodSeconds: p.grace } };
    },
    evictPod: async (_ns, name, grace, uid) => {
      calls.push(`evict ${name} ${grace} ${uid}`);
      if (state.refuse) throw Object.assign(new Error('Cannot evict pod as it would violate the pod\'s disruption budget.'), { code: 429 });
    },
    deletePod: async (_ns, name, grace, uid) => {
      calls.push(`delete ${name} ${grace} ${uid}`);
    },
  };
  return { kube, pods, calls, state };
}

let poolId: string;
let ledger: Ledger;

beforeAll(async () => {
  poolId = await makePool('end-pool').owner('acme').create(t.db);
  await makeNode(NODE).gpus(2).create(t.db, poolId);
  ledger = new Ledger(t.db);
});

beforeEach(async () => {
  // Each test books the node's two GPUs afresh: what the one before booked is released.
  await t.db.query(`UPDATE reservation_pod_assignments SET released_at = compute_now() WHERE released_at IS NULL`);
  await t.db.query(`SELECT bc_release_allocations(array_agg(id)) FROM allocations WHERE released_at IS NULL`);
  await t.db.query(`UPDATE reservations SET state = 'released', ended_at = compute_now() WHERE state IN ('held', 'confirmed')`);
  await t.db.query(`UPDATE pools SET stop_grace_seconds = 30 WHERE id = $1`, [poolId]);
  await t.clock.sync();
});

/** Books both GPUs for `seconds` from `startMs` (now when omitted; whole milliseconds, as the API takes them). */
async function book(seconds: number, startMs?: number) {
  await t.clock.sync();
  const input = reservation(poolId, { devices: [{ class: 'gpu', count: 2 }], duration: seconds, ...(startMs ? { start: Math.ceil(startMs) } : {}) });
  const r = await ledger.reserve(input, t.clock.now());
  if (!r.ok) throw new Error(r.message);
  return r.reservation;
}

async function assign(reservationId: string, name: string, uid: string) {
  const out = await ledger.assignPod({ podUid: uid, reservationId, tenantId: 'acme', nodeId: NODE, namespace: 'end', podName: name, count: 1 });
  if (!out.ok) throw new Error(out.reason);
}

/** Moves the ledger's clock to `ms` before `endMs`. */
async function toBefore(endMs: number, ms: number) {
  await t.clock.sync();
  await advanceClock(t.db, endMs - ms - t.clock.now());
  await t.clock.sync();
}

/** An hour's booking of both GPUs with one pod (`grace` its own) assigned, and a stopper that has nothing to do yet. */
async function bookedWithPod(name: string, grace: number) {
  const r = await book(3600);
  const f = fakeKube();
  f.pods.set(name, { uid: `u-${name}`, grace });
  await assign(r.id, name, `u-${name}`);
  const stop = createStopper({ db: t.db, kube: f.kube, log: silentLogger });
  expect(await stop()).toEqual([]);
  return { r, stop };
}

describe('the end of a booking is the end of its containers', () => {
  it('back to back on the same GPUs: the first pod is told to stop 40 s before its end with a grace that ends 5 s before it; not earlier, and once', async () => {
    const first = await book(600);
    const second = await book(600, first.end);
    expect(second.start - first.end).toBeLessThan(1);
    const f = fakeKube();
    f.pods.set('train-0', { uid: 'u-train-0', grace: 15 });
    await assign(first.id, 'train-0', 'u-train-0');
    const stop = createStopper({ db: t.db, kube: f.kube, log: silentLogger });

    await toBefore(first.end, 45_000);
    expect(await stop()).toEqual([]);
    await toBefore(first.end, 40_000);
    expect(await stop()).toEqual([{ pod: 'end/train-0', reservationId: first.id, how: 'evicted', graceSeconds: 15 }]);
    expect(f.calls).toEqual(['evict train-0 15 u-train-0']);
    // Once per pod: the next passes leave it to its grace period.
    expect(await stop()).toEqual([]);
    await toBefore(first.end, 10_000);
    expect(await stop()).toEqual([]);
    expect(f.calls).toHaveLength(1);
  });

  it('a booking that stops its pods takes no new one: refused from its end (or preemption deadline) less the stop grace and slack, with the reason', async () => {
    const r = await book(600);
    await toBefore(r.end, 41_000);
    await assign(r.id, 'in-time', 'u-in-time');
    await toBefore(r.end, 39_000);
    const late = await ledger.assignPod({ podUid: 'u-late', reservationId: r.id, tenantId: 'acme', nodeId: NODE, namespace: 'end', podName: 'late', count: 1 });
    expect(late).toEqual({ ok: false, reason: expect.stringMatching(new RegExp(`^BookingStopping: reservation ${r.id} ends at ${new Date(r.end).toISOString()} and stops its pods from 40 s before`)) });
    // The pod already bound is honoured again (a bind retried), not refused.
    expect(await ledger.assignPod({ podUid: 'u-in-time', reservationId: r.id, tenantId: 'acme', nodeId: NODE, namespace: 'end', podName: 'in-time', count: 1 })).toEqual({ ok: true, existing: true });

    const spot = await book(600, r.end + 1000);
    await toBefore(spot.start, -1000);
    await t.db.query(`UPDATE reservations SET spot = true, preempt_at = compute_now() + interval '30 seconds' WHERE id = $1`, [spot.id]);
    const victim = await ledger.assignPod({ podUid: 'u-victim', reservationId: spot.id, tenantId: 'acme', nodeId: NODE, namespace: 'end', podName: 'victim', count: 1 });
    expect(victim.ok).toBe(false);
    expect(!victim.ok && victim.reason).toMatch(/^BookingStopping: /);
  });

  it('a day-long grace is capped by the pool (30 s by default, then 5 s when the Pool says so)', async () => {
    const r = await book(600);
    const f = fakeKube();
    f.pods.set('slow', { uid: 'u-slow', grace: 86_400 });
    await assign(r.id, 'slow', 'u-slow');
    const stop = createStopper({ db: t.db, kube: f.kube, log: silentLogger });
    await toBefore(r.end, 40_000);
    expect((await stop()).map((p) => p.graceSeconds)).toEqual([30]);

    const s = await book(600, r.end);
    // The Pool's spec.stopGraceSeconds, as the Pool reconciler upserts it.
    expect(await upsertPool(t.db, { name: 'end-pool', ownerTenant: 'acme', stopGraceSeconds: 5 })).toBe(poolId);
    f.pods.set('slow-2', { uid: 'u-slow-2', grace: 86_400 });
    await toBefore(s.start, -1000); // the second booking has begun
    await ledger.releasePod('u-slow'); // its container gone, as the releaser sees it (the next pod waits until then)
    await assign(s.id, 'slow-2', 'u-slow-2');
    await toBefore(s.end, 16_000);
    expect(await stop()).toEqual([]);
    await toBefore(s.end, 15_000);
    expect((await stop()).map((p) => `${p.pod} ${p.graceSeconds}`)).toEqual(['end/slow-2 5']);
  });

  it('an eviction refused by a PodDisruptionBudget (429) is followed by a delete with the same grace', async () => {
    const r = await book(600);
    const f = fakeKube();
    f.state.refuse = true;
    f.pods.set('guarded', { uid: 'u-guarded', grace: 20 });
    await assign(r.id, 'guarded', 'u-guarded');
    const stop = createStopper({ db: t.db, kube: f.kube, log: silentLogger });
    await toBefore(r.end, 40_000);
    expect(await stop()).toEqual([{ pod: 'end/guarded', reservationId: r.id, how: 'deleted', graceSeconds: 20 }]);
    expect(f.calls).toEqual(['evict guarded 20 u-guarded', 'delete guarded 20 u-guarded']);
  });

  it('a pod found late gets only the time left before the end; a successor under the pod’s name is not touched', async () => {
    const r = await book(600);
    const f = fakeKube();
    f.pods.set('late', { uid: 'u-late', grace: 30 });
    f.pods.set('renamed', { uid: 'u-someone-else' });
    await assign(r.id, 'late', 'u-late');
    await assign(r.id, 'renamed', 'u-renamed');
    const stop = createStopper({ db: t.db, kube: f.kube, log: silentLogger });
    await toBefore(r.end, 12_500);
    expect((await stop()).map((p) => `${p.pod} ${p.how} ${p.graceSeconds}`)).toEqual(['end/late evicted 7', 'end/renamed gone 0']);
    expect(f.calls).toEqual(['evict late 7 u-late']);
  });

  it('a Reservation deleted before its end stops its pods at once with the capped grace; its atoms stay booked until they are gone', async () => {
    const { r, stop } = await bookedWithPod('gone-early', 600);
    await ledger.release(r.id);
    expect(await stop()).toEqual([{ pod: 'end/gone-early', reservationId: r.id, how: 'evicted', graceSeconds: 30 }]);
    // Its container may still run: no other booking is placed on its GPUs, until the pod is gone.
    const blocked = await ledger.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 2 }], duration: 60 }), t.clock.now());
    expect(blocked.ok).toBe(false);
    expect(await ledger.releasePod('u-gone-early')).toBe(true);
    const { rows } = await t.db.query(`SELECT count(*)::int AS n FROM allocations WHERE reservation_id = $1 AND released_at IS NULL`, [r.id]);
    expect(rows[0].n).toBe(0);
    await book(60);
  });

  it('a pod first found after its booking’s end gets 1 s, not the capped grace', async () => {
    const r = await book(600);
    const f = fakeKube();
    f.pods.set('found-late', { uid: 'u-found-late', grace: 30 });
    await assign(r.id, 'found-late', 'u-found-late');
    await toBefore(r.end, -2000);
    const stop = createStopper({ db: t.db, kube: f.kube, log: silentLogger });
    expect(await stop()).toEqual([{ pod: 'end/found-late', reservationId: r.id, how: 'evicted', graceSeconds: 1 }]);
  });

  it('a node put in maintenance: its reservation pods are stopped at once with the capped grace (their bookings stay until they are gone: docs/repair.md)', async () => {
    const { r, stop } = await bookedWithPod('on-maint', 600);
    await setNodeState(t.db, NODE, { maintenance: true });
    try {
      expect(await stop()).toEqual([{ pod: 'end/on-maint', reservationId: r.id, how: 'evicted', graceSeconds: 30 }]);
    } finally {
      await setNodeState(t.db, NODE, { maintenance: false });
    }
  });

  it('a pod on a node where its reservation no longer has a live booking (re-placed while the node was away) is stopped at once, with 1 s', async () => {
    const { r, stop } = await bookedWithPod('left-behind', 10);
    // What a repair's cut leaves: the reservation's bookings on the node end now.
    await t.db.query(`SELECT bc_repair_cut($1)`, [
      JSON.stringify([{ allocationId: r.allocations[0]!.id, atoms: r.allocations[0]!.atoms }]),
    ]);
    expect(await stop()).toEqual([{ pod: 'end/left-behind', reservationId: r.id, how: 'evicted', graceSeconds: 1 }]);
  });
});
