// Spot preemption (ADR 0017) at the database level: a regular Reservation that fits only by displacing two spot ones
// gets their atoms from one deadline (now + the notice), booked in the transaction that truncates theirs there; the
// leader's pass annotates their pods with the deadline; the stopper evicts them ahead of it, their grace capped by the
// pool (docs/booking-end.md), and at the deadline (the test clock) the pass ends them; their Reservations show the PreemptionNotice condition, its Event, and then Released (Preempted).
// Spot never displaces regular work; regular never displaces regular; spot never displaces spot. Invariants after.
import { beforeAll, describe, expect, it } from 'vitest';
import { preemptionPass } from '../../src/controller/preemption.ts';
import { createStopper } from '../../src/controller/stopper.ts';
import { ReservationReconciler } from '../../src/controller/reservation/reconciler.ts';
import { PREEMPTION_NOTICE } from '../../src/controller/reservation/status.ts';
import { type Reservation } from '../../src/kube/types.ts';
import { advanceClock } from '../../src/db/clock.ts';
import { Ledger } from '../../src/db/ledger.ts';
import type { ExtenderKube } from '../../src/extender/kube.ts';
import { ExtenderService } from '../../src/extender/service.ts';
import { silentLogger } from '../../src/log.ts';
import { makeNode, makePool, reservation } from '../support/builders.ts';
import { fakeController, type FakeController } from '../support/controller-context.ts';
import { useTestDatabase } from '../support/db.ts';
import { checkInvariants, CLEAN } from '../support/invariants.ts';
import { PREEMPT_AT_ANNOTATION, RESERVATION_FINALIZER, TENANT_LABEL, reservationResourceName } from '../../src/core/names.ts';

const t = useTestDatabase();
const NOTICE_MS = 120_000; // the Ledger's default notice (BETTER_COMPUTE_SPOT_NOTICE: 2m)

interface FakePod {
  metadata: { name: string; namespace: string; uid: string };
  spec: { terminationGracePeriodSeconds?: number; containers: { name: string; resources?: { limits?: Record<string, string> } }[] };
}

/** Records what the preemption loop asks of Kubernetes. */
class FakeKube implements ExtenderKube {
  pods = new Map<string, FakePod>();
  annotated: { pod: string; annotations: Record<string, string> }[] = [];
  evicted: { pod: string; graceSeconds: number }[] = [];
  async getPod(namespace: string, name: string) {
    return this.pods.get(`${namespace}/${name}`);
  }
  async nodeAllocatable() {
    return {};
  }
  async namespaceLabels(name: string): Promise<Record<string, string>> {
    return name === 'team-a' ? { [TENANT_LABEL]: 'acme' } : {};
  }
  async annotatePod(namespace: string, name: string, annotations: Record<string, string>) {
    this.annotated.push({ pod: `${namespace}/${name}`, annotations });
  }
  async bindPod() {}
  async evictPod(namespace: string, name: string, graceSeconds: number) {
    this.evicted.push({ pod: `${namespace}/${name}`, graceSeconds });
  }
  async deletePod() {
    throw new Error('not expected: no eviction is refused here');
  }
}

let f: FakeController;
let reconciler: ReservationReconciler;
let kube: FakeKube;
let extender: ExtenderService;
let poolId: string;

beforeAll(async () => {
  f = await fakeController(t);
  // A limited key (16 GPUs), so every booking and truncation rewrites its used/reserved counters.
  poolId = await makePool('sp').owner('ops').offer('acme', { gpu: 16 }).create(t.db);
  for (const n of ['sp-n1', 'sp-n2']) await makeNode(n).gpus(4).create(t.db, poolId);
  f.ctx.poolIds.set('sp', poolId);
  f.informers.pools.put({ metadata: { name: 'sp' }, spec: { nodeSelector: { pool: 'sp' }, ownerTenant: 'ops' }, status: { poolId } });
  f.informers.namespaces.put({ metadata: { name: 'team-a', labels: { [TENANT_LABEL]: 'acme' } } });
  reconciler = new ReservationReconciler(f.ctx);
  kube = new FakeKube();
  extender = new ExtenderService({ tenancyByName: true, db: t.db, ledger: new Ledger(t.db), clock: t.clock, kube, log: silentLogger });
});

const cr = (name: string, spec: Partial<Reservation['spec']>): Reservation =>
  f.informers.reservations.put({
    apiVersion: 'bettercompute.io/v1alpha1',
    kind: 'Reservation',
    metadata: { namespace: 'team-a', name, uid: `uid-${name}`, generation: 1, resourceVersion: '1', finalizers: [RESERVATION_FINALIZER] },
    spec: { pool: 'sp', devices: [{ class: 'gpu', count: 2 }], duration: '1h', ...spec },
  });
const status = (name: string) => f.informers.reservations.get(`team-a/${name}`)!.status!;
const condition = (name: string, type: string) => status(name).conditions?.find((c) => c.type === type);
const eventsOf = (name: string) => f.events.filter((e) => e.key === `team-a/${name}`).map((e) => e.reason);
const atomsOf = (name: string) => status(name).allocations!.flatMap((a) => a.atoms).sort();
const pass = () => preemptionPass({ ledger: f.ctx.ledger, kube, log: silentLogger, wake: () => undefined });

async function bindPod(reservationId: string, node: string, name: string, grace?: number) {
  const pod: FakePod = {
    metadata: { name, namespace: 'team-a', uid: `spot-pod-${name}` },
    spec: {
      ...(grace !== undefined ? { terminationGracePeriodSeconds: grace } : {}),
      containers: [{ name: 'main', resources: { limits: { [reservationResourceName(reservationId)]: '1' } } }],
    },
  };
  kube.pods.set(`team-a/${name}`, pod);
  await t.clock.sync();
  const r = await extender.bind({ PodName: name, PodNamespace: 'team-a', PodUID: pod.metadata.uid, Node: node });
  return r.Error;
}

/** The victims' bookings as the ledger keeps them: upper bound of each (ms), per reservation. */
async function bookingEnds(reservationId: string): Promise<number[]> {
  const { rows } = await t.db.query<{ e: number }>(
    `SELECT (extract(epoch FROM upper(b.during)) * 1000)::float8 AS e FROM device_bookings b JOIN allocations a ON a.id = b.allocation_id
     WHERE a.reservation_id = $1 ORDER BY b.device_id`,
    [reservationId],
  );
  return rows.map((r) => r.e);
}

describe('a regular reservation displacing two spot ones', () => {
  it('notices with one deadline, bookings cut there, the freed atoms booked from there, pods stopped ahead of the deadline', async () => {
    // A regular one takes a whole node; two spot ones (2 GPUs each) fill the other. The pool is full.
    cr('steady', { devices: [{ class: 'gpu', count: 4 }] });
    await reconciler.reconcile('team-a/steady');
    cr('spot-a', { spot: true });
    await reconciler.reconcile('team-a/spot-a');
    cr('spot-b', { spot: true });
    await reconciler.reconcile('team-a/spot-b');
    for (const n of ['steady', 'spot-a', 'spot-b']) expect(status(n)).toMatchObject({ phase: 'Reserved' });
    const spotNode = status('spot-a').allocations![0]!.node;
    expect(status('spot-b').allocations![0]!.node).toBe(spotNode);
    const freed = [...atomsOf('spot-a'), ...atomsOf('spot-b')].sort();
    const [idA, idB] = [status('spot-a').reservationId!, status('spot-b').reservationId!];
    expect(await bindPod(idA, spotNode, 'spot-a-0', 45)).toBe('');
    expect(await bindPod(idB, spotNode, 'spot-b-0')).toBe('');

    // Preview of the regular request: both spot reservations would get a notice; it would start after the notice.
    const before = t.clock.now();
    const preview = await f.ctx.ledger.preview(reservation(poolId, { devices: [{ class: 'gpu', count: 4 }] }), before);
    expect(preview).toMatchObject({ ok: false, preemptible: { count: 2, start: before + NOTICE_MS } });

    cr('urgent', { devices: [{ class: 'gpu', count: 4 }] });
    await reconciler.reconcile('team-a/urgent');
    const urgent = status('urgent');
    expect(urgent).toMatchObject({ phase: 'Reserved', atoms: 4 });
    // Exactly the freed atoms, never the regular one's.
    expect(atomsOf('urgent')).toEqual(freed);

    const a = (await f.ctx.ledger.get(idA))!;
    const b = (await f.ctx.ledger.get(idB))!;
    const urgentView = (await f.ctx.ledger.get(urgent.reservationId!))!;
    // One deadline for both, the notice ahead of the booking's time; the regular booking starts at it.
    const deadline = a.preemption!.at;
    expect(b.preemption).toEqual({ at: deadline, by: urgentView.id });
    expect(a.preemption!.by).toBe(urgentView.id);
    expect(deadline - before).toBeGreaterThanOrEqual(NOTICE_MS - 1);
    expect(urgentView.start).toBe(deadline);
    expect(urgentView.end).toBe(deadline + 3_600_000);
    expect(await bookingEnds(idA)).toEqual([deadline, deadline]);
    expect(await bookingEnds(idB)).toEqual([deadline, deadline]);
    expect(await checkInvariants(t.db)).toEqual(CLEAN);
    // Under notice a victim takes no new pod: its atoms belong to the regular reservation from the deadline.
    expect(await bindPod(idA, spotNode, 'spot-a-late')).toMatch(/holds 0 atoms/);
    kube.pods.delete('team-a/spot-a-late');

    // The leader's pass delivers the notices: each victim's pod annotated with the deadline; nothing evicted yet.
    const deadlineIso = new Date(deadline).toISOString();
    const first = await pass();
    expect(first).toEqual({ notified: [idA, idB].sort(), ended: [] });
    expect(kube.annotated.sort((x, y) => (x.pod < y.pod ? -1 : 1))).toEqual([
      { pod: 'team-a/spot-a-0', annotations: { [PREEMPT_AT_ANNOTATION]: deadlineIso } },
      { pod: 'team-a/spot-b-0', annotations: { [PREEMPT_AT_ANNOTATION]: deadlineIso } },
    ]);
    expect(await pass()).toEqual({ notified: [], ended: [] });

    // Their Reservations: the PreemptionNotice condition with the deadline, the deadline in status, a Warning Event.
    for (const n of ['spot-a', 'spot-b']) {
      await reconciler.reconcile(`team-a/${n}`);
      expect(condition(n, PREEMPTION_NOTICE)).toMatchObject({ status: 'True', reason: 'Preempted', message: expect.stringContaining(deadlineIso) });
      expect(status(n)).toMatchObject({ phase: 'Reserved', preemptAt: deadlineIso });
      expect(eventsOf(n)).toEqual(['Reserved', PREEMPTION_NOTICE]);
      expect(f.events.find((e) => e.key === `team-a/${n}` && e.reason === PREEMPTION_NOTICE)).toMatchObject({ type: 'Warning' });
    }

    // The pool's stop grace (30 s) plus the slack (10 s) before the deadline, and not earlier: the stopper evicts their
    // pods, the one that names 45 s capped at 30 (docs/booking-end.md), once each. The victims live on to the deadline.
    const stop = createStopper({ db: t.db, kube, log: silentLogger });
    await advanceClock(t.db, NOTICE_MS - 50_000);
    expect(await stop()).toEqual([]);
    await advanceClock(t.db, 10_000);
    const stopped = await stop();
    expect(stopped.map((p) => `${p.pod} ${p.how} ${p.graceSeconds}`).sort()).toEqual(['team-a/spot-a-0 evicted 30', 'team-a/spot-b-0 evicted 30']);
    expect(kube.evicted.map((e) => e.graceSeconds)).toEqual([30, 30]);
    expect(await stop()).toEqual([]);
    await t.clock.sync();
    expect(await pass()).toEqual({ notified: [], ended: [] });

    // At the deadline the victims end.
    await advanceClock(t.db, 41_000);
    await t.clock.sync();
    const due = await pass();
    expect(due.ended.sort()).toEqual([idA, idB].sort());
    expect(await pass()).toEqual({ notified: [], ended: [] });
    for (const n of ['spot-a', 'spot-b']) {
      await reconciler.reconcile(`team-a/${n}`);
      expect(status(n)).toMatchObject({ phase: 'Released', state: 'released', preemptAt: deadlineIso });
      expect(condition(n, 'Reserved')).toMatchObject({ status: 'False', reason: 'Preempted' });
    }
    // History kept: the victims' booking rows remain, ending at the deadline.
    expect(await bookingEnds(idA)).toEqual([deadline, deadline]);
    // Time passed the deadline (bookings ended, one began), which counters learn from the leader's periodic rebuilds,
    // as when any booking ends by itself.
    await t.db.query('SELECT bc_rebuild_rollup(), bc_rebuild_quotas()');
    expect(await checkInvariants(t.db)).toEqual(CLEAN);
  });
});

describe('what is never displaced', () => {
  let other: string;
  beforeAll(async () => {
    other = await makePool('sp2').owner('ops').offer('acme', { gpu: 16 }).create(t.db);
    await makeNode('sp2-n1').gpus(4).create(t.db, other);
  });
  const reserve = async (over: Parameters<typeof reservation>[1]) => f.ctx.ledger.reserve(reservation(other, over), t.clock.now());

  it('spot never displaces regular work, and regular never displaces regular', async () => {
    const regular = await reserve({ devices: [{ class: 'gpu', count: 4 }] });
    expect(regular.ok).toBe(true);
    expect(await reserve({ devices: [{ class: 'gpu', count: 2 }], spot: true })).toMatchObject({ ok: false, code: 'NO_CAPACITY' });
    expect(await reserve({ devices: [{ class: 'gpu', count: 2 }] })).toMatchObject({ ok: false, code: 'NO_CAPACITY' });
    if (!regular.ok) return;
    const view = (await f.ctx.ledger.get(regular.reservation.id))!;
    expect(view.preemption).toBeUndefined();
    expect(view.allocations.flatMap((x) => x.atoms)).toHaveLength(4);
    expect(await f.ctx.ledger.release(regular.reservation.id)).toBe(true);
    expect(await checkInvariants(t.db)).toEqual(CLEAN);
  });

  it('spot never displaces spot', async () => {
    const s = await reserve({ devices: [{ class: 'gpu', count: 4 }], spot: true });
    expect(s.ok).toBe(true);
    expect(await reserve({ devices: [{ class: 'gpu', count: 1 }], spot: true })).toMatchObject({ ok: false, code: 'NO_CAPACITY' });
    if (s.ok) expect((await f.ctx.ledger.get(s.reservation.id))!.preemption).toBeUndefined();
    expect(await checkInvariants(t.db)).toEqual(CLEAN);
  });
});

describe('racing for the same spot atoms', () => {
  it('two regular requests and a third party at once: one preemption wins, nobody else gets the freed atoms', async () => {
    const race = await makePool('sp3').owner('ops').offer('acme', { gpu: 16 }).create(t.db);
    await makeNode('sp3-n1').gpus(4).create(t.db, race);
    const setup = new Ledger(t.db);
    for (let i = 0; i < 2; i++) {
      expect((await setup.reserve(reservation(race, { devices: [{ class: 'gpu', count: 2 }], spot: true }), t.clock.now())).ok).toBe(true);
    }
    // Separate ledgers (as separate replicas): nothing shared but the database.
    const now = t.clock.now();
    const [r1, r2, r3] = await Promise.all([
      new Ledger(t.db).reserve(reservation(race, { devices: [{ class: 'gpu', count: 4 }] }), now),
      new Ledger(t.db).reserve(reservation(race, { devices: [{ class: 'gpu', count: 4 }] }), now),
      new Ledger(t.db).reserve(reservation(race, { devices: [{ class: 'gpu', count: 2 }], start: now + NOTICE_MS + 60_000 }), now),
    ]);
    // Whoever commits first holds the node's atoms (or two of them) from its deadline: the others no longer fit, and the
    // victims' bookings end at that deadline, before any later request's own deadline, so they are refused outright.
    const winners = [r1, r2, r3].filter((r) => r.ok);
    expect(winners).toHaveLength(1);
    for (const r of [r1, r2, r3]) if (!r.ok) expect(r.code).toBe('NO_CAPACITY');
    const { rows } = await t.db.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM reservations WHERE pool_id = $1 AND spot AND preempt_at IS NOT NULL`,
      [race],
    );
    // A 4-GPU winner displaced both spot reservations; the 2-GPU one, only one of them (2 atoms are the fewest).
    expect(rows[0]!.n).toBe(winners[0] === r3 ? 1 : 2);
    expect(await checkInvariants(t.db)).toEqual(CLEAN);
  });
});

describe('a spot reservation already preempted', () => {
  it('is not chosen again: a second request that would need it is refused at once, not replanned until contended', async () => {
    const once = await makePool('sp4').owner('ops').offer('acme', { gpu: 16 }).create(t.db);
    await makeNode('sp4-n1').gpus(4).create(t.db, once);
    const before = t.clock.now();
    const victim = await new Ledger(t.db).reserve(reservation(once, { devices: [{ class: 'gpu', count: 4 }], spot: true }), before);
    if (!victim.ok) throw new Error(victim.message);
    const first = await new Ledger(t.db).reserve(reservation(once, { devices: [{ class: 'gpu', count: 2 }] }), before);
    expect(first).toMatchObject({ ok: true });
    expect((await f.ctx.ledger.get(victim.reservation.id))!.preemption).toBeDefined();
    // Asked as of `before`, its window starts before the first one's deadline, where the victim's bookings still run
    // on the two atoms the first one left: those bookings are the victim's last, not preemptible again.
    const second = await new Ledger(t.db).reserve(reservation(once, { devices: [{ class: 'gpu', count: 2 }] }), before);
    expect(second).toMatchObject({ ok: false, code: 'NO_CAPACITY', replans: 0 });
    expect(await checkInvariants(t.db)).toEqual(CLEAN);
  });
});

describe('the one release function (migration 0013)', () => {
  it('cuts at a given time, never in the past; without one it cuts now', async () => {
    const poolId = await makePool('rel-at').owner('acme').create(t.db);
    await makeNode('rel-at-1').gpus(1).create(t.db, poolId);
    const ledger = new Ledger(t.db);
    const out = await ledger.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 1 }], duration: 3600 }), t.clock.now());
    if (!out.ok) throw new Error(out.message);
    const alloc = out.reservation.allocations[0]!.id;
    await expect(t.db.query(`SELECT bc_release_allocations($1, compute_now() - interval '1 second')`, [[alloc]])).rejects.toThrow(
      /release time .* is in the past/,
    );
    const cut = t.clock.now() + 60_000;
    await t.db.query('SELECT bc_release_allocations($1, to_timestamp($2 / 1000.0))', [[alloc], cut]);
    const { rows } = await t.db.query<{ released: number; upper: number }>(
      `SELECT extract(epoch FROM a.released_at) * 1000 AS released, extract(epoch FROM upper(b.during)) * 1000 AS upper
       FROM allocations a JOIN device_bookings b ON b.allocation_id = a.id WHERE a.id = $1`,
      [alloc],
    );
    expect(rows.map((r) => [Number(r.released), Number(r.upper)])).toEqual([[cut, cut]]);
    // Released once: a second release (now) changes nothing.
    expect((await t.db.query<{ n: number }>('SELECT bc_release_allocations($1) AS n', [[alloc]])).rows[0]!.n).toBe(0);
  });
});
