import { describe, expect, it } from 'vitest';
import { summarizeNode } from './planner.ts';
import { choosePreemption, MAX_VICTIM_SEARCH } from './preemption.ts';
import type { AtomSnap, BookingSnap, NodeSnap, PlacementRequest, PoolSnap } from './types.ts';

// node('a', 4, { 0: spot('S'), 1: regular }): 4 GPUs a-g0..a-g3 with the given bookings over [0, 1000).
const spot = (ref: string, start = 0, end = 1000): BookingSnap => ({ start, end, spot: true, ref });
const regular: BookingSnap = { start: 0, end: 1000, ref: 'R' };
function node(id: string, gpus: number, bookings: Record<number, BookingSnap> = {}): NodeSnap {
  const atoms: AtomSnap[] = Array.from({ length: gpus }, (_, i) => ({
    id: `${id}-g${i}`, class: 'gpu', parentId: null, healthy: true, bookable: true,
    bookings: bookings[i] ? [bookings[i]] : [], attributes: { numaNode: 0 },
  }));
  const n: NodeSnap = { id, schedulable: true, labels: {}, atoms, scalars: {} };
  n.summary = summarizeNode(n);
  return n;
}
const pool = (...nodes: NodeSnap[]): PoolSnap => ({ id: 'p', sharing: 'exclusive', topologyKey: 'zone', nodes });
const req = (count: number): PlacementRequest => ({ devices: [{ class: 'gpu', count, selector: [] }], window: { start: 100, end: 200 }, binding: 'hold' });

describe('choosePreemption', () => {
  it('displaces the fewest spot atoms, not the fewest reservations', () => {
    // Room for 4 on a: A (3 atoms). On b: B1 + B2 (1 + 1 = 2 atoms). Fewest atoms: {B1, B2}.
    const p = pool(node('a', 4, { 0: spot('A'), 1: spot('A'), 2: spot('A') }), node('b', 4, { 0: spot('B1'), 1: spot('B2') }));
    const pre = choosePreemption(p, req(4));
    expect(pre).toMatchObject({ victims: ['B1', 'B2'], atoms: 2 });
    expect(pre!.candidates.map((c) => [c.nodeId, c.atoms])).toEqual([['b', ['b-g0', 'b-g1', 'b-g2', 'b-g3']]]);
  });

  it('on equal atoms, displaces fewer reservations', () => {
    // a: X holds 2 atoms; b: Y1 and Y2 hold 1 each. Both 2 atoms; X is one reservation.
    const p = pool(node('a', 4, { 0: spot('X'), 1: spot('X') }), node('b', 4, { 0: spot('Y1'), 1: spot('Y2') }));
    expect(choosePreemption(p, req(4))).toMatchObject({ victims: ['X'], atoms: 2 });
  });

  it('takes only the victims whose atoms the placement needs', () => {
    // 3 wanted on a: a-g3 is free, so one of S1, S2, S3 (1 atom each) goes: the first by ref.
    const p = pool(node('a', 4, { 0: spot('S1'), 1: spot('S2'), 2: spot('S3') }));
    expect(choosePreemption(p, req(2))).toMatchObject({ victims: ['S1'], atoms: 1 });
  });

  it('never displaces regular work: a request that fits only without a regular booking gets nothing', () => {
    const p = pool(node('a', 4, { 0: regular, 1: regular, 2: spot('S') }));
    expect(choosePreemption(p, req(4))).toBeUndefined();
    // Without spot in the way: nothing to preempt either (regular never displaces regular).
    expect(choosePreemption(pool(node('a', 4, { 0: regular })), req(4))).toBeUndefined();
  });

  it('preempts nothing when the request fits as it is, or when spot bookings lie outside its window', () => {
    expect(choosePreemption(pool(node('a', 4, { 0: spot('S') })), req(3))).toBeUndefined();
    // S ended before the window starts (100): not in the way.
    expect(choosePreemption(pool(node('a', 4, { 0: spot('S', 0, 100) })), req(4))).toBeUndefined();
  });

  it('beyond the search limit, takes the spot reservations under the placement made without any spot', () => {
    const many = Object.fromEntries(Array.from({ length: MAX_VICTIM_SEARCH + 2 }, (_, i) => [i, spot(`S${String(i).padStart(2, '0')}`)]));
    const p = pool(node('a', MAX_VICTIM_SEARCH + 2, many));
    const pre = choosePreemption(p, req(2));
    expect(pre?.victims).toHaveLength(2);
    expect(pre?.atoms).toBe(2);
  });
});
