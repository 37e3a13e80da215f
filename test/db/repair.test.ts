// BookingRepair at the db level (ADR 0016): a node failing between placement and start is re-placed before the start,
// same reservation id; with no room the reservation is Degraded with the atoms short, then repaired when a node comes;
// a GPU going unhealthy under a live reservation is replaced on its node, the old booking truncated at now and kept as
// history. Quota: the replacement is not refused for the atoms it replaces. The test clock moves time.
import { beforeAll, describe, expect, it } from 'vitest';
import { advanceClock } from '../../src/db/clock.ts';
import { setDeviceHealth, setNodeState, setQuota, upsertNode } from '../../src/db/inventory.ts';
import { withTransaction, type Db } from '../../src/db/pool.ts';
import { Ledger } from '../../src/db/ledger.ts';
import { repairPass, type RepairOutcome } from '../../src/db/repair.ts';
import { makeNode, makePool, reservation } from '../support/builders.ts';
import { useTestDatabase } from '../support/db.ts';
import { checkInvariants, CLEAN } from '../support/invariants.ts';

const t = useTestDatabase();
const GRACE = 120;
let ledger: Ledger;

beforeAll(() => {
  ledger = new Ledger(t.db);
});

async function advance(ms: number): Promise<void> {
  await advanceClock(t.db, ms);
  await t.clock.sync();
}

const pass = async (id: string): Promise<RepairOutcome | undefined> =>
  (await repairPass(t.db, { graceSeconds: GRACE })).find((o) => o.reservationId === id);

async function bookings(reservationId: string) {
  const { rows } = await t.db.query<{ device_id: string; node_id: string; empty: boolean; lost: boolean; from: number | null; to: number | null }>(
    `SELECT b.device_id, a.node_id, isempty(b.during) AS empty, b.lost_at IS NOT NULL AS lost,
            (extract(epoch FROM lower(b.during)) * 1000)::float8 AS "from", (extract(epoch FROM upper(b.during)) * 1000)::float8 AS "to"
     FROM device_bookings b JOIN allocations a ON a.id = b.allocation_id WHERE a.reservation_id = $1 ORDER BY b.id`,
    [reservationId],
  );
  return rows;
}

async function nowMs(): Promise<number> {
  const { rows } = await t.db.query<{ t: number }>('SELECT (extract(epoch FROM compute_now()) * 1000)::float8 AS t');
  return rows[0]!.t;
}

describe('a node failing between placement and start', () => {
  let poolId: string;
  beforeAll(async () => {
    poolId = await makePool('nf').owner('ops').offer('acme', { gpu: 2 }).create(t.db);
    for (const n of ['nf-a', 'nf-b']) await makeNode(n).gpus(2).create(t.db, poolId);
  });

  it('is re-placed on another node before its start, same id, once the node is NotReady past the grace', async () => {
    const start = t.clock.now() + 3_600_000;
    const out = await ledger.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 2 }], start, duration: 3600 }), t.clock.now());
    if (!out.ok) throw new Error(out.message);
    const id = out.reservation.id;
    const first = out.reservation.allocations[0]!.nodeId;
    const other = first === 'nf-a' ? 'nf-b' : 'nf-a';

    await setNodeState(t.db, first, { connectivity: 'unreachable' });
    await advance(60_000);
    expect(await pass(id)).toBeUndefined(); // within the grace: NotReady may pass
    await advance(61_000);
    expect(await pass(id)).toEqual({ reservationId: id, verdict: 'repaired', atoms: 2, reason: 'NodeNotReady' });

    const view = (await ledger.get(id))!;
    expect(view.id).toBe(id);
    expect(view.start).toBe(out.reservation.start);
    expect(view.end).toBe(out.reservation.end);
    expect(view.allocations).toEqual([{ id: expect.any(String), nodeId: other, atoms: [`GPU-${other}-00`, `GPU-${other}-01`] }]);
    expect(view.repair).toEqual({ short: 0, reason: 'NodeNotReady', repairs: 1, repairedAt: expect.any(Number) });
    // History: the old bookings had not started, so they end empty; the new ones cover the whole window.
    const rows = await bookings(id);
    expect(rows.filter((b) => b.node_id === first).map((b) => [b.empty, b.lost])).toEqual([[true, true], [true, true]]);
    expect(rows.filter((b) => b.node_id === other).map((b) => [b.from, b.to, b.lost])).toEqual([
      [out.reservation.start, out.reservation.end, false],
      [out.reservation.start, out.reservation.end, false],
    ]);
    // Quota (limit 2): the old charge ended as the new one began; 2 reserved, not 4.
    const q = await t.db.query('SELECT used, reserved FROM quotas WHERE tenant_id = $1 AND pool_id = $2 AND resource = $3', ['acme', poolId, 'gpu']);
    expect(q.rows[0]).toEqual({ used: 0, reserved: 2 });
    expect(await checkInvariants(t.db)).toEqual(CLEAN);
    await ledger.release(id);
  });
});

describe('with no room', () => {
  let poolId: string;
  beforeAll(async () => {
    poolId = await makePool('nr').owner('acme').create(t.db);
    await makeNode('nr-a').gpus(2).create(t.db, poolId);
  });

  it('is Degraded with the atoms short, then repaired when a node comes', async () => {
    const start = t.clock.now() + 3_600_000;
    const out = await ledger.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 2 }], start, duration: 3600 }), t.clock.now());
    if (!out.ok) throw new Error(out.message);
    const id = out.reservation.id;

    // The Node is deleted (what nodeGone writes): no grace, and no other node to go to.
    await upsertNode(t.db, { id: 'nr-a', poolId: null });
    await setNodeState(t.db, 'nr-a', { connectivity: 'unreachable' });
    const degraded = await pass(id);
    expect(degraded).toMatchObject({ reservationId: id, verdict: 'degraded', short: 2, reason: 'NodeGone' });
    expect((await ledger.get(id))!.repair).toEqual({ short: 2, reason: 'NodeGone', repairs: 0, repairedAt: null });
    // It keeps its bookings meanwhile, and says so once: another pass changes nothing.
    expect((await ledger.get(id))!.allocations[0]!.atoms).toHaveLength(2);
    expect(await pass(id)).toBeUndefined();

    await makeNode('nr-b').gpus(2).create(t.db, poolId);
    expect(await pass(id)).toEqual({ reservationId: id, verdict: 'repaired', atoms: 2, reason: 'NodeGone' });
    const view = (await ledger.get(id))!;
    expect(view.allocations.map((a) => a.nodeId)).toEqual(['nr-b']);
    expect(view.repair).toMatchObject({ short: 0, repairs: 1 });
    expect(await checkInvariants(t.db)).toEqual(CLEAN);
    await ledger.release(id);
  });

  it('is whole again, without moving, when its NotReady node comes back', async () => {
    const start = t.clock.now() + 3_600_000;
    const out = await ledger.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 2 }], start, duration: 3600 }), t.clock.now());
    if (!out.ok) throw new Error(out.message);
    const id = out.reservation.id;
    await makeNode('nr-c').gpus(2).create(t.db, poolId); // taken by another reservation: no room
    const blocker = await ledger.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 2 }], start, duration: 3600 }), t.clock.now());
    if (!blocker.ok) throw new Error(blocker.message);
    await setNodeState(t.db, 'nr-b', { connectivity: 'unreachable' });
    await advance((GRACE + 1) * 1000);
    expect(await pass(id)).toMatchObject({ verdict: 'degraded', short: 2, reason: 'NodeNotReady' });

    await setNodeState(t.db, 'nr-b', { connectivity: 'connected' });
    expect(await pass(id)).toEqual({ reservationId: id, verdict: 'restored' });
    const view = (await ledger.get(id))!;
    expect(view.allocations.map((a) => a.nodeId)).toEqual(['nr-b']);
    expect(view.repair).toEqual({ short: 0, reason: 'NodeNotReady', repairs: 0, repairedAt: expect.any(Number) });
    expect(await checkInvariants(t.db)).toEqual(CLEAN);
    await ledger.release(id);
    await ledger.release(blocker.reservation.id);
  });
});

describe('a GPU going unhealthy under a live reservation', () => {
  let poolId: string;
  beforeAll(async () => {
    poolId = await makePool('gu').owner('ops').offer('acme', { gpu: 2 }).create(t.db);
    await makeNode('gu-a').gpus(4).create(t.db, poolId);
  });

  it('is replaced on its node; the old booking truncated at now, the kept one untouched, quota not refused', async () => {
    const out = await ledger.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 2 }], duration: 7200 }), t.clock.now());
    if (!out.ok) throw new Error(out.message);
    const id = out.reservation.id;
    const [lost, kept] = out.reservation.allocations[0]!.atoms as [string, string];
    await advance(600_000);
    const before = await nowMs();

    await setDeviceHealth(t.db, lost, false);
    expect(await pass(id)).toEqual({ reservationId: id, verdict: 'repaired', atoms: 1, reason: 'DeviceUnhealthy' });

    const view = (await ledger.get(id))!;
    const atoms = view.allocations.flatMap((a) => a.atoms).sort();
    expect(atoms).toHaveLength(2);
    expect(atoms).toContain(kept);
    expect(atoms).not.toContain(lost);
    expect(view.allocations.every((a) => a.nodeId === 'gu-a')).toBe(true);
    const rows = await bookings(id);
    const s = out.reservation.start;
    const e = out.reservation.end;
    const replacement = atoms.find((a) => a !== kept)!;
    // The cut: one instant, now (the test clock runs), where the lost GPU's booking ends and its replacement's begins.
    const cut = rows.find((b) => b.device_id === replacement)!.from!;
    expect(cut).toBeGreaterThan(before);
    expect(cut).toBeLessThanOrEqual(await nowMs());
    expect(rows.map((b) => [b.device_id, b.from, b.to, b.lost])).toEqual(
      expect.arrayContaining([
        [lost, s, cut, true], // history: it held the lost GPU from its start until now
        [kept, s, e, false],
        [replacement, cut, e, false],
      ]),
    );
    expect(rows).toHaveLength(3);
    // Limit 2, 2 in use: the replacement fits because the lost GPU's charge ends where it starts.
    const q = await t.db.query('SELECT used, reserved FROM quotas WHERE tenant_id = $1 AND pool_id = $2 AND resource = $3', ['acme', poolId, 'gpu']);
    expect(q.rows[0]).toEqual({ used: 2, reserved: 0 });
    expect(await checkInvariants(t.db)).toEqual(CLEAN);
  });
});

// The design notes' scenario, as docs/repair.md tells it: rack A (a1, a2) is pulled for maintenance while three
// reservations are being placed and two confirmed ones hold atoms there. Limit 10 GPUs for acme, 10 GPUs off the rack.
describe('a rack pulled for repair', () => {
  let poolId: string;
  beforeAll(async () => {
    poolId = await makePool('rack').owner('ops').offer('acme', { gpu: 10 }).create(t.db);
    for (const n of ['a1', 'a2']) await makeNode(n).gpus(2).domain('rack-a').create(t.db, poolId);
    for (const n of ['b1', 'b2', 'b3', 'b4', 'b5']) await makeNode(n).gpus(2).domain('rack-b').create(t.db, poolId);
  });

  const capacity = async () =>
    (await t.db.query(
      `SELECT allocatable, allocated, reserved, maintenance FROM pool_capacity WHERE pool_id = $1 AND resource = 'gpu'`,
      [poolId],
    )).rows[0];
  const quota = async () =>
    (await t.db.query(`SELECT used, reserved FROM quotas WHERE tenant_id = 'acme' AND pool_id = $1 AND resource = 'gpu'`, [poolId])).rows[0];

  it('moves the rollup first, quota never, and re-places both confirmed ones off the rack; the in-flight ones land off it', async () => {
    const h = 3_600_000;
    const t0 = t.clock.now();
    const gpus2 = [{ class: 'gpu' as const, count: 2 }];
    // R1 live from now for 2 h, R2 from +1 h for 2 h: on empty nodes the planner breaks ties by node name, so a1 and
    // a2. The rack's atoms are then busy through [+1 h, +2 h).
    const r1 = await ledger.reserve(reservation(poolId, { devices: gpus2, duration: 2 * 3600 }), t0);
    if (!r1.ok) throw new Error(r1.message);
    const r2out = await ledger.reserve(reservation(poolId, { devices: gpus2, start: t0 + h, duration: 2 * 3600 }), t0);
    if (!r2out.ok) throw new Error(r2out.message);
    const r2 = r2out.reservation;
    expect([r1.reservation.allocations[0]!.nodeId, r2.allocations[0]!.nodeId]).toEqual(['a1', 'a2']);
    expect(await capacity()).toEqual({ allocatable: 14, allocated: 2, reserved: 2, maintenance: 0 });
    expect(await quota()).toEqual({ used: 2, reserved: 2 });

    // The pull (the node reconciler's writes for the labelled rack) while three 2-GPU reservations for [+1 h, +2 h) are
    // being placed: the rack's atoms are booked then, so wherever they land it is off the rack.
    const [, ...inFlight] = await Promise.all([
      withTransaction(t.db, async (c) => {
        for (const n of ['a1', 'a2']) await setNodeState(c as unknown as Db, n, { maintenance: true });
      }),
      ...[1, 2, 3].map(() => ledger.reserve(reservation(poolId, { devices: gpus2, start: t0 + h, duration: 3600 }), t0)),
    ]);
    for (const r of inFlight) {
      if (!r.ok) throw new Error(r.message);
      expect(r.reservation.allocations.map((a) => a.nodeId)[0]).toMatch(/^b/);
    }
    // First the rollup, in the pull's own transaction: 4 GPUs from allocatable to maintenance, and the bookings on
    // them leave allocated (R1) and reserved (R2). Quota does not move: both are still charged.
    expect(await capacity()).toEqual({ allocatable: 10, allocated: 0, reserved: 6, maintenance: 4 });
    expect(await quota()).toEqual({ used: 2, reserved: 8 });

    // The repair pass: both confirmed ones re-placed on rack B, same ids; at the limit of 10, not refused.
    const outcomes = (await repairPass(t.db, { graceSeconds: GRACE })).filter((o) => [r1.reservation.id, r2.id].includes(o.reservationId));
    expect(outcomes).toEqual([
      { reservationId: r1.reservation.id, verdict: 'repaired', atoms: 2, reason: 'Maintenance' },
      { reservationId: r2.id, verdict: 'repaired', atoms: 2, reason: 'Maintenance' },
    ].sort((a, b) => (a.reservationId < b.reservationId ? -1 : 1)));
    for (const id of [r1.reservation.id, r2.id]) {
      const v = (await ledger.get(id))!;
      expect(v.allocations.map((a) => a.nodeId)[0]).toMatch(/^b/);
      expect(v.allocations.flatMap((a) => a.atoms)).toHaveLength(2);
    }
    // Then the rollup gets them back on rack B; quota still as before; rack B is full in [+1 h, +2 h).
    expect(await capacity()).toEqual({ allocatable: 10, allocated: 2, reserved: 8, maintenance: 4 });
    expect(await quota()).toEqual({ used: 2, reserved: 8 });
    const full = await ledger.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 1 }], start: t0 + h, duration: 60 }), t.clock.now());
    expect(full).toMatchObject({ ok: false });
    expect(await checkInvariants(t.db)).toEqual(CLEAN);
  });
});


describe('a gang whose domain loses a node', () => {
  let poolId: string;
  beforeAll(async () => {
    poolId = await makePool('gg').owner('acme').create(t.db);
    for (const n of ['gg1-a', 'gg1-b', 'gg1-c']) await makeNode(n).gpus(2).domain('z1').create(t.db, poolId);
    for (const n of ['gg2-a', 'gg2-b']) await makeNode(n).gpus(2).domain('z2').create(t.db, poolId);
  });

  it('gets the member replaced inside its domain; when the domain is full it is Degraded, not moved to another', async () => {
    const start = t.clock.now() + 3_600_000;
    const out = await ledger.reserve(
      reservation(poolId, { devices: [{ class: 'gpu', count: 2 }], gang: { size: 2 }, start, duration: 3600 }),
      t.clock.now(),
    );
    if (!out.ok) throw new Error(out.message);
    const id = out.reservation.id;
    // Equal scores: the domain and members first by name.
    expect(out.reservation.allocations.map((a) => a.nodeId)).toEqual(['gg1-a', 'gg1-b']);

    await setNodeState(t.db, 'gg1-a', { maintenance: true });
    expect(await pass(id)).toEqual({ reservationId: id, verdict: 'repaired', atoms: 2, reason: 'Maintenance' });
    expect((await ledger.get(id))!.allocations.map((a) => a.nodeId)).toEqual(['gg1-b', 'gg1-c']);

    // z1 has no node left for a member; z2 has two free nodes, but the gang keeps gg1-b and stays in z1.
    await setNodeState(t.db, 'gg1-c', { maintenance: true });
    expect(await pass(id)).toMatchObject({ reservationId: id, verdict: 'degraded', short: 2, reason: 'Maintenance' });
    expect((await ledger.get(id))!.allocations.map((a) => a.nodeId)).toEqual(['gg1-b', 'gg1-c']);

    // gg1-a back from maintenance: the member moves there.
    await setNodeState(t.db, 'gg1-a', { maintenance: false });
    expect(await pass(id)).toMatchObject({ reservationId: id, verdict: 'repaired' });
    expect((await ledger.get(id))!.allocations.map((a) => a.nodeId)).toEqual(['gg1-a', 'gg1-b']);
    expect((await ledger.get(id))!.repair).toEqual({ short: 0, reason: 'Maintenance', repairs: 2, repairedAt: expect.any(Number) });
    expect(await checkInvariants(t.db)).toEqual(CLEAN);
  });
});

describe('a started reservation that loses a GPU with no spare on its node', () => {
  let poolId: string;
  beforeAll(async () => {
    poolId = await makePool('st').owner('acme').create(t.db);
    for (const n of ['st-a', 'st-b']) await makeNode(n).gpus(2).create(t.db, poolId);
  });

  it('keeps its node and its other GPU (pods may run there), and is Degraded by one', async () => {
    const out = await ledger.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 2 }], duration: 3600 }), t.clock.now());
    if (!out.ok) throw new Error(out.message);
    const id = out.reservation.id;
    const [lost] = out.reservation.allocations[0]!.atoms as [string];
    await setDeviceHealth(t.db, lost, false);
    expect(await pass(id)).toMatchObject({ reservationId: id, verdict: 'degraded', short: 1, reason: 'DeviceUnhealthy' });
    expect((await ledger.get(id))!.allocations).toEqual(out.reservation.allocations);
    await setDeviceHealth(t.db, lost, true);
    expect(await pass(id)).toEqual({ reservationId: id, verdict: 'restored' });
    expect(await checkInvariants(t.db)).toEqual(CLEAN);
  });
});

describe('a repair that the tenant\'s quota refuses', () => {
  let poolId: string;
  beforeAll(async () => {
    poolId = await makePool('qd').owner('ops').offer('acme', { gpu: 2 }).create(t.db);
    for (const n of ['qd-a', 'qd-b']) await makeNode(n).gpus(2).create(t.db, poolId);
  });

  it('is Degraded (not retried as a lost race) while the limit was lowered below it, and repaired once raised', async () => {
    const out = await ledger.reserve(
      reservation(poolId, { devices: [{ class: 'gpu', count: 2 }], start: t.clock.now() + 3_600_000, duration: 3600 }),
      t.clock.now(),
    );
    if (!out.ok) throw new Error(out.message);
    const id = out.reservation.id;
    await setQuota(t.db, 'acme', poolId, 'gpu', 1);
    await setNodeState(t.db, out.reservation.allocations[0]!.nodeId, { maintenance: true });
    expect(await pass(id)).toMatchObject({ reservationId: id, verdict: 'degraded', short: 2, reason: 'Maintenance' });
    expect((await ledger.get(id))!.allocations).toEqual(out.reservation.allocations); // rolled back: kept as it was
    expect(await pass(id)).toBeUndefined();
    await setQuota(t.db, 'acme', poolId, 'gpu', 2);
    expect(await pass(id)).toEqual({ reservationId: id, verdict: 'repaired', atoms: 2, reason: 'Maintenance' });
    expect(await checkInvariants(t.db)).toEqual(CLEAN);
  });
});

describe('pods of a repaired reservation', () => {
  let poolId: string;
  beforeAll(async () => {
    poolId = await makePool('pd').owner('acme').create(t.db);
    for (const n of ['pd-a', 'pd-b']) await makeNode(n).gpus(2).create(t.db, poolId);
  });

  it('keep what a running pod holds until it is gone, then land on the new atoms: the assignment counts the replacement, not the lost node', async () => {
    const out = await ledger.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 2 }], duration: 3600 }), t.clock.now());
    if (!out.ok) throw new Error(out.message);
    const id = out.reservation.id;
    const pod = (n: number, nodeId: string) =>
      ledger.assignPod({ podUid: `pd-pod-${n}`, reservationId: id, tenantId: 'acme', nodeId, namespace: 'team-a', podName: `p${n}`, count: 2 });
    const bookable = async () => {
      const r = await ledger.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 2 }], duration: 600 }), t.clock.now());
      if (r.ok) await ledger.release(r.reservation.id);
      return r.ok;
    };
    expect(await pod(1, 'pd-a')).toMatchObject({ ok: true }); // running there when the node goes into maintenance
    await setNodeState(t.db, 'pd-a', { maintenance: true });
    // While it runs there: nothing cut, nothing re-placed (docs/repair.md); its atoms stay booked. Another
    // reservation gets pd-b's two, and no more.
    expect(await pass(id)).toBeUndefined();
    await setNodeState(t.db, 'pd-a', { maintenance: false });
    expect(await pass(id)).toBeUndefined();
    const other = await ledger.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 2 }], duration: 600 }), t.clock.now());
    expect(other).toMatchObject({ ok: true, reservation: { allocations: [{ nodeId: 'pd-b' }] } });
    expect(await bookable()).toBe(false);
    if (other.ok) await ledger.release(other.reservation.id);

    // Into maintenance again; the pod goes: the next pass re-places onto pd-b; pd-a's atoms are free once it is back.
    await setNodeState(t.db, 'pd-a', { maintenance: true });
    expect(await pass(id)).toBeUndefined();
    await ledger.releasePod('pd-pod-1');
    expect(await pass(id)).toMatchObject({ verdict: 'repaired' });
    expect(await pod(2, 'pd-b')).toMatchObject({ ok: true });
    expect(await pod(3, 'pd-a')).toMatchObject({ ok: false, reason: expect.stringContaining('holds 0 atoms on pd-a') });
    await setNodeState(t.db, 'pd-a', { maintenance: false });
    expect(await bookable()).toBe(true);
  });
});
