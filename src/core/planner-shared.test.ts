import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { NodeGroups } from './node-groups.ts';
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

describe('NodeGroups', () => {
  const toReq = (q: { count: number; start: number; len: number; binding: 'hold' | 'node'; nvlink: boolean; selector: boolean }): PlacementRequest => ({
    devices: [{ class: 'gpu', count: q.count, selector: q.selector ? [{ attr: 'numaNode', op: '>=', value: 0 }] : [] }],
    window: { start: q.start, end: q.start + q.len },
    binding: q.binding,
    ...(q.nvlink ? { topology: 'nvlink-all' as const } : {}),
  });
  // Bookings added to and taken from nodes after the groups were made, each followed by update(), as the ledger's
  // assume and its undo do.
  const arbChanges = fc.array(fc.record({ node: fc.nat(59), atom: fc.nat(7), start: fc.integer({ min: 0, max: 300 }), undo: fc.boolean() }), { maxLength: 12 });

  it('plans exactly as the node-by-node pass, also after bookings come and go', () => {
    fc.assert(
      fc.property(arbPool, fc.array(arbReq, { minLength: 1, maxLength: 3 }), arbChanges, (specs, qs, changes) => {
        const shared = new Map<string, NodeSummary>();
        const nodes = specs.map((n) => ({ ...n, atoms: n.atoms.map((a) => ({ ...a, bookings: [...a.bookings] })), summary: summarizeShared(n, shared) }));
        const pool = { id: 'p', sharing: 'exclusive' as const, topologyKey: 'zone', nodes };
        const groups = new NodeGroups(nodes);
        const check = () => {
          for (const q of qs) expect(plan(pool, toReq(q), groups)).toEqual(plan(pool, toReq(q)));
        };
        check();
        for (const ch of changes) {
          const node = nodes[ch.node % nodes.length]!;
          const atom = node.atoms[ch.atom % node.atoms.length]!;
          if (ch.undo) atom.bookings.pop();
          else atom.bookings.push({ start: ch.start, end: ch.start + 50 });
          node.summary = summarizeShared(node, shared);
          groups.update(node);
          check();
        }
      }),
      { numRuns: 300 },
    );
  });

  it('screens a shared summary once for all its nodes, and keeps ties in pool order', () => {
    const gpus = (id: string, booked: number): NodeSnap => ({
      id, schedulable: true, labels: {}, scalars: {},
      atoms: [0, 1, 2, 3].map((g) => ({ id: `${id}-${g}`, class: 'gpu' as const, parentId: null, healthy: true, bookable: true,
        attributes: { numaNode: 0 }, bookings: g < booked ? [{ start: 0, end: 100 }] : [] })),
    });
    const shared = new Map<string, NodeSummary>();
    const nodes = ['a', 'b', 'c', 'd', 'e'].map((id, i) => gpus(id, i === 3 ? 2 : 0));
    for (const n of nodes) n.summary = summarizeShared(n, shared);
    const groups = new NodeGroups(nodes);
    expect([...groups.shared.values()]).toEqual([[0, 1, 2, 4]]);
    expect(groups.others).toEqual([3]);
    const pool = { id: 'p', sharing: 'exclusive' as const, topologyKey: 'zone', nodes };
    const req: PlacementRequest = { devices: [{ class: 'gpu', count: 1, selector: [] }], window: { start: 0, end: 10 }, binding: 'hold' };
    const r = plan(pool, req, groups);
    // The half-booked node packs best; the free ones follow in pool order.
    expect(r.ok && r.candidates.map((c) => c.nodeId)).toEqual(['d', 'a', 'b', 'c', 'e']);

    // A node that gets a booking leaves its group, and comes back when the booking goes.
    nodes[1]!.atoms[0]!.bookings.push({ start: 0, end: 100 });
    nodes[1]!.summary = summarizeShared(nodes[1]!, shared);
    groups.update(nodes[1]!);
    expect([...groups.shared.values()]).toEqual([[0, 2, 4]]);
    expect(groups.others).toEqual([1, 3]);
    nodes[1]!.atoms[0]!.bookings.pop();
    nodes[1]!.summary = summarizeShared(nodes[1]!, shared);
    groups.update(nodes[1]!);
    expect([...groups.shared.values()]).toEqual([[0, 1, 2, 4]]);
    expect(groups.others).toEqual([3]);
  });

  it('refuses groups of another node list, and ignores a node it does not hold', () => {
    const node: NodeSnap = { id: 'x', schedulable: true, labels: {}, scalars: {}, atoms: [] };
    const groups = new NodeGroups([node]);
    const req: PlacementRequest = { devices: [{ class: 'gpu', count: 1, selector: [] }], window: { start: 0, end: 10 }, binding: 'hold' };
    expect(() => plan({ id: 'p', sharing: 'exclusive', topologyKey: 'zone', nodes: [node] }, req, groups)).toThrow(/another node list/);
    groups.update({ ...node });
    expect(groups.others).toEqual([0]);
  });
});
