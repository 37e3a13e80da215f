// Capacity reads: rollup rows per pool, the tenant summary, the GPU timeline; and the rollup's fold and rebuild.
import type { Db } from './pool.ts';

export interface CapacityRow {
  poolId: string;
  resource: string;
  total: number;
  allocatable: number;
  allocated: number;
  reserved: number;
  available: number;
  provisioning: number;
  unhealthy: number;
  maintenance: number;
  unreachable: number;
  updatedAt: number;
}

export interface PoolCapacity {
  poolId: string;
  name: string;
  gpuModel: string | null;
  ownerTenant: string;
  archived: boolean;
  capacity: CapacityRow[];
}

export interface Totals {
  total: number;
  allocatable: number;
  allocated: number;
  reserved: number;
  available: number;
}

export interface Summary {
  tenantId: string;
  pools: PoolCapacity[];
  byGpuModel: Record<string, Totals>;
}

const ROW_COLUMNS = `pool_id AS "poolId", resource, total, allocatable, allocated, reserved, available, provisioning,
  unhealthy, maintenance, unreachable, (extract(epoch FROM updated_at) * 1000)::float8 AS "updatedAt"`;

/** One pool's rows, ordered by resource. */
export async function poolCapacity(db: Db, poolId: string): Promise<CapacityRow[]> {
  const { rows } = await db.query<CapacityRow>(
    `SELECT ${ROW_COLUMNS} FROM pool_capacity WHERE pool_id = $1 ORDER BY resource`,
    [poolId],
  );
  return rows.map((r) => ({ ...r, updatedAt: Math.round(r.updatedAt) }));
}

/** Pools the tenant owns or is offered (archived ones only for their owner), with rows and whole-GPU totals per model. */
export async function capacitySummary(db: Db, tenantId: string): Promise<Summary> {
  const { rows: pools } = await db.query<{ id: string; name: string; gpu_model: string | null; owner_tenant: string; archived: boolean }>(
    `SELECT id, name, gpu_model, owner_tenant, archived FROM pools p
     WHERE owner_tenant = $1 OR (NOT archived AND EXISTS (SELECT 1 FROM pool_offerings o WHERE o.pool_id = p.id AND o.tenant_id = $1))
     ORDER BY name`,
    [tenantId],
  );
  const { rows } = await db.query<CapacityRow>(
    `SELECT ${ROW_COLUMNS} FROM pool_capacity WHERE pool_id = ANY ($1) ORDER BY pool_id, resource`,
    [pools.map((p) => p.id)],
  );
  const byPool = new Map<string, CapacityRow[]>();
  for (const r of rows) byPool.set(r.poolId, [...(byPool.get(r.poolId) ?? []), { ...r, updatedAt: Math.round(r.updatedAt) }]);
  const byGpuModel: Record<string, Totals> = {};
  const result: PoolCapacity[] = pools.map((p) => {
    const capacity = byPool.get(p.id) ?? [];
    const gpu = capacity.find((r) => r.resource === 'gpu');
    if (gpu) {
      const model = p.gpu_model ?? 'other';
      const t = (byGpuModel[model] ??= { total: 0, allocatable: 0, allocated: 0, reserved: 0, available: 0 });
      t.total += gpu.total;
      t.allocatable += gpu.allocatable;
      t.allocated += gpu.allocated;
      t.reserved += gpu.reserved;
      t.available += gpu.available;
    }
    return { poolId: p.id, name: p.name, gpuModel: p.gpu_model, ownerTenant: p.owner_tenant, archived: p.archived, capacity };
  });
  return { tenantId, pools: result, byGpuModel };
}

/** One resource's numbers inside one placement domain: the rollup's columns, computed by the rollup's own math. */
export type DomainCapacityRow = Omit<CapacityRow, 'poolId' | 'updatedAt'>;

/** Nodes of one placement domain (excluded nodes are not counted, as in the rollup). */
export interface DomainNodes {
  /** Every node that counts: allocatable plus those provisioning, unhealthy, in maintenance or unreachable. */
  total: number;
  /** Nodes whose state lets them take bookings. */
  allocatable: number;
  /**
   * Allocatable nodes with at least one GPU, every bookable atom healthy and none booked now or later: what a
   * `binding: 'node'` lease or a gang member could take whole. Conservative like `available`.
   */
  free: number;
}

/** How tables and metric labels name the nodes without the domain label (a label value cannot hold parentheses). */
export const UNLABELLED_DOMAIN = '(unlabelled)';

export interface DomainCapacity {
  /** The node label value under the topology key; null for nodes without the label (gangs never use them). */
  domain: string | null;
  nodes: DomainNodes;
  capacity: DomainCapacityRow[];
}

export interface PoolDomains {
  poolId: string;
  name: string;
  gpuModel: string | null;
  /** The label key the nodes were grouped by: the one asked for, else the pool's own. */
  topologyKey: string;
  /** Ordered by domain, the unlabelled nodes last; each domain's rows ordered by resource. */
  domains: DomainCapacity[];
}

interface DomainRow extends Omit<DomainCapacityRow, 'resource'> {
  /** Null for a domain whose nodes report no atoms or counters yet (the LEFT JOIN found nothing). */
  resource: string | null;
  poolId: string;
  name: string;
  gpuModel: string | null;
  topologyKey: string;
  domain: string | null;
  nodes: number;
  allocatableNodes: number;
  freeNodes: number;
}

// One statement (one snapshot). Nodes are grouped by their label under the key; each group goes through bc_contrib,
// the function the rollup rebuild uses, so a domain's rows are what the rebuild would write for its nodes now, and
// the domains of a pool add up to the pool's rebuilt rows. Each node, atom and booking is read once (by index from
// its group's ids): linear in the pools' atoms and live bookings, whatever the number of domains. A domain of
// excluded nodes only (not counted by the rollup either) is left out.
const DOMAIN_SQL = `
  WITH p AS (
    SELECT id, name, gpu_model, owner_tenant, archived, coalesce($2::text, topology_key) AS key
    FROM pools WHERE $1::text[] IS NULL OR id = ANY ($1::text[])
  ), n AS (
    SELECT x AS node, x.id, x.pool_id, x.labels ->> p.key AS domain, bc_bucket(x, p.owner_tenant, p.archived, true) AS bucket
    FROM nodes x JOIN p ON p.id = x.pool_id
  ), atoms AS (
    SELECT d.node_id, count(*) FILTER (WHERE d.class = 'gpu') AS gpus, bool_and(d.healthy) AS healthy,
           bool_or(EXISTS (SELECT 1 FROM device_bookings b WHERE b.device_id = d.id AND NOT isempty(b.during)
                                                               AND upper(b.during) > compute_now())) AS busy
    FROM devices d JOIN n ON n.id = d.node_id
    WHERE d.present AND d.bookable
    GROUP BY d.node_id
  ), g AS (
    SELECT n.pool_id, n.domain, array_agg(n.node) AS nodes, array_agg(n.id) AS ids,
           count(*) FILTER (WHERE n.bucket <> 'excluded') AS counted,
           count(*) FILTER (WHERE n.bucket = 'allocatable') AS allocatable_nodes,
           count(*) FILTER (WHERE n.bucket = 'allocatable' AND a.gpus > 0 AND a.healthy AND NOT a.busy) AS free_nodes
    FROM n LEFT JOIN atoms a ON a.node_id = n.id
    GROUP BY n.pool_id, n.domain
  )
  SELECT g.pool_id AS "poolId", p.name, p.gpu_model AS "gpuModel", p.key AS "topologyKey", g.domain,
         g.counted::int AS nodes, g.allocatable_nodes::int AS "allocatableNodes", g.free_nodes::int AS "freeNodes",
         c.resource, coalesce(c.total, 0)::int AS total, coalesce(c.allocatable, 0)::int AS allocatable,
         coalesce(c.allocated, 0)::int AS allocated, coalesce(c.reserved, 0)::int AS reserved,
         greatest(0, coalesce(c.allocatable, 0) - coalesce(c.allocated, 0) - coalesce(c.reserved, 0))::int AS available,
         coalesce(c.provisioning, 0)::int AS provisioning, coalesce(c.unhealthy, 0)::int AS unhealthy,
         coalesce(c.maintenance, 0)::int AS maintenance, coalesce(c.unreachable, 0)::int AS unreachable
  FROM g JOIN p ON p.id = g.pool_id
  LEFT JOIN LATERAL bc_contrib(
    g.nodes,
    ARRAY(SELECT d FROM devices d WHERE d.node_id = ANY (g.ids)),
    ARRAY(SELECT r FROM node_resources r WHERE r.node_id = ANY (g.ids))
  ) c ON true
  WHERE g.counted > 0
  ORDER BY g.pool_id, g.domain NULLS LAST, c.resource`;

/**
 * Capacity per placement domain: for each pool (all, or `poolIds`), its nodes grouped by the value of their label
 * under `topologyKey` (default: each pool's own key), with node counts and the rollup's rows per resource. Computed
 * from the ledger at the call, not from the rollup table (which has no domain); see docs/adr/0014-capacity-per-domain.md.
 */
export async function domainCapacity(db: Db, opts: { poolIds?: readonly string[]; topologyKey?: string } = {}): Promise<PoolDomains[]> {
  const { rows } = await db.query<DomainRow>(DOMAIN_SQL, [opts.poolIds ?? null, opts.topologyKey ?? null]);
  const pools = new Map<string, PoolDomains>();
  let last: DomainCapacity | undefined;
  for (const r of rows) {
    let pool = pools.get(r.poolId);
    if (!pool) {
      pool = { poolId: r.poolId, name: r.name, gpuModel: r.gpuModel, topologyKey: r.topologyKey, domains: [] };
      pools.set(r.poolId, pool);
      last = undefined;
    }
    if (!last || last.domain !== r.domain) {
      last = { domain: r.domain, nodes: { total: r.nodes, allocatable: r.allocatableNodes, free: r.freeNodes }, capacity: [] };
      pool.domains.push(last);
    }
    if (r.resource === null) continue; // a domain whose nodes report nothing yet
    last.capacity.push({
      resource: r.resource,
      total: r.total,
      allocatable: r.allocatable,
      allocated: r.allocated,
      reserved: r.reserved,
      available: r.available,
      provisioning: r.provisioning,
      unhealthy: r.unhealthy,
      maintenance: r.maintenance,
      unreachable: r.unreachable,
    });
  }
  return [...pools.values()];
}

export interface TimelineBucket {
  start: number;
  end: number;
  booked: number;
  free: number;
}

/**
 * Whole GPUs booked per bucket of [from, to): a GPU counts in a bucket when any of its bookings overlaps it. `free` is
 * the pool's current allocatable GPUs minus booked, never below 0. MIG and slot atoms are not counted.
 */
export async function gpuTimeline(
  db: Db,
  poolId: string,
  from: number,
  to: number,
  stepMs: number,
): Promise<{ allocatable: number; buckets: TimelineBucket[] }> {
  const { rows: alloc } = await db.query<{ allocatable: number }>(
    `SELECT allocatable FROM pool_capacity WHERE pool_id = $1 AND resource = 'gpu'`,
    [poolId],
  );
  const allocatable = alloc[0]?.allocatable ?? 0;
  const { rows } = await db.query<{ i: number; booked: number }>(
    `WITH buckets AS (
       SELECT i, tstzrange(to_timestamp(($2::float8 + i * $4::float8) / 1000), to_timestamp(least($2::float8 + (i + 1) * $4::float8, $3::float8) / 1000)) AS span
       FROM generate_series(0, ceil(($3::float8 - $2::float8) / $4::float8)::int - 1) i
     )
     SELECT bk.i, count(DISTINCT b.device_id)::int AS booked
     FROM buckets bk
     LEFT JOIN device_bookings b ON b.during && bk.span AND b.device_id IN (
       SELECT d.id FROM devices d JOIN nodes n ON n.id = d.node_id WHERE n.pool_id = $1 AND d.class = 'gpu')
     GROUP BY bk.i ORDER BY bk.i`,
    [poolId, from, to, stepMs],
  );
  return {
    allocatable,
    buckets: rows.map((r) => {
      const start = from + r.i * stepMs;
      return { start, end: Math.min(start + stepMs, to), booked: r.booked, free: Math.max(0, allocatable - r.booked) };
    }),
  };
}

/** Folds pending deltas into the rollup rows. */
export async function foldRollup(db: Db): Promise<number> {
  const { rows } = await db.query<{ n: number }>('SELECT bc_fold_rollup() AS n');
  return rows[0]!.n;
}

/** Recomputes every rollup row (moves started bookings from reserved to allocated, picks up bucket changes). */
export async function rebuildRollup(db: Db): Promise<number> {
  const { rows } = await db.query<{ n: number }>('SELECT bc_rebuild_rollup() AS n');
  return rows[0]!.n;
}
