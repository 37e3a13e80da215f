import type pg from 'pg';
import { SQLSTATE, sqlState } from '../../src/db/errors.ts';
import type { Db } from '../../src/db/pool.ts';

export interface InvariantReport {
  overlappingBookings: number;
  quotaTotalMismatches: { tenant_id: string; pool_id: string; resource: string; total: number; booked: number }[];
  quotaUsedMismatches: { tenant_id: string; pool_id: string; resource: string; used: number; live: number }[];
  quotaOverMax: { tenant_id: string; pool_id: string; resource: string; peak: number; max: number }[];
  scalarMismatches: { node_id: string; resource: string; allocated: number; claimed: number }[];
  scalarOutOfBounds: number;
  rollupMismatches: Record<string, unknown>[];
}

/** The incrementally kept rollup (rows + deltas) against a computation from scratch, at the same compute_now(). */
export const ROLLUP_MISMATCHES = `
  WITH computed AS (SELECT * FROM bc_compute_rollup())
  SELECT coalesce(k.pool_id, c.pool_id) AS pool_id, coalesce(k.resource, c.resource) AS resource,
         row(k.total, k.allocatable, k.allocated, k.reserved, k.provisioning, k.unhealthy, k.maintenance, k.unreachable)::text AS kept,
         row(c.total, c.allocatable, c.allocated, c.reserved, c.provisioning, c.unhealthy, c.maintenance, c.unreachable)::text AS computed
  FROM pool_capacity k FULL JOIN computed c ON c.pool_id = k.pool_id AND c.resource = k.resource
  WHERE (coalesce(k.total, 0), coalesce(k.allocatable, 0), coalesce(k.allocated, 0), coalesce(k.reserved, 0),
         coalesce(k.provisioning, 0), coalesce(k.unhealthy, 0), coalesce(k.maintenance, 0), coalesce(k.unreachable, 0))
     IS DISTINCT FROM
        (coalesce(c.total, 0), coalesce(c.allocatable, 0), coalesce(c.allocated, 0), coalesce(c.reserved, 0),
         coalesce(c.provisioning, 0), coalesce(c.unhealthy, 0), coalesce(c.maintenance, 0), coalesce(c.unreachable, 0))`;

const BOOKED_BY_KEY = `
  SELECT a.tenant_id, a.pool_id, d.class AS resource,
         count(*) FILTER (WHERE b.during @> compute_now()) AS live,
         count(*) FILTER (WHERE upper(b.during) > compute_now()) AS booked
  FROM device_bookings b JOIN allocations a ON a.id = b.allocation_id JOIN devices d ON d.id = b.device_id
  WHERE a.kind <> 'layout' AND NOT isempty(b.during)
  GROUP BY 1, 2, 3`;

/**
 * The ledger's invariants, checked in SQL against the rows themselves (not against any counter's own idea).
 * Quota counters are checked twice: for limited keys, `used + reserved` against every booking not yet ended as they
 * stand (bookings move from reserved to used as time passes, so only the sum is exact between rebuilds); then, after
 * the periodic rebuild, every key's `used` against the bookings live now.
 *
 * All in one REPEATABLE READ transaction: one snapshot and one compute_now() for every query, also the ones inside
 * functions, so that a ledger still at work (pods ending during a soak's checkpoint) cannot make two of them disagree.
 */
export async function checkInvariants(db: Db): Promise<InvariantReport> {
  for (let attempt = 1; ; attempt++) {
    const client = await db.connect();
    try {
      await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
      const report = await checkInvariantsIn(client);
      await client.query('COMMIT');
      return report;
    } catch (e) {
      await client.query('ROLLBACK').catch(() => undefined);
      // The quota rebuild writes: a concurrent booking can make it a serialization failure; look again.
      if (sqlState(e) !== SQLSTATE.serializationFailure || attempt >= 10) throw e;
    } finally {
      client.release();
    }
  }
}

async function checkInvariantsIn(db: pg.PoolClient): Promise<InvariantReport> {
  const overlapping = await db.query(`
    SELECT count(*)::int AS n FROM device_bookings a JOIN device_bookings b
      ON a.device_id = b.device_id AND a.id < b.id AND a.during && b.during`);
  const totals = await db.query(`
    SELECT q.tenant_id, q.pool_id, q.resource, q.used + q.reserved AS total, coalesce(l.booked, 0)::int AS booked
    FROM quotas q LEFT JOIN (${BOOKED_BY_KEY}) l USING (tenant_id, pool_id, resource)
    WHERE q.max IS NOT NULL AND q.used + q.reserved <> coalesce(l.booked, 0)`);
  await db.query('SELECT bc_rebuild_quotas()');
  const used = await db.query(`
    SELECT q.tenant_id, q.pool_id, q.resource, q.used, coalesce(l.live, 0)::int AS live
    FROM quotas q LEFT JOIN (${BOOKED_BY_KEY}) l USING (tenant_id, pool_id, resource)
    WHERE q.used <> coalesce(l.live, 0)`);
  const overMax = await db.query(`
    SELECT tenant_id, pool_id, resource, peak, max FROM (
      SELECT q.*, bc_quota_peak(q.tenant_id, q.pool_id, q.resource, tstzrange(compute_now(), 'infinity')) AS peak FROM quotas q
    ) x WHERE max IS NOT NULL AND peak > max`);
  const scalars = await db.query(`
    SELECT nr.node_id, nr.resource, nr.allocated, coalesce(c.claimed, 0)::int AS claimed
    FROM node_resources nr LEFT JOIN (
      SELECT a.node_id, s.key AS resource, sum(s.value::int) AS claimed
      FROM allocations a, jsonb_each_text(a.scalars) s WHERE a.released_at IS NULL GROUP BY 1, 2
    ) c USING (node_id, resource)
    WHERE nr.allocated <> coalesce(c.claimed, 0)`);
  const rollup = await db.query(ROLLUP_MISMATCHES);
  const bounds = await db.query(`
    SELECT count(*)::int AS n FROM node_resources WHERE allocated < 0 OR allocated > floor(allocatable * ratio)`);
  return {
    overlappingBookings: overlapping.rows[0].n,
    quotaTotalMismatches: totals.rows,
    quotaUsedMismatches: used.rows,
    quotaOverMax: overMax.rows,
    scalarMismatches: scalars.rows,
    scalarOutOfBounds: bounds.rows[0].n,
    rollupMismatches: rollup.rows,
  };
}

export const CLEAN: InvariantReport = {
  overlappingBookings: 0,
  quotaTotalMismatches: [],
  quotaUsedMismatches: [],
  quotaOverMax: [],
  scalarMismatches: [],
  scalarOutOfBounds: 0,
  rollupMismatches: [],
};

/** A small deterministic PRNG (mulberry32), so a failing torture run can be replayed from its seed. */
export function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
