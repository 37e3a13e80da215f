// spec.releaseIfUnusedSeconds (ADR 0015): a confirmed Reservation that no pod has used that long after its start is
// released, reason Unused, with an Event, its atoms free again; one whose pod bound (the extender's real bind) is kept;
// an invalid value fails the Reservation before it books. The test clock moves the database's time.
import { beforeAll, describe, expect, it } from 'vitest';
import { ReservationReconciler } from '../../src/controller/reservation/reconciler.ts';
import { type Reservation } from '../../src/kube/types.ts';
import { advanceClock } from '../../src/db/clock.ts';
import { Ledger } from '../../src/db/ledger.ts';
import type { ExtenderKube } from '../../src/extender/kube.ts';
import { ExtenderService } from '../../src/extender/service.ts';
import { silentLogger } from '../../src/log.ts';
import { makeNode, makePool, reservation } from '../support/builders.ts';
import { fakeController, type FakeController } from '../support/controller-context.ts';
import { useTestDatabase } from '../support/db.ts';
import { RESERVATION_FINALIZER, TENANT_LABEL, reservationResourceName } from '../../src/core/names.ts';

const t = useTestDatabase();

const pods = new Map<string, unknown>();
const kube = {
  getPod: async (ns: string, name: string) => pods.get(`${ns}/${name}`),
  nodeAllocatable: async () => ({}),
  namespaceLabels: async () => ({ [TENANT_LABEL]: 'acme' }),
  annotatePod: async () => undefined,
  bindPod: async () => undefined,
  evictPod: async () => undefined,
  deletePod: async () => undefined,
} as unknown as ExtenderKube;

let f: FakeController;
let reconciler: ReservationReconciler;
let poolId: string;

beforeAll(async () => {
  f = await fakeController(t);
  poolId = await makePool('up').owner('acme').create(t.db);
  await makeNode('up-n1').gpus(4).create(t.db, poolId);
  f.ctx.poolIds.set('up', poolId);
  f.informers.pools.put({ metadata: { name: 'up' }, spec: { nodeSelector: { pool: 'up' }, ownerTenant: 'acme' }, status: { poolId } });
  f.informers.namespaces.put({ metadata: { name: 'team-a', labels: { [TENANT_LABEL]: 'acme' } } });
  reconciler = new ReservationReconciler(f.ctx);
});

const cr = (name: string, spec: Partial<Reservation['spec']>): Reservation =>
  f.informers.reservations.put({
    apiVersion: 'bettercompute.io/v1alpha1',
    kind: 'Reservation',
    metadata: { namespace: 'team-a', name, uid: `uid-${name}`, generation: 1, resourceVersion: '1', finalizers: [RESERVATION_FINALIZER] },
    spec: { pool: 'up', devices: [{ class: 'gpu', count: 2 }], duration: '1h', ...spec },
  });
const status = (name: string) => f.informers.reservations.get(`team-a/${name}`)!.status!;
const reason = (name: string) => status(name).conditions!.find((c) => c.type === 'Reserved')!.reason;
const eventsOf = (name: string) => f.events.filter((e) => e.key === `team-a/${name}`).map((e) => e.reason);

describe('releaseIfUnusedSeconds', () => {
  it('an invalid value fails the Reservation before it books', async () => {
    cr('bad', { releaseIfUnusedSeconds: 10 });
    await reconciler.reconcile('team-a/bad');
    expect(status('bad')).toMatchObject({ phase: 'Failed' });
    expect(status('bad').reservationId).toBeUndefined();
    expect(reason('bad')).toBe('Invalid');
  });

  it('unused: released at start + the time, reason Unused, atoms free; used: kept', async () => {
    cr('idle', { releaseIfUnusedSeconds: 60 });
    cr('busy', { releaseIfUnusedSeconds: 60 });
    // Its wake-up is due at start + 60 s (plus a margin), not at the window's end an hour later.
    const wake = await reconciler.reconcile('team-a/idle');
    expect(wake).toEqual({ requeueAfterMs: expect.any(Number) });
    expect((wake as { requeueAfterMs: number }).requeueAfterMs).toBeLessThan(120_000);
    await reconciler.reconcile('team-a/busy');
    const idle = status('idle').reservationId!;
    const busy = status('busy').reservationId!;
    const idleNode = status('idle').allocations![0]!.node;

    // A pod of "busy" binds through the extender.
    await t.clock.sync();
    const pod = { metadata: { name: 'busy-0', namespace: 'team-a', uid: 'busy-0' }, spec: { containers: [{ name: 'm', resources: { limits: { [reservationResourceName(busy)]: '1' } } }] } };
    pods.set('team-a/busy-0', pod);
    const extender = new ExtenderService({ tenancyByName: true, db: t.db, ledger: new Ledger(t.db), clock: t.clock, kube, log: silentLogger });
    expect((await extender.bind({ PodName: 'busy-0', PodNamespace: 'team-a', PodUID: 'busy-0', Node: status('busy').allocations![0]!.node })).Error).toBe('');

    // Before the time nothing is released.
    await advanceClock(t.db, 30_000);
    await t.clock.sync();
    await reconciler.reconcile('team-a/idle');
    expect((await f.ctx.ledger.get(idle))!.state).toBe('confirmed');

    await advanceClock(t.db, 31_000);
    await t.clock.sync();
    await reconciler.reconcile('team-a/idle');
    await reconciler.reconcile('team-a/busy');
    expect((await f.ctx.ledger.get(idle))!.state).toBe('released');
    expect(status('idle')).toMatchObject({ phase: 'Released', state: 'released' });
    expect(reason('idle')).toBe('Unused');
    expect(status('idle').conditions!.find((c) => c.type === 'Reserved')!.message).toBe(
      `released ${idle}: no pod used it within 60s of its start at ${status('idle').start}`,
    );
    expect(eventsOf('idle')).toEqual(['Reserved', 'Unused']);
    expect((await f.ctx.ledger.get(busy))!.state).toBe('confirmed');
    expect(status('busy')).toMatchObject({ phase: 'Reserved', state: 'confirmed' });

    // The mirror keeps saying Unused on later reconciles (it is read from the ledger, not from status).
    await reconciler.reconcile('team-a/idle');
    expect(reason('idle')).toBe('Unused');
    expect(eventsOf('idle')).toEqual(['Reserved', 'Unused']);

    // Its 2 atoms are free again: the one node has 4 GPUs, busy holds 2, so a new booking of 2 fits there.
    const again = await f.ctx.ledger.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 2 }] }), t.clock.now());
    expect(again).toMatchObject({ ok: true, reservation: { allocations: [{ nodeId: idleNode }] } });
  });
});
