// The NodeDevices reconciler against the real ledger: a spec the ledger cannot take (a MIG GI/CI twice, a fractional
// scalar) is refused before any SQL, with the reason in status (Accepted=False) and one Warning Event, and is not
// retried; the ledger keeps the last accepted inventory. A report applied in part (a GPU another node owns, a layout
// change waiting for bookings) says so in status and an Event, and is tried again.
import { beforeAll, describe, expect, it } from 'vitest';
import { NodeReconciler } from '../../src/controller/node/reconciler.ts';
import { NodeDevicesReconciler } from '../../src/controller/nodedevices/reconciler.ts';
import { findCondition, type NodeDevicesCR } from '../../src/kube/types.ts';
import { advanceClock } from '../../src/db/clock.ts';
import type { InventoryReport } from '../../src/core/inventory.ts';
import { makePool, reservation } from '../support/builders.ts';
import { fakeController, type FakeController } from '../support/controller-context.ts';
import { useTestDatabase } from '../support/db.ts';

const t = useTestDatabase();
const NODE = 'nd-n1';
const GPU = 'GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77';

describe('NodeDevices reconciler: inputs refused with a reason', () => {
  let f: FakeController;
  let nodes: NodeReconciler;
  let reconciler: NodeDevicesReconciler;
  let generation = 0;
  const put = (spec: InventoryReport) => {
    const cur = f.informers.nodeDevices.get(NODE);
    return f.informers.nodeDevices.put({
      apiVersion: 'bettercompute.io/v1alpha1',
      kind: 'NodeDevices',
      metadata: { name: NODE, uid: 'nd-uid', generation: ++generation },
      spec,
      ...(cur?.status ? { status: cur.status } : {}),
    } as NodeDevicesCR);
  };
  const devices = async () =>
    (await t.db.query<{ id: string }>('SELECT id FROM devices WHERE node_id = $1 AND present ORDER BY id', [NODE])).rows.map((r) => r.id);
  const condition = (type: string) => findCondition(f.informers.nodeDevices.get(NODE)!.status?.conditions, type);

  beforeAll(async () => {
    f = await fakeController(t);
    const poolId = await makePool('nd').create(t.db);
    f.ctx.poolIds.set('nd', poolId);
    f.informers.pools.put({ metadata: { name: 'nd' }, spec: { nodeSelector: { pool: 'nd' }, ownerTenant: 'acme' }, status: { poolId } });
    f.informers.nodes.put({ metadata: { name: NODE, labels: { pool: 'nd' } }, status: { conditions: [{ type: 'Ready', status: 'True' }] } });
    nodes = new NodeReconciler(f.ctx);
    reconciler = new NodeDevicesReconciler(f.ctx, (n) => nodes.reconcile(n));
    put({ gpus: [{ uuid: GPU, model: 'A100', mig: [{ gi: 1, ci: 0, profile: '3g.20gb' }, { gi: 5, ci: 0, profile: '2g.10gb' }] }], scalars: { vcpu: 64 } });
    expect(await reconciler.reconcile(NODE)).toBeUndefined();
    expect(condition('Applied')).toMatchObject({ status: 'True' });
    expect(await devices()).toEqual([GPU, `${GPU}/gi1/ci0`, `${GPU}/gi5/ci0`]);
  });

  it('a MIG GI/CI listed twice: Accepted=False with the reason, one Warning Event, no retry, the ledger unchanged', async () => {
    put({ gpus: [{ uuid: GPU, mig: [{ gi: 1, ci: 0 }, { gi: 1, ci: 0 }] }], scalars: { vcpu: 64 } });
    const events = f.events.length;
    expect(await reconciler.reconcile(NODE)).toBeUndefined();
    expect(condition('Accepted')).toMatchObject({ status: 'False', reason: 'InvalidSpec', message: expect.stringMatching(/gpus\[0\]\.mig\[1\]: MIG instance gi1\/ci0 of GPU \S+ is listed twice/) });
    expect(condition('Applied')).toMatchObject({ status: 'False', reason: 'InvalidSpec' });
    expect(f.events.slice(events)).toEqual([expect.objectContaining({ kind: 'NodeDevices', type: 'Warning', reason: 'InvalidSpec', message: expect.stringMatching(/listed twice/) })]);
    expect(await devices()).toEqual([GPU, `${GPU}/gi1/ci0`, `${GPU}/gi5/ci0`]);
    // Looked at again (a resync): still refused, quietly: no second Event, no status write.
    const writes = f.statusWrites.length;
    expect(await reconciler.reconcile(NODE)).toBeUndefined();
    expect(f.events.length).toBe(events + 1);
    expect(f.statusWrites.length).toBe(writes);
  });

  it('a fractional scalar is refused the same way', async () => {
    put({ gpus: [{ uuid: GPU, mig: [{ gi: 1, ci: 0 }] }], scalars: { vcpu: 1.5 } });
    expect(await reconciler.reconcile(NODE)).toBeUndefined();
    expect(condition('Accepted')).toMatchObject({ status: 'False', reason: 'InvalidSpec', message: expect.stringMatching(/scalars\.vcpu: must be a whole number/) });
    expect(f.events.at(-1)).toMatchObject({ type: 'Warning', reason: 'InvalidSpec' });
    expect(await devices()).toEqual([GPU, `${GPU}/gi1/ci0`, `${GPU}/gi5/ci0`]);
  });

  it('a GPU listed twice is refused; a corrected spec is applied and Accepted again', async () => {
    put({ gpus: [{ uuid: GPU }, { uuid: GPU }], scalars: {} });
    expect(await reconciler.reconcile(NODE)).toBeUndefined();
    expect(condition('Accepted')).toMatchObject({ status: 'False', message: expect.stringMatching(/gpus\[1\]\.uuid: GPU \S+ is listed twice/) });
    put({ gpus: [{ uuid: GPU, mig: [{ gi: 1, ci: 0 }, { gi: 2, ci: 0 }] }], scalars: { vcpu: 64 } });
    expect(await reconciler.reconcile(NODE)).toBeUndefined();
    expect(condition('Accepted')).toMatchObject({ status: 'True', reason: 'Valid' });
    expect(condition('Applied')).toMatchObject({ status: 'True' });
    expect(await devices()).toEqual([GPU, `${GPU}/gi1/ci0`, `${GPU}/gi2/ci0`]);
  });

  it('a scalar below what is booked now is not an input error: said in status and tried again later', async () => {
    const poolId = f.ctx.poolIds.get('nd')!;
    // Past the layout window of the change above (every atom of the GPU is booked by it for 300 s).
    await advanceClock(t.db, 301_000);
    await t.clock.sync();
    const booked = await f.ctx.ledger.reserve(reservation(poolId, { devices: [{ class: 'gpu.mig', count: 1 }], resources: { vcpu: 48 } }), t.clock.now());
    expect(booked).toMatchObject({ ok: true });
    put({ gpus: [{ uuid: GPU, mig: [{ gi: 1, ci: 0 }, { gi: 2, ci: 0 }] }], scalars: { vcpu: 16 } });
    expect(await reconciler.reconcile(NODE)).toEqual({ requeueAfterMs: 30_000 });
    expect(condition('Applied')).toMatchObject({ status: 'False', reason: 'ScalarsInUse' });
    expect(condition('Accepted')).toMatchObject({ status: 'True' });
  });

  it('the Node deleted before its NodeDevices: the devices still go out of service (nothing left for the drift reconcile)', async () => {
    expect((await devices()).length).toBeGreaterThan(0);
    f.informers.nodes.cache.delete(NODE);
    await nodes.reconcile(NODE);
    f.informers.nodeDevices.cache.delete(NODE);
    await reconciler.reconcile(NODE);
    expect(await devices()).toEqual([]);
  });
});

describe('NodeDevices reconciler: a report applied in part', () => {
  const A = 'nd-own-a';
  const B = 'nd-own-b';
  const X = 'GPU-7a7a0000-0000-4000-8000-00000000000a';
  const Y = 'GPU-7b7b0000-0000-4000-8000-00000000000b';
  let f: FakeController;
  let reconciler: NodeDevicesReconciler;
  const generations = new Map<string, number>();
  const put = (name: string, spec: InventoryReport) => {
    const cur = f.informers.nodeDevices.get(name);
    const generation = (generations.get(name) ?? 0) + 1;
    generations.set(name, generation);
    f.informers.nodeDevices.put({
      apiVersion: 'bettercompute.io/v1alpha1',
      kind: 'NodeDevices',
      metadata: { name, uid: `${name}-uid`, generation },
      spec,
      ...(cur?.status ? { status: cur.status } : {}),
    } as NodeDevicesCR);
  };
  const condition = (name: string, type: string) => findCondition(f.informers.nodeDevices.get(name)!.status?.conditions, type);
  const row = async (id: string) => (await t.db.query('SELECT node_id, present, bookable, healthy FROM devices WHERE id = $1', [id])).rows[0];

  beforeAll(async () => {
    f = await fakeController(t);
    const poolId = await makePool('nd-own').create(t.db);
    f.ctx.poolIds.set('nd-own', poolId);
    f.informers.pools.put({ metadata: { name: 'nd-own' }, spec: { nodeSelector: { pool: 'nd-own' }, ownerTenant: 'acme' }, status: { poolId } });
    for (const n of [A, B]) f.informers.nodes.put({ metadata: { name: n, labels: { pool: 'nd-own' } }, status: { conditions: [{ type: 'Ready', status: 'True' }] } });
    const nodes = new NodeReconciler(f.ctx);
    reconciler = new NodeDevicesReconciler(f.ctx, (n) => nodes.reconcile(n));
    put(B, { gpus: [{ uuid: X }], scalars: {} });
    expect(await reconciler.reconcile(B)).toBeUndefined();
    expect(condition(B, 'DevicesAccepted')).toMatchObject({ status: 'True' });
  });

  it("another node's GPU: DevicesAccepted=False naming it and its node, one Warning Event, retried until the owner drops it", async () => {
    put(A, { gpus: [{ uuid: X }, { uuid: Y }], scalars: {} });
    const events = f.events.length;
    expect(await reconciler.reconcile(A)).toEqual({ requeueAfterMs: 30_000 });
    const message = expect.stringMatching(new RegExp(`GPU ${X} is node ${B}'s`));
    expect(condition(A, 'DevicesAccepted')).toMatchObject({ status: 'False', reason: 'DeviceOwnedByOtherNode', message });
    expect(condition(A, 'Applied')).toMatchObject({ status: 'True', message: expect.stringContaining(`refused (another node's): ${X}`) });
    expect(f.informers.nodeDevices.get(A)!.status).toMatchObject({ gpus: 1 });
    expect(f.events.slice(events)).toEqual([expect.objectContaining({ key: A, type: 'Warning', reason: 'DeviceOwnedByOtherNode', message })]);
    expect(await row(X)).toEqual({ node_id: B, present: true, bookable: true, healthy: true });
    expect(await row(Y)).toMatchObject({ node_id: A, present: true });

    // The retry finds the same: no second Event, no status write.
    const writes = f.statusWrites.length;
    expect(await reconciler.reconcile(A)).toEqual({ requeueAfterMs: 30_000 });
    expect(f.events.length).toBe(events + 1);
    expect(f.statusWrites.length).toBe(writes);

    // B no longer reports X: A's next try takes it, and is done.
    put(B, { gpus: [], scalars: {} });
    expect(await reconciler.reconcile(B)).toBeUndefined();
    expect(await reconciler.reconcile(A)).toBeUndefined();
    expect(condition(A, 'DevicesAccepted')).toMatchObject({ status: 'True', reason: 'OwnDevices' });
    expect(f.informers.nodeDevices.get(A)!.status).toMatchObject({ gpus: 2 });
    expect(await row(X)).toMatchObject({ node_id: A, present: true, bookable: true });
  });

  it('a layout change of a booked GPU (MIG mode on, no instance yet) waits: LayoutBusy=True, WaitingForBookings, retried; then applied', async () => {
    const poolId = f.ctx.poolIds.get('nd-own')!;
    const booked = await f.ctx.ledger.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 2 }] }), t.clock.now());
    if (!booked.ok) throw new Error(booked.message);
    // X in MIG mode (no instance yet), Y unhealthy.
    put(A, { gpus: [{ uuid: X, migEnabled: true }, { uuid: Y, healthy: false }], scalars: {} });
    const events = f.events.length;
    expect(await reconciler.reconcile(A)).toEqual({ requeueAfterMs: 30_000 });
    expect(condition(A, 'LayoutBusy')).toMatchObject({ status: 'True', reason: 'WaitingForBookings', message: expect.stringContaining(`GPU ${X} waits for the bookings`) });
    expect(condition(A, 'Applied')).toMatchObject({ status: 'True', message: expect.stringContaining(`layout change waiting: ${X}`) });
    expect(f.events.slice(events)).toEqual([expect.objectContaining({ type: 'Warning', reason: 'LayoutBusy' })]);
    expect(await row(X)).toMatchObject({ bookable: true, healthy: true });
    expect(await row(Y)).toMatchObject({ bookable: true, healthy: false });

    expect(await f.ctx.ledger.release(booked.reservation.id)).toBe(true);
    expect(await reconciler.reconcile(A)).toBeUndefined();
    expect(condition(A, 'LayoutBusy')).toMatchObject({ status: 'False' });
    expect(await row(X)).toMatchObject({ present: true, bookable: false });
    expect((await t.db.query('SELECT count(*)::int AS n FROM devices WHERE parent_id = $1', [X])).rows[0].n).toBe(0);
  });
});
