// Hold and confirm (ADR 0015): a Reservation with leaseSeconds is booked held; its first pod that binds (the extender's
// real bind and hand-off) confirms it in the transaction of the pod's assignment; the annotation bettercompute.io/confirm
// confirms it through the reconciler; an unconfirmed hold expires at its lease (the test clock) and its atoms are
// bookable again. Quota: held and confirmed are charged alike, so confirming moves nothing. Status mirrors the ledger.
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
import { CONFIRM_ANNOTATION, RESERVATION_FINALIZER, TENANT_LABEL, reservationResourceName } from '../../src/core/names.ts';

const t = useTestDatabase();

interface FakePod {
  metadata: { name: string; namespace: string; uid: string };
  spec: { containers: { name: string; resources?: { limits?: Record<string, string> } }[] };
}

class FakeKube implements ExtenderKube {
  pods = new Map<string, FakePod>();
  bound: { namespace: string; name: string; node: string }[] = [];
  async getPod(namespace: string, name: string) {
    return this.pods.get(`${namespace}/${name}`);
  }
  async nodeAllocatable() {
    return {};
  }
  async namespaceLabels(name: string): Promise<Record<string, string>> {
    return name === 'team-a' ? { [TENANT_LABEL]: 'acme' } : {};
  }
  async annotatePod() {}
  async bindPod(namespace: string, name: string, _uid: string, node: string) {
    this.bound.push({ namespace, name, node });
  }
  async evictPod() {}
  async deletePod() {}
}

let f: FakeController;
let reconciler: ReservationReconciler;
let kube: FakeKube;
let extender: ExtenderService;
let poolId: string;

beforeAll(async () => {
  f = await fakeController(t);
  // acme is offered the pool with a limit of 8 GPUs: a limited key, whose used/reserved counters every booking rewrites.
  poolId = await makePool('hp').owner('ops').offer('acme', { gpu: 8 }).create(t.db);
  for (const n of ['hp-n1', 'hp-n2', 'hp-n3', 'hp-n4']) await makeNode(n).gpus(2).create(t.db, poolId);
  f.ctx.poolIds.set('hp', poolId);
  f.informers.pools.put({ metadata: { name: 'hp' }, spec: { nodeSelector: { pool: 'hp' }, ownerTenant: 'ops' }, status: { poolId } });
  f.informers.namespaces.put({ metadata: { name: 'team-a', labels: { [TENANT_LABEL]: 'acme' } } });
  reconciler = new ReservationReconciler(f.ctx);
  kube = new FakeKube();
  extender = new ExtenderService({ tenancyByName: true, db: t.db, ledger: new Ledger(t.db), clock: t.clock, kube, log: silentLogger });
});

const cr = (name: string, spec: Partial<Reservation['spec']>, annotations?: Record<string, string>): Reservation =>
  f.informers.reservations.put({
    apiVersion: 'bettercompute.io/v1alpha1',
    kind: 'Reservation',
    metadata: { namespace: 'team-a', name, uid: `uid-${name}`, generation: 1, resourceVersion: '1', finalizers: [RESERVATION_FINALIZER], ...(annotations ? { annotations } : {}) },
    spec: { pool: 'hp', devices: [{ class: 'gpu', count: 2 }], duration: '1h', ...spec },
  });
const status = (name: string) => f.informers.reservations.get(`team-a/${name}`)!.status!;
const reservedCondition = (name: string) => status(name).conditions!.find((c) => c.type === 'Reserved')!;
const eventsOf = (name: string) => f.events.filter((e) => e.key === `team-a/${name}`).map((e) => e.reason);
const quota = async () =>
  (await t.db.query<{ used: number; reserved: number }>(`SELECT used, reserved FROM quotas WHERE tenant_id = 'acme' AND pool_id = $1 AND resource = 'gpu'`, [poolId]))
    .rows[0]!;
const stateRow = async (id: string) =>
  (await t.db.query<{ state: string; lease: Date | null }>('SELECT state, lease_expires_at AS lease FROM reservations WHERE id = $1', [id])).rows[0]!;

let podSeq = 0;
async function bindPod(reservationId: string, node: string) {
  const n = ++podSeq;
  const pod: FakePod = {
    metadata: { name: `job-${n}`, namespace: 'team-a', uid: `hold-pod-${n}` },
    spec: { containers: [{ name: 'main', resources: { limits: { [reservationResourceName(reservationId)]: '1' } } }] },
  };
  kube.pods.set(`team-a/${pod.metadata.name}`, pod);
  // The ledger starts a booking at the database's now, which the sampled clock may trail by a round trip.
  await t.clock.sync();
  const r = await extender.bind({ PodName: pod.metadata.name, PodNamespace: 'team-a', PodUID: pod.metadata.uid, Node: node });
  return { error: r.Error, pod: `team-a/${pod.metadata.name}` };
}

describe('hold confirmed by its first pod that binds', () => {
  it('the bind confirms it in the assignment’s transaction; the counters stay; the reconciler mirrors it', async () => {
    cr('first-pod', { leaseSeconds: 300 });
    await reconciler.reconcile('team-a/first-pod');
    expect(status('first-pod')).toMatchObject({ phase: 'Reserved', state: 'held', atoms: 2, leaseExpiresAt: expect.any(String) });
    expect(reservedCondition('first-pod')).toMatchObject({ status: 'True', reason: 'Held' });
    const id = status('first-pod').reservationId!;
    const node = status('first-pod').allocations![0]!.node;
    // By hand: 2 GPUs booked from now, so 2 used and none reserved (reserved counts charges that start later).
    expect(await quota()).toEqual({ used: 2, reserved: 0 });

    const first = await bindPod(id, node);
    expect(first.error).toBe('');
    const row = await stateRow(id);
    expect(row).toEqual({ state: 'confirmed', lease: null });
    const view = (await f.ctx.ledger.get(id))!;
    expect(view.hold).toEqual({ confirmedAt: expect.any(Number), confirmedByPod: first.pod });
    // Held and confirmed are charged alike: confirming moves nothing between used and reserved.
    expect(await quota()).toEqual({ used: 2, reserved: 0 });

    // The second pod binds into the confirmed reservation; the confirmation stays the first pod's.
    expect((await bindPod(id, node)).error).toBe('');
    expect((await f.ctx.ledger.get(id))!.hold).toEqual(view.hold);

    // The leader finds the Reservation mirrored as held that the ledger no longer holds, and its reconcile mirrors it.
    expect(await f.ctx.ledger.heldNoMore([id])).toEqual([id]);
    await reconciler.reconcile('team-a/first-pod');
    const s = status('first-pod');
    expect(s).toMatchObject({ phase: 'Reserved', state: 'confirmed', confirmedAt: new Date(view.hold!.confirmedAt!).toISOString(), confirmedBy: `pod ${first.pod}` });
    expect(s.leaseExpiresAt).toBeUndefined();
    expect(reservedCondition('first-pod')).toMatchObject({ status: 'True', reason: 'Confirmed', message: expect.stringContaining(`by pod ${first.pod}`) });
    expect(eventsOf('first-pod')).toEqual(['Held', 'Confirmed']);
    expect(await f.ctx.ledger.heldNoMore([])).toEqual([]);
  });

  it('a future hold is reserved quota before and after its confirmation (charged alike)', async () => {
    const now = t.clock.now();
    const out = await f.ctx.ledger.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 2 }], start: now + 3_600_000, leaseSeconds: 60 }), now);
    if (!out.ok) throw new Error(out.message);
    // By hand: the earlier test's 2 GPUs are live (used 2); these 2 start in an hour (reserved 2).
    expect(await quota()).toEqual({ used: 2, reserved: 2 });
    expect(await f.ctx.ledger.confirm(out.reservation.id)).toMatchObject({ state: 'confirmed', leaseExpiresAt: null, hold: { confirmedByPod: null } });
    expect(await quota()).toEqual({ used: 2, reserved: 2 });
    // Confirming again answers the confirmed reservation (idempotent).
    expect(await f.ctx.ledger.confirm(out.reservation.id)).toMatchObject({ state: 'confirmed' });
    expect(await f.ctx.ledger.release(out.reservation.id)).toBe(true);
    expect(await quota()).toEqual({ used: 2, reserved: 0 });
  });
});

describe('hold confirmed by the annotation', () => {
  it('a Reservation annotated before it is booked is confirmed in the same reconcile', async () => {
    cr('annotated', { leaseSeconds: 300 }, { [CONFIRM_ANNOTATION]: 'true' });
    await reconciler.reconcile('team-a/annotated');
    const id = status('annotated').reservationId!;
    expect(await stateRow(id)).toEqual({ state: 'confirmed', lease: null });
    expect(status('annotated')).toMatchObject({ phase: 'Reserved', state: 'confirmed', confirmedBy: `annotation ${CONFIRM_ANNOTATION}` });
    expect(reservedCondition('annotated')).toMatchObject({ reason: 'Confirmed' });
    expect(eventsOf('annotated')).toEqual(['Confirmed']);
    await f.ctx.ledger.release(id);
  });

  it('annotated later (kubectl annotate): held, then confirmed, the lease removed from status; another value asks nothing', async () => {
    cr('later', { leaseSeconds: 300 }, { [CONFIRM_ANNOTATION]: 'yes' });
    await reconciler.reconcile('team-a/later');
    const id = status('later').reservationId!;
    expect(status('later')).toMatchObject({ state: 'held', leaseExpiresAt: expect.any(String) });
    expect((await stateRow(id)).state).toBe('held');

    const r = f.informers.reservations.get('team-a/later')!;
    f.informers.reservations.put({ ...r, metadata: { ...r.metadata, annotations: { [CONFIRM_ANNOTATION]: 'true' } } });
    await reconciler.reconcile('team-a/later');
    expect(await stateRow(id)).toEqual({ state: 'confirmed', lease: null });
    expect(status('later')).toMatchObject({ state: 'confirmed', confirmedBy: `annotation ${CONFIRM_ANNOTATION}` });
    expect(status('later').leaseExpiresAt).toBeUndefined();
    expect(eventsOf('later')).toEqual(['Held', 'Confirmed']);
    await f.ctx.ledger.release(id);
  });
});

// Last: these move the database's clock.
describe('an unconfirmed hold expires at its lease', () => {
  it('no pod and no annotation: expired at the lease, its atoms bookable again; a pod after the lease is refused', async () => {
    // Fill all 8 GPUs (4 nodes × 2): the hold's 2 are the only ones left, so a new booking can fit only once they are free.
    cr('unconfirmed', { leaseSeconds: 30 });
    await reconciler.reconcile('team-a/unconfirmed');
    const id = status('unconfirmed').reservationId!;
    const node = status('unconfirmed').allocations![0]!.node;
    const fillers: string[] = [];
    for (;;) {
      const o = await f.ctx.ledger.reserve(reservation(poolId, { tenantId: 'ops', devices: [{ class: 'gpu', count: 2 }] }), t.clock.now());
      if (!o.ok) break;
      fillers.push(o.reservation.id);
    }
    // By hand: 8 GPUs, 2 confirmed for the first test's Reservation, 2 in this hold, so 2 fillers of 2 GPUs.
    expect(fillers).toHaveLength(2);
    const again = () => f.ctx.ledger.reserve(reservation(poolId, { tenantId: 'ops', devices: [{ class: 'gpu', count: 2 }] }), t.clock.now());
    expect(await again()).toMatchObject({ ok: false, code: 'NO_CAPACITY' });

    // Before the lease runs out nothing expires.
    expect(await f.ctx.ledger.expireLeases()).toEqual([]);
    await advanceClock(t.db, 31_000);
    await t.clock.sync();
    // After it, a pod of the hold is refused at bind (the lease is checked on the database's clock) ...
    const late = await bindPod(id, node);
    expect(late.error).toMatch(/hold of reservation .* ran out at .* before it was confirmed/);
    expect(kube.bound.map((b) => b.name)).not.toContain(late.pod.split('/')[1]);
    // ... and the leader's expiry releases it: state expired, its bookings end at the database's now.
    expect(await f.ctx.ledger.expireLeases()).toEqual([id]);
    expect((await stateRow(id)).state).toBe('expired');
    const { rows } = await t.db.query<{ live: number }>(
      `SELECT count(*) FILTER (WHERE upper(b.during) > compute_now())::int AS live
       FROM device_bookings b JOIN allocations a ON a.id = b.allocation_id WHERE a.reservation_id = $1`,
      [id],
    );
    expect(rows[0]!.live).toBe(0);
    // Its atoms are bookable again: the same 2 GPUs on the same node.
    const after = await again();
    expect(after).toMatchObject({ ok: true, reservation: { allocations: [{ nodeId: node }] } });

    // The reconciler mirrors Expired.
    await reconciler.reconcile('team-a/unconfirmed');
    expect(status('unconfirmed')).toMatchObject({ phase: 'Expired', state: 'expired' });
    expect(status('unconfirmed').leaseExpiresAt).toBeUndefined();
    expect(reservedCondition('unconfirmed')).toMatchObject({ status: 'False', reason: 'Expired' });
    expect(eventsOf('unconfirmed')).toEqual(['Held', 'Expired']);
    for (const x of [...fillers, (after as { reservation: { id: string } }).reservation.id]) await f.ctx.ledger.release(x);
  });

  it('an annotation that comes after the lease ran out confirms nothing', async () => {
    cr('too-late', { leaseSeconds: 30 });
    await reconciler.reconcile('team-a/too-late');
    const id = status('too-late').reservationId!;
    await advanceClock(t.db, 31_000);
    await t.clock.sync();
    const r = f.informers.reservations.get('team-a/too-late')!;
    f.informers.reservations.put({ ...r, metadata: { ...r.metadata, annotations: { [CONFIRM_ANNOTATION]: 'true' } } });
    await reconciler.reconcile('team-a/too-late');
    expect((await stateRow(id)).state).toBe('held');
    expect(await f.ctx.ledger.confirm(id)).toEqual({ error: `cannot confirm reservation ${id} in state held (lease ran out)` });
    expect(await f.ctx.ledger.expireLeases()).toEqual([id]);
    await reconciler.reconcile('team-a/too-late');
    expect(status('too-late')).toMatchObject({ phase: 'Expired', state: 'expired' });
  });
});
