// Placement metrics: what the Ledger reports through its `metrics` option (LedgerMetrics in src/db/ledger.ts).
import { Counter, Histogram, type Registry } from 'prom-client';

/** The callbacks the Ledger calls; the same shape as its LedgerMetrics option. */
export interface LedgerMetricsSink {
  onPlacement(seconds: number, outcome: string): void;
  onLostRace(reason: string): void;
  onReplan(): void;
}

/** Seconds: a placement is a few milliseconds when uncontended; replans and lock waits make the tail. */
export const PLACEMENT_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

/**
 * Registers the placement histogram and the lost-race and replan counters on `registry`, and returns the object to
 * pass as `new Ledger(db, { metrics: ledgerMetrics(registry) })`.
 */
export function ledgerMetrics(registry: Registry): LedgerMetricsSink {
  const placement = new Histogram({
    name: 'bettercompute_placement_duration_seconds',
    help: 'Time to place one reservation request (plan, commit and replans), by outcome (reserved, NO_CAPACITY, QUOTA_EXCEEDED, ...).',
    labelNames: ['outcome'] as const,
    buckets: PLACEMENT_BUCKETS,
    registers: [registry],
  });
  const lostRaces = new Counter({
    name: 'bettercompute_placement_lost_races_total',
    help: 'Commits that lost a race with another placement (stale snapshot, booking conflict, deadlock), by reason.',
    labelNames: ['reason'] as const,
    registers: [registry],
  });
  const replans = new Counter({
    name: 'bettercompute_placement_replans_total',
    help: 'Times a placement planned again on fresh rows after a lost race.',
    registers: [registry],
  });
  return {
    onPlacement(seconds, outcome) {
      placement.observe({ outcome }, seconds);
    },
    onLostRace(reason) {
      lostRaces.inc({ reason });
    },
    onReplan() {
      replans.inc();
    },
  };
}
