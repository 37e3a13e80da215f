// A leader's periodic job: once at once, then every `everyMs`, never two runs at a time. A run that fails is logged
// (a fenced one as a warning: another replica leads) and the next tick tries again.
import { FencedError } from '../db/ledger.ts';
import { errorFields, type Logger } from '../log.ts';

export interface PeriodicJob<T> {
  /** The run at start. */
  readonly first: Promise<T | undefined>;
  /** Runs once now (after a run in progress); resolves with its outcome. */
  runNow(): Promise<T | undefined>;
  /** Stops the timer and waits for a run in progress. */
  stop(): Promise<void>;
}

export function startPeriodicJob<T>(name: string, everyMs: number, log: Logger, run: () => Promise<T>): PeriodicJob<T> {
  let stopped = false;
  let queued = 0;
  let last: Promise<T | undefined> = Promise.resolve(undefined);
  const runNow = () => {
    queued++;
    last = last.then(async () => {
      try {
        if (stopped) return undefined;
        return await run();
      } catch (e) {
        if (e instanceof FencedError) log.warn(`${name} fenced: another replica leads`);
        else log.error(`${name} failed`, errorFields(e));
        return undefined;
      } finally {
        queued--;
      }
    });
    return last;
  };
  const first = runNow();
  // A run slower than the period is not queued behind itself again and again.
  const timer = setInterval(() => {
    if (queued === 0) void runNow();
  }, everyMs);
  timer.unref?.();
  return {
    first,
    runNow,
    async stop() {
      stopped = true;
      clearInterval(timer);
      await last;
    },
  };
}
