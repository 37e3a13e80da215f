// Whether the database answers: a `SELECT 1` with a short timeout, every few seconds and on each readiness probe. The
// controller's readiness fails at once when it does not answer; its liveness (and its leadership) when it has not
// answered for long.
import { systemClock, type MonotonicClock } from '../clock.ts';
import { errorFields, type Logger } from '../log.ts';
import { pingDatabase, type Db } from './pool.ts';

export interface DbHealthOptions {
  /** How long a `SELECT 1` may take. */
  pingTimeoutMs: number;
  /** How often the background ping runs (start()). */
  pingEveryMs: number;
  log: Logger;
  /** How long the database has been silent (unreachableForMs: the leader's blocker, liveness). */
  clock?: MonotonicClock;
}

export class DbHealth {
  private readonly clock: MonotonicClock;
  private lastOk: number;
  private failing: string | undefined;
  private timer: NodeJS.Timeout | undefined;
  private inFlight: Promise<void> | undefined;

  constructor(
    private readonly db: Db,
    private readonly o: DbHealthOptions,
  ) {
    this.clock = o.clock ?? systemClock;
    this.lastOk = this.clock.now();
  }

  /** Pings now and every pingEveryMs until stop(). */
  start(): void {
    if (this.timer) return;
    this.timer = setInterval(() => void this.check().catch(() => undefined), this.o.pingEveryMs);
    this.timer.unref?.();
    void this.check().catch(() => undefined);
  }

  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }

  /** Resolves when the database answers within the ping timeout; rejects with the reason otherwise. */
  check(): Promise<void> {
    // Probes that arrive together share one ping.
    this.inFlight ??= pingDatabase(this.db, this.o.pingTimeoutMs)
      .then(
        () => {
          this.lastOk = this.clock.now();
          if (this.failing !== undefined) this.o.log.info('the database answers again');
          this.failing = undefined;
        },
        (e: unknown) => {
          if (this.failing === undefined) this.o.log.warn('the database does not answer', errorFields(e));
          this.failing = (e as Error)?.message ?? String(e);
          throw e;
        },
      )
      .finally(() => (this.inFlight = undefined));
    return this.inFlight;
  }

  /** 0 while the last ping succeeded; else the time since the last one that did. */
  unreachableForMs(): number {
    return this.failing === undefined ? 0 : this.clock.now() - this.lastOk;
  }

  /** Why the last ping failed, while it did. */
  get lastError(): string | undefined {
    return this.failing;
  }
}
