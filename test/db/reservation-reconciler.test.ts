// The Reservation reconciler against the real ledger: status is a mirror, never an input. Which booking is a
// Reservation's is asked of the ledger by its metadata.uid, so a status forged to another tenant's reservationId (by
// anyone allowed to write reservations/status) is neither mirrored (served) nor released on delete.
import { beforeAll, describe, expect, it } from 'vitest';
import { ReservationReconciler } from '../../src/controller/reservation/reconciler.ts';
import { type Reservation } from '../../src/kube/types.ts';
import { makeNode, makePool } from '../support/builders.ts';
import { fakeController, type FakeController } from '../support/controller-context.ts';
import { useTestDatabase } from '../support/db.ts';
import { RESERVATION_FINALIZER, TENANT_LABEL, reservationResourceName } from '../../src/core/names.ts';

const t = useTestDatabase();

describe('Reservation reconciler: identity from the ledger, by metadata.uid', () => {
  let f: FakeController;
  let reconciler: ReservationReconciler;
  const cr = (namespace: string, name: string, uid: string, status?: Reservation['status']): Reservation =>
    f.informers.reservations.put({
      apiVersion: 'bettercompute.io/v1alpha1',
      kind: 'Reservation',
      metadata: { namespace, name, uid, generation: 1, resourceVersion: '1' },
      spec: { pool: 'rp', devices: [{ class: 'gpu', count: 1 }], duration: '1h', binding: 'confirmed' },
      ...(status ? { status } : {}),
    });
  const get = (key: string) => f.informers.reservations.get(key);
  const stateOf = async (id: string) => (await f.ctx.ledger.get(id))?.state;
  const tenantOf = async (id: string) => (await f.ctx.ledger.get(id))?.tenantId;

  beforeAll(async () => {
    f = await fakeController(t);
    const poolId = await makePool('rp').owner('alpha').offer('beta').create(t.db);
    await makeNode('rp-n1').gpus(4).create(t.db, poolId);
    f.ctx.poolIds.set('rp', poolId);
    f.informers.pools.put({ metadata: { name: 'rp' }, spec: { nodeSelector: { pool: 'rp' }, ownerTenant: 'alpha' }, status: { poolId } });
    f.informers.namespaces.put({ metadata: { name: 'team-a', labels: { [TENANT_LABEL]: 'alpha' } } });
    f.informers.namespaces.put({ metadata: { name: 'team-b', labels: { [TENANT_LABEL]: 'beta' } } });
    reconciler = new ReservationReconciler(f.ctx);
  });

  it('a Pool whose status.poolId is forged to another pool’s id books nothing there: it waits for its own upsert', async () => {
    const rp = f.ctx.poolIds.get('rp')!;
    // Pool "lure" is not in the ledger yet (its reconcile has not run); its status claims rp's id.
    f.informers.pools.put({ metadata: { name: 'lure' }, spec: { nodeSelector: { pool: 'lure' }, ownerTenant: 'beta' }, status: { poolId: rp } });
    f.informers.reservations.put({
      apiVersion: 'bettercompute.io/v1alpha1',
      kind: 'Reservation',
      metadata: { namespace: 'team-b', name: 'lured', uid: 'uid-lured', generation: 1, resourceVersion: '1' },
      spec: { pool: 'lure', devices: [{ class: 'gpu', count: 1 }], duration: '1h', binding: 'confirmed' },
    });
    expect(await reconciler.reconcile('team-b/lured')).toEqual({ requeueAfterMs: 500 });
    expect(get('team-b/lured')?.status?.reservationId).toBeUndefined();
    const { rows } = await t.db.query('SELECT id FROM reservations WHERE pool_id = $1 AND tenant_id = $2', [rp, 'beta']);
    expect(rows).toEqual([]);
    expect(f.ctx.poolNameOf(rp)).toBe('rp');
    f.informers.pools.cache.delete('lure');
    f.informers.reservations.cache.delete('team-b/lured');
  });

  it('a status forged to another tenant’s reservation: neither mirrored nor released on delete; the CR’s own booking is', async () => {
    cr('team-a', 'a', 'uid-a');
    cr('team-b', 'b', 'uid-b');
    await reconciler.reconcile('team-a/a');
    await reconciler.reconcile('team-b/b');
    const idA = get('team-a/a')!.status!.reservationId!;
    const idB = get('team-b/b')!.status!.reservationId!;
    expect(idA).toMatch(/^rsv_/);
    expect(idB).toMatch(/^rsv_/);
    expect(idA).not.toBe(idB);
    const atomsA = get('team-a/a')!.status!.allocations;
    const atomsB = get('team-b/b')!.status!.allocations;
    expect(await tenantOf(idB)).toBe('beta');

    // Someone with reservations/status points A at B's booking.
    const forge = () => {
      const a = get('team-a/a')!;
      f.informers.reservations.put({
        ...a,
        status: { ...a.status, reservationId: idB, resourceName: reservationResourceName(idB), allocations: atomsB, tenant: 'beta' },
      });
    };
    forge();
    await reconciler.reconcile('team-a/a');
    // The mirror is A's own booking again: B's id, resource and atoms are not served from A's status.
    expect(get('team-a/a')!.status).toMatchObject({ reservationId: idA, resourceName: reservationResourceName(idA), allocations: atomsA, tenant: 'alpha' });

    // Forged again, then A is deleted: A's own booking is released, B's stays.
    forge();
    const a = get('team-a/a')!;
    f.informers.reservations.put({ ...a, metadata: { ...a.metadata, deletionTimestamp: new Date().toISOString(), finalizers: [RESERVATION_FINALIZER] } });
    await reconciler.reconcile('team-a/a');
    expect(get('team-a/a')).toBeUndefined();
    expect(await stateOf(idB)).toBe('confirmed');
    expect(await stateOf(idA)).toBe('released');
    expect(f.events.filter((e) => e.key === 'team-a/a' && e.reason === 'Released').map((e) => e.message)).toEqual([expect.stringContaining(idA)]);

    // B is served on as before.
    await reconciler.reconcile('team-b/b');
    expect(get('team-b/b')!.status).toMatchObject({ phase: 'Reserved', reservationId: idB, allocations: atomsB });
  });

  it('a status tenant forged before booking: the booking is made under the namespace’s tenant, not the forged one', async () => {
    cr('team-a', 'c', 'uid-c', { tenant: 'beta' });
    await reconciler.reconcile('team-a/c');
    const c = get('team-a/c')!.status!;
    expect(c.phase).toBe('Reserved');
    expect(await tenantOf(c.reservationId!)).toBe('alpha');
    expect(c.tenant).toBe('alpha');
  });

  it('tenancy by name off: a Reservation in an unlabelled namespace books nothing, Pending NoTenant; on, it books under the name', async () => {
    f.informers.namespaces.put({ metadata: { name: 'alpha' } }); // named like the tenant, no label
    cr('alpha', 'squatter', 'uid-squatter');
    f.ctx.tuning.tenancyByName = false;
    try {
      await reconciler.reconcile('alpha/squatter');
      const st = get('alpha/squatter')!.status!;
      expect(st.phase).toBe('Pending');
      expect(st.conditions?.find((c) => c.type === 'Reserved')).toMatchObject({ status: 'False', reason: 'NoTenant' });
      expect(st.reservationId).toBeUndefined();
    } finally {
      f.ctx.tuning.tenancyByName = true;
    }
    await reconciler.reconcile('alpha/squatter');
    const booked = get('alpha/squatter')!.status!;
    expect(booked.reservationId).toBeDefined();
    expect(await tenantOf(booked.reservationId!)).toBe('alpha');
  });

  it('a status with no reservationId at all: the booking is found by uid and mirrored again, not booked twice', async () => {
    cr('team-a', 'd', 'uid-d');
    await reconciler.reconcile('team-a/d');
    const id = get('team-a/d')!.status!.reservationId!;
    const d = get('team-a/d')!;
    f.informers.reservations.put({ ...d, status: {} });
    await reconciler.reconcile('team-a/d');
    expect(get('team-a/d')!.status!.reservationId).toBe(id);
    const { rows } = await t.db.query('SELECT id FROM reservations WHERE idempotency_key = $1', ['uid-d']);
    expect(rows).toEqual([{ id }]);
  });
});
