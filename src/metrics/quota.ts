// Quota gauges: per tenant, pool and resource, the limit in force, the atoms charged now and ahead, and the current
// period's GPU-hour budget (limit, burned, booked ahead) in atom-seconds (Prometheus' base unit: divide by 3600 for
// GPU-hours); read from the database at scrape time with one query, like the capacity gauges (src/metrics/capacity.ts).
import { Gauge, type Registry } from 'prom-client';
import type { Db } from '../db/pool.ts';
import { quotaStatus, type QuotaStatus } from '../db/quota.ts';

const seconds = (hours: number | null) => (hours === null ? null : Math.round(hours * 3600));

/** Gauge name, help, and the value of a key (null: no series, e.g. an unlimited key's limit). */
export const QUOTA_GAUGES: readonly [string, string, (q: QuotaStatus) => number | null][] = [
  ['bettercompute_quota_limit', 'The quota limit in force now (an override included), in atoms; absent when unlimited.', (q) => q.limit],
  ['bettercompute_quota_used', 'Atoms charged to the tenant now.', (q) => q.used],
  ['bettercompute_quota_reserved', 'Atoms charged to bookings that start later.', (q) => q.reserved],
  ['bettercompute_quota_budget_limit_atom_seconds', 'The GPU-hour quota per period, in atom-seconds (3600 per GPU-hour); absent when none.', (q) => seconds(q.hours.limit)],
  ['bettercompute_quota_budget_used_atom_seconds', 'Atom-seconds burned in the current period so far.', (q) => seconds(q.hours.used)],
  ['bettercompute_quota_budget_reserved_atom_seconds', 'Atom-seconds booked ahead in the current period (charges from now to its end).', (q) => seconds(q.hours.reserved)],
];

const LABELS = ['pool', 'pool_id', 'tenant', 'resource', 'period'] as const;

/** Registers the quota gauges on `registry`; one query per scrape, shared by the six gauges. */
export function registerQuotaGauges(registry: Registry, db: Db): void {
  let inFlight: Promise<{ rows: QuotaStatus[]; names: Map<string, string> }> | undefined;
  const load = async () => {
    const [rows, pools] = await Promise.all([
      quotaStatus(db),
      db.query<{ id: string; name: string }>('SELECT id, name FROM pools'),
    ]);
    return { rows, names: new Map(pools.rows.map((p) => [p.id, p.name])) };
  };
  const snapshot = () => {
    if (!inFlight) {
      inFlight = load();
      const clear = () => {
        inFlight = undefined;
      };
      inFlight.then(clear, clear);
    }
    return inFlight;
  };
  for (const [name, help, value] of QUOTA_GAUGES) {
    new Gauge({
      name,
      help,
      labelNames: LABELS,
      registers: [registry],
      async collect() {
        const { rows, names } = await snapshot();
        this.reset();
        for (const q of rows) {
          const v = value(q);
          if (v === null) continue;
          this.set({ pool: names.get(q.poolId) ?? '', pool_id: q.poolId, tenant: q.tenantId, resource: q.resource, period: q.hours.period }, v);
        }
      },
    });
  }
}
