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
