// Node → the ledger's nodes row: pool membership by Pool.spec.nodeSelector (no matching Pool: pool null) and the
// schedulability fields (state.ts). Writes only what changed since this leader last wrote it. A node that moved to
// another pool gets its inventory applied again (the atoms depend on the pool's sharing mode).
import { setNodeState, upsertNode } from '../../db/inventory.ts';
import type { ControllerContext } from '../context.ts';
import { poolIdOf } from '../context.ts';
import { fenced } from '../fence.ts';
import { nodeGone } from '../gone.ts';
import type { ReconcileResult } from '../queue.ts';
import { nodeRowOf, nodeStateOf, poolOfNode } from './state.ts';

export class NodeReconciler {
  constructor(private readonly ctx: ControllerContext) {}

  async reconcile(name: string): Promise<ReconcileResult> {
    const ctx = this.ctx;
    const node = ctx.informers.nodes.get(name);
    const prev = ctx.nodeWritten.get(name);
    if (!node) {
      // Gone from Kubernetes: out of its pool and unreachable; the row stays for history.
      if (prev) {
        await nodeGone(ctx.db, ctx.fence(), name);
        ctx.nodeWritten.delete(name);
        if (prev.poolId) ctx.ledger.invalidateNodes(prev.poolId, [name]);
      }
      return;
    }
    const pool = poolOfNode(node, ctx.informers.pools.list());
    let poolId: string | null = null;
    if (pool) {
      const id = poolIdOf(ctx, pool.metadata.name);
      // The Pool reconciler has not put the pool in the ledger yet; it wakes every node when it has.
      if (!id) return { requeueAfterMs: 2000 };
      poolId = id;
    }
    const row = nodeRowOf(node, poolId);
    const state = nodeStateOf(node);
    const json = JSON.stringify([row, state]);
    if (prev?.json === json) return;
    await fenced(ctx.db, ctx.fence(), async (tx) => {
      await upsertNode(tx, row);
      await setNodeState(tx, name, state);
    });
    ctx.nodeWritten.set(name, { json, poolId });
    ctx.log.info('node synced', { node: name, poolId, ...state });
    // Only this node is read again by the placer's snapshots (not the whole pool at each node's sync).
    if (prev?.poolId && prev.poolId !== poolId) ctx.ledger.invalidateNodes(prev.poolId, [name]);
    if (poolId) ctx.ledger.invalidateNodes(poolId, [name]);
    if (prev?.poolId !== poolId && ctx.informers.nodeDevices.get(name)) ctx.queues.nodeDevices.add(name);
    // Capacity may have come back (uncordon, Ready again, taint removed): Pending reservations try again.
    if (pool) ctx.wakePending(pool.metadata.name);
  }
}
