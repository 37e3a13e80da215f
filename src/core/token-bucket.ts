// A token bucket per key (ADR 0036): each key may spend `burst` requests at once and earns `perSecond` back, up to
// `burst`. Pure: the caller passes the time (ms, monotonic). At most `maxKeys` keys are remembered; past that, keys
// whose bucket has refilled are forgotten first (a full bucket and no bucket are the same), then the oldest seen.

export interface TokenBucketOptions {
  /** Requests earned back per second (> 0). */
  perSecond: number;
  /** Requests that may be spent at once (>= 1). */
  burst: number;
  /** Keys remembered at most (memory bound). Default 10,000. */
  maxKeys?: number;
}

export type TakeResult = { allowed: true } | { allowed: false; retryAfterMs: number };

interface Bucket {
  tokens: number;
  at: number;
}

export class TokenBuckets {
  private readonly buckets = new Map<string, Bucket>();
  private readonly maxKeys: number;

  constructor(private readonly o: TokenBucketOptions) {
    if (!(o.perSecond > 0) || !(o.burst >= 1)) throw new Error('a token bucket needs perSecond > 0 and burst >= 1');
    this.maxKeys = o.maxKeys ?? 10_000;
  }

  /** Spends one request of `key` at `now`; refused with how long until one is earned back. */
  take(key: string, now: number): TakeResult {
    const b = this.refilled(key, now);
    if (b.tokens >= 1) {
      b.tokens -= 1;
      return { allowed: true };
    }
    return { allowed: false, retryAfterMs: Math.ceil(((1 - b.tokens) * 1000) / this.o.perSecond) };
  }

  /** Keys remembered now (tests, metrics). */
  get size(): number {
    return this.buckets.size;
  }

  private refilled(key: string, now: number): Bucket {
    let b = this.buckets.get(key);
    if (b) {
      b.tokens = Math.min(this.o.burst, b.tokens + (Math.max(0, now - b.at) * this.o.perSecond) / 1000);
      b.at = now;
      // Most recently seen last: the oldest are evicted first.
      this.buckets.delete(key);
      this.buckets.set(key, b);
      return b;
    }
    if (this.buckets.size >= this.maxKeys) this.evict(now);
    b = { tokens: this.o.burst, at: now };
    this.buckets.set(key, b);
    return b;
  }

  private evict(now: number): void {
    for (const [k, b] of this.buckets) {
      if (b.tokens + ((now - b.at) * this.o.perSecond) / 1000 >= this.o.burst) this.buckets.delete(k);
    }
    // Still full: forget the oldest tenth (insertion order is least recently seen first).
    let drop = this.buckets.size >= this.maxKeys ? Math.max(1, Math.floor(this.maxKeys / 10)) : 0;
    for (const k of this.buckets.keys()) {
      if (drop-- <= 0) break;
      this.buckets.delete(k);
    }
  }
}
