// The ledger's side of DRA (migrations/0019_dra_claims.sql, src/db/claims.ts, ADR 0043): which atom is handed to which
// ResourceClaim. On-demand claims book on the node the placer chooses, Reservation claims take their Reservation's
// atoms inside its window only, one atom is held by one live claim, and a claim's row can name only an atom booked to it.
import { beforeAll, describe, expect, it } from 'vitest';
import { advanceClock } from '../../src/db/clock.ts';
import { claimHolding, type ClaimIdentity } from '../../src/db/claims.ts';
import { setNodeState } from '../../src/db/inventory.ts';
import { repairPass } from '../../src/db/repair.ts';
import { Ledger } from '../../src/db/ledger.ts';
import { makeNode, makePool, reservation } from '../support/builders.ts';
import { useTestDatabase } from '../support/db.ts';

const ctx = useTestDatabase();
let ledger: Ledger;
let draPool: string;
let n = 0;

function claim(over: Partial<ClaimIdentity> = {}): ClaimIdentity {
  n++;
  return { claimUid: `claim-uid-${n}`, namespace: 'acme', claimName: `claim-${n}`, podUid: `pod-uid-${n}`, podName: `pod-${n}`, ...over };
}

const liveRows = async (sql: string, params: unknown[] = []) => (await ctx.db.query(sql, params)).rows;

describe('DRA claims in the ledger', () => {
  beforeAll(async () => {
    ledger = new Ledger(ctx.db);
    draPool = await makePool('dra').handoff('dra').create(ctx.db);
    await makeNode('dra-a').gpus(2).domain('a').create(ctx.db, draPool);
    await makeNode('dra-b').gpus(4).domain('b').create(ctx.db, draPool);
    // A device-plugin pool's nodes are never booked for a claim.
    const dp = await makePool('dp').create(ctx.db);
    await makeNode('dp-a').gpus(8).domain('c').create(ctx.db, dp);
  });

  it('an on-demand claim is booked on a node the placer chooses, among those its pod selects; idempotent', async () => {
    const id = claim();
    const r = await ledger.bookClaim(
      { id, tenantId: 'acme', requests: [{ name: 'gpu', count: 2, class: 'gpu' }], nodeSelector: { 'topology.kubernetes.io/zone': 'a' }, durationSeconds: null },
      ctx.clock.now(),
    );
    if (!r.ok) throw new Error(r.message);
    expect(r.holding.nodeId).toBe('dra-a');
    expect(r.holding.owner).toMatchObject({ kind: 'pod', podUid: id.podUid });
    expect(r.holding.devices.map((d) => d.request)).toEqual(['gpu', 'gpu']);
    expect(r.holding.end).toBeNull();
    expect(r.holding.now).toBe(true);
    // The pod's booking is the one behind the claim.
    const booking = await ledger.podBooking(id.podUid);
    expect(booking?.atoms.sort()).toEqual(r.holding.devices.map((d) => d.atomId).sort());
    const again = await ledger.bookClaim({ id, tenantId: 'acme', requests: [{ name: 'gpu', count: 2, class: 'gpu' }], durationSeconds: null }, ctx.clock.now());
    expect(again).toEqual(r);
    // dra-a is full now: the next claim that selects it does not fit, and the device-plugin pool is no way out.
    const full = await ledger.bookClaim(
      { id: claim(), tenantId: 'acme', requests: [{ name: 'gpu', count: 1, class: 'gpu' }], nodeSelector: { 'topology.kubernetes.io/zone': 'a' }, durationSeconds: null },
      ctx.clock.now(),
    );
    expect(full).toMatchObject({ ok: false, code: 'NO_CAPACITY' });
    const dpOnly = await ledger.bookClaim(
      { id: claim(), tenantId: 'acme', requests: [{ name: 'gpu', count: 1, class: 'gpu' }], nodeSelector: { 'topology.kubernetes.io/zone': 'c' }, durationSeconds: null },
      ctx.clock.now(),
    );
    expect(dpOnly).toMatchObject({ ok: false, code: 'NO_CAPACITY' });
    // A tenant no DRA pool is offered to.
    const stranger = await ledger.bookClaim({ id: claim(), tenantId: 'nobody', requests: [{ name: 'gpu', count: 1, class: 'gpu' }], durationSeconds: null }, ctx.clock.now());
    expect(stranger).toMatchObject({ ok: false, code: 'NO_CAPACITY' });
    // Released: the rows and the booking behind them.
    expect(await ledger.releaseClaim(id.claimUid)).toBe(true);
    expect(await claimHolding(ctx.db, id.claimUid)).toBeUndefined();
    expect(await ledger.podBooking(id.podUid)).toBeUndefined();
    expect(await ledger.releaseClaim(id.claimUid)).toBe(false);
  });

  it('a pod booking left by a crash before its rows is handed to the claim, not booked again', async () => {
    const id = claim();
    const booked = await ledger.bookPod(
      { tenantId: 'acme', poolId: draPool, podUid: id.podUid, nodeId: 'dra-b', devices: [{ class: 'gpu', count: 1 }], durationSeconds: null },
      ctx.clock.now(),
    );
    if (!booked.ok) throw new Error(booked.message);
    const r = await ledger.bookClaim({ id, tenantId: 'acme', requests: [{ name: 'r', count: 1, class: 'gpu' }], durationSeconds: null }, ctx.clock.now());
    if (!r.ok) throw new Error(r.message);
    expect(r.holding.devices).toEqual([{ request: 'r', atomId: booked.atoms[0] }]);
    expect(r.holding.owner).toEqual({ kind: 'pod', podUid: id.podUid, allocationId: booked.allocationId });
    // The pod's release (the releaser's) releases its claim too.
    expect(await ledger.releasePod(id.podUid)).toBe(true);
    expect(await claimHolding(ctx.db, id.claimUid)).toBeUndefined();
  });

  it('two claims cannot hold one atom, and a row cannot name an atom not booked to it', async () => {
    const id = claim();
    const r = await ledger.bookClaim({ id, tenantId: 'acme', requests: [{ name: 'gpu', count: 1, class: 'gpu' }], durationSeconds: null }, ctx.clock.now());
    if (!r.ok) throw new Error(r.message);
    const { atomId } = r.holding.devices[0]!;
    const { allocationId } = r.holding.owner as { allocationId: string };
    const insert = (claimUid: string, device: string) =>
      ctx.db.query(
        `INSERT INTO claim_atoms (claim_uid, namespace, claim_name, request, pod_uid, node_id, device_id, allocation_id)
         VALUES ($1, 'acme', 'x', 'gpu', $2, $3, $4, $5)`,
        [claimUid, id.podUid, r.holding.nodeId, device, allocationId],
      );
    await expect(insert('another-claim', atomId)).rejects.toMatchObject({ code: '23505', constraint: 'unique$claim_atoms$live_device' });
    // Another atom of the node, free: not booked to this allocation.
    const [other] = await liveRows(
      `SELECT d.id FROM devices d WHERE d.node_id = $1 AND d.bookable AND d.id <> $2
         AND NOT EXISTS (SELECT 1 FROM device_bookings b WHERE b.device_id = d.id AND upper(b.during) > compute_now()) LIMIT 1`,
      [r.holding.nodeId, atomId],
    );
    await expect(insert('another-claim', other!.id)).rejects.toMatchObject({ code: '23514', constraint: 'check$claim_atoms$booked' });
    await ledger.releaseClaim(id.claimUid);
  });

  it("a Reservation's claims take its atoms, each atom once, on one node", async () => {
    const rsv = await ledger.reserve(reservation(draPool, { devices: [{ class: 'gpu', count: 2 }] }), ctx.clock.now());
    if (!rsv.ok) throw new Error(rsv.message);
    const booked = rsv.reservation.allocations.flatMap((a) => a.atoms).sort();
    const assign = (id: ClaimIdentity) => ledger.assignClaim({ id, reservationId: rsv.reservation.id, tenantId: 'acme', requests: [{ name: 'gpus', count: 1, class: 'any' }] });
    const a = claim();
    const b = claim();
    const ra = await assign(a);
    const rb = await assign(b);
    if (!ra.ok || !rb.ok) throw new Error('not assigned');
    const got = [...ra.holding.devices, ...rb.holding.devices].map((d) => d.atomId).sort();
    expect(got).toEqual(booked);
    expect(ra.holding.owner).toEqual({ kind: 'reservation', reservationId: rsv.reservation.id });
    expect(ra.holding.now).toBe(true);
    expect(ra.holding.end).toBe(rsv.reservation.end);
    // Idempotent; and the third claim finds no atom left.
    expect(await assign(a)).toMatchObject({ ok: true, existing: true, holding: ra.holding });
    expect(await assign(claim())).toMatchObject({ ok: false, reason: expect.stringContaining('no node with 1 atoms that no other claim of it holds') });
    // The pods are the Reservation's pods as in device-plugin mode (the releaser and the stopper read these).
    const assignments = await liveRows('SELECT pod_uid FROM reservation_pod_assignments WHERE reservation_id = $1 AND released_at IS NULL ORDER BY pod_uid', [rsv.reservation.id]);
    expect(assignments.map((x) => x.pod_uid)).toEqual([a.podUid, b.podUid].sort());
    // Released, a claim's atom is free for the next claim; its pod's assignment goes with it.
    expect(await ledger.releaseClaim(a.claimUid)).toBe(true);
    const c = await assign(claim());
    expect(c).toMatchObject({ ok: true, holding: { devices: ra.holding.devices } });
    expect((await ledger.get(rsv.reservation.id))?.state).toBe('confirmed');
    // At the window's end the allocator releases the Reservation's claims (the next booking's claims need the atoms).
    await ledger.releaseClaim(b.claimUid);
    if (c.ok) await ledger.releaseClaim(c.holding.claimUid);
  });

  it("a Reservation's claim before the window is refused, and assigned once it starts", async () => {
    const start = ctx.clock.now() + 3 * 3600_000;
    const rsv = await ledger.reserve(reservation(draPool, { start, duration: 600 }), ctx.clock.now());
    if (!rsv.ok) throw new Error(rsv.message);
    const id = claim();
    const assign = () => ledger.assignClaim({ id, reservationId: rsv.reservation.id, tenantId: 'acme', requests: [{ name: 'gpu', count: 1, class: 'any' }] });
    expect(await assign()).toMatchObject({ ok: false, reason: expect.stringContaining('starts at') });
    expect(await claimHolding(ctx.db, id.claimUid)).toBeUndefined();
    // Another tenant's pod may not take it either.
    expect(await ledger.assignClaim({ id: claim(), reservationId: rsv.reservation.id, tenantId: 'other', requests: [{ name: 'gpu', count: 1, class: 'any' }] })).toMatchObject({ ok: false });
    await advanceClock(ctx.db, 3 * 3600_000 + 1000);
    const r = await assign();
    if (!r.ok) throw new Error(r.reason);
    expect(r.holding.devices.map((d) => d.atomId)).toEqual(rsv.reservation.allocations[0]!.atoms);
    expect(r.holding.now).toBe(true);
    // After the window the holding no longer holds now (the prepare check refuses it).
    await advanceClock(ctx.db, 601_000);
    expect((await claimHolding(ctx.db, id.claimUid))?.now).toBe(false);
  });

  it("repair in DRA mode: a Reservation's atoms on a node in maintenance stay while its claim holds them; released, they move, and the next claim gets the new ones", async () => {
    const pool = await makePool('dra-repair').handoff('dra').create(ctx.db);
    await makeNode('rep-a').gpus(2).domain('ra').create(ctx.db, pool);
    await makeNode('rep-b').gpus(2).domain('rb').create(ctx.db, pool);
    const rsv = await ledger.reserve(reservation(pool, { devices: [{ class: 'gpu', count: 2 }] }), ctx.clock.now());
    if (!rsv.ok) throw new Error(rsv.message);
    const [before] = rsv.reservation.allocations;
    const other = before!.nodeId === 'rep-a' ? 'rep-b' : 'rep-a';
    const assign = (id: ClaimIdentity) => ledger.assignClaim({ id, reservationId: rsv.reservation.id, tenantId: 'acme', requests: [{ name: 'gpu', count: 1, class: 'any' }] });
    const held = await assign(claim());
    if (!held.ok) throw new Error(held.reason);
    expect(held.holding.devices[0]!.atomId).toSatisfy((a: string) => before!.atoms.includes(a));

    await setNodeState(ctx.db, before!.nodeId, { maintenance: true });
    // A container may hold the atom: the booking on that node is neither cut nor moved.
    expect((await repairPass(ctx.db, { graceSeconds: 120 })).filter((o) => o.reservationId === rsv.reservation.id && o.verdict === 'repaired')).toEqual([]);
    expect((await ledger.get(rsv.reservation.id))?.allocations.map((a) => a.nodeId)).toEqual([before!.nodeId]);

    // The pod is gone (released on evidence): the next pass moves the booking, and a new claim is handed the new atoms.
    expect(await ledger.releaseClaim(held.holding.claimUid)).toBe(true);
    const outcomes = await repairPass(ctx.db, { graceSeconds: 120 });
    expect(outcomes.find((o) => o.reservationId === rsv.reservation.id)).toMatchObject({ verdict: 'repaired' });
    const after = (await ledger.get(rsv.reservation.id))!.allocations.filter((a) => a.nodeId === other);
    expect(after.flatMap((a) => a.atoms)).toHaveLength(2);
    const next = await assign(claim());
    if (!next.ok) throw new Error(next.reason);
    expect(next.holding.devices[0]!.atomId).toSatisfy((a: string) => after[0]!.atoms.includes(a));
    await ledger.releaseClaim(next.holding.claimUid);
    await setNodeState(ctx.db, before!.nodeId, { maintenance: false });
  });

  it('a gang Reservation (2 members of 2 GPUs): each claim of 2 devices takes one member\'s node whole, the two claims two nodes', async () => {
    const pool = await makePool('dra-gang').handoff('dra').create(ctx.db);
    await makeNode('gang-a').gpus(2).domain('g').create(ctx.db, pool);
    await makeNode('gang-b').gpus(2).domain('g').create(ctx.db, pool);
    const rsv = await ledger.reserve(reservation(pool, { devices: [{ class: 'gpu', count: 2 }], gang: { size: 2 } }), ctx.clock.now());
    if (!rsv.ok) throw new Error(rsv.message);
    const assign = () => ledger.assignClaim({ id: claim(), reservationId: rsv.reservation.id, tenantId: 'acme', requests: [{ name: 'gpus', count: 2, class: 'any' }] });
    const got = [await assign(), await assign()];
    const holdings = got.map((g) => {
      if (!g.ok) throw new Error(g.reason);
      return g.holding;
    });
    const byNode = (atoms: string[]) => rsv.reservation.allocations.find((a) => atoms.every((x) => a.atoms.includes(x)))?.nodeId;
    const nodes = holdings.map((h) => byNode(h.devices.map((d) => d.atomId)));
    expect(nodes.sort()).toEqual(['gang-a', 'gang-b']);
    expect(await assign()).toMatchObject({ ok: false });
    for (const h of holdings) await ledger.releaseClaim(h.claimUid);
  });

  it("a pod's second on-demand claim of ours is refused (its booking answers one claim); the first keeps its atoms", async () => {
    const first = claim();
    const second = claim({ podUid: first.podUid, podName: first.podName });
    const book = (id: ClaimIdentity) => ledger.bookClaim({ id, tenantId: 'acme', requests: [{ name: 'gpu', count: 1, class: 'gpu' }], durationSeconds: null }, ctx.clock.now());
    const a = await book(first);
    if (!a.ok) throw new Error(a.message);
    expect(await book(second)).toMatchObject({ ok: false, code: 'CLAIM_REFUSED', message: expect.stringContaining('one on-demand claim per pod') });
    expect(await claimHolding(ctx.db, second.claimUid)).toBeUndefined();
    expect(await claimHolding(ctx.db, first.claimUid)).toEqual(a.holding);
    expect(await ledger.releaseClaim(first.claimUid)).toBe(true);
  });
});
