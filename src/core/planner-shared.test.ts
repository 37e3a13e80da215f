import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { plan, summarizeNode, summarizeShared } from './planner.ts';
import type { AtomSnap, NodeSnap, NodeSummary, PlacementRequest } from './types.ts';

// Pools where many nodes have no bookings (so they share summaries), some have bookings or unhealthy atoms, some are
// unschedulable, and GPU counts differ between nodes.
const arbNode = (i: number) =>
  fc.record({
    gpus: fc.constantFrom(4, 8, 8, 8),
    schedulable: fc.constantFrom(true, true, true, false),
    bookings: fc.array(fc.record({ atom: fc.nat(7), start: fc.integer({ min: 0, max: 300 }), len: fc.integer({ min: 1, max: 200 }) }), { maxLength: 3 }),
    unhealthy: fc.array(fc.nat(7), { maxLength: 1 }),
    quiet: fc.boolean(),
  }).map((spec): NodeSnap => {
    const id = `n${String(i).padStart(3, '0')}`;
    const atoms: AtomSnap[] = Array.from({ length: spec.gpus }, (_, g) => ({
      id: `${id}-g${g}`, class: 'gpu', parentId: null, bookable: true, bookings: [],
      healthy: !spec.unhealthy.includes(g), attributes: { numaNode: g < spec.gpus / 2 ? 0 : 1, nvlinkDomain: id },
    }));
    if (!spec.quiet) for (const b of spec.bookings) atoms[b.atom % spec.gpus]!.bookings.push({ start: b.start, end: b.start + b.len });
    return { id, schedulable: spec.schedulable, labels: { zone: `z${i % 3}` }, atoms, scalars: {} };
  });
const arbPool = fc.integer({ min: 1, max: 60 }).chain((n) => fc.tuple(...Array.from({ length: n }, (_, i) => arbNode(i))));
const arbReq = fc.record({
  count: fc.integer({ min: 1, max: 8 }),
  start: fc.integer({ min: 0, max: 400 }),
  len: fc.integer({ min: 1, max: 200 }),
  binding: fc.constantFrom('hold' as const, 'node' as const),
  nvlink: fc.boolean(),
  selector: fc.boolean(),
});

describe('summarizeShared', () => {
  it('plans exactly as per-node summaries do', () => {
    fc.assert(
      fc.property(arbPool, arbReq, (nodes, q) => {
        const r: PlacementRequest = {
          devices: [{ class: 'gpu', count: q.count, selector: q.selector ? [{ attr: 'numaNode', op: '>=', value: 0 }] : [] }],
          window: { start: q.start, end: q.start + q.len },
          binding: q.binding,
          ...(q.nvlink ? { topology: 'nvlink-all' as const } : {}),
        };
        const own = nodes.map((n) => ({ ...n, summary: summarizeNode(n) }));
        const shared = new Map<string, NodeSummary>();
        const interned = nodes.map((n) => ({ ...n, summary: summarizeShared(n, shared) }));
        const pool = (ns: NodeSnap[]) => ({ id: 'p', sharing: 'exclusive' as const, topologyKey: 'zone', nodes: ns });
        expect(plan(pool(interned), r)).toEqual(plan(pool(own), r));
      }),
      { numRuns: 300 },
    );
  });

  it('shares one summary among nodes without bookings and with the same counts, and none with a booked node', () => {
    const gpus = (id: string, booked: boolean): NodeSnap => ({
      id, schedulable: true, labels: {}, scalars: {},
      atoms: [0, 1].map((g) => ({ id: `${id}-${g}`, class: 'gpu' as const, parentId: null, healthy: true, bookable: true, attributes: {},
        bookings: booked && g === 0 ? [{ start: 0, end: 10 }] : [] })),
    });
    const shared = new Map<string, NodeSummary>();
    const [a, b, c] = [gpus('a', false), gpus('b', false), gpus('c', true)].map((n) => summarizeShared(n, shared));
    expect(a).toBe(b);
    expect(c).not.toBe(a);
    expect(c).toEqual(summarizeNode(gpus('c', true)));
  });
});
