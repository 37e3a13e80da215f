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

describe('GroupCommit', () => {
  it('sends a lone request at once, and batches the ones that arrive while it is written, up to maxBatch', async () => {
    const w = manualWriter();
    const gc = new GroupCommit(w.write, { maxBatch: 3, maxInFlight: 1 });
    const results = [1, 2, 3, 4, 5].map((i) => settle(gc.submit(i)));
    expect(w.batches.map((b) => b.items)).toEqual([[1]]);
    expect(gc.waiting).toBe(4);
    w.batches[0]!.finish([{ ok: true, value: 'one' }]);
    await results[0];
    expect(w.batches.map((b) => b.items)).toEqual([[1], [2, 3, 4]]);
    w.batches[1]!.finish([{ ok: true, value: 'two' }, { ok: false, error: new Error('three') }, { ok: true, value: 'four' }]);
    await results[3];
    expect(w.batches.map((b) => b.items)).toEqual([[1], [2, 3, 4], [5]]);
    w.batches[2]!.finish(new Error('connection lost'));
    const out = await Promise.all(results);
    expect(out).toEqual([{ v: 'one' }, { v: 'two' }, { e: new Error('three') }, { v: 'four' }, { e: new Error('connection lost') }]);
    expect(gc.waiting).toBe(0);
  });

  it('keeps at most maxInFlight batches written at once', async () => {
    const w = manualWriter();
    const gc = new GroupCommit(w.write, { maxBatch: 2, maxInFlight: 2 });
    const results = [1, 2, 3, 4].map((i) => settle(gc.submit(i)));
    expect(w.batches.map((b) => b.items)).toEqual([[1], [2]]);
    w.batches[1]!.finish([{ ok: true, value: 'b' }]);
    await results[1];
    expect(w.batches.map((b) => b.items)).toEqual([[1], [2], [3, 4]]);
    w.batches[0]!.finish([{ ok: true, value: 'a' }]);
    w.batches[2]!.finish([{ ok: true, value: 'c' }]);
    expect(await Promise.all(results)).toEqual([{ v: 'a' }, { v: 'b' }, { e: new Error('a batch of 2 answered 1 outcomes') }, { e: new Error('a batch of 2 answered 1 outcomes') }]);
  });
});
