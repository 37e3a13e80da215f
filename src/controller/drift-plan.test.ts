import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { incompleteReason, planDrift, type ClusterView, type LedgerView } from './drift-plan.ts';
import { type Reservation } from '../kube/types.ts';
import { RESERVATION_FINALIZER } from '../core/names.ts';

const UID_A = '0b6c3c1e-2f4d-4a8b-9c1d-111111111111';
const UID_B = '0b6c3c1e-2f4d-4a8b-9c1d-222222222222';
const UID_C = '0b6c3c1e-2f4d-4a8b-9c1d-333333333333';
const UID_D = '0b6c3c1e-2f4d-4a8b-9c1d-444444444444';

const named = (name: string) => ({ metadata: { name } });
const cr = (uid: string, o: { finalizers?: string[]; deleting?: boolean } = {}): Reservation => ({
  metadata: {
    name: `r-${uid.slice(-4)}`,
    namespace: 'ns',
    uid,
    resourceVersion: '5',
    finalizers: o.finalizers ?? [RESERVATION_FINALIZER],
    ...(o.deleting ? { deletionTimestamp: '2026-01-01T00:00:00Z' } : {}),
  },
  spec: { pool: 'p', devices: [{ class: 'gpu', count: 1 }], duration: 60 },
});

const ledger: LedgerView = {
  nodes: [
    { id: 'n1', poolId: 'pool_a', connectivity: 'connected', presentDevices: 8 },
    { id: 'n2', poolId: 'pool_a', connectivity: 'connected', presentDevices: 8 },
    { id: 'n3', poolId: null, connectivity: 'unreachable', presentDevices: 0 },
    { id: 'n4', poolId: 'pool_a', connectivity: 'connected', presentDevices: 0 },
  ],
  pools: [
    { id: 'pool_a', name: 'a', archived: false },
    { id: 'pool_b', name: 'b', archived: false },
    { id: 'pool_c', name: 'c', archived: true },
  ],
  reservations: [
    { id: 'rsv_1', poolId: 'pool_a', idempotencyKey: UID_A },
    { id: 'rsv_2', poolId: 'pool_a', idempotencyKey: UID_B },
    { id: 'rsv_3', poolId: 'pool_a', idempotencyKey: UID_C },
    { id: 'rsv_4', poolId: 'pool_a', idempotencyKey: UID_D },
    { id: 'rsv_5', poolId: 'pool_a', idempotencyKey: 'api-key' },
  ],
};

const agreeing: ClusterView = {
  nodes: ['n1', 'n2', 'n4'].map(named),
  nodeDevices: ['n1', 'n2'].map((n) => ({ ...named(n), spec: { gpus: [] } })),
  pools: ['a', 'b'].map((p) => ({ ...named(p), spec: { nodeSelector: {}, ownerTenant: 't' } })),
  reservations: [cr(UID_A), cr(UID_B), cr(UID_C), cr(UID_D)],
};

describe('planDrift', () => {
  it('finds nothing when the cluster agrees with the ledger (a node without a report yet, an archived pool, a foreign key)', () => {
    expect(planDrift(ledger, agreeing)).toEqual([]);
    expect(incompleteReason(ledger, agreeing)).toBeUndefined();
  });

  it('a deleted Node leaves its pool; a deleted NodeDevices takes the devices first; an already-gone node is left alone', () => {
    const cluster = { ...agreeing, nodes: ['n2', 'n4'].map(named), nodeDevices: [named('n2')].map((n) => ({ ...n, spec: { gpus: [] } })) };
    expect(planDrift(ledger, cluster)).toEqual([
      { kind: 'nodedevices', action: 'devices-removed', node: 'n1', poolId: 'pool_a' },
      { kind: 'node', action: 'left-pool', node: 'n1', poolId: 'pool_a' },
    ]);
  });

  it('a deleted Pool is archived (an archived one is not archived again)', () => {
    expect(planDrift(ledger, { ...agreeing, pools: [] })).toEqual([{ kind: 'pool', action: 'archived', pool: 'a', poolId: 'pool_a' }, { kind: 'pool', action: 'archived', pool: 'b', poolId: 'pool_b' }]);
  });

  it("releases a booking whose Reservation is gone or going without our finalizer; restores a live one's finalizer", () => {
    const cluster = {
      ...agreeing,
      reservations: [
        cr(UID_B, { finalizers: ['other'], deleting: true }),
        cr(UID_C, { finalizers: ['other'] }),
        cr(UID_D, { deleting: true }), // ours is there: the Reservation reconciler's finalize releases it
      ],
    };
    expect(planDrift(ledger, cluster)).toEqual([
      { kind: 'reservation', action: 'released', reservationId: 'rsv_1', poolId: 'pool_a', uid: UID_A },
      { kind: 'reservation', action: 'released', reservationId: 'rsv_2', poolId: 'pool_a', uid: UID_B },
      {
        kind: 'reservation',
        action: 'finalizer-restored',
        reservationId: 'rsv_3',
        namespace: 'ns',
        name: 'r-3333',
        finalizers: ['other', RESERVATION_FINALIZER],
        resourceVersion: '5',
      },
    ]);
  });

  it("a recurring Reservation's windows (keyed uid:start): all released when it is gone; its finalizer restored once", () => {
    const windows: LedgerView = {
      ...ledger,
      reservations: [
        { id: 'rsv_w1', poolId: 'pool_a', idempotencyKey: `${UID_A}:2027-01-04T08:00:00.000Z` },
        { id: 'rsv_w2', poolId: 'pool_a', idempotencyKey: `${UID_A}:2027-01-05T08:00:00.000Z` },
        { id: 'rsv_x', poolId: 'pool_a', idempotencyKey: `${UID_B}x:2027-01-05T08:00:00.000Z` }, // no uid: not ours
      ],
    };
    expect(planDrift(windows, { ...agreeing, reservations: [] })).toEqual([
      { kind: 'reservation', action: 'released', reservationId: 'rsv_w1', poolId: 'pool_a', uid: UID_A },
      { kind: 'reservation', action: 'released', reservationId: 'rsv_w2', poolId: 'pool_a', uid: UID_A },
    ]);
    expect(planDrift(windows, { ...agreeing, reservations: [cr(UID_A, { finalizers: [] })] })).toEqual([
      { kind: 'reservation', action: 'finalizer-restored', reservationId: 'rsv_w1', namespace: 'ns', name: 'r-1111', finalizers: [RESERVATION_FINALIZER], resourceVersion: '5' },
    ]);
    expect(planDrift(windows, { ...agreeing, reservations: [cr(UID_A)] })).toEqual([]);
  });

  it('a view without any Node is not complete while the ledger has nodes in pools', () => {
    const empty: ClusterView = { nodes: [], nodeDevices: [], pools: [], reservations: [] };
    expect(incompleteReason(ledger, empty)).toMatch(/no Nodes/);
    expect(incompleteReason({ ...ledger, nodes: [ledger.nodes[2]!] }, empty)).toBeUndefined();
  });

  it('never touches what the cluster view holds (property)', () => {
    const ids = fc.constantFrom('n1', 'n2', 'n3', 'n4');
    const uids = fc.constantFrom(UID_A, UID_B, UID_C, 'key');
    const arb = fc.record({
      nodes: fc.uniqueArray(fc.record({ id: ids, poolId: fc.option(fc.constant('pool_a'), { nil: null }), connectivity: fc.constantFrom('connected', 'unreachable'), presentDevices: fc.nat(4) }), { selector: (n) => n.id }),
      pools: fc.uniqueArray(fc.record({ id: fc.constant('pool_x'), name: fc.constantFrom('a', 'b'), archived: fc.boolean() }), { selector: (p) => p.name }),
      reservations: fc.uniqueArray(fc.record({ id: fc.constantFrom('rsv_1', 'rsv_2'), poolId: fc.constant('pool_a'), idempotencyKey: uids }), { selector: (r) => r.id }),
      clusterNodes: fc.subarray(['n1', 'n2', 'n3', 'n4']),
      clusterDevices: fc.subarray(['n1', 'n2', 'n3', 'n4']),
      clusterPools: fc.subarray(['a', 'b']),
      crs: fc.uniqueArray(fc.record({ uid: uids, finalizers: fc.subarray([RESERVATION_FINALIZER, 'other']), deleting: fc.boolean() }), { selector: (r) => r.uid }),
    });
    fc.assert(
      fc.property(arb, (x) => {
        const cluster: ClusterView = {
          nodes: x.clusterNodes.map(named),
          nodeDevices: x.clusterDevices.map((n) => ({ ...named(n), spec: { gpus: [] } })),
          pools: x.clusterPools.map((p) => ({ ...named(p), spec: { nodeSelector: {}, ownerTenant: 't' } })),
          reservations: x.crs.map((r) => cr(r.uid, r)),
        };
        for (const f of planDrift({ nodes: x.nodes, pools: x.pools, reservations: x.reservations }, cluster)) {
          if (f.kind === 'node') expect(x.clusterNodes).not.toContain(f.node);
          if (f.kind === 'nodedevices') expect(x.clusterDevices).not.toContain(f.node);
          if (f.kind === 'pool') expect(x.clusterPools).not.toContain(f.pool);
          if (f.kind === 'reservation') {
            const r = x.crs.find((c) => c.uid === x.reservations.find((b) => b.id === f.reservationId)!.idempotencyKey);
            expect(r?.finalizers ?? []).not.toContain(RESERVATION_FINALIZER);
            if (f.action === 'finalizer-restored') expect(r?.deleting).toBe(false);
          }
        }
      }),
    );
  });
});
