// Usage windows (migrations/0008_usage.sql, docs/adr/0011-usage-windows.md): the leader's run, and the reads of the
// API, the CLI and the metrics. Stored as exact atom-seconds; hours are derived here.
import type { Db } from './pool.ts';

/** What one bc_run_usage() call did. */
export interface UsageStep {
  /** The hours recomputed: [from, to), epoch ms. */
  from: number;
  to: number;
  /** Hours before this are final (epoch ms). */
  finalUntil: number;
  rows: number;
  /** False when hours beyond `to` still wait (a backfill): run again. */
  caughtUp: boolean;
}

/** One run step: at most `maxHours` hours from the watermark; hours that ended `settleMs` ago become final. */
export async function runUsageStep(db: Pick<Db, 'query'>, maxHours: number, settleMs: number): Promise<UsageStep> {
  const { rows } = await db.query<{ step: UsageStep }>(
    'SELECT bc_run_usage($1, make_interval(secs => $2::float8 / 1000)) AS step',
    [maxHours, settleMs],
  );
  const s = rows[0]!.step;
  return { from: Number(s.from), to: Number(s.to), finalUntil: Number(s.finalUntil), rows: s.rows, caughtUp: s.caughtUp };
}

/** Recomputes the hours of [fromMs, toMs) (whole hours), watermark untouched. Returns the rows written. */
export async function computeUsageHours(db: Pick<Db, 'query'>, fromMs: number, toMs: number): Promise<number> {
  const { rows } = await db.query<{ n: number }>(
    'SELECT bc_compute_usage(to_timestamp($1::float8 / 1000), to_timestamp($2::float8 / 1000)) AS n',
    [fromMs, toMs],
  );
  return rows[0]!.n;
}

export interface UsageHour {
  /** The hour's start, epoch ms (UTC hours). */
  hour: number;
  poolId: string;
  resource: string;
  /** amount × seconds held in the hour, exact to the microsecond. */
  atomSeconds: number;
  /** atomSeconds / 3600, rounded to 6 decimals. */
  hours: number;
}

export interface UsageTotal {
  poolId: string;
  resource: string;
  atomSeconds: number;
  hours: number;
}

export interface UsageRead {
  hours: UsageHour[];
  /** Per pool and resource over the window. */
  totals: UsageTotal[];
  /** Hours before this are final (epoch ms); null before the first run. */
  finalUntil: number | null;
}

/** A tenant's usage rows in [fromMs, toMs) (by hour start), optionally of one pool. */
export async function readUsage(db: Db, q: { tenantId: string; poolId?: string | undefined; fromMs: number; toMs: number }): Promise<UsageRead> {
  const params = [q.tenantId, q.fromMs, q.toMs, q.poolId ?? null];
  const where = `tenant_id = $1 AND hour >= to_timestamp($2::float8 / 1000) AND hour < to_timestamp($3::float8 / 1000)
                 AND ($4::text IS NULL OR pool_id = $4)`;
  const hours = await db.query<UsageHour>(
    `SELECT (extract(epoch FROM hour) * 1000)::float8 AS hour, pool_id AS "poolId", resource,
            atom_seconds AS "atomSeconds", round(atom_seconds / 3600, 6) AS hours
     FROM usage_hours WHERE ${where} ORDER BY hour, pool_id, resource`,
    params,
  );
  const totals = await db.query<UsageTotal>(
    `SELECT pool_id AS "poolId", resource, sum(atom_seconds) AS "atomSeconds", round(sum(atom_seconds) / 3600, 6) AS hours
     FROM usage_hours WHERE ${where} GROUP BY pool_id, resource ORDER BY pool_id, resource`,
    params,
  );
  const mark = await db.query<{ t: number | null }>('SELECT (extract(epoch FROM final_until) * 1000)::float8 AS t FROM usage_watermark');
  return { hours: hours.rows, totals: totals.rows, finalUntil: mark.rows[0]?.t ?? null };
}

export interface UsageSeries {
  tenantId: string;
  poolId: string;
  pool: string;
  resource: string;
  /** Exact, as stored (÷ 3600: GPU-hours for gpu). */
  atomSeconds: number;
}

/** Atom-seconds burned per tenant, pool and resource since the start of the current UTC month (by compute_now()). */
export async function monthToDateUsage(db: Pick<Db, 'query'>): Promise<UsageSeries[]> {
  const { rows } = await db.query<UsageSeries>(
    `SELECT u.tenant_id AS "tenantId", u.pool_id AS "poolId", p.name AS pool, u.resource,
            sum(u.atom_seconds)::float8 AS "atomSeconds"
     FROM usage_hours u JOIN pools p ON p.id = u.pool_id
     WHERE u.hour >= date_trunc('month', compute_now(), 'UTC')
     GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 4`,
  );
  return rows;
}
