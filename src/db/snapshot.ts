// Reads the planner's snapshot of a pool from the ledger: nodes (schedulability resolved), atoms with their live
// bookings, scalar counters. One statement; no per-atom round trips.
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

/** One row of loadNodes' statement: a node (0), an atom (1), a live booking (2) or a scalar counter (3). */
type SnapRow = [
  kind: 0 | 1 | 2 | 3,
  /** The node's, atom's, booked atom's or counter's node id. */
  id: string,
  /** The atom's node, the booking's ref, the counter's resource. */
  ref: string | null,
  /** The node's labels, the atom's attributes. */
  json: unknown,
  /** Schedulable, healthy, spot. */
  flag: boolean | null,
  cls: string | null,
  parentId: string | null,
  start: number | null,
  end: number | null,
  allocatable: number | null,
  ratio: number | null,
  allocated: number | null,
  /** A node's place in n.id order, an atom's in d.id order (1-based). */
  rank: number | null,
];

/**
 * Loads the nodes of a pool (all of them, or only `nodeIds`) in one statement, one round trip (the extender reloads a
 * node per bind): nodes, bookable atoms, their live bookings and scalar counters as the four branches of a UNION ALL,
 * told apart by `kind`. Every value keeps its SQL type, parsed by node-postgres as in a query of its own (no JSON in
 * between). Nodes and atoms carry their rank in id order instead of the union being sorted (for a whole pool the planner
 * reads both in primary key order, no sort at all).
 */
export async function loadNodes(db: Db, poolId: string, nodeIds?: readonly string[]): Promise<NodeSnap[]> {
  const { rows } = await db.query<SnapRow>({
    // Named: parsed and planned once per connection (planning was about a millisecond of a one-node reload).
    name: nodeIds ? 'bc_load_nodes_some' : 'bc_load_nodes_pool',
    text: nodeIds ? LOAD_SOME_NODES : LOAD_POOL_NODES,
    values: nodeIds ? [poolId, nodeIds] : [poolId],
    rowMode: 'array',
  });
  const { nodes, devices, bookingsOf, scalarsOf } = byKind(rows);
  const atomsOf = atomsByNode(devices, bookingsOf);
  return nodes.map(([, id, , labels, schedulable]) => ({
    id,
    schedulable: schedulable!,
    labels: labels as NodeSnap['labels'],
    atoms: atomsOf.get(id) ?? [],
    scalars: scalarsOf.get(id) ?? {},
  }));
}

/** loadNodes' statement: the four branches, for the whole pool or (`only`) the nodes of $2. */
const loadNodesSql = (only: string) =>
  `SELECT 0 AS kind, n.id, NULL::text AS ref, n.labels AS json,
            n.schedulable AND NOT p.archived AND (n.trust = 'platform' OR n.owner_tenant = p.owner_tenant) AS flag,
            NULL::text AS class, NULL::text AS parent_id, NULL::float8 AS s, NULL::float8 AS e,
            NULL::integer AS allocatable, NULL::numeric AS ratio, NULL::integer AS allocated,
            (row_number() OVER (ORDER BY n.id))::integer AS rank
     FROM nodes n JOIN pools p ON p.id = n.pool_id WHERE n.pool_id = $1 ${only}
     UNION ALL
     SELECT 1, d.id, d.node_id, d.attributes, d.healthy, d.class, d.parent_id, NULL, NULL, NULL, NULL, NULL,
            (row_number() OVER (ORDER BY d.id))::integer
     FROM devices d JOIN nodes n ON n.id = d.node_id
     WHERE n.pool_id = $1 ${only} AND d.bookable
     UNION ALL
     SELECT 2, b.device_id, coalesce(a.reservation_id, a.id), NULL,
            -- A spot reservation already preempted is displaced once: its bookings end at its deadline anyway.
            coalesce(r.spot AND r.preempt_at IS NULL, false), NULL, NULL,
            (extract(epoch FROM lower(b.during)) * 1000)::float8,
            CASE WHEN upper_inf(b.during) THEN NULL ELSE (extract(epoch FROM upper(b.during)) * 1000)::float8 END,
            NULL, NULL, NULL, NULL
     FROM device_bookings b JOIN devices d ON d.id = b.device_id JOIN nodes n ON n.id = d.node_id
     JOIN allocations a ON a.id = b.allocation_id LEFT JOIN reservations r ON r.id = a.reservation_id
     WHERE n.pool_id = $1 ${only} AND d.bookable AND NOT isempty(b.during) AND upper(b.during) > compute_now()
     UNION ALL
     SELECT 3, nr.node_id, nr.resource, NULL, NULL, NULL, NULL, NULL, NULL, nr.allocatable, nr.ratio, nr.allocated, NULL
     FROM node_resources nr JOIN nodes n ON n.id = nr.node_id WHERE n.pool_id = $1 ${only}`;
const LOAD_POOL_NODES = loadNodesSql('');
const LOAD_SOME_NODES = loadNodesSql('AND n.id = ANY ($2)');

/** The statement's rows by kind: nodes and atoms at their rank, bookings by atom, scalar counters by node. */
function byKind(rows: readonly SnapRow[]) {
  const nodes: SnapRow[] = [];
  const devices: SnapRow[] = [];
  const bookingsOf = new Map<string, BookingSnap[]>();
  const scalarsOf = new Map<string, Partial<Record<ScalarResource, ScalarSnap>>>();
  for (const r of rows) {
    const [kind, id, ref, , flag, , , start, end, allocatable, ratio, allocated, rank] = r;
    if (kind === 0) nodes[rank! - 1] = r;
    else if (kind === 1) devices[rank! - 1] = r;
    else if (kind === 2) {
      const list = bookingsOf.get(id) ?? [];
      list.push(flag ? { start: start!, end: end ?? Infinity, spot: true, ref: ref! } : { start: start!, end: end ?? Infinity });
      bookingsOf.set(id, list);
    } else {
      const m = scalarsOf.get(id) ?? {};
      m[ref as ScalarResource] = { allocatable: allocatable!, ratio: ratio!, allocated: allocated! };
      scalarsOf.set(id, m);
    }
  }
  return { nodes, devices, bookingsOf, scalarsOf };
}

/** Each node's bookable atoms, in id order, with their live bookings. */
function atomsByNode(devices: readonly SnapRow[], bookingsOf: ReadonlyMap<string, BookingSnap[]>): Map<string, AtomSnap[]> {
  const atomsOf = new Map<string, AtomSnap[]>();
  for (const [, id, nodeId, attributes, healthy, cls, parentId] of devices) {
    const list = atomsOf.get(nodeId!) ?? [];
    list.push({
      id,
      class: cls as DeviceClass,
      parentId,
      attributes: attributes as Attributes,
      healthy: healthy!,
      bookable: true,
      bookings: bookingsOf.get(id) ?? [],
    });
    atomsOf.set(nodeId!, list);
  }
  return atomsOf;
}
