import { describe, expect, it } from 'vitest';
import { Ledger } from '../../src/db/ledger.ts';
import { makeNode, makePool, reservation } from '../support/builders.ts';
import { useTestDatabase } from '../support/db.ts';

// Ledger.earliestWindow (core/earliest-window.ts on fresh rows): the Kueue check's search for a Workload's first free
// window, then the booking at that start, which the ledger accepts.
const ctx = useTestDatabase();
const MIN = 60_000;

describe('the earliest window on the ledger', () => {
  it('starts when the bookings in its way end, and the ledger books it there', async () => {
    const poolId = await makePool('earliest').create(ctx.db);
    const gpus = 4;
    await makeNode('earliest-n0').gpus(gpus).domain('zone-a').create(ctx.db, poolId);
    const ledger = new Ledger(ctx.db);
    const now = ctx.clock.now();
    // All but one GPU for 10 minutes, the last one for 20.
    const first = await ledger.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: gpus - 1 }], duration: 600, idempotencyKey: 'a' }), now);
    const second = await ledger.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 1 }], duration: 1200, idempotencyKey: 'b' }), now);
    if (!first.ok || !second.ok) throw new Error('expected the blockers to fit');
    const two = reservation(poolId, { devices: [{ class: 'gpu', count: 2 }], duration: 300, idempotencyKey: 'c' });
    const found = await ledger.earliestWindow([two], now, 7 * 24 * 60 * MIN);
    expect(found).toMatchObject({ ok: true, start: Math.ceil(first.reservation.end), shape: 0 });
    const all = reservation(poolId, { devices: [{ class: 'gpu', count: gpus }], duration: 300, idempotencyKey: 'd' });
    expect(await ledger.earliestWindow([all], now, 7 * 24 * 60 * MIN)).toMatchObject({ ok: true, start: Math.ceil(second.reservation.end) });
    // Not within a horizon shorter than the wait.
    expect(await ledger.earliestWindow([all], now, 5 * MIN)).toMatchObject({ ok: false });
    if (!found.ok) return;
    const booked = await ledger.reserve({ ...two, start: found.start }, now);
    expect(booked).toMatchObject({ ok: true, reservation: { start: found.start } });
  });
});
