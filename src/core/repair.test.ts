import { describe, expect, it } from 'vitest';
import { cuttableNow, planRepair, type RepairInput } from './repair.ts';
import type { AtomSnap, NodeSnap, PlacementRequest, PoolSnap } from './types.ts';

const W = { start: 1000, end: 2000 };

function node(id: string, gpus: number, o: { zone?: string; busy?: number[]; unhealthy?: number[]; schedulable?: boolean } = {}): NodeSnap {
  const atoms: AtomSnap[] = Array.from({ length: gpus }, (_, i) => ({
    id: `${id}-g${i}`,
    class: 'gpu',
    parentId: null,
    healthy: !(o.unhealthy ?? []).includes(i),
    bookable: true,
    bookings: (o.busy ?? []).includes(i) ? [{ ...W }] : [],
    attributes: { numaNode: 0 },
  }));
  return { id, schedulable: o.schedulable ?? true, labels: o.zone ? { zone: o.zone } : {}, atoms, scalars: {} };
}

const pool = (nodes: NodeSnap[]): PoolSnap => ({ id: 'pool', sharing: 'exclusive', topologyKey: 'zone', nodes });
const req = (count: number, extra: Partial<PlacementRequest> = {}): PlacementRequest => ({
  devices: [{ class: 'gpu', count, selector: [] }],
  window: W,
  binding: 'hold',
  ...extra,
});
const input = (o: Omit<RepairInput, 'classes' | 'started'> & { started?: boolean }): RepairInput => ({
  started: false,
  classes: new Map([...o.lost.values()].flat().map((id) => [id, 'gpu'])),
  ...o,
});

describe('planRepair', () => {
  it('replaces a lost atom on its own node when the node has a free one; the kept atom stays', () => {
    const p = planRepair(
      input({
        pool: pool([node('a', 4, { busy: [0, 1], unhealthy: [0] }), node('b', 4)]),
        request: req(2),
        started: true,
        allocations: [{ id: 'al1', nodeId: 'a', atoms: ['a-g0', 'a-g1'] }],
        lost: new Map([['al1', ['a-g0']]]),
      }),
    );
    expect(p).toEqual({
      cuts: [{ allocationId: 'al1', atoms: ['a-g0'] }],
      placements: [{ nodeId: 'a', atoms: ['a-g2'], scalars: {}, score: expect.any(Number) }],
      short: 0,
      reasons: [],
    });
  });

  it('moves a whole allocation whose node is gone to a node the reservation does not use', () => {
    const p = planRepair(
      input({
        pool: pool([node('a', 2, { busy: [0, 1], schedulable: false }), node('b', 2), node('c', 2)]),
        request: req(2),
        allocations: [{ id: 'al1', nodeId: 'a', atoms: ['a-g0', 'a-g1'] }],
        lost: new Map([['al1', ['a-g0', 'a-g1']]]),
      }),
    );
    expect(p.cuts).toEqual([{ allocationId: 'al1', atoms: ['a-g0', 'a-g1'] }]);
    expect(p.placements.map((c) => [c.nodeId, c.atoms])).toEqual([['b', ['b-g0', 'b-g1']]]);
    expect(p.short).toBe(0);
  });

  it('keeps a started allocation on its node: without a spare there it is short, even with room elsewhere', () => {
    const p = planRepair(
      input({
        pool: pool([node('a', 2, { busy: [0, 1], unhealthy: [1] }), node('b', 2)]),
        request: req(2),
        started: true,
        allocations: [{ id: 'al1', nodeId: 'a', atoms: ['a-g0', 'a-g1'] }],
        lost: new Map([['al1', ['a-g1']]]),
      }),
    );
    expect(p).toMatchObject({ cuts: [], placements: [], short: 1 });
  });

  it('replaces a gang member inside the domain of the members kept, never in another domain', () => {
    const nodes = [
      node('z1-a', 2, { zone: 'z1', busy: [0, 1], schedulable: false }),
      node('z1-b', 2, { zone: 'z1', busy: [0, 1] }),
      node('z2-a', 2, { zone: 'z2' }),
    ];
    const gang = { gang: { size: 2 } };
    const allocations = [
      { id: 'm1', nodeId: 'z1-a', atoms: ['z1-a-g0', 'z1-a-g1'] },
      { id: 'm2', nodeId: 'z1-b', atoms: ['z1-b-g0', 'z1-b-g1'] },
    ];
    const lost = new Map([['m1', ['z1-a-g0', 'z1-a-g1']]]);
    expect(planRepair(input({ pool: pool(nodes), request: req(2, gang), allocations, lost }))).toMatchObject({ placements: [], short: 2 });
    const withRoom = [...nodes, node('z1-c', 2, { zone: 'z1' })];
    const p = planRepair(input({ pool: pool(withRoom), request: req(2, gang), allocations, lost }));
    expect(p.placements.map((c) => c.nodeId)).toEqual(['z1-c']);
  });

  it('gives each allocation that moves a node of its own', () => {
    const p = planRepair(
      input({
        pool: pool([node('a', 2, { busy: [0, 1], schedulable: false }), node('b', 2, { busy: [0, 1], schedulable: false }), node('c', 4)]),
        request: req(2),
        allocations: [
          { id: 'al1', nodeId: 'a', atoms: ['a-g0', 'a-g1'] },
          { id: 'al2', nodeId: 'b', atoms: ['b-g0', 'b-g1'] },
        ],
        lost: new Map([
          ['al1', ['a-g0', 'a-g1']],
          ['al2', ['b-g0', 'b-g1']],
        ]),
      }),
    );
    // One node per allocation: c takes the first; the second finds no other node.
    expect(p.placements.map((c) => c.nodeId)).toEqual(['c']);
    expect(p.short).toBe(2);
  });
});

describe('cuttableNow: what a running pod holds is kept until it is gone', () => {
  const lost = (reservationId: string, nodeId: string, reason: string) => ({ reservationId, nodeId, reason, deviceId: `${nodeId}-0` });
  it('keeps the lost atoms of a reservation with a live pod on their node, for reasons whose node answers', () => {
    const all = [
      lost('r1', 'n1', 'Maintenance'),
      lost('r1', 'n2', 'Maintenance'),
      lost('r2', 'n1', 'DeviceUnhealthy'),
      lost('r2', 'n1', 'DeviceGone'),
      lost('r3', 'n1', 'NodeNotReady'),
      lost('r3', 'n3', 'NodeGone'),
    ];
    const pods = new Set(['r1 n1', 'r2 n1', 'r3 n1', 'r3 n3']);
    // r1's pod runs on n1 only; r2's on n1; r3's nodes cannot say whether their containers run: re-placed all the same.
    expect(cuttableNow(all, pods)).toEqual([lost('r1', 'n2', 'Maintenance'), lost('r3', 'n1', 'NodeNotReady'), lost('r3', 'n3', 'NodeGone')]);
    expect(cuttableNow(all, new Set())).toEqual(all);
  });
});
