// The per-tenant limit on pending Reservations (issue 35, item 4; core/pending.ts): beyond a Pool's
// spec.maxPendingPerTenant, a tenant's later Reservation stays Pending with reason TooManyPending and is not retried
// (its reconcile asks for no requeue) until an earlier one leaves; other tenants are not held back by it.
import { beforeAll, describe, expect, it } from 'vitest';
import { ReservationReconciler } from '../../src/controller/reservation/reconciler.ts';
import { findCondition, type Reservation } from '../../src/kube/types.ts';
import { makeNode, makePool } from '../support/builders.ts';
import { fakeController, type FakeController } from '../support/controller-context.ts';
import { useTestDatabase } from '../support/db.ts';
import { TENANT_LABEL } from '../../src/core/names.ts';

const t = useTestDatabase();

describe('pending Reservations per tenant', () => {
  let f: FakeController;
  let reconciler: ReservationReconciler;
  const cr = (namespace: string, name: string, second: number): Reservation =>
    f.informers.reservations.put({
      apiVersion: 'bettercompute.io/v1alpha1',
      kind: 'Reservation',
      metadata: { namespace, name, uid: `uid-${namespace}-${name}`, generation: 1, resourceVersion: '1', creationTimestamp: `2026-01-01T00:00:${String(second).padStart(2, '0')}Z` },
      // More GPUs than the pool has: every one stays Pending (Unschedulable) while it tries.
      spec: { pool: 'lp', devices: [{ class: 'gpu', count: 8 }], duration: '1h', binding: 'confirmed' },
    });
  const reason = (key: string) => findCondition(f.informers.reservations.get(key)?.status?.conditions, 'Reserved')?.reason;
  const phase = (key: string) => f.informers.reservations.get(key)?.status?.phase;

  beforeAll(async () => {
    f = await fakeController(t);
    const poolId = await makePool('lp').owner('alpha').offer('beta').create(t.db);
    await makeNode('lp-n1').gpus(2).create(t.db, poolId);
    f.ctx.poolIds.set('lp', poolId);
    f.informers.pools.put({ metadata: { name: 'lp' }, spec: { nodeSelector: { pool: 'lp' }, ownerTenant: 'alpha', maxPendingPerTenant: 2 } });
    // Two namespaces of one tenant, one of another.
    f.informers.namespaces.put({ metadata: { name: 'a1', labels: { [TENANT_LABEL]: 'alpha' } } });
    f.informers.namespaces.put({ metadata: { name: 'a2', labels: { [TENANT_LABEL]: 'alpha' } } });
    f.informers.namespaces.put({ metadata: { name: 'b1', labels: { [TENANT_LABEL]: 'beta' } } });
    reconciler = new ReservationReconciler(f.ctx);
  });

  it('the tenant’s first two try, the third waits (not retried) until one of them leaves; another tenant’s is not held back', async () => {
    cr('a1', 'first', 1);
    cr('a2', 'second', 2);
    cr('a1', 'third', 3);
    cr('b1', 'other', 4);
    // Reconciled latest first: the order of creation decides, not the order of reconciles.
    expect(await reconciler.reconcile('b1/other')).toEqual({ backoff: true });
    expect(await reconciler.reconcile('a1/third')).toBeUndefined();
    expect(await reconciler.reconcile('a2/second')).toEqual({ backoff: true });
    expect(await reconciler.reconcile('a1/first')).toEqual({ backoff: true });
    expect([reason('a1/first'), reason('a2/second'), reason('a1/third'), reason('b1/other')]).toEqual([
      'Unschedulable',
      'Unschedulable',
      'TooManyPending',
      'Unschedulable',
    ]);
    expect(phase('a1/third')).toBe('Pending');
    const msg = findCondition(f.informers.reservations.get('a1/third')?.status?.conditions, 'Reserved')?.message;
    expect(msg).toContain('tenant alpha has 2 earlier pending Reservations in pool lp (at most 2');
    // Nothing was booked or asked of the ledger for it.
    const { rows } = await t.db.query(`SELECT count(*)::int AS n FROM reservations WHERE idempotency_key = 'uid-a1-third'`);
    expect(rows[0].n).toBe(0);

    // A new one of the tenant, created last, waits as well.
    cr('a2', 'fourth', 5);
    expect(await reconciler.reconcile('a2/fourth')).toBeUndefined();
    expect(reason('a2/fourth')).toBe('TooManyPending');

    // The first leaves (deleted): the third, the earliest waiting, tries now; the fourth still waits.
    f.informers.reservations.cache.delete('a1/first');
    expect(await reconciler.reconcile('a1/third')).toEqual({ backoff: true });
    expect(reason('a1/third')).toBe('Unschedulable');
    expect(await reconciler.reconcile('a2/fourth')).toBeUndefined();
    // The Pool's limit raised: the fourth tries at its next reconcile (the Pool's reconcile wakes its pending ones).
    f.informers.pools.put({ metadata: { name: 'lp' }, spec: { nodeSelector: { pool: 'lp' }, ownerTenant: 'alpha', maxPendingPerTenant: 3 } });
    expect(await reconciler.reconcile('a2/fourth')).toEqual({ backoff: true });
  });
});
