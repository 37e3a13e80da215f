import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { judgeFromSummary, judgeNodes, MAX_CANDIDATES, overlapsChangeAt, plan, scoreNode, summarizeNode } from './planner.ts';
import type { AtomSnap, DeviceClass, NodeSnap, PlacementRequest, PoolSnap } from './types.ts';

// Builders: makeNode('n1').gpus(8).busy(0, [0, 10]).build()
class NodeB {
  private atoms: AtomSnap[] = [];
  private sched = true;
  private labels: Record<string, string> = {};
  constructor(private readonly id: string) {}
  gpus(n: number, attrs: Record<string, string | number> = {}) {
    for (let i = 0; i < n; i++) {
      this.atoms.push({
        id: `${this.id}-g${i}`, class: 'gpu', parentId: null, healthy: true, bookable: true, bookings: [],
        attributes: { numaNode: i < n / 2 ? 0 : 1, nvlinkDomain: `${this.id}-nvl`, gpuModel: 'H100', vramGiB: 80, ...attrs },
      });
    }
    return this;
  }
  busy(i: number, start: number, end: number) {
    this.atoms[i]!.bookings.push({ start, end });
    return this;
  }
  unhealthy(i: number) {
    this.atoms[i] = { ...this.atoms[i]!, healthy: false };
    return this;
  }
  unschedulable() {
    this.sched = false;
    return this;
  }
  zone(z: string) {
    this.labels.zone = z;
    return this;
  }
  build(summarized = true): NodeSnap {
    const n: NodeSnap = { id: this.id, schedulable: this.sched, labels: this.labels, atoms: this.atoms, scalars: {} };
    if (summarized) n.summary = summarizeNode(n);
    return n;
  }
}
const node = (id: string) => new NodeB(id);
const pool = (nodes: NodeSnap[]): PoolSnap => ({ id: 'p', sharing: 'exclusive', topologyKey: 'zone', nodes });
const req = (count: number, over: Partial<PlacementRequest> = {}): PlacementRequest => ({
  devices: [{ class: 'gpu', count, selector: [] }],
  window: { start: 100, end: 200 },
  binding: 'hold',
  ...over,
});

describe('plan', () => {
  it('prefers the fuller node (bin-packing) and one NUMA node', () => {
    const p = pool([node('a').gpus(8).build(), node('b').gpus(8).busy(0, 0, 1000).busy(1, 0, 1000).build()]);
    const r = plan(p, req(2));
    if (!r.ok) throw new Error(r.reason);
    expect(r.candidates[0]!.nodeId).toBe('b');
    expect(r.candidates[0]!.atoms).toEqual(['b-g2', 'b-g3']);
  });

  it('treats bookings outside the window as free, and half-open ranges as not overlapping', () => {
    const p = pool([node('a').gpus(1).busy(0, 0, 100).busy(0, 200, 300).build()]);
    expect(plan(p, req(1)).ok).toBe(true);
    expect(plan(p, req(1, { window: { start: 99, end: 200 } })).ok).toBe(false);
  });

  it('explains a miss by counting nodes per reason', () => {
    const p = pool([node('a').gpus(1).build(), node('b').gpus(4).unschedulable().build(), node('c').gpus(2).unhealthy(0).unhealthy(1).build()]);
    expect(plan(p, req(2))).toEqual({ ok: false, reason: '0/3 nodes fit: 2 without enough free gpu atoms matching the request in the window, 1 unschedulable' });
  });

  it('counts two requests of one class against the same free atoms', () => {
    const p = pool([node('a').gpus(8).build(), node('b').gpus(8).build()]);
    const both = (a: number, b: number): PlacementRequest => req(1, { devices: [{ class: 'gpu', count: a, selector: [] }, { class: 'gpu', count: b, selector: [] }] });
    expect(plan(p, both(5, 7))).toMatchObject({ ok: false, reason: expect.stringMatching(/^0\/2 nodes fit/) });
    const r = plan(p, both(3, 5));
    if (!r.ok) throw new Error(r.reason);
    expect(r.candidates[0]!.atoms).toHaveLength(8);
    expect(r.candidates[0]!.score).toBeLessThanOrEqual(110);
  });

  it('places a gang in one domain only', () => {
    const p = pool([node('a').gpus(8).zone('x').build(), node('b').gpus(8).zone('y').build(), node('c').gpus(8).zone('y').build()]);
    const r = plan(p, req(8, { gang: { size: 2 } }));
    expect(r).toMatchObject({ ok: true, gangDomain: 'y' });
    if (r.ok) expect(r.candidates.map((c) => c.nodeId)).toEqual(['b', 'c']);
    expect(plan(p, req(8, { gang: { size: 3 } })).ok).toBe(false);
  });
});

describe('overlapsChangeAt', () => {
  // GPU 0 booked [100, 200), GPU 1 [300, 400).
  const n = node('n').gpus(2).busy(0, 100, 200).busy(1, 300, 400).build();
  it('is where an overlapped booking ends, or where the window’s end reaches a later booking', () => {
    expect(overlapsChangeAt(n, 0, 50)).toBe(50); // [50, 100) is the last start before reaching GPU 0's booking
    expect(overlapsChangeAt(n, 120, 50)).toBe(200); // overlapping GPU 0's booking until it ends
    expect(overlapsChangeAt(n, 120, 250)).toBe(200); // both overlapped: the earlier end
    expect(overlapsChangeAt(n, 0, Infinity)).toBe(200); // open-ended: only ends count
    expect(overlapsChangeAt(n, 400, 10)).toBe(Infinity);
  });
});

// Random pools: up to 30 nodes of up to 8 GPUs with random bookings, health and schedulability.
const arbNode = (i: number) =>
  fc.record({
    gpus: fc.integer({ min: 0, max: 8 }),
    schedulable: fc.boolean(),
    zone: fc.constantFrom('x', 'y', 'z'),
    bookings: fc.array(fc.record({ atom: fc.nat(7), start: fc.integer({ min: 0, max: 300 }), len: fc.integer({ min: 1, max: 200 }) }), { maxLength: 6 }),
    unhealthy: fc.array(fc.nat(7), { maxLength: 2 }),
  }).map((spec) => {
    const b = node(`n${String(i).padStart(2, '0')}`).gpus(spec.gpus).zone(spec.zone);
    if (!spec.schedulable) b.unschedulable();
    for (const u of spec.unhealthy) if (u < spec.gpus) b.unhealthy(u);
    for (const k of spec.bookings) if (k.atom < spec.gpus) b.busy(k.atom, k.start, k.start + k.len);
    return b;
  });
const arbPool = fc.integer({ min: 1, max: 30 }).chain((n) => fc.tuple(...Array.from({ length: n }, (_, i) => arbNode(i))));
const arbReq = fc.record({
  count: fc.integer({ min: 1, max: 8 }),
  start: fc.integer({ min: 0, max: 400 }),
  len: fc.integer({ min: 1, max: 200 }),
  nvlink: fc.boolean(),
  node: fc.boolean(),
});

function freeAtoms(n: NodeSnap, r: PlacementRequest, cls: DeviceClass = 'gpu') {
  return n.atoms.filter((a) => a.class === cls && a.healthy && a.bookable && a.bookings.every((b) => b.end <= r.window.start || b.start >= r.window.end));
}

describe('plan properties', () => {
  it('every candidate takes distinct free atoms of one node, at most 10, best first; a miss means no node could fit', () => {
    fc.assert(
      fc.property(arbPool, arbReq, (builders, q) => {
        const nodes = builders.map((b) => b.build());
        const r = req(q.count, { window: { start: q.start, end: q.start + q.len }, ...(q.nvlink ? { topology: 'nvlink-all' as const } : {}), binding: q.node ? 'node' : 'hold' });
        const result = plan(pool(nodes), r);
        const byId = new Map(nodes.map((n) => [n.id, n]));
        if (result.ok) {
          expect(result.candidates.length).toBeGreaterThan(0);
          expect(result.candidates.length).toBeLessThanOrEqual(MAX_CANDIDATES);
          for (let i = 1; i < result.candidates.length; i++) expect(result.candidates[i - 1]!.score).toBeGreaterThanOrEqual(result.candidates[i]!.score);
          for (const c of result.candidates) {
            const n = byId.get(c.nodeId)!;
            expect(n.schedulable).toBe(true);
            expect(new Set(c.atoms).size).toBe(c.atoms.length);
            const free = new Set(freeAtoms(n, r).map((a) => a.id));
            for (const a of c.atoms) expect(free.has(a)).toBe(true);
            if (q.node) expect(c.atoms.length).toBe(n.atoms.length);
            else expect(c.atoms.length).toBe(q.count);
          }
        } else {
          for (const n of nodes) {
            if (!n.schedulable || q.nvlink || q.node) continue;
            expect(freeAtoms(n, r).length).toBeLessThan(q.count);
          }
        }
      }),
      { numRuns: 400 },
    );
  });

  it('the candidates score as the best MAX_CANDIDATES of the nodes each planned alone', () => {
    fc.assert(
      fc.property(arbPool, arbReq, (builders, q) => {
        const nodes = builders.map((b) => b.build());
        const r = req(q.count, { window: { start: q.start, end: q.start + q.len }, binding: q.node ? 'node' : 'hold' });
        const alone = nodes
          .map((n) => plan(pool([n]), r))
          .flatMap((p) => (p.ok ? [p.candidates[0]!.score] : []))
          .sort((a, b) => b - a)
          .slice(0, MAX_CANDIDATES);
        const result = plan(pool(nodes), r);
        expect(result.ok ? result.candidates.map((c) => c.score) : []).toEqual(alone);
      }),
      { numRuns: 400 },
    );
  });

  it('several device requests: distinct atoms, each request served, or no node could serve them all', () => {
    fc.assert(
      fc.property(arbPool, fc.array(fc.integer({ min: 1, max: 6 }), { minLength: 2, maxLength: 3 }), (builders, counts) => {
        const nodes = builders.map((b) => b.build());
        const r = req(1, { devices: counts.map((count) => ({ class: 'gpu' as const, count, selector: [] })) });
        const result = plan(pool(nodes), r);
        const total = counts.reduce((a, b) => a + b, 0);
        if (result.ok) {
          for (const c of result.candidates) {
            expect(new Set(c.atoms).size).toBe(total);
            expect(c.score).toBeLessThanOrEqual(110);
          }
        } else {
          for (const n of nodes) if (n.schedulable) expect(freeAtoms(n, r).length).toBeLessThan(total);
        }
      }),
      { numRuns: 300 },
    );
  });

  it('judging each node alone agrees with planning on that node alone', () => {
    fc.assert(
      fc.property(arbPool, arbReq, (builders, q) => {
        const nodes = builders.map((b) => b.build());
        const r = req(q.count, { window: { start: q.start, end: q.start + q.len }, binding: q.node ? 'node' : 'hold' });
        const verdicts = judgeNodes(nodes, r);
        for (const n of nodes) {
          const alone = plan(pool([n]), r);
          const v = verdicts.get(n.id)!;
          if (alone.ok) expect(v).toEqual({ ok: true, score: alone.candidates[0]!.score });
          else expect(v).toEqual({ ok: false, reason: alone.reason.replace(/^0\/1 nodes fit: 1 /, '') });
        }
      }),
      { numRuns: 300 },
    );
  });

  it('the summary fast path gives the same answer as visiting every atom', () => {
    fc.assert(
      fc.property(arbPool, arbReq, (builders, q) => {
        const r = req(q.count, { window: { start: q.start, end: q.start + q.len }, binding: q.node ? 'node' : 'hold' });
        const withSummary = plan(pool(builders.map((b) => b.build(true))), r);
        const without = plan(pool(builders.map((b) => b.build(false))), r);
        expect(withSummary).toEqual(without);
      }),
      { numRuns: 400 },
    );
  });

  it('judging from the summary gives what visiting every atom gives (locality over any NUMA layout included)', () => {
    const arbAtoms = fc.array(
      // Bookable only, as the ledger's snapshots load them (src/db/snapshot.ts).
      fc.record({ numa: fc.option(fc.constantFrom(0, 1, 2, '1'), { nil: undefined }), healthy: fc.boolean(), busy: fc.array(fc.integer({ min: 0, max: 300 }), { maxLength: 3 }) }),
      { maxLength: 8 },
    );
    fc.assert(
      fc.property(fc.array(arbAtoms, { minLength: 1, maxLength: 6 }), arbReq, (specs, q) => {
        const build = (summarized: boolean) =>
          specs.map((atoms, i) => {
            const n: NodeSnap = {
              id: `n${i}`,
              schedulable: true,
              labels: {},
              scalars: {},
              atoms: atoms.map((a, k) => ({
                id: `n${i}-g${k}`,
                class: 'gpu' as const,
                parentId: null,
                healthy: a.healthy,
                bookable: true,
                attributes: (a.numa === undefined ? {} : { numaNode: a.numa }) as AtomSnap['attributes'],
                bookings: a.busy.map((start) => ({ start, end: start + 50 })),
              })),
            };
            if (summarized) n.summary = summarizeNode(n);
            return n;
          });
        const r = req(q.count, { window: { start: q.start, end: q.start + q.len }, binding: q.node ? 'node' : 'hold', ...(q.nvlink ? { topology: 'nvlink-all' as const } : {}) });
        expect(judgeNodes(build(true), r)).toEqual(judgeNodes(build(false), r));
        // What the summary decides alone is what visiting the atoms decides.
        for (const n of build(true)) {
          const quick = judgeFromSummary(n.summary!, r);
          if (quick !== undefined) expect(quick).toEqual(scoreNode({ ...n, summary: undefined }, r));
        }
      }),
      { numRuns: 500 },
    );
  });

  it('scoreNode answers alike for every window start before overlapsChangeAt (open-ended windows included)', () => {
    fc.assert(
      fc.property(
        arbNode(0),
        arbReq,
        fc.boolean(),
        fc.array(fc.integer({ min: 0, max: 600 }), { minLength: 1, maxLength: 8 }),
        (b, q, open, later) => {
          const n = b.build();
          const len = open ? Infinity : q.len;
          const at = (start: number) => req(q.count, { window: { start, end: start + len }, binding: q.node ? 'node' : 'hold' });
          const until = overlapsChangeAt(n, q.start, len);
          expect(until).toBeGreaterThan(q.start - 1);
          const first = scoreNode(n, at(q.start));
          // The last start before the change too, where a bound one too late shows first.
          const starts = [...later.map((d) => q.start + d), until - 1];
          for (const t of starts) if (t >= q.start && t < until) expect(scoreNode(n, at(t))).toEqual(first);
        },
      ),
      { numRuns: 1000 },
    );
  });

  it('a gang takes `size` distinct nodes of one domain, or nothing', () => {
    fc.assert(
      fc.property(arbPool, fc.integer({ min: 2, max: 4 }), fc.integer({ min: 1, max: 4 }), (builders, size, count) => {
        const nodes = builders.map((b) => b.build());
        const result = plan(pool(nodes), req(count, { gang: { size } }));
        if (!result.ok) return;
        expect(result.candidates).toHaveLength(size);
        expect(new Set(result.candidates.map((c) => c.nodeId)).size).toBe(size);
        const zones = new Set(result.candidates.map((c) => nodes.find((n) => n.id === c.nodeId)!.labels.zone));
        expect([...zones]).toEqual([result.gangDomain]);
      }),
      { numRuns: 300 },
    );
  });
});
