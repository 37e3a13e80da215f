// A keyed work queue with per-key exponential backoff, after client-go's workqueue: a key is queued at most once, is
// never processed by two workers at the same time, and a key added while it is being processed runs again afterwards.
import { systemClock, type MonotonicClock } from '../clock.ts';
import { errorFields, type Logger } from '../log.ts';

export type ReconcileResult = void | { requeueAfterMs?: number; backoff?: boolean };

export interface WorkQueueOptions {
  name: string;
  workers?: number;
  baseDelayMs?: number;
  maxDelayMs?: number;
  log: Logger;
  /** Called once per processed key with its duration and outcome (metrics). */
  onProcessed?: (name: string, seconds: number, outcome: 'ok' | 'requeue' | 'error') => void;
  /** The delays (requeueAfter, backoff) and the durations. */
  clock?: MonotonicClock;
}

export class WorkQueue {
  private readonly ready: string[] = [];
  private readonly queued = new Set<string>();
  private readonly processing = new Set<string>();
  private readonly dirty = new Set<string>();
  private readonly failures = new Map<string, number>();
  /** key → what cancels its delayed add. */
  private readonly timers = new Map<string, () => void>();
  private running = 0;
  private stopped = true;
  private idleWaiters: (() => void)[] = [];
  private handler: ((key: string) => Promise<ReconcileResult>) | undefined;

  private readonly clock: MonotonicClock;

  constructor(private readonly opts: WorkQueueOptions) {
    this.clock = opts.clock ?? systemClock;
  }

  get name(): string {
    return this.opts.name;
  }

  /** Starts `workers` workers calling `handler` for each key. */
  start(handler: (key: string) => Promise<ReconcileResult>): void {
    this.handler = handler;
    this.stopped = false;
    this.pump();
  }

  /** Stops taking keys; waits for the keys in progress. Queued keys and timers are dropped. */
  async stop(): Promise<void> {
    this.stopped = true;
    for (const cancel of this.timers.values()) cancel();
    this.timers.clear();
    this.ready.length = 0;
    this.queued.clear();
    this.dirty.clear();
    this.failures.clear();
    if (this.running > 0) await new Promise<void>((r) => this.idleWaiters.push(r));
  }

  add(key: string): void {
    if (this.stopped) return;
    const t = this.timers.get(key);
    if (t) {
      t();
      this.timers.delete(key);
    }
    if (this.processing.has(key)) {
      this.dirty.add(key);
      return;
    }
    if (this.queued.has(key)) return;
    this.queued.add(key);
    this.ready.push(key);
    this.pump();
  }

  /** Adds the key after `ms` unless it is added sooner. */
  addAfter(key: string, ms: number): void {
    if (this.stopped) return;
    if (ms <= 0) return this.add(key);
    if (this.timers.has(key) || this.queued.has(key)) return;
    const cancel = this.clock.after(ms, () => {
      this.timers.delete(key);
      this.add(key);
    });
    this.timers.set(key, cancel);
  }

  /** Adds the key after its next backoff delay (doubling per consecutive failure, up to maxDelayMs). */
  addRateLimited(key: string): void {
    const n = this.failures.get(key) ?? 0;
    this.failures.set(key, n + 1);
    const base = this.opts.baseDelayMs ?? 500;
    const delay = Math.min(this.opts.maxDelayMs ?? 60_000, base * 2 ** n);
    // Jitter, so that many keys that failed together do not come back together.
    this.addAfter(key, Math.round(delay * (0.8 + Math.random() * 0.4)));
  }

  /** Clears the key's backoff. */
  forget(key: string): void {
    this.failures.delete(key);
  }

  get length(): number {
    return this.ready.length;
  }

  private pump(): void {
    const workers = this.opts.workers ?? 1;
    while (!this.stopped && this.running < workers && this.ready.length > 0) {
      const key = this.ready.shift()!;
      this.queued.delete(key);
      this.processing.add(key);
      this.running++;
      void this.process(key);
    }
  }

  private async process(key: string): Promise<void> {
    const started = this.clock.now();
    let outcome: 'ok' | 'requeue' | 'error' = 'ok';
    try {
      const r = await this.handler!(key);
      if (r && r.backoff) {
        outcome = 'requeue';
        this.addRateLimited(key);
      } else {
        this.forget(key);
        if (r && r.requeueAfterMs !== undefined) {
          outcome = 'requeue';
          this.addAfter(key, r.requeueAfterMs);
        }
      }
    } catch (e) {
      outcome = 'error';
      this.opts.log.warn('reconcile failed', { queue: this.opts.name, key, ...errorFields(e) });
      this.addRateLimited(key);
    } finally {
      this.opts.onProcessed?.(this.opts.name, (this.clock.now() - started) / 1000, outcome);
      this.processing.delete(key);
      this.running--;
      if (this.dirty.delete(key)) this.add(key);
      if (this.running === 0) {
        const waiters = this.idleWaiters;
        this.idleWaiters = [];
        for (const w of waiters) w();
      }
      this.pump();
    }
  }
}
