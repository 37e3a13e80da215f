import { describe, expect, it } from 'vitest';
import { TokenBuckets } from './token-bucket.ts';

describe('TokenBuckets', () => {
  it('a burst, then one per 1/perSecond, with the wait until the next', () => {
    const b = new TokenBuckets({ perSecond: 2, burst: 3 });
    for (let i = 0; i < 3; i++) expect(b.take('a', 0)).toEqual({ allowed: true });
    expect(b.take('a', 0)).toEqual({ allowed: false, retryAfterMs: 500 });
    expect(b.take('a', 400)).toEqual({ allowed: false, retryAfterMs: 100 });
    expect(b.take('a', 500)).toEqual({ allowed: true });
    expect(b.take('a', 500)).toMatchObject({ allowed: false });
    // Never more than the burst, however long the pause.
    for (let i = 0; i < 3; i++) expect(b.take('a', 1_000_000)).toEqual({ allowed: true });
    expect(b.take('a', 1_000_000)).toMatchObject({ allowed: false });
  });

  it('keys are independent: one source spending its bucket does not touch another', () => {
    const b = new TokenBuckets({ perSecond: 1, burst: 1 });
    expect(b.take('10.0.0.1', 0).allowed).toBe(true);
    expect(b.take('10.0.0.1', 0).allowed).toBe(false);
    expect(b.take('10.0.0.2', 0).allowed).toBe(true);
  });

  it('a clock that goes back earns nothing and does not throw', () => {
    const b = new TokenBuckets({ perSecond: 1, burst: 1 });
    expect(b.take('a', 1000).allowed).toBe(true);
    expect(b.take('a', 0)).toEqual({ allowed: false, retryAfterMs: 1000 });
  });

  it('memory is bounded: refilled keys are forgotten first, then the least recently seen', () => {
    const b = new TokenBuckets({ perSecond: 1, burst: 2, maxKeys: 10 });
    for (let i = 0; i < 10; i++) b.take(`k${i}`, 0);
    expect(b.size).toBe(10);
    // All refilled by t = 1 s: the 11th key clears them.
    b.take('new', 1000);
    expect(b.size).toBe(1);
    // None refilled: the oldest tenth goes, and a spent key that was seen recently keeps its state.
    for (let i = 0; i < 9; i++) b.take(`m${i}`, 2000);
    b.take('new', 2000);
    b.take('new', 2000);
    expect(b.take('new', 2000).allowed).toBe(false);
    b.take('x', 2000);
    expect(b.size).toBeLessThanOrEqual(10);
    expect(b.take('new', 2000).allowed).toBe(false);
  });

  it('refuses nonsense limits', () => {
    expect(() => new TokenBuckets({ perSecond: 0, burst: 1 })).toThrow();
    expect(() => new TokenBuckets({ perSecond: 1, burst: 0 })).toThrow();
  });
});
