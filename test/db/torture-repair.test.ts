// The torture run extended with repair and spot preemption (issue 12): a few hundred interleaved operations from a
// seeded generator — reserves (regular and spot, some future, some held with a lease), confirms, releases, pod
// bookings, GPUs removed and flipped unhealthy through applyInventory (what the NodeDevices reconciler calls), Nodes
// deleted through nodeGone and coming back, maintenance and NotReady, repair passes, time passing (the leader's lease
// expiry and preemption steps called on the ledger at each step), rollup and quota rebuilds — with every invariant
// checked every CHECK_EVERY operations and at the end. Sequential, so one seed replays one run (the seed is printed;
// BC_TORTURE_SEED overrides it). Time is frozen and moved by hand, so a run does not depend on how fast it goes.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FenceHolder } from '../../src/controller/fence.ts';
import { rebuildQuotas } from '../../src/controller/drift.ts';
import { nodeGone } from '../../src/controller/gone.ts';
import { SQLSTATE, sqlState } from '../../src/db/errors.ts';
import { applyInventory, setNodeState, upsertNode } from '../../src/db/inventory.ts';
import { Ledger } from '../../src/db/ledger.ts';
import { createPool, type Db } from '../../src/db/pool.ts';
import { repairPass } from '../../src/db/repair.ts';
import { makeNode, makePool, reservation, type NodeBuilder } from '../support/builders.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { checkInvariants, CLEAN, rng } from '../support/invariants.ts';

const DEFAULT_SEED = 20261130;
const SEED = Number(process.env.BC_TORTURE_SEED ?? DEFAULT_SEED);
const OPERATIONS = 600;
const CHECK_EVERY = 25;
const GRACE_SECONDS = 120;
const TENANTS = ['acme', 'beta', 'gamma'];
const NODE_LABELS = { 'topology.kubernetes.io/zone': 'zone-a' };

let t: TestDatabase;
let ledger: Ledger;
/** Three "controller replicas" for the concurrent run, each with its own connections and snapshot cache. */
let replicas: Db[] = [];
let poolId: string;
const fence = new FenceHolder('torture-repair');
/** The frozen compute_now(), in ms: every decision of the run uses it, so the run does not depend on wall time. */
let now = 0;

interface NodeModel {
  builder: NodeBuilder;
  gone: boolean;
  maintenance: boolean;
  notReady: boolean;
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
    nodes.set(builder.id, { builder, gone: false, maintenance: false, notReady: false, removed: new Set(), unhealthy: new Set() });
  }
});
afterAll(async () => {
  await Promise.all(replicas.map((p) => p.end()));
  await t?.drop();
});

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

/**
 * Breaks stay few, so that the pool keeps room to repair into: a node event on a healthy node breaks it only while at
 * most one other node is out; otherwise it heals the chosen node (or, when that one is fine, the first one out).
 */
const nodeOut = (m: NodeModel) => m.gone || m.maintenance || m.notReady;
function nodeToChange(chosen: string, wouldBreak: (m: NodeModel) => boolean): { id: string; m: NodeModel } {
  const m = nodes.get(chosen)!;
  if (wouldBreak(m) && [...nodes.values()].filter(nodeOut).length >= 2) {
    const [id, out] = [...nodes.entries()].find(([, n]) => nodeOut(n))!;
    return { id, m: out };
  }
  return { id: chosen, m };
}
/** At most four GPUs of the pool removed or unhealthy at once; past that, a device event puts one back. */
function deviceToChange(chosen: string, gpu: number, set: 'removed' | 'unhealthy'): { id: string; gpu: number } {
  const m = nodes.get(chosen)!;
  const broken = [...nodes.values()].reduce((n, x) => n + x.removed.size + x.unhealthy.size, 0);
  if (!m[set].has(gpu) && broken >= 4) {
    const [id, other] = [...nodes.entries()].find(([, n]) => n[set].size > 0) ?? [chosen, m];
    return { id, gpu: other[set].size > 0 ? [...other[set]][0]! : gpu };
  }
  return { id: chosen, gpu };
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
 * Spot victims under notice are held to it too (they report themselves short; see the test of one below).
 */
const ON_LOST_ATOMS = `
  SELECT r.id, b.device_id FROM device_bookings b JOIN allocations a ON a.id = b.allocation_id
    JOIN reservations r ON r.id = a.reservation_id JOIN devices d ON d.id = b.device_id JOIN nodes n ON n.id = a.node_id
  WHERE a.kind = 'reservation' AND r.state IN ('held', 'confirmed') AND r.repair_short = 0
    AND NOT isempty(b.during) AND upper(b.during) > compute_now()
    AND (n.pool_id IS DISTINCT FROM a.pool_id OR n.maintenance
         OR (n.connectivity <> 'connected' AND n.unreachable_since <= compute_now() - make_interval(secs => ${GRACE_SECONDS}))
         OR NOT d.present OR NOT d.bookable OR NOT d.healthy)
  ORDER BY 1, 2`;

async function lostButNotDegraded() {
  return (await t.db.query(ON_LOST_ATOMS)).rows;
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

// A spot victim under notice loses a GPU before its deadline (found by this torture run: repair used to skip victims,
// whose allocations are released at the deadline ahead). Node v-a has 3 GPUs: the spot reservation holds 2, a regular
// one the third; a second regular one for 2 fits only by displacing the spot one. Then a fourth GPU arrives and one of
// the victim's goes unhealthy: the victim reports itself short by 1 and is not re-placed (ADR 0016).
describe('a spot victim under notice losing a GPU before its deadline', () => {
  it('is reported Degraded by the atom it lost, not re-placed, and never booked past its deadline', async () => {
    const victimPool = await makePool('victim').owner('acme').create(t.db);
    const node = makeNode('v-a').gpus(3);
    await node.create(t.db, victimPool);
    const spot = await ledger.reserve(reservation(victimPool, { devices: [{ class: 'gpu', count: 2 }], spot: true, duration: 7200 }), now);
    const steady = await ledger.reserve(reservation(victimPool, { devices: [{ class: 'gpu', count: 1 }], duration: 7200 }), now);
    const urgent = await ledger.reserve(reservation(victimPool, { devices: [{ class: 'gpu', count: 2 }], duration: 3600 }), now);
    if (!spot.ok || !steady.ok || !urgent.ok) throw new Error('setup did not place');
    expect((await ledger.get(spot.reservation.id))!.preemption).toMatchObject({ by: urgent.reservation.id });
    try {
      const broken = spot.reservation.allocations[0]!.atoms[0]!;
      const gpus = makeNode('v-a').gpus(4).report().map((g) => (g.uuid === broken ? { ...g, healthy: false } : g));
      await applyInventory(t.db, 'v-a', { gpus });
      const outcomes = await repairPass(t.db, { graceSeconds: GRACE_SECONDS });
      // The victim is short; the regular reservation that takes its atoms at the deadline moves off the broken one onto
      // the fourth GPU.
      expect(outcomes).toHaveLength(2);
      expect(outcomes).toEqual(
        expect.arrayContaining([
          expect.objectContaining({ reservationId: spot.reservation.id, verdict: 'degraded', short: 1, reason: 'DeviceUnhealthy' }),
          expect.objectContaining({ reservationId: urgent.reservation.id, verdict: 'repaired', atoms: 1 }),
        ]),
      );
      expect((await preemptionViolations()).bookingsPastDeadline).toEqual([]);
      expect(await lostButNotDegraded()).toEqual([]);
      // Not re-placed: the same single allocation on the same atoms, no repair counted; the view says it is short.
      const view = (await ledger.get(spot.reservation.id))!;
      expect(view.allocations.map((a) => [...a.atoms].sort())).toEqual(spot.reservation.allocations.map((a) => [...a.atoms].sort()));
      expect(view.repair).toMatchObject({ short: 1, reason: 'DeviceUnhealthy', repairs: 0 });
      // A second pass says nothing new.
      expect(await repairPass(t.db, { graceSeconds: GRACE_SECONDS })).toEqual([]);
    } finally {
      for (const r of [spot, steady, urgent]) await ledger.release(r.reservation.id);
    }
  });
});

/** The leader's steps as time passes: held leases run out; victims at their deadline end (pods evicted). */
async function leaderSteps(l: Ledger): Promise<void> {
  await l.expireLeases();
  for (const v of await l.preemptionNotices()) await l.markPreemptionNotified(v.reservationId);
  for (const v of await l.preemptionsDue()) await l.finishPreemption(v.reservationId);
}

describe('torture with repair and spot preemption', () => {
  const live: string[] = [];
  const held: string[] = [];
  const pods: string[] = [];
  let podSeq = 0;

  /** One random operation through `l`; `step` names it in messages, or is null in the concurrent run (see there). */
  async function randomOp(rand: () => number, l: Ledger, step: number | null, moveClock = true): Promise<string> {
    const pick = <T,>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;
    const nodeIds = [...nodes.keys()];
    const x = rand();
    if (x < 0.28) {
      const spot = rand() < 0.35;
      const hold = rand() < 0.2;
      const r = await l.reserve(
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
      const c = await l.confirm(id);
      return 'error' in c ? 'confirm-refused' : 'confirmed';
    }
    if (x < 0.46) {
      const id = live.splice(Math.floor(rand() * live.length), 1)[0];
      if (!id) return 'nothing-to-release';
      return (await l.release(id)) ? 'released' : 'release-noop';
    }
    if (x < 0.52) {
      const podUid = `pod-${++podSeq}`;
      const r = await l.bookPod(
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
      await l.releasePod(uid);
      return 'pod-released';
    }
    const chosen = pick(nodeIds);
    if (x < 0.68) {
      // A GPU pulled from the node or put back; or flipped unhealthy or healthy (the device plugin's report).
      const set = x < 0.62 ? 'removed' : 'unhealthy';
      const { id, gpu } = deviceToChange(chosen, Math.floor(rand() * 4), set);
      const m = nodes.get(id)!;
      if (m[set].has(gpu)) m[set].delete(gpu);
      else m[set].add(gpu);
      await report(id);
      return set === 'removed' ? 'device-removal' : 'device-health';
    }
    if (x < 0.71) {
      // The Node deleted (the informer's delete path), or created again (what the Node reconciler writes).
      const { id: node, m } = nodeToChange(chosen, (n) => !n.gone);
      if (m.gone) {
        await upsertNode(t.db, { id: node, poolId, labels: NODE_LABELS });
        await setNodeState(t.db, node, { connectivity: m.notReady ? 'unreachable' : 'connected' });
      } else {
        await nodeGone(t.db, fence.fence(), node);
      }
      m.gone = !m.gone;
      return 'node-deletion';
    }
    if (x < 0.75) {
      // The bettercompute.io/maintenance label set or taken off (the Node reconciler's setNodeState).
      const { id: node, m } = nodeToChange(chosen, (n) => !n.maintenance);
      m.maintenance = !m.maintenance;
      await setNodeState(t.db, node, { maintenance: m.maintenance });
      return 'maintenance';
    }
    if (x < 0.78) {
      // NotReady or Ready again (a deleted node stays unreachable until it comes back).
      const { id: node, m } = nodeToChange(chosen, (n) => !n.notReady);
      m.notReady = !m.notReady;
      if (!m.gone) await setNodeState(t.db, node, { connectivity: m.notReady ? 'unreachable' : 'connected' });
      return 'not-ready';
    }
    if (x < 0.88) {
      await repairPass(t.db, { graceSeconds: GRACE_SECONDS });
      if (step !== null) {
        expect(await lostButNotDegraded(), `seed ${SEED}, repair pass at operation ${step}`).toEqual([]);
      }
      return 'repair-pass';
    }
    if (x < 0.97) {
      const ms = 10_000 + Math.floor(rand() * 600_000);
      if (moveClock) await advance(ms);
      await leaderSteps(l);
      return 'time-passes';
    }
    // The leader's periodic quota rebuild (the drift job's). Under concurrent bookings PostgreSQL may end it for a
    // deadlock; the leader's loop then runs it again on its next tick, as here.
    for (let attempt = 1; ; attempt++) {
      try {
        await rebuildQuotas(t.db, fence.fence());
        return attempt === 1 ? 'quota-rebuild' : 'quota-rebuild-after-deadlock';
      } catch (e) {
        if (sqlState(e) !== SQLSTATE.deadlock || attempt >= 5) throw e;
      }
    }
  }

  it(`${OPERATIONS} interleaved operations with repairs and preemptions keep every invariant`, async () => {
    console.log(`torture-repair seed ${SEED} (BC_TORTURE_SEED to replay)`);
    const rand = rng(SEED);
    const counts: Record<string, number> = {};
    for (let i = 1; i <= OPERATIONS; i++) {
      const o = await randomOp(rand, ledger, i);
      counts[o] = (counts[o] ?? 0) + 1;
      if (i % CHECK_EVERY === 0) await checkAll(i);
    }
    await repairPass(t.db, { graceSeconds: GRACE_SECONDS });
    expect(await lostButNotDegraded(), `seed ${SEED}, final repair pass`).toEqual([]);
    await checkAll(OPERATIONS);
    console.log(`torture-repair outcomes ${JSON.stringify(counts)}`);
    const { rows } = await t.db.query<{ preempted: number; repaired: number; preemptedAndRepaired: number }>(
      `SELECT count(*) FILTER (WHERE preempt_at IS NOT NULL)::int AS preempted, count(*) FILTER (WHERE repairs > 0)::int AS repaired,
              count(*) FILTER (WHERE preempt_at IS NOT NULL AND repairs > 0)::int AS "preemptedAndRepaired"
       FROM reservations`,
    );
    console.log(`torture-repair reservations ${JSON.stringify(rows[0])}`);
    // The default seed's run does what it is for: each kind of event happens (a replayed seed is judged by the
    // invariants only).
    if (SEED !== DEFAULT_SEED) return;
    expect(Object.keys(counts)).toEqual(expect.arrayContaining([
      'reserved', 'reserved-spot', 'released', 'pod-booked', 'device-removal', 'device-health', 'node-deletion',
      'maintenance', 'repair-pass', 'time-passes', 'quota-rebuild',
    ]));
    expect(rows[0]!.preempted).toBeGreaterThan(0);
    expect(rows[0]!.repaired).toBeGreaterThan(0);
  });

  // Several replicas at once, as the existing torture runs: 12 workers, each a stream of random operations from its own
  // seed, 8 rounds of 50. Which one wins a race is up to PostgreSQL, so only the seeds, not the run, replay. The clock
  // moves between rounds only: in production compute_now() is the transaction's start (now()), so time never moves
  // inside a transaction; moving the frozen clock under running transactions would (READ COMMITTED sees the new row).
  // The "lost but not Degraded" check needs a quiet moment (a GPU may fail just after a pass): made at the end.
  it('400 concurrent operations from three replicas, repairs and preemptions among them, keep every invariant', async () => {
    replicas = [createPool(t.url, 6), createPool(t.url, 6), createPool(t.url, 6)];
    const ledgers = replicas.map((db) => new Ledger(db, { spotNoticeSeconds: 900 }));
    const counts: Record<string, number> = {};
    const clockRand = rng(SEED + 999);
    for (let round = 0; round < 8; round++) {
      let next = 0;
      await Promise.all(
        Array.from({ length: 12 }, async (_, w) => {
          const rand = rng(SEED + 1000 + 12 * round + w);
          while (next < 50) {
            next++;
            const o = await randomOp(rand, ledgers[w % ledgers.length]!, null, false);
            counts[o] = (counts[o] ?? 0) + 1;
          }
        }),
      );
      await advance(10_000 + Math.floor(clockRand() * 600_000));
      await leaderSteps(ledger);
    }
    console.log(`torture-repair concurrent outcomes ${JSON.stringify(counts)}`);
    expect(Object.values(counts).reduce((a, b) => a + b, 0)).toBe(400);
    await repairPass(t.db, { graceSeconds: GRACE_SECONDS });
    expect(await lostButNotDegraded(), `seed ${SEED}, concurrent run, final repair pass`).toEqual([]);
    await checkAll(400);
  });
});
