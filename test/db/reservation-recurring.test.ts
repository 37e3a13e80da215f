// A recurring Reservation against the real ledger: each window within the horizon is its own booking (keyed by the CR's
// uid and the window's start), a window the ledger refuses is reported alone while the others book, a second reconcile
// (or a restarted controller) books nothing twice, the test clock moving on books the next windows and releases the
// ended ones, and deleting the CR releases every window.
//
// The clock is set to Monday 2027-01-04 06:00Z. Europe/Berlin is CET (UTC+1) all that week, so "weekdays 09:00–17:00"
// is 08:00–16:00Z each weekday. With a three-day horizon the windows starting before Thursday 06:00Z are Monday's,
// Tuesday's and Wednesday's.
import { beforeAll, describe, expect, it } from 'vitest';
import { ReservationReconciler } from '../../src/controller/reservation/reconciler.ts';
import { type Reservation } from '../../src/kube/types.ts';
import { advanceClock } from '../../src/db/clock.ts';
import { makeNode, makePool, reservation } from '../support/builders.ts';
import { fakeController, type FakeController } from '../support/controller-context.ts';
import { useTestDatabase } from '../support/db.ts';
import { RESERVATION_FINALIZER, TENANT_LABEL } from '../../src/core/names.ts';

const t = useTestDatabase();
const DAY = 86_400_000;
const MONDAY_0600Z = Date.parse('2027-01-04T06:00:00Z');
const WEEKDAYS_9_TO_5 = { days: ['Mon', 'Tue', 'Wed', 'Thu', 'Fri'], startTime: '09:00', endTime: '17:00', timeZone: 'Europe/Berlin' };
const UID_A = '6f1c1d2e-1a2b-4c3d-8e9f-0a1b2c3d4e5f';
const UID_B = '7a2b3c4d-5e6f-4a1b-9c2d-3e4f5a6b7c8d';

describe('recurring Reservation: one booking per window, a horizon ahead', () => {
  let f: FakeController;
  let wk: string;
  let qp: string;
  const cr = (namespace: string, name: string, uid: string, spec: Partial<Reservation['spec']>): Reservation =>
    f.informers.reservations.put({
      apiVersion: 'bettercompute.io/v1alpha1',
      kind: 'Reservation',
      metadata: { namespace, name, uid, generation: 1, resourceVersion: '1', creationTimestamp: '2027-01-01T00:00:00Z' },
      spec: { pool: 'wk', devices: [{ class: 'gpu', count: 4 }], binding: 'confirmed', recurrence: WEEKDAYS_9_TO_5, ...spec } as Reservation['spec'],
    });
  const get = (key: string) => f.informers.reservations.get(key);
  /** The CR's windows in the ledger, by start: what was booked, from when to when, and in which state. */
  const windowsOf = async (uid: string) =>
    (
      await t.db.query<{ id: string; key: string; start: Date; end: Date; state: string }>(
        `SELECT id, idempotency_key AS key, starts_at AS start, ends_at AS "end", state FROM reservations
         WHERE starts_with(idempotency_key, $1) ORDER BY starts_at`,
        [`${uid}:`],
      )
    ).rows.map((r) => ({ id: r.id, key: r.key, start: r.start.toISOString(), end: r.end.toISOString(), state: r.state }));
  const moveClockTo = async (ms: number) => {
    await advanceClock(t.db, ms - t.clock.now());
    await t.clock.sync();
  };

  beforeAll(async () => {
    f = await fakeController(t);
    f.ctx.tuning.recurrenceHorizonMs = 3 * DAY;
    wk = await makePool('wk').owner('alpha').create(t.db);
    await makeNode('wk-n1').gpus(4).create(t.db, wk);
    qp = await makePool('qp').owner('alpha').offer('beta', { gpu: 2 }).create(t.db);
    await makeNode('qp-n1').gpus(4).create(t.db, qp);
    for (const [name, id] of [
      ['wk', wk],
      ['qp', qp],
    ] as const) {
      f.ctx.poolIds.set(name, id);
      f.informers.pools.put({ metadata: { name }, spec: { nodeSelector: { pool: name }, ownerTenant: 'alpha' }, status: { poolId: id } });
    }
    f.informers.namespaces.put({ metadata: { name: 'team-a', labels: { [TENANT_LABEL]: 'alpha' } } });
    f.informers.namespaces.put({ metadata: { name: 'team-b', labels: { [TENANT_LABEL]: 'beta' } } });
    await moveClockTo(MONDAY_0600Z);
  });

  it('books Monday to Wednesday as three bookings; Tuesday, with no room, is reported alone; again and after a restart: nothing twice; the clock moving on books Thursday; delete releases all', async () => {
    // One GPU of the node is taken on Tuesday 10:00–12:00Z: Tuesday's window (4 GPUs) has no room, the others do.
    const blocker = await f.ctx.ledger.reserve(
      reservation(wk, { tenantId: 'alpha', start: Date.parse('2027-01-05T10:00:00Z'), duration: 7200, binding: 'confirmed' }),
      f.ctx.clock.now(),
    );
    expect(blocker.ok).toBe(true);
    cr('team-a', 'weekly', UID_A, {});
    const reconciler = new ReservationReconciler(f.ctx);
    expect(await reconciler.reconcile('team-a/weekly')).toEqual({ backoff: true });

    const booked = await windowsOf(UID_A);
    expect(booked).toEqual([
      { id: expect.stringMatching(/^rsv_/), key: `${UID_A}:2027-01-04T08:00:00.000Z`, start: '2027-01-04T08:00:00.000Z', end: '2027-01-04T16:00:00.000Z', state: 'confirmed' },
      { id: expect.stringMatching(/^rsv_/), key: `${UID_A}:2027-01-06T08:00:00.000Z`, start: '2027-01-06T08:00:00.000Z', end: '2027-01-06T16:00:00.000Z', state: 'confirmed' },
    ]);
    const [mon, wed] = booked;
    expect(mon!.id).not.toBe(wed!.id);
    const st = get('team-a/weekly')!.status!;
    expect(st.occurrences).toEqual([
      { start: '2027-01-04T08:00:00.000Z', end: '2027-01-04T16:00:00.000Z', phase: 'Reserved', reservationId: mon!.id, resourceName: expect.any(String), atoms: 4, nodes: 'wk-n1' },
      { start: '2027-01-05T08:00:00.000Z', end: '2027-01-05T16:00:00.000Z', phase: 'Pending', reason: 'Unschedulable', message: expect.any(String) },
      { start: '2027-01-06T08:00:00.000Z', end: '2027-01-06T16:00:00.000Z', phase: 'Reserved', reservationId: wed!.id, resourceName: expect.any(String), atoms: 4, nodes: 'wk-n1' },
    ]);
    expect(st).toMatchObject({ phase: 'Pending', tenant: 'alpha', poolId: wk, start: '2027-01-04T08:00:00.000Z', end: '2027-01-04T16:00:00.000Z', atoms: 4 });
    expect(st.conditions).toEqual([expect.objectContaining({ type: 'Reserved', status: 'False', reason: 'Unschedulable', message: expect.stringContaining('2 of 3 windows booked') })]);
    const warnings = () => f.events.filter((e) => e.key === 'team-a/weekly' && e.type === 'Warning' && e.message.startsWith('window '));
    expect(warnings().map((e) => e.message)).toEqual([expect.stringContaining('window 2027-01-05T08:00:00.000Z to 2027-01-05T16:00:00.000Z')]);

    // Again, and from a restarted controller (nothing in memory): the same two bookings, no new one, no new warning.
    await reconciler.reconcile('team-a/weekly');
    await new ReservationReconciler(f.ctx).reconcile('team-a/weekly');
    expect(await windowsOf(UID_A)).toEqual(booked);
    expect(get('team-a/weekly')!.status!.occurrences).toEqual(st.occurrences);
    expect(warnings()).toHaveLength(1);

    // A day later (Tuesday 06:00Z): Monday's window ended, so it is released and leaves status; Thursday's enters the
    // horizon and is booked; Tuesday's is still refused.
    await moveClockTo(MONDAY_0600Z + DAY);
    await reconciler.reconcile('team-a/weekly');
    const later = await windowsOf(UID_A);
    expect(later.map((w) => [w.start, w.state])).toEqual([
      ['2027-01-04T08:00:00.000Z', 'released'],
      ['2027-01-06T08:00:00.000Z', 'confirmed'],
      ['2027-01-07T08:00:00.000Z', 'confirmed'],
    ]);
    expect(later[1]!.id).toBe(wed!.id);
    expect(get('team-a/weekly')!.status!.occurrences!.map((o) => [o.start, o.phase])).toEqual([
      ['2027-01-05T08:00:00.000Z', 'Pending'],
      ['2027-01-06T08:00:00.000Z', 'Reserved'],
      ['2027-01-07T08:00:00.000Z', 'Reserved'],
    ]);

    // The blocker goes: Tuesday's window books too, and the Reservation is Reserved.
    expect(blocker.ok && (await f.ctx.ledger.release(blocker.reservation.id))).toBe(true);
    expect(await reconciler.reconcile('team-a/weekly')).toEqual({ requeueAfterMs: expect.any(Number) });
    expect((await windowsOf(UID_A)).map((w) => [w.start, w.end, w.state])).toEqual([
      ['2027-01-04T08:00:00.000Z', '2027-01-04T16:00:00.000Z', 'released'],
      ['2027-01-05T08:00:00.000Z', '2027-01-05T16:00:00.000Z', 'confirmed'],
      ['2027-01-06T08:00:00.000Z', '2027-01-06T16:00:00.000Z', 'confirmed'],
      ['2027-01-07T08:00:00.000Z', '2027-01-07T16:00:00.000Z', 'confirmed'],
    ]);
    expect(get('team-a/weekly')!.status).toMatchObject({ phase: 'Reserved', start: '2027-01-05T08:00:00.000Z' });
    expect(get('team-a/weekly')!.status!.occurrences!.every((o) => o.phase === 'Reserved' && o.reason === undefined)).toBe(true);

    // Deleted: every window still live is released, and the finalizer goes.
    const a = get('team-a/weekly')!;
    f.informers.reservations.put({ ...a, metadata: { ...a.metadata, deletionTimestamp: new Date().toISOString(), finalizers: [RESERVATION_FINALIZER] } });
    await reconciler.reconcile('team-a/weekly');
    expect(get('team-a/weekly')).toBeUndefined();
    expect((await windowsOf(UID_A)).map((w) => w.state)).toEqual(['released', 'released', 'released', 'released']);
    expect(f.events.filter((e) => e.key === 'team-a/weekly' && e.reason === 'Released')).toHaveLength(3);
  });

  it('quota per window: the window that would exceed the offering’s 2 GPUs is refused with QuotaExceeded, the others book', async () => {
    // Tuesday 06:00Z now (the first test moved the clock): windows Tue, Wed, Thu. Beta already holds 1 GPU on Thursday.
    const held = await f.ctx.ledger.reserve(
      reservation(qp, { tenantId: 'beta', start: Date.parse('2027-01-07T12:00:00Z'), duration: 3600, binding: 'confirmed' }),
      f.ctx.clock.now(),
    );
    expect(held.ok).toBe(true);
    cr('team-b', 'two', UID_B, { pool: 'qp', devices: [{ class: 'gpu', count: 2 }] });
    await new ReservationReconciler(f.ctx).reconcile('team-b/two');
    expect((await windowsOf(UID_B)).map((w) => w.start)).toEqual(['2027-01-05T08:00:00.000Z', '2027-01-06T08:00:00.000Z']);
    expect(get('team-b/two')!.status!.occurrences!.map((o) => [o.start, o.phase, o.reason])).toEqual([
      ['2027-01-05T08:00:00.000Z', 'Reserved', undefined],
      ['2027-01-06T08:00:00.000Z', 'Reserved', undefined],
      ['2027-01-07T08:00:00.000Z', 'Pending', 'QuotaExceeded'],
    ]);
  });

  it('a window under way when first seen is booked from now to its end; one a month ahead waits; an invalid recurrence fails without booking', async () => {
    // Tuesday 13:00Z, inside Tuesday's 08:00–16:00Z window: booked 13:00–16:00Z (pool qp, 1 GPU, tenant alpha).
    await moveClockTo(Date.parse('2027-01-05T13:00:00Z'));
    const uid = '8b3c4d5e-6f7a-4b2c-8d3e-4f5a6b7c8d9e';
    // Counted from spec.start, Tuesday 00:00Z: one window, Tuesday's.
    cr('team-a', 'late', uid, { pool: 'qp', devices: [{ class: 'gpu', count: 1 }], start: '2027-01-05T00:00:00Z', recurrence: { ...WEEKDAYS_9_TO_5, count: 1 } });
    await new ReservationReconciler(f.ctx).reconcile('team-a/late');
    const [w] = await windowsOf(uid);
    expect(w!.key).toBe(`${uid}:2027-01-05T08:00:00.000Z`);
    expect([w!.start, w!.end]).toEqual([expect.stringMatching(/^2027-01-05T13:00:0\d/), '2027-01-05T16:00:00.000Z']);
    expect(get('team-a/late')!.status!.occurrences).toHaveLength(1);

    // Counted from a month ahead: nothing to book yet; the next window is named, and when it will be booked.
    const ahead = 'ad5e6f7a-8b9c-4d4e-8f5a-6b7c8d9e0f1a';
    cr('team-a', 'ahead', ahead, { pool: 'qp', devices: [{ class: 'gpu', count: 1 }], start: '2027-02-05T00:00:00Z' });
    await new ReservationReconciler(f.ctx).reconcile('team-a/ahead');
    expect(get('team-a/ahead')!.status).toMatchObject({ phase: 'Pending', occurrences: [] });
    expect(get('team-a/ahead')!.status!.conditions![0]).toMatchObject({
      reason: 'Scheduled',
      // Friday 2027-02-05 09:00 CET; booked three days (the horizon) before.
      message: 'the next window, 2027-02-05T08:00:00.000Z to 2027-02-05T16:00:00.000Z, is booked from 2027-02-02T08:00:00.000Z',
    });
    expect(await windowsOf(ahead)).toEqual([]);

    const bad = '9c4d5e6f-7a8b-4c3d-9e4f-5a6b7c8d9e0f';
    cr('team-a', 'bad', bad, { recurrence: { ...WEEKDAYS_9_TO_5, timeZone: 'Mars/Olympus_Mons' } });
    await new ReservationReconciler(f.ctx).reconcile('team-a/bad');
    expect(get('team-a/bad')!.status).toMatchObject({ phase: 'Failed' });
    expect(get('team-a/bad')!.status!.conditions![0]!.message).toContain('spec.recurrence.timeZone');
    expect(await windowsOf(bad)).toEqual([]);
  });
});
