// The capacity rollup's periodic jobs: fold pending deltas often, rebuild every `rollupEvery`. Both run in one queue,
// never at the same time: a fold that commits while a rebuild's statement runs would have its deltas overwritten by
// the rebuild's older snapshot (until the next rebuild).
import { foldRollup, rebuildRollup } from '../db/capacity.ts';
import type { Db } from '../db/pool.ts';
import { errorFields, type Logger } from '../log.ts';
import { systemClock } from '../clock.ts';

export interface CapacityJobsOptions {
  db: Db;
  /** Full rebuild period (default 5 min in config). */
  rollupEveryMs: number;
  /** Delta fold period (default 10 s in config). */
  foldEveryMs: number;
  log: Logger;
  /** Runs after every fold (e.g. re-reading the database clock). */
  afterFold?: () => Promise<void>;
  /** Rebuild once at start (default true): the rollup may be stale after a restart. */
  rebuildAtStart?: boolean;
}

export interface Jobs {
  /** Stops scheduling and waits for a job in progress. */
  stop(): Promise<void>;
  /** How many fold and rebuild runs completed (tests, logs). */
  readonly runs: { fold: number; rebuild: number };
  /**
   * A rebuild now, in the same queue (after a job in progress): for bookings that started or ended by themselves at a
   * known instant (a preemption's deadline), which only a rebuild counts. Resolves when it has run.
   */
  rebuildNow(): Promise<void>;
}

export function startCapacityJobs(opts: CapacityJobsOptions): Jobs {
  let stopped = false;
  let queue: Promise<void> = Promise.resolve();
  const timers = new Set<NodeJS.Timeout>();
  const runs = { fold: 0, rebuild: 0 };

  const enqueue = (name: 'fold' | 'rebuild', fn: () => Promise<void>) => {
    queue = queue.then(async () => {
      if (stopped) return;
      const started = systemClock.now();
      try {
        await fn();
        runs[name]++;
        opts.log.debug('capacity job', { job: name, ms: Math.round(systemClock.now() - started) });
      } catch (e) {
        opts.log.error('capacity job failed', { job: name, ...errorFields(e) });
      }
    });
    return queue;
  };

  const every = (name: 'fold' | 'rebuild', ms: number, fn: () => Promise<void>) => {
    const tick = () => {
      const t = setTimeout(() => {
        timers.delete(t);
        void enqueue(name, fn).then(() => {
          if (!stopped) tick();
        });
      }, ms);
      timers.add(t);
    };
    tick();
  };

  const fold = async () => {
    await foldRollup(opts.db);
    await opts.afterFold?.();
  };
  const rebuild = async () => {
    await rebuildRollup(opts.db);
  };

  if (opts.rebuildAtStart ?? true) void enqueue('rebuild', rebuild);
  every('fold', opts.foldEveryMs, fold);
  every('rebuild', opts.rollupEveryMs, rebuild);

  return {
    runs,
    rebuildNow: () => enqueue('rebuild', rebuild),
    async stop() {
      stopped = true;
      for (const t of timers) clearTimeout(t);
      timers.clear();
      await queue;
    },
  };
}
