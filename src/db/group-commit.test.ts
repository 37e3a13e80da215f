import { describe, expect, it } from 'vitest';
import { GroupCommit, type ItemOutcome } from './group-commit.ts';

/** A writer whose batches the test finishes by hand. */
function manualWriter() {
  const batches: { items: number[]; finish: (o: ItemOutcome<string>[] | Error) => void }[] = [];
  const write = (items: number[]) =>
    new Promise<ItemOutcome<string>[]>((resolve, reject) => {
      batches.push({ items, finish: (o) => (o instanceof Error ? reject(o) : resolve(o)) });
    });
  return { batches, write };
}

const settle = <T>(p: Promise<T>) => p.then((v) => ({ v }), (e: unknown) => ({ e }));
/** The end of the event loop's turn, where batches start. */
const turn = () => new Promise((r) => setImmediate(r));

describe('GroupCommit', () => {
  it('starts a batch at the end of the turn, and batches the requests that arrive while it is written, up to maxBatch', async () => {
    const w = manualWriter();
    const gc = new GroupCommit(w.write, { maxBatch: 3, maxInFlight: 1 });
    const results = [settle(gc.submit(1))];
    expect(w.batches).toEqual([]);
    await turn();
    expect(w.batches.map((b) => b.items)).toEqual([[1]]);
    results.push(...[2, 3, 4, 5].map((i) => settle(gc.submit(i))));
    await turn();
    expect(gc.waiting).toBe(4);
    w.batches[0]!.finish([{ ok: true, value: 'one' }]);
    await results[0];
    await turn();
    expect(w.batches.map((b) => b.items)).toEqual([[1], [2, 3, 4]]);
    w.batches[1]!.finish([{ ok: true, value: 'two' }, { ok: false, error: new Error('three') }, { ok: true, value: 'four' }]);
    await results[3];
    await turn();
    expect(w.batches.map((b) => b.items)).toEqual([[1], [2, 3, 4], [5]]);
    w.batches[2]!.finish(new Error('connection lost'));
    const out = await Promise.all(results);
    expect(out).toEqual([{ v: 'one' }, { v: 'two' }, { e: new Error('three') }, { v: 'four' }, { e: new Error('connection lost') }]);
    expect(gc.waiting).toBe(0);
  });

  it('keeps at most maxInFlight batches written at once', async () => {
    const w = manualWriter();
    const gc = new GroupCommit(w.write, { maxBatch: 2, maxInFlight: 2 });
    const results = [1, 2, 3, 4, 5, 6].map((i) => settle(gc.submit(i)));
    await turn();
    expect(w.batches.map((b) => b.items)).toEqual([[1, 2], [3, 4]]);
    w.batches[1]!.finish([{ ok: true, value: 'b' }, { ok: true, value: 'b2' }]);
    await results[3];
    await turn();
    expect(w.batches.map((b) => b.items)).toEqual([[1, 2], [3, 4], [5, 6]]);
    w.batches[0]!.finish([{ ok: true, value: 'a' }, { ok: true, value: 'a2' }]);
    w.batches[2]!.finish([{ ok: true, value: 'c' }]);
    expect(await Promise.all(results)).toEqual([
      { v: 'a' }, { v: 'a2' }, { v: 'b' }, { v: 'b2' },
      { e: new Error('a batch of 2 answered 1 outcomes') }, { e: new Error('a batch of 2 answered 1 outcomes') },
    ]);
  });

  it('shares what waits over the free slots, up to maxBatch each', async () => {
    const w = manualWriter();
    const gc = new GroupCommit(w.write, { maxBatch: 4, maxInFlight: 3 });
    const first = [1, 2, 3, 4, 5, 6, 7].map((i) => settle(gc.submit(i)));
    await turn();
    expect(w.batches.map((b) => b.items)).toEqual([[1, 2, 3], [4, 5], [6, 7]]);
    const more = [8, 9, 10, 11, 12, 13, 14, 15, 16].map((i) => settle(gc.submit(i)));
    await turn();
    expect(gc.waiting).toBe(9);
    w.batches[0]!.finish([1, 2, 3].map((i) => ({ ok: true, value: `v${i}` })));
    await first[2];
    await turn();
    // One slot free: it takes what waits, up to maxBatch.
    expect(w.batches.slice(3).map((b) => b.items)).toEqual([[8, 9, 10, 11]]);
    w.batches[1]!.finish([4, 5].map((i) => ({ ok: true, value: `v${i}` })));
    w.batches[2]!.finish([6, 7].map((i) => ({ ok: true, value: `v${i}` })));
    await first[6];
    await turn();
    expect(w.batches.slice(4).map((b) => b.items)).toEqual([[12, 13, 14], [15, 16]]);
    for (const b of w.batches.slice(3)) b.finish(b.items.map((i) => ({ ok: true, value: `v${i}` })));
    expect(await Promise.all([...first, ...more])).toEqual([...Array(16).keys()].map((i) => ({ v: `v${i + 1}` })));
  });
});
