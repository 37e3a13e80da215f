// The torture run extended with repair and spot preemption (issue 12): a few hundred interleaved operations from a
// seeded generator — reserves (regular and spot, some future, some held with a lease), confirms, releases, pod
// bookings, GPUs removed and flipped unhealthy through applyInventory (what the NodeDevices reconciler calls), Nodes
// deleted through nodeGone and coming back, maintenance and NotReady, repair passes, time passing (the leader's lease
// expiry and preemption steps called on the ledger at each step), rollup and quota rebuilds — with every invariant
// checked every CHECK_EVERY operations and at the end. Sequential, so one seed replays one run (the seed is printed;
// BC_TORTURE_SEED overrides it). Time is frozen and moved by hand, so a run does not depend on how fast it goes.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FenceHolder } from '../../src/controller/fence.ts';
import { nodeGone } from '../../src/controller/gone.ts';
import { applyInventory, setNodeState, upsertNode } from '../../src/db/inventory.ts';
import { Ledger } from '../../src/db/ledger.ts';
import { repairPass } from '../../src/db/repair.ts';
import { makeNode, makePool, reservation, type NodeBuilder } from '../support/builders.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { checkInvariants, CLEAN, rng } from '../support/invariants.ts';

const SEED = Number(process.env.BC_TORTURE_SEED ?? 20261130);
const OPERATIONS = 400;
const CHECK_EVERY = 25;
const GRACE_SECONDS = 120;
const TENANTS = ['acme', 'beta', 'gamma'];
const NODE_LABELS = { 'topology.kubernetes.io/zone': 'zone-a' };

let t: TestDatabase;
let ledger: Ledger;
let poolId: string;
const fence = new FenceHolder('torture-repair');
/** The frozen compute_now(), in ms: every decision of the run uses it, so the run does not depend on wall time. */
let now = 0;

interface NodeModel {
  builder: NodeBuilder;
  gone: boolean;
  removed: Set<number>;
  unhealthy: Set<number>;
}
const nodes = new Map<string, NodeModel>();

beforeAll(async () => {
  t = await createTestDatabase();
  await t.db.query('UPDATE clock SET frozen_at = date_trunc(\'second\', now())');
  now = await dbNow();
  await fence.take(t.db, 'torture');
  // A long notice, so that victims often lose atoms (and get repair passes) between their notice and their deadline.
  ledger = new Ledger(t.db, { spotNoticeSeconds: 900 });
  poolId = await makePool('tr').owner('acme').offer('beta', { gpu: 10 }).offer('gamma', { gpu: 6 })
    .overcommit({ vcpu: 2 }).create(t.db);
  for (let i = 0; i < 6; i++) {
    const builder = makeNode(`tr-${i}`).gpus(4).domain('zone-a').scalars({ vcpu: 32, memoryGiB: 256 });
    await builder.create(t.db, poolId);
    nodes.set(builder.id, { builder, gone: false, removed: new Set(), unhealthy: new Set() });
  }
});
afterAll(async () => t?.drop());

async function dbNow(): Promise<number> {
  const { rows } = await t.db.query<{ t: number }>('SELECT (extract(epoch FROM compute_now()) * 1000)::float8 AS t');
  return rows[0]!.t;
}

/**
 * Moves frozen time. The incremental rollup and the quota counters are exact at one instant only (bookings start and
 * end as time passes; the periodic rebuilds move them), so the leader's two rebuilds follow a move, as in production.
 * Between moves, every write must keep both exact: that is what the checks look at.
 */
async function advance(ms: number): Promise<void> {
  await t.db.query('UPDATE clock SET frozen_at = frozen_at + make_interval(secs => $1 / 1000.0)', [ms]);
  now = await dbNow();
  await t.db.query('SELECT bc_rebuild_rollup()');
  await t.db.query('SELECT bc_rebuild_quotas()');
}

/** What the node's device plugin would report: its GPUs less the removed ones, the unhealthy ones so flagged. */
async function report(id: string): Promise<void> {
  const m = nodes.get(id)!;
  const gpus = m.builder.report()
    .map((g, i) => (m.unhealthy.has(i) ? { ...g, healthy: false } : g))
    .filter((_, i) => !m.removed.has(i));
  await applyInventory(t.db, id, { gpus, scalars: { vcpu: 32, memoryGiB: 256 } });
}

/**
 * Live or future bookings of live reservations on atoms out of service, of reservations that do not say they are short:
 * written from the rows (the node out of the allocation's pool, in maintenance, NotReady past the grace; the device
 * gone, unbookable or unhealthy), not with bc_lost_atoms, so that repair is not judged by its own idea of "lost".
 * Spot victims under notice are counted apart: see `victimsOnLostAtoms` below (a finding, issue 12).
 */
const ON_LOST_ATOMS = (victims: boolean) => `
  SELECT r.id, b.device_id FROM device_bookings b JOIN allocations a ON a.id = b.allocation_id
    JOIN reservations r ON r.id = a.reservation_id JOIN devices d ON d.id = b.device_id JOIN nodes n ON n.id = a.node_id
  WHERE a.kind = 'reservation' AND r.state IN ('held', 'confirmed') AND r.repair_short = 0
    AND NOT isempty(b.during) AND upper(b.during) > compute_now() AND (r.preempt_at IS NOT NULL) = ${victims}
    AND (n.pool_id IS DISTINCT FROM a.pool_id OR n.maintenance
         OR (n.connectivity <> 'connected' AND n.unreachable_since <= compute_now() - make_interval(secs => ${GRACE_SECONDS}))
         OR NOT d.present OR NOT d.bookable OR NOT d.healthy)
  ORDER BY 1, 2`;

async function lostButNotDegraded() {
  return (await t.db.query(ON_LOST_ATOMS(false))).rows;
}

/**
 * Finding (issue 12): a spot victim under notice is neither repaired nor marked Degraded when one of its atoms leaves
 * service before its deadline (bc_preempt_allocations sets its allocations' released_at to the deadline, and
 * bc_lost_atoms looks only at allocations with released_at IS NULL). Counted and printed, not asserted here; the
 * minimal reproduction below is an it.fails that turns red once it is fixed.
 */
let victimsOnLostAtoms = 0;
async function countVictimsOnLostAtoms(): Promise<void> {
  victimsOnLostAtoms = Math.max(victimsOnLostAtoms, (await t.db.query(ON_LOST_ATOMS(true))).rowCount ?? 0);
}

/** The checks of this file beyond the ledger's: spot never displaced regular work; preempted bookings end by the deadline. */
async function preemptionViolations() {
  const regularPreempted = await t.db.query(
    `SELECT r.id FROM reservations r LEFT JOIN reservations p ON p.id = r.preempted_by
     WHERE r.preempt_at IS NOT NULL AND (NOT r.spot OR p.id IS NULL OR p.spot)`,
  );
  const pastDeadline = await t.db.query(
    `SELECT r.id, b.device_id, b.during::text FROM reservations r JOIN allocations a ON a.reservation_id = r.id
       JOIN device_bookings b ON b.allocation_id = a.id
     WHERE r.preempt_at IS NOT NULL AND NOT isempty(b.during) AND upper(b.during) > r.preempt_at`,
  );
  return { regularPreempted: regularPreempted.rows, bookingsPastDeadline: pastDeadline.rows };
}

async function checkAll(step: number): Promise<void> {
  const where = `seed ${SEED}, after operation ${step}`;
  expect(await checkInvariants(t.db), where).toEqual(CLEAN);
  expect(await preemptionViolations(), where).toEqual({ regularPreempted: [], bookingsPastDeadline: [] });
}

describe('torture with repair and spot preemption', () => {
  const live: string[] = [];
  const held: string[] = [];
  const pods: string[] = [];
  let podSeq = 0;

  async function randomOp(rand: () => number, step: number): Promise<string> {
    const pick = <T,>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;
    const nodeIds = [...nodes.keys()];
    const x = rand();
    if (x < 0.28) {
      const spot = rand() < 0.35;
      const hold = rand() < 0.2;
      const r = await ledger.reserve(
        reservation(poolId, {
          tenantId: pick(TENANTS),
          devices: [{ class: 'gpu', count: 1 + Math.floor(rand() * 4) }],
          duration: 600 + Math.floor(rand() * 7200),
          ...(rand() < 0.3 ? { start: now + Math.floor(rand() * 2 * 3_600_000) } : {}),
          ...(rand() < 0.3 ? { resources: { vcpu: 1 + Math.floor(rand() * 8) } } : {}),
          ...(spot ? { spot: true } : {}),
          ...(hold ? { leaseSeconds: 60 + Math.floor(rand() * 600) } : {}),
        }),
        now,
      );
      if (!r.ok) return r.code;
      live.push(r.reservation.id);
      if (r.reservation.state === 'held') held.push(r.reservation.id);
      return spot ? 'reserved-spot' : 'reserved';
    }
    if (x < 0.32) {
      const id = held.splice(Math.floor(rand() * held.length), 1)[0];
      if (!id) return 'nothing-to-confirm';
      const c = await ledger.confirm(id);
      return 'error' in c ? 'confirm-refused' : 'confirmed';
    }
    if (x < 0.46) {
      const id = live.splice(Math.floor(rand() * live.length), 1)[0];
      if (!id) return 'nothing-to-release';
      return (await ledger.release(id)) ? 'released' : 'release-noop';
    }
    if (x < 0.52) {
      const podUid = `pod-${++podSeq}`;
      const r = await ledger.bookPod(
        {
          tenantId: pick(TENANTS),
          poolId,
          podUid,
          nodeId: pick(nodeIds),
          devices: [{ class: 'gpu', count: 1 + Math.floor(rand() * 2) }],
          durationSeconds: rand() < 0.5 ? null : 600 + Math.floor(rand() * 3600),
        },
        now,
      );
      if (!r.ok) return `pod-${r.code}`;
      pods.push(podUid);
      return 'pod-booked';
    }
    if (x < 0.56) {
      const uid = pods.splice(Math.floor(rand() * pods.length), 1)[0];
      if (!uid) return 'nothing-to-release';
      await ledger.releasePod(uid);
      return 'pod-released';
    }
    const node = pick(nodeIds);
    const m = nodes.get(node)!;
    if (x < 0.62) {
      // A GPU pulled from the node, or put back.
      const gpu = Math.floor(rand() * 4);
      if (m.removed.has(gpu)) m.removed.delete(gpu);
      else m.removed.add(gpu);
      await report(node);
      return 'device-removal';
    }
    if (x < 0.68) {
      const gpu = Math.floor(rand() * 4);
      if (m.unhealthy.has(gpu)) m.unhealthy.delete(gpu);
      else m.unhealthy.add(gpu);
      await report(node);
      return 'device-health';
    }
    if (x < 0.71) {
      // The Node deleted (the informer's delete path), or created again (what the Node reconciler writes).
      if (m.gone) {
        await upsertNode(t.db, { id: node, poolId, labels: NODE_LABELS });
        await setNodeState(t.db, node, { connectivity: 'connected' });
      } else {
        await nodeGone(t.db, fence.fence(), node);
      }
      m.gone = !m.gone;
      return 'node-deletion';
    }
    if (x < 0.75) {
      // The bettercompute.io/maintenance label set or taken off (the Node reconciler's setNodeState).
      await setNodeState(t.db, node, { maintenance: rand() < 0.5 });
      return 'maintenance';
    }
    if (x < 0.78) {
      if (!m.gone) await setNodeState(t.db, node, { connectivity: rand() < 0.5 ? 'unreachable' : 'connected' });
      return 'not-ready';
    }
    if (x < 0.88) {
      await repairPass(t.db, { graceSeconds: GRACE_SECONDS });
      expect(await lostButNotDegraded(), `seed ${SEED}, repair pass at operation ${step}`).toEqual([]);
      await countVictimsOnLostAtoms();
      return 'repair-pass';
    }
    if (x < 0.97) {
      await advance(10_000 + Math.floor(rand() * 600_000));
      // The leader's steps as time passes: held leases run out; victims at their deadline end (pods evicted).
      await ledger.expireLeases();
      for (const v of await ledger.preemptionNotices()) await ledger.markPreemptionNotified(v.reservationId);
      for (const v of await ledger.preemptionsDue()) await ledger.finishPreemption(v.reservationId);
      return 'time-passes';
    }
    await t.db.query('SELECT bc_rebuild_quotas()');
    return 'quota-rebuild';
  }

  it(`${OPERATIONS} interleaved operations with repairs and preemptions keep every invariant`, async () => {
    console.log(`torture-repair seed ${SEED} (BC_TORTURE_SEED to replay)`);
    const rand = rng(SEED);
    const counts: Record<string, number> = {};
    for (let i = 1; i <= OPERATIONS; i++) {
      const o = await randomOp(rand, i);
      counts[o] = (counts[o] ?? 0) + 1;
      if (i % CHECK_EVERY === 0) await checkAll(i);
    }
    await repairPass(t.db, { graceSeconds: GRACE_SECONDS });
    expect(await lostButNotDegraded(), `seed ${SEED}, final repair pass`).toEqual([]);
    await checkAll(OPERATIONS);
    console.log(`torture-repair outcomes ${JSON.stringify(counts)}`);
    // The run did what it is for: each kind of event happened.
    expect(Object.keys(counts)).toEqual(expect.arrayContaining([
      'reserved', 'reserved-spot', 'released', 'pod-booked', 'device-removal', 'device-health', 'node-deletion',
      'maintenance', 'repair-pass', 'time-passes', 'quota-rebuild',
    ]));
    const { rows } = await t.db.query<{ preempted: number; repaired: number; preemptedAndRepaired: number }>(
      `SELECT count(*) FILTER (WHERE preempt_at IS NOT NULL)::int AS preempted, count(*) FILTER (WHERE repairs > 0)::int AS repaired,
              count(*) FILTER (WHERE preempt_at IS NOT NULL AND repairs > 0)::int AS "preemptedAndRepaired"
       FROM reservations`,
    );
    console.log(`torture-repair reservations ${JSON.stringify(rows[0])}, victims under notice left on lost atoms: ${victimsOnLostAtoms}`);
    expect(rows[0]!.preempted).toBeGreaterThan(0);
    expect(rows[0]!.repaired).toBeGreaterThan(0);
  });
});

// The finding above, minimal: a spot victim under notice loses a GPU before its deadline. Node v-a has 3 GPUs: the spot
// reservation holds 2, a regular one the third; a second regular one for 2 fits only by displacing the spot one. Then
// a fourth GPU arrives and one of the victim's goes unhealthy. Repair should either replace it up to the deadline or
// mark the victim Degraded (short 1); today it does neither. it.fails: it turns red once this is fixed — flip it then.
describe('a spot victim under notice losing a GPU before its deadline', () => {
  it.fails('is repaired up to its deadline or reported Degraded', async () => {
    const victimPool = await makePool('victim').owner('acme').create(t.db);
    const node = makeNode('v-a').gpus(3);
    await node.create(t.db, victimPool);
    const spot = await ledger.reserve(reservation(victimPool, { devices: [{ class: 'gpu', count: 2 }], spot: true, duration: 7200 }), now);
    const steady = await ledger.reserve(reservation(victimPool, { devices: [{ class: 'gpu', count: 1 }], duration: 7200 }), now);
    const urgent = await ledger.reserve(reservation(victimPool, { devices: [{ class: 'gpu', count: 2 }], duration: 3600 }), now);
    if (!spot.ok || !steady.ok || !urgent.ok) throw new Error('setup did not place');
    expect((await ledger.get(spot.reservation.id))!.preemption).toMatchObject({ by: urgent.reservation.id });
    const broken = spot.reservation.allocations[0]!.atoms[0]!;
    const gpus = makeNode('v-a').gpus(4).report().map((g) => (g.uuid === broken ? { ...g, healthy: false } : g));
    await applyInventory(t.db, 'v-a', { gpus });
    await repairPass(t.db, { graceSeconds: GRACE_SECONDS });
    // Never past the deadline (this holds today)...
    expect((await preemptionViolations()).bookingsPastDeadline).toEqual([]);
    // ...but the victim is left on the unhealthy GPU, whole by its own account.
    expect((await t.db.query(ON_LOST_ATOMS(true))).rows).toEqual([]);
  });
});
