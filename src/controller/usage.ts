// The leader's usage windows job (migrations/0008_usage.sql, ADR 0011): every `usageEvery` it recomputes the hours
// from the watermark to the current hour from the booking history, and moves the watermark to the hours that are now
// final. After downtime the watermark is hours behind, and the run steps through the missed hours (at most
// `maxHoursPerStep` per fenced transaction) until it has caught up. Recomputing an hour gives the same rows, so a run
// cut short (a crash, a lost lease) is simply done again by the next leader.
import type { Fence } from '../db/ledger.ts';
import type { Db } from '../db/pool.ts';
import { runUsageStep, type UsageStep } from '../db/usage.ts';
import type { Logger } from '../log.ts';
import { fenced } from './fence.ts';
import type { UsageMetrics } from './metrics.ts';
import { startPeriodicJob, type PeriodicJob } from './periodic.ts';
import { systemClock } from '../clock.ts';

/** A week of hours per transaction: a long backfill commits as it goes, and no statement grows without bound. */
export const MAX_HOURS_PER_STEP = 168;
/**
 * An hour becomes final this long after it ended: a booking or release whose transaction read compute_now() before
 * the hour ended may commit a little later (bounded by the statement and idle-in-transaction timeouts).
 */
export const SETTLE_MS = 5 * 60_000;

export interface UsageDeps {
  db: Db;
  fence: () => Fence;
  log: Logger;
  metrics?: UsageMetrics;
  maxHoursPerStep?: number;
  settleMs?: number;
}

export interface UsageRun {
  steps: UsageStep[];
  /** Hours before this are final after the run (epoch ms). */
  finalUntil: number;
}

/** One run: steps until caught up. Throws FencedError when another replica leads. */
export async function runUsage(d: UsageDeps): Promise<UsageRun> {
  const started = systemClock.now();
  const steps: UsageStep[] = [];
  for (;;) {
    const step = await fenced(d.db, d.fence(), (tx) => runUsageStep(tx, d.maxHoursPerStep ?? MAX_HOURS_PER_STEP, d.settleMs ?? SETTLE_MS));
    steps.push(step);
    if (step.caughtUp) break;
  }
  const last = steps.at(-1)!;
  d.metrics?.completed(last.finalUntil / 1000);
  const level = steps.length > 1 ? 'info' : 'debug';
  d.log[level]('usage windows computed', {
    from: new Date(steps[0]!.from).toISOString(),
    to: new Date(last.to).toISOString(),
    finalUntil: new Date(last.finalUntil).toISOString(),
    steps: steps.length,
    rows: steps.reduce((n, s) => n + s.rows, 0),
    ms: Math.round(systemClock.now() - started),
  });
  return { steps, finalUntil: last.finalUntil };
}

export type UsageJob = PeriodicJob<UsageRun>;

/** The leader's periodic usage job: once at once (a backfill after downtime), then every `everyMs`, one at a time. */
export function startUsageWindows(d: UsageDeps & { everyMs: number }): UsageJob {
  return startPeriodicJob('usage windows', d.everyMs, d.log, () => runUsage(d));
}
