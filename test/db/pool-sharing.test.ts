// A Pool's sharing change on a real ledger: its nodes' atoms are derived again from their last reports in the Pool's own
// transaction, with no new report (a NodeDevices whose spec did not change is not applied again by itself). A GPU with a
// live booking keeps its layout until the booking ends; the NodeDevices reconciler, woken by the Pool's, says so
// (LayoutBusy) and changes it then. Guard 2 holds throughout: a layout change books every atom for the change window.
import { describe, expect, it } from 'vitest';
import { NodeReconciler } from '../../src/controller/node/reconciler.ts';
import { NodeDevicesReconciler } from '../../src/controller/nodedevices/reconciler.ts';
import { PoolReconciler } from '../../src/controller/pool/reconciler.ts';
import type { InventoryReport } from '../../src/core/inventory.ts';
import { poolCapacity } from '../../src/db/capacity.ts';
import { advanceClock } from '../../src/db/clock.ts';
import { DEFAULT_LAYOUT_WINDOW_SECONDS, syncPool, type PoolSpec } from '../../src/db/inventory.ts';
import { Ledger } from '../../src/db/ledger.ts';
import { findCondition, type NodeDevicesCR, type PoolCR } from '../../src/kube/types.ts';
import { makeNode, makePool, reservation } from '../support/builders.ts';
import { fakeController, type FakeController } from '../support/controller-context.ts';
import { useTestDatabase } from '../support/db.ts';

const t = useTestDatabase();

/** The node's atoms: its present, bookable devices. */
const atoms = async (node: string) =>
  (await t.db.query<{ id: string }>('SELECT id FROM devices WHERE node_id = $1 AND present AND bookable ORDER BY id', [node])).rows.map((r) => r.id);

/** Each capacity row's resource and total, for those with any. */
const totals = async (poolId: string) =>
  Object.fromEntries((await poolCapacity(t.db, poolId)).filter((r) => r.total > 0).map((r) => [r.resource, r.total]));

const layoutBookings = async (node: string) =>
  (await t.db.query<{ n: number }>(`SELECT count(*)::int AS n FROM allocations WHERE kind = 'layout' AND node_id = $1`, [node])).rows[0]!.n;

describe("a Pool's sharing change derives its nodes' atoms again", () => {
  it('exclusive → timeslice with 2 slots per GPU: slots and no whole GPU, without a new report; bookable once the change window ends', async () => {
    const spec: PoolSpec = { name: 'ps', ownerTenant: 'acme', gpuModel: 'H100', offerings: [] };
    const poolId = await makePool('ps').create(t.db);
    const node = makeNode('ps-n').gpus(2);
    await node.create(t.db, poolId);
    const [g0, g1] = [node.gpuUuid(0), node.gpuUuid(1)];
    expect(await atoms('ps-n')).toEqual([g0, g1]);

    const synced = await syncPool(t.db, { ...spec, sharing: 'timeslice', slotsPerGpu: 2 });
    expect(synced).toEqual({ poolId, layouts: [{ node: 'ps-n', layoutChanged: [g0, g1], layoutPending: [], refused: [] }] });
    expect(await atoms('ps-n')).toEqual([`${g0}/s0`, `${g0}/s1`, `${g1}/s0`, `${g1}/s1`]);
    expect(await totals(poolId)).toEqual({ 'gpu.slot': 4 });
    // Guard 2: the change books every atom of each GPU, old and new, for the change window.
    expect(await layoutBookings('ps-n')).toBe(2);
    const ledger = new Ledger(t.db);
    const slot = reservation(poolId, { devices: [{ class: 'gpu.slot', count: 1 }] });
    expect((await ledger.reserve(slot, t.clock.now())).ok).toBe(false);
    await advanceClock(t.db, (DEFAULT_LAYOUT_WINDOW_SECONDS + 1) * 1000);
    await t.clock.sync();
    const r = await ledger.reserve({ ...slot, idempotencyKey: `${slot.idempotencyKey}-after` }, t.clock.now());
    if (!r.ok) throw new Error(r.message);
    expect(r.reservation.allocations[0]!.atoms[0]).toMatch(/\/s[01]$/);

    // The same setting again (any other edit of the Pool): nothing derived again.
    expect((await syncPool(t.db, { ...spec, sharing: 'timeslice', slotsPerGpu: 2, gpuModel: 'H200' })).layouts).toEqual([]);
    expect(await layoutBookings('ps-n')).toBe(2);

    // 3 slots per GPU: the GPU whose slot is booked keeps its two, the other gets three.
    const busy = r.reservation.allocations[0]!.atoms[0]!.split('/')[0]!;
    const other = busy === g0 ? g1 : g0;
    const three = await syncPool(t.db, { ...spec, sharing: 'timeslice', slotsPerGpu: 3 });
    expect(three.layouts).toEqual([{ node: 'ps-n', layoutChanged: [other], layoutPending: [busy], refused: [] }]);
    expect(await atoms('ps-n')).toEqual([...[0, 1].map((k) => `${busy}/s${k}`), ...[0, 1, 2].map((k) => `${other}/s${k}`)].sort());
    expect(await totals(poolId)).toEqual({ 'gpu.slot': 5 });
  });

  it('a GPU with a live booking keeps its layout, said in the NodeDevices status; it changes once the booking ends', async () => {
    const f: FakeController = await fakeController(t);
    const NODE = 'ps-busy';
    const X = 'GPU-ps-busy-00';
    const Y = 'GPU-ps-busy-01';
    let poolGeneration = 0;
    const putPool = (spec: Partial<PoolCR['spec']>) =>
      f.informers.pools.put({
        metadata: { name: 'ps-busy', generation: ++poolGeneration },
        spec: { nodeSelector: { pool: 'ps-busy' }, ownerTenant: 'acme', handoff: 'dra', ...spec },
        ...(f.informers.pools.get('ps-busy')?.status ? { status: f.informers.pools.get('ps-busy')!.status } : {}),
      } as PoolCR);
    const pools = new PoolReconciler(f.ctx);
    putPool({});
    await pools.reconcile('ps-busy');
    const poolId = f.ctx.poolIds.get('ps-busy')!;
    f.informers.nodes.put({ metadata: { name: NODE, labels: { pool: 'ps-busy' } }, status: { conditions: [{ type: 'Ready', status: 'True' }] } });
    const report: InventoryReport = { gpus: [{ uuid: X, model: 'H100' }, { uuid: Y, model: 'H100' }], scalars: {} };
    f.informers.nodeDevices.put({ apiVersion: 'bettercompute.io/v1alpha1', kind: 'NodeDevices', metadata: { name: NODE, uid: 'nd', generation: 1 }, spec: report } as NodeDevicesCR);
    const nodes = new NodeReconciler(f.ctx);
    const nodeDevices = new NodeDevicesReconciler(f.ctx, (n) => nodes.reconcile(n));
    expect(await nodeDevices.reconcile(NODE)).toBeUndefined();
    expect(await atoms(NODE)).toEqual([X, Y]);
    const condition = (type: string) => findCondition(f.informers.nodeDevices.get(NODE)!.status?.conditions, type);
    const capacityOf = () => Object.fromEntries((f.informers.pools.get('ps-busy')!.status?.capacity ?? []).filter((r) => (r.total as number) > 0).map((r) => [r.resource, r.total]));

    // X booked for an hour from now (the GPU first in the placer's order).
    const booked = await f.ctx.ledger.reserve(reservation(poolId), t.clock.now());
    if (!booked.ok) throw new Error(booked.message);
    expect(booked.reservation.allocations[0]!.atoms).toEqual([X]);

    // The Pool now shares by time slices: Y is derived again at once, X waits; the Pool's status shows it.
    putPool({ sharing: 'timeslice', slotsPerGpu: 2 });
    const queued = f.queued.length;
    await pools.reconcile('ps-busy');
    expect(await atoms(NODE)).toEqual([X, `${Y}/s0`, `${Y}/s1`]);
    expect(capacityOf()).toEqual({ gpu: 1, 'gpu.slot': 2 });
    expect(f.informers.pools.get('ps-busy')!.status?.observedGeneration).toBe(2);
    // The NodeDevices reconciler is woken for the node (its spec is unchanged) and says what waits, retrying.
    expect(f.queued.slice(queued)).toContain(NODE);
    expect(await nodeDevices.reconcile(NODE)).toEqual({ requeueAfterMs: 30_000 });
    expect(condition('LayoutBusy')).toMatchObject({ status: 'True', reason: 'WaitingForBookings', message: expect.stringContaining(`GPU ${X} waits`) });
    expect(await atoms(NODE)).toEqual([X, `${Y}/s0`, `${Y}/s1`]);
    expect((await f.ctx.ledger.get(booked.reservation.id))?.allocations[0]?.atoms).toEqual([X]);

    // The booking ends: the retry changes X's layout too.
    expect(await f.ctx.ledger.release(booked.reservation.id)).toBe(true);
    expect(await nodeDevices.reconcile(NODE)).toBeUndefined();
    expect(condition('LayoutBusy')).toMatchObject({ status: 'False' });
    expect(await atoms(NODE)).toEqual([`${X}/s0`, `${X}/s1`, `${Y}/s0`, `${Y}/s1`]);
    await pools.reconcile('ps-busy');
    expect(capacityOf()).toEqual({ 'gpu.slot': 4 });
    expect(await nodeDevices.reconcile(NODE)).toBeUndefined();
  });
});
