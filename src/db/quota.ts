// What each quota key stands at now (bc_quota_status, migrations/functions/bc_quota_status.sql): for Pool status, the quota
// gauges and `better-compute capacity --quota`.
import type { QuotaPeriod } from '../core/quota.ts';
import type { Db } from './pool.ts';

export interface QuotaStatus {
  tenantId: string;
  poolId: string;
  resource: string;
  /** The instantaneous limit in force now (an override's, else the base); null: unlimited. */
  limit: number | null;
  /** Atoms charged now, and charged to bookings that start later. */
  used: number;
  reserved: number;
  /** Atom-hours in the current period: burned so far (used) and booked ahead (reserved); limit null: none. */
  hours: { limit: number | null; period: QuotaPeriod; periodStart: number; periodEnd: number; used: number; reserved: number };
}

interface Row {
  tenant_id: string;
  pool_id: string;
  resource: string;
  lim: number | null;
  used: number;
  reserved: number;
  hour_limit: number | null;
  hour_period: QuotaPeriod;
  period_start: number;
  period_end: number;
  hours_used: number;
  hours_reserved: number;
}

/** Every quota key, or a pool's, or a tenant's; ordered by pool, tenant, resource. */
export async function quotaStatus(db: Pick<Db, 'query'>, filter: { poolId?: string; tenantId?: string } = {}): Promise<QuotaStatus[]> {
  const { rows } = await db.query<Row>(
    `SELECT tenant_id, pool_id, resource, lim, used, reserved, hour_limit::float8 AS hour_limit, hour_period,
            (extract(epoch FROM period_start) * 1000)::float8 AS period_start,
            (extract(epoch FROM period_end) * 1000)::float8 AS period_end,
            round(hours_used, 4)::float8 AS hours_used, round(hours_reserved, 4)::float8 AS hours_reserved
     FROM bc_quota_status($1, $2)`,
    [filter.poolId ?? null, filter.tenantId ?? null],
  );
  return rows.map((r) => ({
    tenantId: r.tenant_id,
    poolId: r.pool_id,
    resource: r.resource,
    limit: r.lim,
    used: r.used,
    reserved: r.reserved,
    hours: {
      limit: r.hour_limit,
      period: r.hour_period,
      periodStart: r.period_start,
      periodEnd: r.period_end,
      used: r.hours_used,
      reserved: r.hours_reserved,
    },
  }));
}
