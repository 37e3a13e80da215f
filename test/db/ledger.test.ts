import { beforeEach, describe, expect, it } from 'vitest';
import { advanceClock } from '../../src/db/clock.ts';
import { setQuota } from '../../src/db/inventory.ts';
import { Ledger } from '../../src/db/ledger.ts';
import { makeNode, makePool, reservation } from '../support/builders.ts';
import { useTestDatabase } from '../support/db.ts';

const ctx = useTestDatabase();

const HOUR = 3_600_000;

async function freshPool(name: string, nodes = 2, configure = (b: ReturnType<typeof makePool>) => b) {
  const poolId = await configure(makePool(name)).create(ctx.db);
  for (let i = 0; i < nodes; i++) await makeNode(`${name}-n${i}`).domain('zone-a').scalars({ vcpu: 64, memoryGiB: 512 }).create(ctx.db, poolId);
  return poolId;
}

describe('reserve', () => {
  let ledger: Ledger;
  beforeEach(() => {
    ledger = new Ledger(ctx.db);
  });

  it('books exact atoms on one node and records them', async () => {
    const poolId = await freshPool('basic');
    const r = await ledger.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 2 }] }), ctx.clock.now());
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    expect(r.reservation.state).toBe('confirmed');
    expect(r.reservation.allocations).toHaveLength(1);
    expect(r.reservation.allocations[0]!.atoms).toHaveLength(2);
    const stored = await ledger.get(r.reservation.id);
    expect(stored!.allocations).toEqual(r.reservation.allocations);
    expect(stored!.end - stored!.start).toBe(HOUR);
  });

  it('keeps two NUMA-local GPUs together and packs the fuller node first', async () => {
    const poolId = await freshPool('packing');
    const first = await ledger.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 2 }] }), ctx.clock.now());
    const second = await ledger.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 2 }] }), ctx.clock.now());
    if (!first.ok || !second.ok) throw new Error('expected both to fit');
    expect(second.reservation.allocations[0]!.nodeId).toBe(first.reservation.allocations[0]!.nodeId);
    const { rows } = await ctx.db.query(
      `SELECT DISTINCT attributes ->> 'numaNode' AS numa FROM devices WHERE id = ANY ($1)`,
      [second.reservation.allocations[0]!.atoms],
    );
    expect(rows).toHaveLength(1);
  });

  it('is idempotent on the idempotency key, and refuses the key for another request', async () => {
    const poolId = await freshPool('idem');
    const input = reservation(poolId, { idempotencyKey: 'same-key' });
    const a = await ledger.reserve(input, ctx.clock.now());
    const b = await ledger.reserve(input, ctx.clock.now());
    expect(a.ok && b.ok).toBe(true);
    if (!a.ok || !b.ok) return;
    expect(b.existing).toBe(true);
    expect(b.reservation.id).toBe(a.reservation.id);
    const c = await ledger.reserve({ ...input, devices: [{ class: 'gpu', count: 3 }] }, ctx.clock.now());
    expect(c).toMatchObject({ ok: false, code: 'IDEMPOTENCY_MISMATCH' });
    const { rows } = await ctx.db.query('SELECT count(*)::int AS n FROM reservations WHERE idempotency_key = $1', ['same-key']);
    expect(rows[0].n).toBe(1);
  });

  it('answers NOT_FOUND for a pool neither owned nor offered, and for an archived pool of another owner', async () => {
    const poolId = await freshPool('private', 1, (b) => b.owner('other').offer('acme'));
    expect((await ledger.reserve(reservation(poolId, { tenantId: 'stranger' }), ctx.clock.now())).ok).toBe(false);
    expect(await ledger.reserve(reservation(poolId, { tenantId: 'stranger' }), ctx.clock.now())).toMatchObject({ code: 'NOT_FOUND' });
    expect((await ledger.reserve(reservation(poolId), ctx.clock.now())).ok).toBe(true);
    await makePool('private').owner('other').offer('acme').archived().create(ctx.db);
    ledger.invalidate();
    expect(await ledger.reserve(reservation(poolId), ctx.clock.now())).toMatchObject({ code: 'NOT_FOUND' });
    expect(await ledger.reserve(reservation(poolId, { tenantId: 'other' }), ctx.clock.now())).toMatchObject({ code: 'POOL_ARCHIVED' });
  });

  it('books a future start as [start, start + duration) and lets the gap before it be booked', async () => {
    const poolId = await freshPool('calendar', 1, (b) => b);
    const now = ctx.clock.now();
    const whole = await ledger.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 8 }], start: now + 24 * HOUR, duration: 3600 }), now);
    if (!whole.ok) throw new Error(whole.message);
    expect(whole.reservation.start).toBeCloseTo(now + 24 * HOUR, -1);
    expect(whole.reservation.end - whole.reservation.start).toBe(HOUR);
    // Now until tomorrow is free: 8 GPUs for 2 hours fit; 8 GPUs for 30 hours do not.
    expect((await ledger.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 8 }], duration: 7200 }), now)).ok).toBe(true);
    const clash = await ledger.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 8 }], start: now + 23 * HOUR, duration: 7200 }), now);
    expect(clash).toMatchObject({ ok: false, code: 'NO_CAPACITY' });
    if (!clash.ok) expect(clash.message).toMatch(/0\/1 nodes fit/);
  });

  it('selects by typed attributes and explains when nothing matches', async () => {
    const poolId = await makePool('selectors').create(ctx.db);
    await makeNode('sel-a100').gpuModel('A100', 40).create(ctx.db, poolId);
    await makeNode('sel-h100').gpuModel('H100', 80).create(ctx.db, poolId);
    const r = await ledger.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 4, selector: { vramGiB: { gte: 80 } } }] }), ctx.clock.now());
    expect(r.ok && r.reservation.allocations[0]!.nodeId).toBe('sel-h100');
    const none = await ledger.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 1, selector: { gpuModel: 'B200' } }] }), ctx.clock.now());
    expect(none).toMatchObject({ ok: false, code: 'NO_CAPACITY' });
    if (!none.ok) expect(none.message).toContain('2 without enough free gpu atoms');
  });

  it('places a gang inside one placement domain, all or nothing', async () => {
    const poolId = await makePool('gang').create(ctx.db);
    for (const [id, zone] of [['g1', 'a'], ['g2', 'a'], ['g3', 'b'], ['g4', 'b'], ['g5', 'b']] as const) {
      await makeNode(id).domain(zone).create(ctx.db, poolId);
    }
    const r = await ledger.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 8 }], gang: { size: 3 } }), ctx.clock.now());
    if (!r.ok) throw new Error(r.message);
    expect(r.reservation.allocations.map((a) => a.nodeId).sort()).toEqual(['g3', 'g4', 'g5']);
    const again = await ledger.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 8 }], gang: { size: 3 } }), ctx.clock.now());
    expect(again).toMatchObject({ ok: false, code: 'NO_CAPACITY' });
    if (!again.ok) expect(again.message).toMatch(/no placement domain .* has 3 nodes that fit; the best has 2/);
    const { rows } = await ctx.db.query(`SELECT count(*)::int AS n FROM allocations WHERE node_id IN ('g1', 'g2')`);
    expect(rows[0].n).toBe(0);
  });

  it('keeps nvlink-all requests inside one NVLink domain', async () => {
    const poolId = await makePool('nvlink').create(ctx.db);
    await makeNode('nvl-off').noNvlink().create(ctx.db, poolId);
    const r = await ledger.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 2, topology: 'nvlink-all' }] }), ctx.clock.now());
    expect(r).toMatchObject({ ok: false, code: 'NO_CAPACITY' });
    await makeNode('nvl-on').create(ctx.db, poolId);
    ledger.invalidate();
    const ok = await ledger.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 2, topology: 'nvlink-all' }] }), ctx.clock.now());
    expect(ok.ok && ok.reservation.allocations[0]!.nodeId).toBe('nvl-on');
  });

  it('overcommits scalars by the pool ratio and never GPUs', async () => {
    const poolId = await makePool('scalars').overcommit({ vcpu: 2 }).create(ctx.db);
    await makeNode('sc-1').gpus(2).scalars({ vcpu: 10, memoryGiB: 100 }).create(ctx.db, poolId);
    const take = (vcpu: number, memoryGiB = 0) =>
      ledger.reserve(reservation(poolId, { resources: { vcpu, memoryGiB } }), ctx.clock.now());
    expect((await take(15)).ok).toBe(true); // 15 of floor(10 × 2) = 20
    expect(await take(6)).toMatchObject({ ok: false, code: 'NO_CAPACITY' });
    expect((await take(5, 100)).ok).toBe(true); // memory has no ratio: exactly 100
    expect(await take(0)).toMatchObject({ ok: false, code: 'NO_CAPACITY' }); // both GPUs are taken
    const { rows } = await ctx.db.query(`SELECT resource, allocated FROM node_resources WHERE node_id = 'sc-1' ORDER BY resource`);
    expect(rows).toEqual([{ resource: 'memoryGiB', allocated: 100 }, { resource: 'vcpu', allocated: 20 }]);
  });

  it('books whole nodes with binding "node"', async () => {
    const poolId = await freshPool('lease', 2);
    await ledger.reserve(reservation(poolId), ctx.clock.now());
    const r = await ledger.reserve(reservation(poolId, { binding: 'node' }), ctx.clock.now());
    if (!r.ok) throw new Error(r.message);
    expect(r.reservation.allocations[0]!.atoms).toHaveLength(8);
    expect(await ledger.reserve(reservation(poolId, { binding: 'node' }), ctx.clock.now())).toMatchObject({ code: 'NO_CAPACITY' });
  });

  it('books MIG instances and time-slice slots as atoms with the spec ids', async () => {
    const migPool = await makePool('migpool').sharing('mig').create(ctx.db);
    await makeNode('mig-1').gpus(1).mig(7).create(ctx.db, migPool);
    const m = await ledger.reserve(reservation(migPool, { devices: [{ class: 'gpu.mig', count: 3 }] }), ctx.clock.now());
    if (!m.ok) throw new Error(m.message);
    for (const a of m.reservation.allocations[0]!.atoms) expect(a).toMatch(/^GPU-mig-1-00\/gi\d+\/ci0$/);
    expect(await ledger.reserve(reservation(migPool, { devices: [{ class: 'gpu', count: 1 }] }), ctx.clock.now())).toMatchObject({ code: 'NO_CAPACITY' });

    const tsPool = await makePool('tspool').sharing('timeslice', 4).create(ctx.db);
    await makeNode('ts-1').gpus(2).create(ctx.db, tsPool);
    const s1 = await ledger.reserve(reservation(tsPool, { devices: [{ class: 'gpu.slot', count: 1, sharing: 'timeslice' }] }), ctx.clock.now());
    const s2 = await ledger.reserve(reservation(tsPool, { devices: [{ class: 'gpu.slot', count: 1 }] }), ctx.clock.now());
    if (!s1.ok || !s2.ok) throw new Error('slots should fit');
    const parent = (id: string) => id.replace(/\/s\d+$/, '');
    expect(s1.reservation.allocations[0]!.atoms[0]).toMatch(/^GPU-ts-1-0\d\/s\d$/);
    // Slots are packed onto the GPU that is already shared.
    expect(parent(s2.reservation.allocations[0]!.atoms[0]!)).toBe(parent(s1.reservation.allocations[0]!.atoms[0]!));
    expect(await ledger.reserve(reservation(tsPool, { devices: [{ class: 'gpu.slot', count: 1, sharing: 'mps' }] }), ctx.clock.now())).toMatchObject({ code: 'NO_CAPACITY' });
  });
});

describe('lifecycle', () => {
  const ledger = () => new Ledger(ctx.db);

  it('release truncates bookings at now instead of deleting them, and frees the atoms', async () => {
    const l = ledger();
    const poolId = await freshPool('release', 1);
    const r = await l.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 8 }] }), ctx.clock.now());
    if (!r.ok) throw new Error(r.message);
    await advanceClock(ctx.db, 60_000);
    await ctx.clock.sync();
    expect(await l.release(r.reservation.id)).toBe(true);
    expect(await l.release(r.reservation.id)).toBe(false);
    const { rows } = await ctx.db.query(
      `SELECT count(*)::int AS n, bool_and(upper(b.during) <= compute_now()) AS truncated, bool_and(upper(b.planned) > compute_now()) AS planned_kept
       FROM device_bookings b JOIN allocations a ON a.id = b.allocation_id WHERE a.reservation_id = $1`,
      [r.reservation.id],
    );
    expect(rows[0]).toEqual({ n: 8, truncated: true, planned_kept: true });
    expect((await l.get(r.reservation.id))!.state).toBe('released');
    expect((await l.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 8 }] }), ctx.clock.now())).ok).toBe(true);
  });

  it('a released future booking is emptied and keeps its plan', async () => {
    const l = ledger();
    const poolId = await freshPool('release-future', 1);
    const r = await l.reserve(reservation(poolId, { start: ctx.clock.now() + HOUR }), ctx.clock.now());
    if (!r.ok) throw new Error(r.message);
    await l.release(r.reservation.id);
    const { rows } = await ctx.db.query(
      `SELECT isempty(b.during) AS emptied, NOT isempty(b.planned) AS planned FROM device_bookings b
       JOIN allocations a ON a.id = b.allocation_id WHERE a.reservation_id = $1`,
      [r.reservation.id],
    );
    expect(rows).toEqual([{ emptied: true, planned: true }]);
  });

  it('holds with a lease that expires unless confirmed or renewed', async () => {
    const l = ledger();
    const poolId = await freshPool('lease-life', 1);
    const held = await l.reserve(reservation(poolId, { leaseSeconds: 60, devices: [{ class: 'gpu', count: 4 }] }), ctx.clock.now());
    const toConfirm = await l.reserve(reservation(poolId, { leaseSeconds: 60, devices: [{ class: 'gpu', count: 2 }] }), ctx.clock.now());
    const toRenew = await l.reserve(reservation(poolId, { leaseSeconds: 60, devices: [{ class: 'gpu', count: 2 }] }), ctx.clock.now());
    if (!held.ok || !toConfirm.ok || !toRenew.ok) throw new Error('expected three holds');
    expect(held.reservation.state).toBe('held');
    expect(held.reservation.leaseExpiresAt! - ctx.clock.now()).toBeGreaterThan(55_000);
    expect(await l.confirm(toConfirm.reservation.id)).toMatchObject({ state: 'confirmed', leaseExpiresAt: null });
    await advanceClock(ctx.db, 45_000);
    expect(await l.renew(toRenew.reservation.id, 60)).toMatchObject({ state: 'held' });
    await advanceClock(ctx.db, 30_000);
    await ctx.clock.sync();
    expect(await l.expireLeases()).toEqual([held.reservation.id]);
    expect(await l.confirm(held.reservation.id)).toEqual({ error: expect.stringContaining('in state expired') });
    expect((await l.get(toRenew.reservation.id))!.state).toBe('held');
    expect((await l.get(toConfirm.reservation.id))!.state).toBe('confirmed');
    // The expired hold's 4 GPUs are free again.
    expect((await l.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 4 }] }), ctx.clock.now())).ok).toBe(true);
  });
});

describe('quota', () => {
  it('is time-aware: a tenant at its limit today can book next week', async () => {
    const l = new Ledger(ctx.db);
    const poolId = await freshPool('quota-time', 2, (b) => b.owner('ops').offer('acme', { gpu: 4 }));
    const now = ctx.clock.now();
    expect((await l.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 4 }], duration: 86400 }), now)).ok).toBe(true);
    expect(await l.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 1 }] }), now)).toMatchObject({ code: 'QUOTA_EXCEEDED' });
    const nextWeek = await l.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 4 }], start: now + 7 * 24 * HOUR }), now);
    expect(nextWeek.ok).toBe(true);
    const { rows } = await ctx.db.query(`SELECT max, used, reserved FROM quotas WHERE tenant_id = 'acme' AND pool_id = $1`, [poolId]);
    expect(rows[0]).toEqual({ max: 4, used: 4, reserved: 4 });
  });

  it('raising or lowering a limit never touches used; lowering below use only blocks new bookings', async () => {
    const l = new Ledger(ctx.db);
    const poolId = await freshPool('quota-limit', 2, (b) => b.owner('ops').offer('acme', { gpu: 6 }));
    expect((await l.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 6 }] }), ctx.clock.now())).ok).toBe(true);
    await setQuota(ctx.db, 'acme', poolId, 'gpu', 2);
    const { rows } = await ctx.db.query(`SELECT max, used FROM quotas WHERE tenant_id = 'acme' AND pool_id = $1`, [poolId]);
    expect(rows[0]).toEqual({ max: 2, used: 6 });
    expect(await l.reserve(reservation(poolId), ctx.clock.now())).toMatchObject({ code: 'QUOTA_EXCEEDED' });
    await setQuota(ctx.db, 'acme', poolId, 'gpu', 8);
    expect((await l.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 2 }] }), ctx.clock.now())).ok).toBe(true);
    const after = await ctx.db.query(`SELECT max, used FROM quotas WHERE tenant_id = 'acme' AND pool_id = $1`, [poolId]);
    expect(after.rows[0]).toEqual({ max: 8, used: 8 });
  });
});

describe('on-demand pods', () => {
  it('book open-ended only atoms with nothing booked ahead, once per pod, and release by truncation', async () => {
    const l = new Ledger(ctx.db);
    const poolId = await freshPool('pods', 1, (b) => b.owner('ops').offer('acme', { gpu: 3 }));
    const node = 'pods-n0';
    // 6 of the 8 GPUs are booked tomorrow.
    const later = await l.reserve(reservation(poolId, { tenantId: 'ops', devices: [{ class: 'gpu', count: 6 }], start: ctx.clock.now() + 24 * HOUR }), ctx.clock.now());
    if (!later.ok) throw new Error(later.message);
    const tomorrow = new Set(later.reservation.allocations[0]!.atoms);
    const a = await l.bookPod({ tenantId: 'acme', poolId, podUid: 'uid-a', nodeId: node, devices: [{ class: 'gpu', count: 2 }], durationSeconds: null }, ctx.clock.now());
    if (!a.ok) throw new Error(a.message);
    for (const atom of a.atoms) expect(tomorrow.has(atom)).toBe(false);
    // A third open-ended GPU is not there; one bounded by a deadline before tomorrow is.
    expect(await l.bookPod({ tenantId: 'acme', poolId, podUid: 'uid-b', nodeId: node, devices: [{ class: 'gpu', count: 1 }], durationSeconds: null }, ctx.clock.now())).toMatchObject({ ok: false, code: 'NO_CAPACITY' });
    const b = await l.bookPod({ tenantId: 'acme', poolId, podUid: 'uid-b', nodeId: node, devices: [{ class: 'gpu', count: 1 }], durationSeconds: 3600 }, ctx.clock.now());
    expect(b.ok).toBe(true);
    // Quota: acme may hold 3 at once.
    expect(await l.bookPod({ tenantId: 'acme', poolId, podUid: 'uid-c', nodeId: node, devices: [{ class: 'gpu', count: 1 }], durationSeconds: 600 }, ctx.clock.now())).toMatchObject({ ok: false, code: 'QUOTA_EXCEEDED' });
    // The same pod again gets its booking back.
    expect(await l.bookPod({ tenantId: 'acme', poolId, podUid: 'uid-a', nodeId: node, devices: [{ class: 'gpu', count: 2 }], durationSeconds: null }, ctx.clock.now())).toMatchObject({ ok: true, existing: true, atoms: a.atoms });
    expect(await l.releasePod('uid-a')).toBe(true);
    expect(await l.releasePod('uid-a')).toBe(false);
    expect(await l.podBooking('uid-a')).toBeUndefined();
    expect((await l.bookPod({ tenantId: 'acme', poolId, podUid: 'uid-c', nodeId: node, devices: [{ class: 'gpu', count: 1 }], durationSeconds: 600 }, ctx.clock.now())).ok).toBe(true);
  });
});

describe('preview', () => {
  it('writes nothing, and when a regular request does not fit counts the spot reservations that would get a notice', async () => {
    const l = new Ledger(ctx.db, { spotNoticeSeconds: 120 });
    const poolId = await freshPool('preview', 1);
    const spotA = await l.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 3 }], spot: true }), ctx.clock.now());
    const spotB = await l.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 3 }], spot: true }), ctx.clock.now());
    const regular = await l.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 2 }] }), ctx.clock.now());
    expect(spotA.ok && spotB.ok && regular.ok).toBe(true);
    const before = await ctx.db.query('SELECT count(*)::int AS n FROM device_bookings');
    const now = ctx.clock.now();
    const p = await l.preview(reservation(poolId, { devices: [{ class: 'gpu', count: 4 }] }), now);
    expect(p.ok).toBe(false);
    if (p.ok || !('preemptible' in p)) throw new Error('expected a preemptible count');
    expect(p.preemptible.count).toBe(2);
    expect(p.preemptible.start).toBeGreaterThanOrEqual(now + 120_000);
    // A spot request gets no such count; a request that fits gets candidates.
    expect(await l.preview(reservation(poolId, { devices: [{ class: 'gpu', count: 4 }], spot: true }), now)).not.toHaveProperty('preemptible');
    expect(await l.preview(reservation(poolId, { devices: [{ class: 'gpu', count: 9 }] }), now)).not.toHaveProperty('preemptible');
    await l.release(regular.ok ? regular.reservation.id : '');
    const fits = await l.preview(reservation(poolId, { devices: [{ class: 'gpu', count: 2 }] }), ctx.clock.now());
    expect(fits).toMatchObject({ ok: true, candidates: [{ nodeId: 'preview-n0' }] });
    const after = await ctx.db.query('SELECT count(*)::int AS n FROM device_bookings');
    expect(after.rows[0].n).toBe(before.rows[0].n);
  });
});
