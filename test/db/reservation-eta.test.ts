// A Reservation that waits for capacity says when it starts (issue 48, ADR 0058): status.earliestStart and its
// condition's message carry the placer's earliest window over the pool's bookings, and when nothing else changes the
// Reservation is booked at that time. One with a fixed spec.start gets no such time; a booked one loses it.
import { beforeAll, describe, expect, it } from 'vitest';
import { ReservationReconciler } from '../../src/controller/reservation/reconciler.ts';
import { advanceClock } from '../../src/db/clock.ts';
import { findCondition, type Reservation } from '../../src/kube/types.ts';
import { makeNode, makePool } from '../support/builders.ts';
import { fakeController, type FakeController } from '../support/controller-context.ts';
import { useTestDatabase } from '../support/db.ts';
import { TENANT_LABEL } from '../../src/core/names.ts';

const t = useTestDatabase();

describe('a waiting Reservation says when it starts', () => {
  let f: FakeController;
  let reconciler: ReservationReconciler;
  const cr = (name: string, duration: string, start?: string): Reservation =>
    f.informers.reservations.put({
      apiVersion: 'bettercompute.io/v1alpha1',
      kind: 'Reservation',
      metadata: { namespace: 'team-a', name, uid: `uid-${name}`, generation: 1, resourceVersion: '1' },
      spec: { pool: 'eta', devices: [{ class: 'gpu', count: 2 }], duration, binding: 'confirmed', ...(start ? { start } : {}) },
    });
  const status = (name: string) => f.informers.reservations.get(`team-a/${name}`)!.status!;

  beforeAll(async () => {
    f = await fakeController(t);
    const poolId = await makePool('eta').owner('alpha').create(t.db);
    await makeNode('eta-n1').gpus(2).create(t.db, poolId);
    f.ctx.poolIds.set('eta', poolId);
    f.informers.pools.put({ metadata: { name: 'eta' }, spec: { nodeSelector: { pool: 'eta' }, ownerTenant: 'alpha' }, status: { poolId } });
    f.informers.namespaces.put({ metadata: { name: 'team-a', labels: { [TENANT_LABEL]: 'alpha' } } });
    reconciler = new ReservationReconciler(f.ctx);
  });

  it('Pending with the first booking’s end as its earliest start; booked then, which then leaves status', async () => {
    cr('first', '10m');
    await reconciler.reconcile('team-a/first');
    expect(status('first').phase).toBe('Reserved');
    const firstEnd = status('first').end!;

    cr('second', '5m');
    const result = await reconciler.reconcile('team-a/second');
    const waiting = status('second');
    expect(waiting.phase).toBe('Pending');
    expect(waiting.earliestStart).toBe(firstEnd);
    const cond = findCondition(waiting.conditions, 'Reserved')!;
    expect(cond.reason).toBe('Unschedulable');
    expect(cond.message).toContain(`; it starts at ${firstEnd} if nothing else changes`);
    // Ten minutes away: tried again after the queue's longest backoff (and at once when capacity frees).
    expect(result).toEqual({ requeueAfterMs: f.ctx.tuning.pendingMaxBackoffMs });
    expect(f.events.find((e) => e.key === 'team-a/second')).toMatchObject({ reason: 'Unschedulable', type: 'Warning' });

    // Nothing else changes: at that time the first window ends and the second is booked, within 30 s of its ETA.
    await advanceClock(t.db, Date.parse(firstEnd) - f.ctx.clock.now() + 1000);
    await t.clock.sync();
    await reconciler.reconcile('team-a/first');
    expect(status('first').phase).toBe('Released');
    await reconciler.reconcile('team-a/second');
    const booked = status('second');
    expect(booked.phase).toBe('Reserved');
    const late = Date.parse(booked.start!) - Date.parse(firstEnd);
    expect(late).toBeGreaterThanOrEqual(0);
    expect(late).toBeLessThan(30_000);
    expect(booked.earliestStart).toBeUndefined();
  });

  it('close to its earliest start it is tried again then, not after the longest backoff', async () => {
    cr('third', '3m');
    await reconciler.reconcile('team-a/third');
    expect(status('third').phase).toBe('Pending');
    const eta = Date.parse(status('third').earliestStart!);
    expect(eta).toBe(Date.parse(status('second').end!));
    await advanceClock(t.db, eta - f.ctx.clock.now() - 10_000);
    await t.clock.sync();
    const result = (await reconciler.reconcile('team-a/third')) as { requeueAfterMs: number };
    expect(result.requeueAfterMs).toBeGreaterThan(9_000);
    expect(result.requeueAfterMs).toBeLessThanOrEqual(10_500);
  });

  it('a fixed spec.start that does not fit: Pending without an earliest start (its window is its own)', async () => {
    // The second Reservation's window still runs for about 10 s: a fixed minute from 2 s on overlaps it.
    cr('fixed', '1m', new Date(f.ctx.clock.now() + 2000).toISOString());
    await reconciler.reconcile('team-a/fixed');
    const s = status('fixed');
    expect(s.phase).toBe('Pending');
    expect(s.earliestStart).toBeUndefined();
    expect(findCondition(s.conditions, 'Reserved')!.message).not.toContain('if nothing else changes');
  });
});
