// What the ledger does when a Node, NodeDevices or Pool is gone from Kubernetes: one function each, used by the
// reconcilers' delete paths (an informer delete event) and by the drift reconcile (a deletion no leader saw). Each is
// one fenced transaction and needs no memory of the object: the ledger row is all it reads.
import { applyInventory, setNodeState, upsertNode, upsertPool, type PoolSpec } from '../db/inventory.ts';
import type { Fence } from '../db/ledger.ts';
import type { Db } from '../db/pool.ts';
import { fenced } from './fence.ts';

/** The Node is gone: out of its pool and unreachable; the row stays for history. */
export async function nodeGone(db: Db, fence: Fence, name: string): Promise<void> {
  await fenced(db, fence, async (tx) => {
    await upsertNode(tx, { id: name, poolId: null });
    await setNodeState(tx, name, { connectivity: 'unreachable' });
  });
}

/** The node's NodeDevices is gone: its devices are no longer present nor bookable (rows stay for history). */
export async function inventoryGone(db: Db, fence: Fence, name: string): Promise<void> {
  await fenced(db, fence, (tx) => applyInventory(tx, name, { gpus: [] }));
}

/** The Pool is gone: archived in the ledger (its bookings and history stay). Returns its id, or undefined when there was nothing to archive. */
export async function poolGone(db: Db, fence: Fence, name: string): Promise<string | undefined> {
  return fenced(db, fence, async (tx) => {
    const { rows } = await tx.query<Required<Omit<PoolSpec, 'offerings'>>>(
      `SELECT id, name, owner_tenant AS "ownerTenant", gpu_model AS "gpuModel", sharing, slots_per_gpu AS "slotsPerGpu",
              topology_key AS "topologyKey", node_selector AS "nodeSelector", overcommit, archived
       FROM pools WHERE name = $1 FOR UPDATE`,
      [name],
    );
    const row = rows[0];
    if (!row || row.archived) return undefined;
    // Offerings left out: they stay as they are.
    return upsertPool(tx, { ...row, archived: true });
  });
}
