// NodeDevices → applyInventory for the node (devices and scalars replaced in one transaction; a GPU whose layout
// changed while booked is refused with LayoutBusy and tried again later). Status: Applied and LayoutBusy conditions.
import { applyInventory, LayoutBusyError, type InventoryReport } from '../../db/inventory.ts';
import { FencedError } from '../../db/ledger.ts';
import type { ControllerContext } from '../context.ts';
import { fenced } from '../fence.ts';
import { inventoryGone } from '../gone.ts';
import type { ReconcileResult } from '../queue.ts';
import { findCondition, setCondition, type Condition, type NodeDevicesCR } from '../types.ts';

export function toReport(nd: NodeDevicesCR): InventoryReport {
  return {
    gpus: (nd.spec?.gpus ?? []).map((g) => ({ ...g, mig: g.mig ?? [] })),
    scalars: { ...(nd.spec?.scalars ?? {}) },
  };
}

export class NodeDevicesReconciler {
  constructor(
    private readonly ctx: ControllerContext,
    /** Makes sure the node's row exists and is current (the Node reconciler, run inline). */
    private readonly syncNode: (name: string) => Promise<ReconcileResult>,
  ) {}

  async reconcile(name: string): Promise<ReconcileResult> {
    const ctx = this.ctx;
    const nd = ctx.informers.nodeDevices.get(name);
    if (!nd) {
      // The report is gone: the node's devices are no longer present (rows stay for history).
      if (ctx.inventoryApplied.has(name) && ctx.nodeWritten.has(name)) {
        await inventoryGone(ctx.db, ctx.fence(), name);
        const poolId = ctx.nodeWritten.get(name)?.poolId;
        if (poolId) ctx.ledger.invalidate(poolId);
      }
      ctx.inventoryApplied.delete(name);
      return;
    }
    if (!ctx.informers.nodes.get(name)) {
      await this.writeStatus(nd, [{ type: 'Applied', status: 'False', reason: 'NodeNotFound', message: `no Node named ${name}` }]);
      return { requeueAfterMs: 5000 };
    }
    const r = await this.syncNode(name);
    const written = ctx.nodeWritten.get(name);
    if (!written) {
      await this.writeStatus(nd, [{ type: 'Applied', status: 'False', reason: 'WaitingForPool', message: 'the node is not in the ledger yet' }]);
      return r ?? { requeueAfterMs: 2000 };
    }
    const stamp = `${nd.metadata.generation ?? 0}|${written.poolId}`;
    if (ctx.inventoryApplied.get(name) === stamp && nd.status?.observedGeneration === nd.metadata.generation) return;
    try {
      const changed = await fenced(ctx.db, ctx.fence(), (tx) => applyInventory(tx, name, toReport(nd)));
      ctx.inventoryApplied.set(name, stamp);
      if (written.poolId) ctx.ledger.invalidate(written.poolId);
      const gpus = nd.spec?.gpus?.length ?? 0;
      ctx.log.info('inventory applied', { node: name, gpus, layoutChanged: changed });
      await this.writeStatus(
        nd,
        [
          { type: 'Applied', status: 'True', reason: 'Applied', message: `${gpus} GPUs in the ledger${changed.length ? `; layout changed: ${changed.join(', ')}` : ''}` },
          { type: 'LayoutBusy', status: 'False', reason: 'Applied', message: '' },
        ],
        gpus,
      );
      ctx.wakePending(ctx.poolNameOf(written.poolId));
      return;
    } catch (e) {
      if (e instanceof FencedError || !(e instanceof LayoutBusyError)) throw e;
      const message = e.message;
      if (findCondition(nd.status?.conditions, 'LayoutBusy')?.status !== 'True') {
        await ctx.event(nd, 'NodeDevices', { type: 'Warning', reason: 'LayoutBusy', message });
      }
      await this.writeStatus(nd, [
        { type: 'Applied', status: 'False', reason: 'LayoutBusy', message },
        { type: 'LayoutBusy', status: 'True', reason: 'AtomsBooked', message },
      ]);
      return { requeueAfterMs: 30_000 };
    }
  }

  private async writeStatus(nd: NodeDevicesCR, conds: Condition[], gpus?: number): Promise<void> {
    const ctx = this.ctx;
    let conditions = nd.status?.conditions;
    for (const c of conds) conditions = setCondition(conditions, { ...c, observedGeneration: nd.metadata.generation ?? 0 }, ctx.nowIso());
    await ctx.kube.patchNodeDevicesStatus(nd.metadata.name, {
      observedGeneration: nd.metadata.generation ?? 0,
      conditions,
      ...(gpus !== undefined ? { gpus } : {}),
    });
  }
}
