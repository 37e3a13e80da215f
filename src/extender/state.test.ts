import { describe, expect, it } from 'vitest';
import type { NodeSnap } from '../core/types.ts';
import type { PoolInfo } from '../db/snapshot.ts';
import { ExtenderState, quotaPeak } from './state.ts';

const info = (id: string): PoolInfo => ({
  id,
  name: id,
  ownerTenant: 'acme',
  gpuModel: 'H100',
  sharing: 'exclusive',
  slotsPerGpu: 1,
  topologyKey: 'zone',
  archived: false,
  offeredTo: new Set(),
});

const node = (id: string, gpus = 1): NodeSnap => ({
  id,
  schedulable: true,
  labels: {},
  scalars: {},
  atoms: Array.from({ length: gpus }, (_, i) => ({ id: `${id}-g${i}`, class: 'gpu' as const, parentId: null, attributes: {}, healthy: true, bookable: true, bookings: [] })),
});

const empty = { nodePools: new Map(), reservations: new Map(), holdings: new Map(), quotas: [] };

describe('ExtenderState', () => {
  it('moves a node between pools, drops it from every pool when it leaves, and rebuilds the planner snapshot after each change', () => {
    const s = new ExtenderState();
    s.replaceAll({ ...empty, pools: [{ info: info('p1'), nodes: [node('b'), node('a')] }, { info: info('p2'), nodes: [] }], nodePools: new Map([['a', 'p1'], ['b', 'p1']]) });
    expect(s.poolSnap('p1')!.nodes.map((n) => n.id)).toEqual(['a', 'b']);
    expect(s.pool('p1')!.byId.get('a')!.summary!.classes.get('gpu')).toMatchObject({ bookable: 1, healthy: 1, largestNuma: 1 });

    s.setNodes([{ id: 'a', poolId: 'p2', snap: node('a', 2) }]);
    expect(s.poolOfNode('a')).toBe('p2');
    expect(s.poolSnap('p1')!.nodes.map((n) => n.id)).toEqual(['b']);
    expect(s.poolSnap('p2')!.nodes.map((n) => n.id)).toEqual(['a']);
    expect(s.pool('p2')!.byId.get('a')!.summary!.classes.get('gpu')!.bookable).toBe(2);

    s.setNodes([{ id: 'b', poolId: null }], ['a']);
    expect(s.poolOfNode('b')).toBeNull();
    expect(s.poolOfNode('a')).toBeUndefined();
    expect(s.poolSnap('p1')!.nodes).toEqual([]);
    expect(s.poolSnap('p2')!.nodes).toEqual([]);
  });

  it('resolves a call’s names to entries, and resolves them again after any node changed', () => {
    const s = new ExtenderState();
    s.replaceAll({ ...empty, pools: [{ info: info('p1'), nodes: [node('a'), node('b')] }], nodePools: new Map([['a', 'p1'], ['b', 'p1']]) });
    const first = s.resolve(['a', 'b', 'c']);
    expect(first.map((e) => e?.snap?.id)).toEqual(['a', 'b', undefined]);
    expect(s.resolve(['a', 'b', 'c'])).toBe(first);
    expect(s.resolve(['b', 'a', 'c']).map((e) => e?.snap?.id)).toEqual(['b', 'a', undefined]);
    s.setNodes([{ id: 'a', poolId: 'p1', snap: node('a', 4) }]);
    expect(s.resolve(['b', 'a', 'c'])[1]!.snap!.atoms).toHaveLength(4);
  });

  it('a pool gone takes its nodes out of every pool', () => {
    const s = new ExtenderState();
    s.replaceAll({ ...empty, pools: [{ info: info('p1'), nodes: [node('a')] }], nodePools: new Map([['a', 'p1']]) });
    s.setPool('p1', undefined);
    expect(s.pool('p1')).toBeUndefined();
    expect(s.poolOfNode('a')).toBeNull();
  });

  it('applies a pod booking to new snapshot objects, once, and only on a node and atoms it holds', () => {
    const s = new ExtenderState();
    s.replaceAll({ ...empty, pools: [{ info: info('p1'), nodes: [node('a', 2)] }], nodePools: new Map([['a', 'p1']]) });
    const before = s.node('a')!.snap!;
    const booking = { podUid: 'u1', nodeId: 'a', atoms: ['a-g1'], start: 1000, end: Infinity };
    expect(s.applyPodBooking(booking)).toBe(true);
    const after = s.node('a')!.snap!;
    expect(after).not.toBe(before);
    expect(before.atoms[1]!.bookings).toEqual([]);
    expect(after.atoms.map((a) => a.bookings)).toEqual([[], [{ start: 1000, end: Infinity }]]);
    expect(after.atoms[0]).toBe(before.atoms[0]);
    expect(after.summary).not.toBe(before.summary);
    expect(after.summary!.busyFrom).toBe(1000);
    expect(s.poolSnap('p1')!.nodes[0]).toBe(after);
    expect(s.podHolding('u1')).toBe('a');
    // Again (a reload brought it meanwhile): the atom keeps one booking.
    expect(s.applyPodBooking(booking)).toBe(true);
    expect(s.node('a')!.snap!.atoms[1]!.bookings).toHaveLength(1);
    // A node or an atom this state does not hold: nothing applied.
    expect(s.applyPodBooking({ ...booking, podUid: 'u2', nodeId: 'z' })).toBe(false);
    expect(s.applyPodBooking({ ...booking, podUid: 'u2', atoms: ['a-g0', 'a-g9'] })).toBe(false);
    expect(s.node('a')!.snap!.atoms[0]!.bookings).toEqual([]);
    expect(s.podHolding('u2')).toBeUndefined();
  });

  it('keeps only limited quota keys', () => {
    const s = new ExtenderState();
    const key = { tenantId: 't', poolId: 'p', resource: 'gpu' };
    s.setQuota(key, { max: 2, charges: [{ start: 0, end: 10, amount: 1 }] });
    expect(s.quotaHeadroom('t', 'p', ['gpu', 'gpu.mig'], 5, null)).toEqual(new Map([['gpu', { max: 2, peak: 1 }]]));
    s.setQuota(key, { max: null, charges: [] });
    expect(s.quotaHeadroom('t', 'p', ['gpu'], 5, null).size).toBe(0);
  });
});

describe('quotaPeak', () => {
  it('ranges are half-open: one ending where another starts never add up', () => {
    const charges = [
      { start: 0, end: 10, amount: 2 },
      { start: 10, end: 20, amount: 3 },
    ];
    expect(quotaPeak(charges, 0, 30)).toBe(3);
    expect(quotaPeak(charges, 0, 10)).toBe(2);
  });

  it('an unbounded window counts no end, as bc_quota_peak does; an infinite one counts them', () => {
    const charges = [
      { start: 0, end: 10, amount: 2 },
      { start: 20, end: Infinity, amount: 3 },
    ];
    expect(quotaPeak(charges, 5, null)).toBe(5);
    expect(quotaPeak(charges, 5, Infinity)).toBe(3);
  });
});
