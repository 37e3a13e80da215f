import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { candidateStarts, earliestWindow } from './earliest-window.ts';
import { plan, summarizeNode } from './planner.ts';
import type { AtomSnap, NodeSnap, PlacementRequest, PoolSnap } from './types.ts';

/** A node of `gpus` GPUs in `zone`, each GPU's bookings as [start, end) pairs. */
function node(id: string, zone: string, bookings: [number, number][][], schedulable = true): NodeSnap {
  const atoms: AtomSnap[] = bookings.map((b, i) => ({
    id: `${id}-g${i}`,
    class: 'gpu',
    parentId: null,
    healthy: true,
    bookable: true,
    attributes: { numaNode: 0 },
    bookings: b.map(([start, end]) => ({ start, end })),
  }));
  const n: NodeSnap = { id, schedulable, labels: { zone }, atoms, scalars: {} };
  n.summary = summarizeNode(n);
  return n;
}
const pool = (nodes: NodeSnap[]): PoolSnap => ({ id: 'p', sharing: 'exclusive', topologyKey: 'zone', nodes });
const req = (count: number, start: number, length: number, gang?: number): PlacementRequest => ({
  devices: [{ class: 'gpu', count, selector: [] }],
  window: { start, end: start + length },
  binding: 'hold',
  ...(gang ? { gang: { size: gang } } : {}),
});

describe('the earliest window', () => {
  it('asks about now and the ends of bookings after it, within the horizon, on schedulable nodes only', () => {
    const p = pool([node('a', 'z1', [[[0, 50]], [[0, 120], [200, 300]]]), node('b', 'z1', [[[0, 80]]], false)]);
    expect(candidateStarts(p, 10, 250)).toEqual([10, 50, 120]);
    expect(candidateStarts(p, 10, 1000)).toEqual([10, 50, 120, 300]);
  });

  it('rounds a booking’s end up to whole milliseconds (the database keeps microseconds)', () => {
    const p = pool([node('a', 'z1', [[[0, 100.4]]])]);
    expect(candidateStarts(p, 10, 1000)).toEqual([10, 101]);
    expect(earliestWindow(p, 1, (_s, start) => req(1, start, 50), 10, 1000)).toMatchObject({ ok: true, start: 101 });
  });

  it('starts now when it fits now, else when the atoms it needs come free', () => {
    const p = pool([node('a', 'z1', [[[0, 100]], [[0, 300]]])]);
    expect(earliestWindow(p, 1, (_s, start) => req(1, start, 50), 10, 1000)).toMatchObject({ ok: true, start: 100 });
    expect(earliestWindow(p, 1, (_s, start) => req(2, start, 50), 10, 1000)).toMatchObject({ ok: true, start: 300 });
    expect(earliestWindow(p, 1, (_s, start) => req(1, start, 50), 10, 50)).toMatchObject({ ok: false, reason: expect.stringContaining('0/1 nodes fit') });
    const free = pool([node('a', 'z1', [[]])]);
    expect(earliestWindow(free, 1, (_s, start) => req(1, start, 50), 10, 1000)).toMatchObject({ ok: true, start: 10, tried: 1 });
  });

  it('fits before a later booking when the gap is long enough, and after it when not', () => {
    const p = pool([node('a', 'z1', [[[0, 100], [200, 300]]])]);
    expect(earliestWindow(p, 1, (_s, start) => req(1, start, 100), 0, 1000)).toMatchObject({ ok: true, start: 100 });
    expect(earliestWindow(p, 1, (_s, start) => req(1, start, 101), 0, 1000)).toMatchObject({ ok: true, start: 300 });
  });

  it('takes the first shape that fits at the earliest start: one node, else a gang in one placement domain', () => {
    // Two nodes of one free GPU in zone z1: two GPUs fit only as a gang of two, now; one node of two GPUs frees at 500.
    const p = pool([node('a', 'z1', [[]]), node('b', 'z1', [[]]), node('c', 'z2', [[[0, 500]], [[0, 500]]])]);
    const shapes = (s: number, start: number) => (s === 0 ? req(2, start, 100) : req(1, start, 100, 2));
    const found = earliestWindow(p, 2, shapes, 0, 1000);
    expect(found).toMatchObject({ ok: true, start: 0, shape: 1, gangDomain: 'z1' });
    if (found.ok) expect(found.candidates.map((c) => c.nodeId).sort()).toEqual(['a', 'b']);
    // Without the gang the single node is the answer, at 500.
    expect(earliestWindow(p, 1, shapes, 0, 1000)).toMatchObject({ ok: true, start: 500, shape: 0 });
  });

  it('is never later than any start at which the placer would fit it (exclusive atoms)', () => {
    const booking = fc.tuple(fc.integer({ min: 0, max: 40 }), fc.integer({ min: 1, max: 20 })).map(([s, l]) => [s * 10, s * 10 + l * 10] as [number, number]);
    const gpu = fc.array(booking, { maxLength: 3 }).filter((bs) => bs.every((a, i) => bs.every((b, j) => i === j || a[1] <= b[0] || b[1] <= a[0])));
    fc.assert(
      fc.property(fc.array(fc.array(gpu, { minLength: 1, maxLength: 3 }), { minLength: 1, maxLength: 3 }), fc.integer({ min: 1, max: 3 }), fc.integer({ min: 1, max: 30 }), (nodes, count, len) => {
        const p = pool(nodes.map((gpus, i) => node(`n${i}`, 'z', gpus)));
        const length = len * 10;
        const found = earliestWindow(p, 1, (_s, start) => req(count, start, length), 0, 1000);
        // Brute force over every instant of the grid the bookings lie on.
        let first: number | undefined;
        for (let t = 0; t <= 1000 && first === undefined; t += 5) if (plan(p, req(count, t, length)).ok) first = t;
        if (first === undefined) expect(found.ok).toBe(false);
        else expect(found).toMatchObject({ ok: true, start: first });
      }),
      { numRuns: 200 },
    );
  });
});
