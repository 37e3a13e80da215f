// A pool that counts the statements and transactions that go through it: the extender's in-memory paths must read
// nothing (test/db/extender-state.test.ts, bench/extender.bench.ts).
import type { Db } from '../../src/db/pool.ts';

export function countingDb(db: Db): Db & { calls: number } {
  const calls = { n: 0 };
  return new Proxy(db, {
    get(target, prop, receiver) {
      if (prop === 'calls') return calls.n;
      const v = Reflect.get(target, prop, receiver) as unknown;
      if ((prop === 'query' || prop === 'connect') && typeof v === 'function') {
        return (...args: unknown[]) => {
          calls.n++;
          return (v as (...a: unknown[]) => unknown).apply(target, args);
        };
      }
      return v;
    },
  }) as Db & { calls: number };
}
