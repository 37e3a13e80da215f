// Reads the planner's snapshot of a pool from the ledger: nodes (schedulability resolved), atoms with their live
// bookings, scalar counters. Three statements, merged here; no per-atom round trips.
import type { Attributes, AtomSnap, BookingSnap, DeviceClass, NodeSnap, ScalarResource, ScalarSnap, Sharing } from '../core/types.ts';
import type { Db } from './pool.ts';

export interface PoolInfo {
  id: string;
  name: string;
  ownerTenant: string;
  gpuModel: string | null;
  sharing: Sharing;
  slotsPerGpu: number;
  topologyKey: string;
  archived: boolean;
  offeredTo: ReadonlySet<string>;
}

export async function getPool(db: Db, poolId: string): Promise<PoolInfo | undefined> {
  const { rows } = await db.query(
    `SELECT id, name, owner_tenant, gpu_model, sharing, slots_per_gpu, topology_key, archived,
            ARRAY(SELECT tenant_id FROM pool_offerings o WHERE o.pool_id = p.id) AS offered_to
     FROM pools p WHERE id = $1`,
    [poolId],
  );
  const r = rows[0];
  if (!r) return undefined;
  return {
    id: r.id,
    name: r.name,
    ownerTenant: r.owner_tenant,
    gpuModel: r.gpu_model,
    sharing: r.sharing,
    slotsPerGpu: r.slots_per_gpu,
    topologyKey: r.topology_key,
    archived: r.archived,
    offeredTo: new Set(r.offered_to),
  };
}

/** Owned, or offered and not archived (an archived pool is visible to its owner only). */
export function isPoolVisible(pool: PoolInfo, tenantId: string): boolean {
  return pool.ownerTenant === tenantId || (!pool.archived && pool.offeredTo.has(tenantId));
}

/** Loads the nodes of a pool (all of them, or only `nodeIds`). */
export async function loadNodes(db: Db, poolId: string, nodeIds?: readonly string[]): Promise<NodeSnap[]> {
  const only = nodeIds ? 'AND n.id = ANY ($2)' : '';
  const params = nodeIds ? [poolId, nodeIds] : [poolId];
  const [nodes, devices, bookings, scalars] = await Promise.all([
    db.query(
      `SELECT n.id, n.labels,
              n.schedulable AND NOT p.archived AND (n.trust = 'platform' OR n.owner_tenant = p.owner_tenant) AS schedulable
       FROM nodes n JOIN pools p ON p.id = n.pool_id WHERE n.pool_id = $1 ${only} ORDER BY n.id`,
      params,
    ),
    db.query(
      `SELECT d.id, d.node_id, d.class, d.parent_id, d.attributes, d.healthy
       FROM devices d JOIN nodes n ON n.id = d.node_id
       WHERE n.pool_id = $1 ${only} AND d.bookable ORDER BY d.id`,
      params,
    ),
    db.query(
      `SELECT b.device_id, (extract(epoch FROM lower(b.during)) * 1000)::float8 AS s,
              CASE WHEN upper_inf(b.during) THEN NULL ELSE (extract(epoch FROM upper(b.during)) * 1000)::float8 END AS e,
              coalesce(a.reservation_id, a.id) AS ref,
              -- A spot reservation already preempted is displaced once: its bookings end at its deadline anyway.
              coalesce(r.spot AND r.preempt_at IS NULL, false) AS spot
       FROM device_bookings b JOIN devices d ON d.id = b.device_id JOIN nodes n ON n.id = d.node_id
       JOIN allocations a ON a.id = b.allocation_id LEFT JOIN reservations r ON r.id = a.reservation_id
       WHERE n.pool_id = $1 ${only} AND d.bookable AND NOT isempty(b.during) AND upper(b.during) > compute_now()`,
      params,
    ),
    db.query(
      `SELECT nr.node_id, nr.resource, nr.allocatable, nr.ratio, nr.allocated
       FROM node_resources nr JOIN nodes n ON n.id = nr.node_id WHERE n.pool_id = $1 ${only}`,
      params,
    ),
  ]);
  const bookingsOf = new Map<string, BookingSnap[]>();
  for (const b of bookings.rows) {
    const list = bookingsOf.get(b.device_id) ?? [];
    list.push(b.spot ? { start: b.s, end: b.e ?? Infinity, spot: true, ref: b.ref } : { start: b.s, end: b.e ?? Infinity });
    bookingsOf.set(b.device_id, list);
  }
  const atomsOf = new Map<string, AtomSnap[]>();
  for (const d of devices.rows) {
    const list = atomsOf.get(d.node_id) ?? [];
    list.push({
      id: d.id,
      class: d.class as DeviceClass,
      parentId: d.parent_id,
      attributes: d.attributes as Attributes,
      healthy: d.healthy,
      bookable: true,
      bookings: bookingsOf.get(d.id) ?? [],
    });
    atomsOf.set(d.node_id, list);
  }
  const scalarsOf = new Map<string, Partial<Record<ScalarResource, ScalarSnap>>>();
  for (const s of scalars.rows) {
    const m = scalarsOf.get(s.node_id) ?? {};
    m[s.resource as ScalarResource] = { allocatable: s.allocatable, ratio: s.ratio, allocated: s.allocated };
    scalarsOf.set(s.node_id, m);
  }
  return nodes.rows.map((n) => ({
    id: n.id,
    schedulable: n.schedulable,
    labels: n.labels,
    atoms: atomsOf.get(n.id) ?? [],
    scalars: scalarsOf.get(n.id) ?? {},
  }));
}
