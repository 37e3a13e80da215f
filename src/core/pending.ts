// Bounds on pending Reservations (docs/adr/0042): a tenant has at most `maxPendingPerTenant` of them trying to book in
// a Pool, the earliest created first; the rest wait, Pending with reason TooManyPending, and are not retried until one
// of the earlier ones leaves (is booked, fails or is deleted). And a capacity change wakes a Pool's pending
// Reservations in batches: at most one wake per Pool per interval, the earliest created first, a bounded number per
// wake (the others keep their own backoff). Pure: no I/O, no clock.
import { z } from 'zod';

/** The default of a Pool's spec.maxPendingPerTenant. */
export const DEFAULT_MAX_PENDING_PER_TENANT = 100;
/** The bounds of spec.maxPendingPerTenant (the CRD's too). */
export const MaxPendingPerTenant = z.number().int().min(1).max(100_000);

/** The reason of a Reservation that waits behind its tenant's earlier pending ones. */
export const TOO_MANY_PENDING = 'TooManyPending';

/** What the ordering of pending Reservations reads: when each was created (RFC 3339) and its key, the tie-break. */
export interface PendingEntry {
  key: string;
  createdAt: string | undefined;
}

const createdMs = (e: PendingEntry): number => {
  const ms = e.createdAt === undefined ? NaN : Date.parse(e.createdAt);
  // Not yet known (a new object always has one): last.
  return Number.isNaN(ms) ? Number.POSITIVE_INFINITY : ms;
};

/** Earliest created first; equal times by key. */
export function comparePending(a: PendingEntry, b: PendingEntry): number {
  const d = createdMs(a) - createdMs(b);
  if (d !== 0 && !Number.isNaN(d)) return d < 0 ? -1 : 1;
  return a.key < b.key ? -1 : a.key > b.key ? 1 : 0;
}

/** The Pool's limit: its spec value when valid, else the default. */
export function maxPendingOf(spec: unknown): number {
  const v = MaxPendingPerTenant.safeParse(spec);
  return v.success ? v.data : DEFAULT_MAX_PENDING_PER_TENANT;
}

/**
 * Whether `mine` waits behind its tenant's earlier pending Reservations: `others` are the same tenant's pending ones
 * in the same Pool (`mine` among them or not); at least `limit` of them earlier than `mine` means it waits.
 */
export function overPendingLimit(mine: PendingEntry, others: Iterable<PendingEntry>, limit: number): { over: boolean; earlier: number } {
  let earlier = 0;
  for (const o of others) if (o.key !== mine.key && comparePending(o, mine) < 0) earlier++;
  return { over: earlier >= limit, earlier };
}

/** The first `max` of `entries`, earliest created first. */
export function wakeBatch(entries: Iterable<PendingEntry>, max: number): PendingEntry[] {
  return [...entries].sort(comparePending).slice(0, Math.max(0, max));
}

/**
 * Wake requests per Pool, coalesced: `request` marks a Pool, `due` returns the Pools whose wake may run at `nowMs`
 * (marked, and not woken within `intervalMs`) and records that they were woken. A Pool marked while its interval runs
 * stays marked, for the next `due` after the interval.
 */
export class WakeCoalescer {
  private readonly marked = new Set<string>();
  private readonly lastWake = new Map<string, number>();

  constructor(private readonly intervalMs: number) {}

  request(pool: string): void {
    this.marked.add(pool);
  }

  /** Pools marked and not yet due. */
  get waiting(): number {
    return this.marked.size;
  }

  /** How long until the first marked Pool is due (0: now), or undefined when none is marked. */
  nextDueIn(nowMs: number): number | undefined {
    let min: number | undefined;
    for (const pool of this.marked) {
      const last = this.lastWake.get(pool);
      const wait = last === undefined ? 0 : Math.max(0, this.intervalMs - (nowMs - last));
      min = min === undefined ? wait : Math.min(min, wait);
    }
    return min;
  }

  due(nowMs: number): string[] {
    const out: string[] = [];
    for (const pool of this.marked) {
      const last = this.lastWake.get(pool);
      if (last !== undefined && nowMs - last < this.intervalMs) continue;
      out.push(pool);
    }
    for (const pool of out) {
      this.marked.delete(pool);
      this.lastWake.set(pool, nowMs);
    }
    // Forget Pools whose interval is long over (no unbounded map of every Pool ever woken).
    for (const [pool, at] of this.lastWake) if (nowMs - at >= this.intervalMs && !this.marked.has(pool)) this.lastWake.delete(pool);
    return out;
  }
}
