// The capacity methods behind the HTTP routes (and the CLI's --direct mode): visibility (NOT_FOUND) rules, the
// clock-dependent timeline defaults, and the shape of each answer. Reads only; nothing here writes.
import { DbClock, type Clock } from '../db/clock.ts';
import { calendarBookings, calendarNodes, calendarReservations, type CalendarBooking, type CalendarNode, type CalendarReservation } from '../db/calendar.ts';
import {
  capacitySummary,
  domainCapacity,
  gpuTimeline,
  poolCapacity,
  type CapacityRow,
  type DomainCapacity,
  type Summary,
  type TimelineBucket,
} from '../db/capacity.ts';
import { Ledger, type LedgerMetrics } from '../db/ledger.ts';
import type { Db } from '../db/pool.ts';
import { quotaStatus, type QuotaStatus } from '../db/quota.ts';
import { getPool, isPoolVisible, type PoolInfo } from '../db/snapshot.ts';
import { notFound } from '../http/errors.ts';
import type { Preemptible, Previewer } from '../core/preview.ts';
import { readUsage, type UsageTotal } from '../db/usage.ts';
import {
  resolveTimelineWindow,
  resolveUsageWindow,
  type ByDomainInput,
  type ByPoolInput,
  type PreviewInput,
  type QuotaInput,
  type SummaryInput,
  type TimelineInput,
  type UsageInput,
} from '../core/schemas.ts';

/** The most candidates a preview returns (a gang returns all its members). */
export const MAX_PREVIEW_CANDIDATES = 10;

export interface PreviewCandidate {
  nodeId: string;
  atoms: string[];
  score: number;
}

export interface PreviewResult {
  fits: boolean;
  candidates: PreviewCandidate[];
  /** The placement domain of the chosen gang. */
  gangDomain?: string;
  /** Why it does not fit. */
  reason?: string;
  /** A regular request that does not fit: what preempting spot reservations would take. */
  preemptible?: Preemptible;
}

export interface ByPoolResult {
  poolId: string;
  capacity: CapacityRow[];
}

export interface ByDomainResult {
  poolId: string;
  /** The node label the domains are values of. */
  topologyKey: string;
  /** Ordered by domain; nodes without the label last, as `domain: null`. */
  domains: DomainCapacity[];
}

export interface QuotaResult {
  tenantId: string;
  quotas: QuotaStatus[];
}

export interface TimelineResult {
  poolId: string;
  from: number;
  to: number;
  stepMinutes: number;
  allocatable: number;
  buckets: TimelineBucket[];
}

/** The GPU calendar's rows (src/ui/): every booking in the pool; masking other tenants' is src/ui/layout.ts's. */
export interface CalendarRows {
  nodes: CalendarNode[];
  bookings: CalendarBooking[];
  /** The tenant's own reservations among the bookings (no one else's is read). */
  reservations: CalendarReservation[];
}

export interface UsageResult {
  tenantId: string;
  poolId?: string;
  /** The window in whole UTC hours (ISO 8601). */
  from: string;
  to: string;
  /** Hours before this are final; later ones (the current hour among them) may still grow. Null before the first run. */
  finalUntil: string | null;
  /** Per pool and resource over the window: atom-seconds (exact) and hours (÷ 3600, 6 decimals). */
  totals: UsageTotal[];
  /** With `hourly`: one row per hour, pool and resource that had use. */
  hours?: { hour: string; poolId: string; resource: string; atomSeconds: number; hours: number }[];
}

export interface CapacityServiceDeps {
  db: Db;
  previewer: Previewer;
  /** The database's compute_now(): the timeline's defaults and the preview's "now" come from it. */
  clock: Clock;
}

export class CapacityService {
  constructor(private readonly deps: CapacityServiceDeps) {}

  /**
   * The pool, when the tenant may see it: owned, or offered and not archived. Anything else — no such pool, another
   * tenant's pool, an archived pool of another owner — is the same NOT_FOUND, so that a caller learns nothing about
   * pools it cannot see.
   */
  async visiblePool(poolId: string, tenantId: string): Promise<PoolInfo> {
    const pool = await getPool(this.deps.db, poolId);
    if (!pool || !isPoolVisible(pool, tenantId)) throw notFound(`pool ${poolId} not found`);
    return pool;
  }

  summary(input: SummaryInput): Promise<Summary> {
    return capacitySummary(this.deps.db, input.tenantId);
  }

  async byPool(input: ByPoolInput): Promise<ByPoolResult> {
    await this.visiblePool(input.poolId, input.tenantId);
    return { poolId: input.poolId, capacity: await poolCapacity(this.deps.db, input.poolId) };
  }

  /** The pool's capacity per placement domain: where a gang (`gang.size` nodes in one domain) could go. */
  async byDomain(input: ByDomainInput): Promise<ByDomainResult> {
    const pool = await this.visiblePool(input.poolId, input.tenantId);
    const topologyKey = input.topologyKey ?? pool.topologyKey;
    const [found] = await domainCapacity(this.deps.db, { poolIds: [input.poolId], topologyKey });
    return { poolId: input.poolId, topologyKey, domains: found?.domains ?? [] };
  }

  async preview(input: PreviewInput): Promise<PreviewResult> {
    await this.visiblePool(input.poolId, input.tenantId);
    const plan = await this.deps.previewer.preview(input, this.deps.clock.now());
    if (plan.ok) {
      const all = plan.candidates.map((c) => ({ nodeId: c.nodeId, atoms: [...c.atoms], score: c.score }));
      return {
        fits: true,
        candidates: input.gang ? all : all.slice(0, MAX_PREVIEW_CANDIDATES),
        ...(plan.gangDomain !== undefined ? { gangDomain: plan.gangDomain } : {}),
      };
    }
    const p = plan.preemptible;
    return {
      fits: false,
      candidates: [],
      reason: plan.reason,
      // A count and a time only, and only for a regular request: spot requests never preempt.
      ...(p && !input.spot ? { preemptible: { count: p.count, start: p.start } } : {}),
    };
  }

  /** The tenant's quota keys (limit, used, reserved; GPU-hours of the current period) in the pools it may see. */
  async quota(input: QuotaInput): Promise<QuotaResult> {
    if (input.poolId) await this.visiblePool(input.poolId, input.tenantId);
    const rows = await quotaStatus(this.deps.db, { tenantId: input.tenantId, ...(input.poolId ? { poolId: input.poolId } : {}) });
    const visible = new Map<string, boolean>();
    for (const poolId of new Set(rows.map((r) => r.poolId))) {
      const pool = await getPool(this.deps.db, poolId);
      visible.set(poolId, pool !== undefined && isPoolVisible(pool, input.tenantId));
    }
    return { tenantId: input.tenantId, quotas: rows.filter((r) => visible.get(r.poolId)) };
  }

  async timeline(input: TimelineInput): Promise<TimelineResult> {
    const w = resolveTimelineWindow(input, this.deps.clock.now());
    await this.visiblePool(input.poolId, input.tenantId);
    const { allocatable, buckets } = await gpuTimeline(this.deps.db, input.poolId, w.from, w.to, w.stepMs);
    return { poolId: input.poolId, from: w.from, to: w.to, stepMinutes: w.stepMinutes, allocatable, buckets };
  }

  /** The database clock's now (epoch ms): the calendar's window and "now" marker. */
  now(): number {
    return this.deps.clock.now();
  }

  /** The pool's nodes and bookings overlapping [from, to) and the tenant's own reservations among them, for the GPU calendar. */
  async calendar(input: { tenantId: string; poolId: string; from: number; to: number }): Promise<CalendarRows> {
    await this.visiblePool(input.poolId, input.tenantId);
    const [nodes, bookings] = await Promise.all([
      calendarNodes(this.deps.db, input.poolId),
      calendarBookings(this.deps.db, input.poolId, input.from, input.to),
    ]);
    const own = [...new Set(bookings.filter((b) => b.tenantId === input.tenantId && b.reservationId).map((b) => b.reservationId!))];
    return { nodes, bookings, reservations: await calendarReservations(this.deps.db, input.tenantId, own) };
  }

  /**
   * The tenant's usage windows. Only the tenant's own rows are read, so no pool visibility check: a pool it may no
   * longer see still shows what it burned there, and an unknown pool shows nothing.
   */
  async usage(input: UsageInput): Promise<UsageResult> {
    const w = resolveUsageWindow(input, this.deps.clock.now());
    const u = await readUsage(this.deps.db, { tenantId: input.tenantId, poolId: input.poolId, fromMs: w.from, toMs: w.to });
    const iso = (ms: number) => new Date(ms).toISOString();
    return {
      tenantId: input.tenantId,
      ...(input.poolId !== undefined ? { poolId: input.poolId } : {}),
      from: iso(w.from),
      to: iso(w.to),
      finalUntil: u.finalUntil === null ? null : iso(u.finalUntil),
      totals: u.totals,
      ...(input.hourly ? { hours: u.hours.map((h) => ({ ...h, hour: iso(h.hour) })) } : {}),
    };
  }
}

/** The service on a database, with its own Ledger (for previews) and database clock. */
export async function createCapacityService(
  db: Db,
  opts: { metrics?: LedgerMetrics } = {},
): Promise<{ service: CapacityService; clock: DbClock; ledger: Ledger }> {
  const clock = await DbClock.create(db);
  const ledger = new Ledger(db, opts.metrics ? { metrics: opts.metrics } : {});
  return { service: new CapacityService({ db, previewer: ledger, clock }), clock, ledger };
}
