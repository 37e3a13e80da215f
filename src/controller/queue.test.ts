import { describe, expect, it } from 'vitest';
import { silentLogger } from '../log.ts';
import { WorkQueue } from './queue.ts';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('WorkQueue', () => {
  it('dedupes keys, never runs one key twice at once, and runs a key added during processing again', async () => {
    const q = new WorkQueue({ name: 't', workers: 4, log: silentLogger });
    const running = new Set<string>();
    const seen: string[] = [];
    let overlap = false;
    q.start(async (k) => {
      if (running.has(k)) overlap = true;
      running.add(k);
      seen.push(k);
      await sleep(20);
      running.delete(k);
    });
    q.add('a');
    q.add('a');
    q.add('b');
    await sleep(5);
    q.add('a'); // while a runs: once more afterwards
    await sleep(100);
    expect(overlap).toBe(false);
    expect(seen.filter((k) => k === 'a')).toHaveLength(2);
    expect(seen.filter((k) => k === 'b')).toHaveLength(1);
    await q.stop();
  });

  it('backs off a failing key exponentially and forgets on success', async () => {
    const q = new WorkQueue({ name: 't', workers: 1, baseDelayMs: 10, maxDelayMs: 40, log: silentLogger });
    const times: number[] = [];
    q.start(async () => {
      times.push(performance.now());
      if (times.length < 4) throw new Error('not yet');
    });
    q.add('k');
    await sleep(250);
    expect(times).toHaveLength(4);
    const gaps = times.slice(1).map((t, i) => t - times[i]!);
    expect(gaps[0]!).toBeGreaterThanOrEqual(7);
    expect(gaps[2]!).toBeGreaterThan(gaps[0]!);
    await q.stop();
  });
});
