// The process's one clock (ADR 0033): every decision that depends on elapsed time (TTLs, deadlines, backoff, the
// leader's renew deadline, a watch's liveness) reads `now()`, a monotonic millisecond count, and waits with `sleep` or
// `after`; wall time (a timestamp for people, logs, the API server) comes from `wallNow()`. The only module that reads
// performance.now() and Date.now() (eslint.config.js forbids them elsewhere in src/). Tests hand a FakeClock in and
// move it by hand. Ledger time (compute_now(), what bookings are measured in) is db/clock.ts's, built on this one.

/** A monotonic clock with timers, and the wall time. */
export interface MonotonicClock {
  /** Milliseconds since an arbitrary origin; never goes back (no meaning across processes). */
  now(): number;
  /** The wall time, for timestamps (never for measuring how long something took). */
  wallNow(): Date;
  /** Resolves once `ms` of this clock have passed. */
  sleep(ms: number): Promise<void>;
  /** Calls `fn` once, `ms` from now; returns what cancels it. The real clock's timers do not keep the process alive. */
  after(ms: number, fn: () => void): () => void;
}

/** The real clock: performance.now(), the system's wall time, and unref'd timers. */
export const systemClock: MonotonicClock = {
  now: () => performance.now(),
  wallNow: () => new Date(Date.now()),
  sleep: (ms) => new Promise((resolve) => setTimeout(resolve, ms)),
  after(ms, fn) {
    const t = setTimeout(fn, ms);
    t.unref?.();
    return () => clearTimeout(t);
  },
};

interface FakeTimer {
  at: number;
  seq: number;
  fn: () => void;
}

/** Lets every promise chain that is ready run (one turn of the event loop). */
function settle(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/**
 * A clock that moves only when told (tests): `advance(ms)` fires every timer that falls due, in order, each at its own
 * instant, letting the promises it starts settle before the next one fires.
 */
export class FakeClock implements MonotonicClock {
  private t: number;
  private readonly origin: number;
  private seq = 0;
  private timers: FakeTimer[] = [];

  constructor(
    start = 1_000_000,
    private readonly wallOrigin = Date.UTC(2026, 0, 1),
  ) {
    this.t = start;
    this.origin = start;
  }

  now(): number {
    return this.t;
  }

  wallNow(): Date {
    return new Date(this.wallOrigin + (this.t - this.origin));
  }

  sleep(ms: number): Promise<void> {
    return new Promise((resolve) => this.after(ms, resolve));
  }

  after(ms: number, fn: () => void): () => void {
    const timer = { at: this.t + Math.max(0, ms), seq: this.seq++, fn };
    this.timers.push(timer);
    return () => {
      this.timers = this.timers.filter((x) => x !== timer);
    };
  }

  /** How many timers wait (sleeps among them). */
  get pending(): number {
    return this.timers.length;
  }

  /** Moves the clock `ms` ahead, firing what falls due on the way. */
  async advance(ms: number): Promise<void> {
    const end = this.t + ms;
    await settle();
    for (;;) {
      const due = this.timers.filter((x) => x.at <= end).sort((a, b) => a.at - b.at || a.seq - b.seq)[0];
      if (!due) break;
      this.timers = this.timers.filter((x) => x !== due);
      this.t = Math.max(this.t, due.at);
      due.fn();
      await settle();
    }
    this.t = end;
    await settle();
  }

  /**
   * Advances in steps of `stepMs` until `done()` holds (checked after each step), at most `maxMs` in all; throws when
   * it never does. For waits on the code's own timers whose exact count is not the point of the test.
   */
  async advanceUntil(done: () => boolean, stepMs: number, maxMs: number): Promise<void> {
    for (let moved = 0; !done(); moved += stepMs) {
      if (moved >= maxMs) throw new Error(`FakeClock: not done after ${maxMs} ms of fake time`);
      await this.advance(stepMs);
    }
  }
}
