import { describe, expect, it } from 'vitest';
import { comparePending, DEFAULT_MAX_PENDING_PER_TENANT, maxPendingOf, overPendingLimit, WakeCoalescer, wakeBatch, type PendingEntry } from './pending.ts';

const at = (key: string, s: number): PendingEntry => ({ key, createdAt: new Date(Date.UTC(2026, 0, 1, 0, 0, s)).toISOString() });

describe('pending Reservations per tenant', () => {
  it('orders earliest created first, equal times by key, unknown times last', () => {
    const list = [at('ns/c', 2), { key: 'ns/x', createdAt: undefined }, at('ns/b', 1), at('ns/a', 1)];
    expect([...list].sort(comparePending).map((e) => e.key)).toEqual(['ns/a', 'ns/b', 'ns/c', 'ns/x']);
  });

  it('the first `limit` of a tenant try to book; a later one waits until an earlier one leaves', () => {
    const all = [at('ns/a', 1), at('ns/b', 2), at('ns/c', 3), at('ns/d', 4)];
    expect(all.map((e) => overPendingLimit(e, all, 2).over)).toEqual([false, false, true, true]);
    expect(overPendingLimit(all[3]!, all, 2).earlier).toBe(3);
    // a leaves: c moves up, d still waits; a new one created last waits too.
    const rest = all.slice(1);
    expect(rest.map((e) => overPendingLimit(e, rest, 2).over)).toEqual([false, false, true]);
    expect(overPendingLimit(at('ns/e', 9), rest, 2).over).toBe(true);
    expect(overPendingLimit(at('ns/e', 9), rest, 3).over).toBe(true);
    expect(overPendingLimit(at('ns/e', 9), rest, 4).over).toBe(false);
  });

  it('the Pool setting: a valid whole number, else the default', () => {
    expect(maxPendingOf(5)).toBe(5);
    for (const bad of [undefined, 0, -1, 2.5, '7', 1e9]) expect(maxPendingOf(bad), String(bad)).toBe(DEFAULT_MAX_PENDING_PER_TENANT);
  });
});

describe('batched wakes', () => {
  it('a wake takes at most `max`, earliest created first', () => {
    const all = [at('ns/c', 3), at('ns/a', 1), at('ns/d', 4), at('ns/b', 2)];
    expect(wakeBatch(all, 2).map((e) => e.key)).toEqual(['ns/a', 'ns/b']);
    expect(wakeBatch(all, 10)).toHaveLength(4);
    expect(wakeBatch(all, 0)).toEqual([]);
  });

  it('one wake per Pool per interval: requests inside it wait for its end, none is lost', () => {
    const w = new WakeCoalescer(1000);
    w.request('p');
    w.request('p');
    w.request('q');
    expect(w.due(0).sort()).toEqual(['p', 'q']);
    expect(w.due(10)).toEqual([]);
    w.request('p');
    w.request('p');
    expect(w.due(500)).toEqual([]);
    expect(w.waiting).toBe(1);
    expect(w.nextDueIn(500)).toBe(500);
    expect(w.due(1000)).toEqual(['p']);
    expect(w.due(1001)).toEqual([]);
    // Long after: a request is due at once.
    expect(w.nextDueIn(1001)).toBeUndefined();
    w.request('q');
    expect(w.nextDueIn(5000)).toBe(0);
    expect(w.due(5000)).toEqual(['q']);
  });
});
