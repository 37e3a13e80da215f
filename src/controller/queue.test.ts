// The work queue on a FakeClock: its delays (requeueAfter, backoff) fire as the test moves the clock, so the backoff's
// doubling and cap are checked exactly (up to the ±20 % jitter), with no sleeps.
import { describe, expect, it } from 'vitest';
import { FakeClock } from '../clock.ts';
import { silentLogger } from '../log.ts';
import { WorkQueue } from './queue.ts';

describe('WorkQueue', () => {
  it('dedupes keys, never runs one key twice at once, and runs a key added during processing again', async () => {
    const clock = new FakeClock();
    const q = new WorkQueue({ name: 't', workers: 4, log: silentLogger, clock });
    const running = new Set<string>();
    const seen: string[] = [];
    let overlap = false;
    q.start(async (k) => {
      if (running.has(k)) overlap = true;
      running.add(k);
      seen.push(k);
      await clock.sleep(20);
      running.delete(k);
    });
    q.add('a');
    q.add('a');
    q.add('b');
    await clock.advance(5);
    expect(running).toEqual(new Set(['a', 'b']));
    q.add('a'); // while a runs: once more afterwards
    await clock.advance(100);
    expect(overlap).toBe(false);
    expect(seen.filter((k) => k === 'a')).toHaveLength(2);
    expect(seen.filter((k) => k === 'b')).toHaveLength(1);
    await q.stop();
  });

  it('backs off a failing key exponentially up to its cap, and forgets on success', async () => {
    const clock = new FakeClock();
    const q = new WorkQueue({ name: 't', workers: 1, baseDelayMs: 10, maxDelayMs: 40, log: silentLogger, clock });
    const times: number[] = [];
    q.start(async () => {
      times.push(clock.now());
      if (times.length < 5) throw new Error('not yet');
    });
    q.add('k');
    await clock.advanceUntil(() => times.length === 5, 1, 1000);
    const gaps = times.slice(1).map((t, i) => t - times[i]!);
    // 10, 20, 40, then 40 (the cap), each ±20 % (the step is 1 ms).
    for (const [gap, delay] of gaps.map((g, i) => [g, [10, 20, 40, 40][i]!] as const)) {
      expect(gap).toBeGreaterThanOrEqual(Math.floor(delay * 0.8));
      expect(gap).toBeLessThanOrEqual(Math.ceil(delay * 1.2) + 1);
    }
    // Succeeded: no more runs, and no timer left.
    await clock.advance(1000);
    expect(times).toHaveLength(5);
    expect(clock.pending).toBe(0);
    await q.stop();
  });

  it('requeueAfter runs the key again at that time, not before', async () => {
    const clock = new FakeClock();
    const q = new WorkQueue({ name: 't', log: silentLogger, clock });
    const times: number[] = [];
    q.start(async () => {
      times.push(clock.now());
      return times.length === 1 ? { requeueAfterMs: 300 } : undefined;
    });
    const t0 = clock.now();
    q.add('k');
    await clock.advance(299);
    expect(times).toEqual([t0]);
    await clock.advance(1);
    expect(times).toEqual([t0, t0 + 300]);
    await q.stop();
  });
});
