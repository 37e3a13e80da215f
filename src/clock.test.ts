import { describe, expect, it } from 'vitest';
import { FakeClock, systemClock } from './clock.ts';

describe('FakeClock', () => {
  it('moves only when advanced, and its wall time with it', async () => {
    const c = new FakeClock(5000, Date.UTC(2030, 0, 1));
    expect(c.now()).toBe(5000);
    expect(c.wallNow().toISOString()).toBe('2030-01-01T00:00:00.000Z');
    await c.advance(1500);
    expect(c.now()).toBe(6500);
    expect(c.wallNow().toISOString()).toBe('2030-01-01T00:00:01.500Z');
  });

  it('fires timers in order, each at its own instant, and not before', async () => {
    const c = new FakeClock(0);
    const fired: [string, number][] = [];
    c.after(300, () => fired.push(['b', c.now()]));
    c.after(100, () => fired.push(['a', c.now()]));
    const cancel = c.after(200, () => fired.push(['cancelled', c.now()]));
    cancel();
    await c.advance(99);
    expect(fired).toEqual([]);
    await c.advance(250);
    expect(fired).toEqual([['a', 100], ['b', 300]]);
    expect(c.now()).toBe(349);
    expect(c.pending).toBe(0);
  });

  it('runs what a timer starts before the next fires (a loop of sleeps advances step by step)', async () => {
    const c = new FakeClock(0);
    const ticks: number[] = [];
    void (async () => {
      for (let i = 0; i < 3; i++) {
        await c.sleep(100);
        ticks.push(c.now());
      }
    })();
    await c.advance(1000);
    expect(ticks).toEqual([100, 200, 300]);
  });

  it('advanceUntil stops once done, and throws when it never is', async () => {
    const c = new FakeClock(0);
    let done = false;
    c.after(450, () => (done = true));
    await c.advanceUntil(() => done, 100, 10_000);
    expect(c.now()).toBe(500);
    await expect(c.advanceUntil(() => false, 100, 300)).rejects.toThrow(/not done after 300 ms/);
  });
});

describe('systemClock', () => {
  it('is monotonic, and its timers fire and cancel', async () => {
    const a = systemClock.now();
    await systemClock.sleep(5);
    expect(systemClock.now()).toBeGreaterThan(a);
    let fired = false;
    systemClock.after(1, () => (fired = true))();
    await systemClock.sleep(10);
    expect(fired).toBe(false);
  });
});
