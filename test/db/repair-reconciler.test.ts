// BookingRepair as the customer sees it on the Reservation (ADR 0016): its node deleted between placement and start
// with no room elsewhere → condition Degraded True (AtomsLost, the atoms short) and a Warning Event, the booking kept;
// a node comes → re-placed, same reservation id, Degraded False (Repaired), an Event Repaired, status on the new node.
import { beforeAll, describe, expect, it } from 'vitest';
import { ReservationReconciler } from '../../src/controller/reservation/reconciler.ts';
import { type Reservation } from '../../src/kube/types.ts';
import { setNodeState, upsertNode } from '../../src/db/inventory.ts';
import { repairPass } from '../../src/db/repair.ts';
import { makeNode, makePool } from '../support/builders.ts';
import { fakeController, type FakeController } from '../support/controller-context.ts';
import { useTestDatabase } from '../support/db.ts';
import { checkInvariants, CLEAN } from '../support/invariants.ts';
import { RESERVATION_FINALIZER, TENANT_LABEL } from '../../src/core/names.ts';

const t = useTestDatabase();
let f: FakeController;
let reconciler: ReservationReconciler;
let poolId: string;

beforeAll(async () => {
  f = await fakeController(t);
  poolId = await makePool('rr').owner('ops').offer('acme', { gpu: 2 }).create(t.db);
  await makeNode('rr-a').gpus(2).create(t.db, poolId);
  f.ctx.poolIds.set('rr', poolId);
  f.informers.pools.put({ metadata: { name: 'rr' }, spec: { nodeSelector: { pool: 'rr' }, ownerTenant: 'ops' }, status: { poolId } });
  f.informers.namespaces.put({ metadata: { name: 'team-a', labels: { [TENANT_LABEL]: 'acme' } } });
  reconciler = new ReservationReconciler(f.ctx);
});

const status = (name: string) => f.informers.reservations.get(`team-a/${name}`)!.status!;
const condition = (name: string, type: string) => status(name).conditions!.find((c) => c.type === type);
const eventsOf = (name: string) => f.events.filter((e) => e.key === `team-a/${name}`).map((e) => [e.type, e.reason]);

describe('a Reservation whose node is deleted before its start', () => {
  it('shows Degraded with the atoms short and an Event, then Repaired on a new node with the same id', async () => {
    const start = new Date(t.clock.now() + 3_600_000).toISOString();
    const cr: Reservation = {
      apiVersion: 'bettercompute.io/v1alpha1',
      kind: 'Reservation',
      metadata: { namespace: 'team-a', name: 'train', uid: 'uid-train', generation: 1, resourceVersion: '1', finalizers: [RESERVATION_FINALIZER] },
      spec: { pool: 'rr', devices: [{ class: 'gpu', count: 2 }], duration: '1h', start },
    };
    f.informers.reservations.put(cr);
    await reconciler.reconcile('team-a/train');
    expect(status('train')).toMatchObject({ phase: 'Reserved', allocations: [{ node: 'rr-a' }] });
    expect(condition('train', 'Degraded')).toBeUndefined();
    const id = status('train').reservationId!;

    // What nodeGone writes for a deleted Node: out of its pool, unreachable.
    await upsertNode(t.db, { id: 'rr-a', poolId: null });
    await setNodeState(t.db, 'rr-a', { connectivity: 'unreachable' });
    expect((await repairPass(t.db, { graceSeconds: 120 })).map((o) => o.verdict)).toEqual(['degraded']);
    await reconciler.reconcile('team-a/train');
    expect(status('train')).toMatchObject({ phase: 'Reserved', reservationId: id, allocations: [{ node: 'rr-a' }] });
    expect(condition('train', 'Reserved')).toMatchObject({ status: 'True' });
    expect(condition('train', 'Degraded')).toMatchObject({
      status: 'True',
      reason: 'AtomsLost',
      message: expect.stringMatching(/^2 atoms short: lost to NodeGone/),
    });
    expect(eventsOf('train')).toEqual([['Normal', 'Reserved'], ['Warning', 'Degraded']]);
    // Nothing new: a second reconcile writes no second Event.
    await reconciler.reconcile('team-a/train');
    expect(eventsOf('train')).toHaveLength(2);

    await makeNode('rr-b').gpus(2).create(t.db, poolId);
    expect((await repairPass(t.db, { graceSeconds: 120 })).map((o) => o.verdict)).toEqual(['repaired']);
    await reconciler.reconcile('team-a/train');
    expect(status('train')).toMatchObject({
      phase: 'Reserved',
      reservationId: id,
      start,
      allocations: [{ node: 'rr-b', atoms: ['GPU-rr-b-00', 'GPU-rr-b-01'] }],
    });
    expect(condition('train', 'Degraded')).toMatchObject({
      status: 'False',
      reason: 'Repaired',
      message: expect.stringContaining('now on rr-b'),
    });
    expect(eventsOf('train')).toEqual([['Normal', 'Reserved'], ['Warning', 'Degraded'], ['Normal', 'Repaired']]);
    expect(await checkInvariants(t.db)).toEqual(CLEAN);
  });
});
