import { describe, expect, it } from 'vitest';
import { FencedError } from '../../db/ledger.ts';
import type { Informer } from '../../kube/informer.ts';
import type { ReservationCreateInput } from '../../core/schemas.ts';
import type { WindowFound } from '../../core/earliest-window.ts';
import type { AdmissionCheckCR, CheckStateWrite, WorkloadCR } from '../../kube/kueue.ts';
import { keyOf, type KubeObject, type NamespaceCR, type PoolCR, type Reservation } from '../../kube/types.ts';
import type { Logger } from '../../log.ts';
import { CheckReconciler, reservationFacts } from './check.ts';

const NOW = Date.UTC(2026, 11, 3, 12, 0);
const quiet: Logger = { debug: () => undefined, info: () => undefined, warn: () => undefined, error: () => undefined } as unknown as Logger;

/** An informer's cache, as the reconciler reads it (get by key, list). */
function cache<T extends KubeObject>(items: T[]): Informer<T> {
  const m = new Map(items.map((i) => [keyOf(i), i]));
  return { get: (k: string) => m.get(k), list: () => [...m.values()] } as unknown as Informer<T>;
}

const UID = '0a1b2c3d-0000-4000-8000-000000000001';
const BOOKED = 'kq-job-train-abc12-0a1b2c3d';

function workload(state: string, o: { check?: string; reservation?: string | null; pods?: number; conditions?: { type: string; status: string }[]; maxSeconds?: number } = {}): WorkloadCR {
  return {
    apiVersion: 'kueue.x-k8s.io/v1beta2',
    kind: 'Workload',
    metadata: {
      name: 'job-train-abc12',
      namespace: 'team-a',
      uid: UID,
      labels: o.reservation === null ? {} : { 'bettercompute.io/reservation': o.reservation ?? 'train' },
      creationTimestamp: new Date(NOW - 1000).toISOString(),
      ownerReferences: [{ apiVersion: 'batch/v1', kind: 'Job', name: 'train', uid: 'job-uid' }],
    } as WorkloadCR['metadata'],
    spec: {
      podSets: [{ name: 'main', count: o.pods ?? 1, template: { spec: { containers: [{ name: 'c', resources: { limits: { 'bettercompute.io/gpu': '1' } } }] } } }],
      ...(o.maxSeconds ? { maximumExecutionTimeSeconds: o.maxSeconds } : {}),
    },
    status: {
      admissionChecks: [{ name: o.check ?? 'reservation', state, message: '', lastTransitionTime: new Date(NOW).toISOString() }],
      ...(o.conditions ? { conditions: o.conditions } : {}),
    },
  };
}

/** The Reservation the check booked for workload(): labelled with its uid. */
function bookedCR(startMs: number, o: { deleting?: boolean; status?: Reservation['status'] } = {}): Reservation {
  return {
    metadata: {
      name: BOOKED,
      namespace: 'team-a',
      uid: 'rsv-uid',
      labels: { 'bettercompute.io/kueue-workload-uid': UID },
      annotations: { 'bettercompute.io/kueue-workload': 'job-train-abc12' },
      ...(o.deleting ? { deletionTimestamp: new Date(NOW).toISOString() } : {}),
    },
    spec: { pool: 'p', devices: [{ class: 'gpu', count: 2 }], duration: 600 },
    status: o.status ?? { phase: 'Reserved', tenant: 'team-a', start: new Date(startMs).toISOString(), end: new Date(startMs + 600_000).toISOString() },
  };
}

const pool: PoolCR = { metadata: { name: 'p' }, spec: { nodeSelector: { pool: 'p' }, ownerTenant: 'platform', offerings: [{ tenant: 'team-a' }], kueueDefaultDurationSeconds: 900 } };

function reservationCR(startMs: number): Reservation {
  return {
    metadata: { name: 'train', namespace: 'team-a' },
    spec: { pool: 'p', devices: [{ class: 'gpu', count: 1 }], duration: '1h' },
    status: { phase: 'Reserved', tenant: 'team-a', start: new Date(startMs).toISOString(), end: new Date(startMs + 3_600_000).toISOString() },
  };
}

const checks: AdmissionCheckCR[] = [
  { metadata: { name: 'reservation' }, spec: { controllerName: 'bettercompute.io/reservation' } },
  { metadata: { name: 'provisioning' }, spec: { controllerName: 'kueue.x-k8s.io/provisioning-request' } },
];

function setup(w: WorkloadCR | undefined, r: Reservation[], opts: { fenced?: boolean; window?: WindowFound; jobDeadline?: number; exists?: boolean } = {}) {
  const writes: { ns: string; name: string; check: CheckStateWrite }[] = [];
  const events: string[] = [];
  const created: Reservation[] = [];
  const deleted: string[] = [];
  const asked: { inputs: readonly ReservationCreateInput[]; now: number; horizon: number }[] = [];
  let now = NOW;
  const rec = new CheckReconciler({
    workloads: cache(w ? [w] : []),
    admissionChecks: cache(checks),
    reservations: cache(r),
    namespaces: cache<NamespaceCR>([{ metadata: { name: 'team-a', labels: { 'bettercompute.io/tenant': 'team-a' } } }]),
    pools: cache([pool]),
    poolIdOf: (name) => (name === 'p' ? 'pool_0123456789abcdefghjkmnpqrs' : undefined),
    earliestWindow: async (inputs, n, horizon) => {
      asked.push({ inputs, now: n, horizon });
      return opts.window ?? { ok: true, start: NOW + 300_000, shape: 0, candidates: [], tried: 3 };
    },
    createReservation: async (x) => {
      if (opts.fenced) throw new FencedError('fenced');
      created.push(x);
      return !opts.exists;
    },
    deleteReservation: async (ns, name, uid) => void deleted.push(`${ns}/${name}@${uid}`),
    jobActiveDeadlineSeconds: async () => opts.jobDeadline,
    applyCheck: async (ns, name, check) => {
      if (opts.fenced) throw new FencedError('fenced');
      writes.push({ ns, name, check });
    },
    nowMs: () => now,
    tenancyByName: false,
    log: quiet,
    event: async (_w, e) => void events.push(`${e.reason}: ${e.message}`),
  });
  return { rec, writes, events, created, deleted, asked, at: (ms: number) => (now = ms) };
}

describe('the reservation check reconciler', () => {
  it('writes Pending with the start and looks again at the start, then Ready with the label', async () => {
    const start = NOW + 120_000;
    const s = setup(workload('Pending'), [reservationCR(start)]);
    const first = await s.rec.reconcile('team-a/job-train-abc12');
    expect(first).toEqual({ requeueAfterMs: 120_050 });
    expect(s.writes).toHaveLength(1);
    expect(s.writes[0]!.check).toMatchObject({ name: 'reservation', state: 'Pending', message: expect.stringContaining('starts at 2026-12-03T12:02:00Z') });
    expect(s.events[0]).toMatch(/^WaitingForReservation: /);
    s.at(start);
    expect(await s.rec.reconcile('team-a/job-train-abc12')).toBeUndefined();
    expect(s.writes[1]!.check).toMatchObject({ state: 'Ready', podSetUpdates: [{ name: 'main', labels: { 'bettercompute.io/reservation': 'train' } }] });
  });

  it('answers only its own checks, and leaves a live Ready, Retry and Rejected as they are', async () => {
    for (const w of [workload('Pending', { check: 'provisioning' }), workload('Ready'), workload('Retry'), workload('Rejected')]) {
      const s = setup(w, [reservationCR(NOW)]);
      await s.rec.reconcile('team-a/job-train-abc12');
      expect(s.writes).toEqual([]);
    }
  });

  it('does not write a state the Workload already shows', async () => {
    const s = setup(workload('Pending'), [reservationCR(NOW + 60_000)]);
    await s.rec.reconcile('team-a/job-train-abc12');
    const shown = workload('Pending');
    (shown.status!.admissionChecks as { message: string }[])[0]!.message = s.writes[0]!.check.message;
    const again = setup(shown, [reservationCR(NOW + 60_000)]);
    expect(await again.rec.reconcile('team-a/job-train-abc12')).toEqual({ requeueAfterMs: 60_050 });
    expect(again.writes).toEqual([]);
  });

  it('a fenced write is dropped: another replica leads', async () => {
    const s = setup(workload('Pending'), [reservationCR(NOW)], { fenced: true });
    await expect(s.rec.reconcile('team-a/job-train-abc12')).resolves.toBeUndefined();
  });

  it('finds the Workloads a Reservation wakes by the name they carry', () => {
    expect(CheckReconciler.reservationKeyOf(workload('Pending', { reservation: 'nightly' }))).toBe('team-a/nightly');
  });

  it('reads a recurring Reservation’s occurrences as its windows', () => {
    const r = reservationCR(NOW);
    r.status!.occurrences = [{ start: new Date(NOW).toISOString(), end: new Date(NOW + 1000).toISOString(), phase: 'Reserved' }];
    expect(reservationFacts(r).windows).toEqual([{ phase: 'Reserved', startMs: NOW, endMs: NOW + 1000 }]);
  });

  it('books a Reservation for a Workload that names none: at the earliest window, owned by the Workload, for its run time', async () => {
    const s = setup(workload('Pending', { reservation: null, pods: 2, maxSeconds: 1200 }), []);
    const res = await s.rec.reconcile('team-a/job-train-abc12');
    expect(s.writes.map((x) => x.check.message)).toEqual([expect.stringContaining('booked')]);
    expect(res).toEqual({ requeueAfterMs: 300_050 });
    expect(s.asked).toHaveLength(1);
    expect(s.asked[0]!.horizon).toBe(7 * 86_400_000);
    // One node first, then a gang of one pod per node in one placement domain.
    expect(s.asked[0]!.inputs.map((i) => [i.devices, i.gang, i.duration, i.tenantId, i.poolId])).toEqual([
      [[{ class: 'gpu', count: 2 }], undefined, 1200, 'team-a', 'pool_0123456789abcdefghjkmnpqrs'],
      [[{ class: 'gpu', count: 1 }], { size: 2 }, 1200, 'team-a', 'pool_0123456789abcdefghjkmnpqrs'],
    ]);
    expect(s.created).toHaveLength(1);
    const r = s.created[0]!;
    expect(r.metadata).toMatchObject({ name: BOOKED, namespace: 'team-a', labels: { 'bettercompute.io/kueue-workload-uid': UID } });
    expect((r.metadata as { ownerReferences?: unknown }).ownerReferences).toEqual([{ apiVersion: 'kueue.x-k8s.io/v1beta2', kind: 'Workload', name: 'job-train-abc12', uid: UID, controller: true }]);
    expect(r.spec).toEqual({ pool: 'p', devices: [{ class: 'gpu', count: 2 }], start: new Date(NOW + 300_000).toISOString(), duration: 1200 });
    expect(s.writes[0]!.check).toMatchObject({ state: 'Pending', message: expect.stringContaining(`booked Reservation team-a/${BOOKED} in Pool p, the earliest window: from at 2026-12-03T12:05:00Z for 1200 s`) });
    expect(s.events[0]).toMatch(/^ReservationBooked: booked Reservation/);
  });

  it('books a gang when that is the shape that fits, for the Job’s deadline, else the Pool’s default', async () => {
    const s = setup(workload('Pending', { reservation: null, pods: 2 }), [], { jobDeadline: 700, window: { ok: true, start: NOW, shape: 1, candidates: [], tried: 2 } });
    await s.rec.reconcile('team-a/job-train-abc12');
    expect(s.created[0]!.spec).toMatchObject({ devices: [{ class: 'gpu', count: 1 }], gang: { size: 2 }, duration: 700 });
    const d = setup(workload('Pending', { reservation: null }), []);
    await d.rec.reconcile('team-a/job-train-abc12');
    expect(d.created[0]!.spec.duration).toBe(900);
  });

  it('looks again when no window fits, and writes nothing over a booking the cache has not shown yet', async () => {
    const s = setup(workload('Pending', { reservation: null }), [], { window: { ok: false, reason: '0/2 nodes fit', tried: 4 } });
    expect(await s.rec.reconcile('team-a/job-train-abc12')).toEqual({ requeueAfterMs: 30_050 });
    expect(s.created).toEqual([]);
    expect(s.writes[0]!.check.message).toContain('no window in Pool p within 7 days fits the Workload\'s pods (0/2 nodes fit)');
    const e = setup(workload('Pending', { reservation: null }), [], { exists: true });
    await e.rec.reconcile('team-a/job-train-abc12');
    expect(e.writes).toEqual([]);
  });

  it('decides a booked Reservation as a named one: Pending until its window, then Ready with its label', async () => {
    const s = setup(workload('Pending', { reservation: null }), [bookedCR(NOW - 1000)]);
    await s.rec.reconcile('team-a/job-train-abc12');
    expect(s.created).toEqual([]);
    expect(s.writes[0]!.check).toMatchObject({ state: 'Ready', podSetUpdates: [{ name: 'main', labels: { 'bettercompute.io/reservation': BOOKED } }] });
    expect(s.writes[0]!.check.message).toContain('(booked for this Workload) is live');
  });

  it('a namesake not booked for the Workload is never taken', async () => {
    const other = bookedCR(NOW);
    other.metadata.labels = {};
    const s = setup(workload('Pending', { reservation: null }), [other]);
    await s.rec.reconcile('team-a/job-train-abc12');
    expect(s.created).toEqual([]);
    expect(s.writes[0]!.check).toMatchObject({ state: 'Rejected', message: expect.stringContaining('was not booked for this Workload') });
  });

  it('an evicted, deactivated, finished or deleted Workload releases its booked Reservation; a released one is waited for', async () => {
    for (const w of [
      workload('Pending', { reservation: null, conditions: [{ type: 'Evicted', status: 'True' }] }),
      workload('Ready', { reservation: null, conditions: [{ type: 'Finished', status: 'True' }] }),
      { ...workload('Ready', { reservation: null }), spec: { ...workload('Ready', { reservation: null }).spec, active: false } },
    ]) {
      const s = setup(w, [bookedCR(NOW)]);
      await s.rec.reconcile('team-a/job-train-abc12');
      expect(s.deleted).toEqual([`team-a/${BOOKED}@rsv-uid`]);
      expect(s.writes).toEqual([]);
      expect(s.events[0]).toMatch(/^ReservationReleased: /);
    }
    const gone = setup(undefined, [bookedCR(NOW)]);
    gone.rec.forget(workload('Ready', { reservation: null }));
    await gone.rec.reconcile('team-a/job-train-abc12');
    expect(gone.deleted).toEqual([`team-a/${BOOKED}@rsv-uid`]);
    // Queued again after the eviction: the old booking is still going, so nothing is booked yet.
    const again = setup(workload('Pending', { reservation: null }), [bookedCR(NOW, { deleting: true })]);
    expect(await again.rec.reconcile('team-a/job-train-abc12')).toEqual({ requeueAfterMs: 1_050 });
    expect(again.created).toEqual([]);
    expect(again.writes[0]!.check.message).toContain('waiting for the released Reservation');
  });

  it('moves a Ready check to Retry when its Reservation is deleted, preempted or degraded, and keeps it Ready otherwise', async () => {
    const preempted = reservationCR(NOW - 1000);
    preempted.status!.preemptAt = new Date(NOW + 120_000).toISOString();
    const degraded = reservationCR(NOW - 1000);
    degraded.status!.conditions = [{ type: 'Degraded', status: 'True', reason: 'AtomsLost', message: '1 atom short' }];
    const repaired = reservationCR(NOW - 1000);
    repaired.status!.conditions = [{ type: 'Degraded', status: 'False', reason: 'Repaired' }];
    const cases: [Reservation[], string | undefined][] = [
      [[], 'is gone'],
      [[preempted], 'is preempted (its atoms go at 2026-12-03T12:02:00Z)'],
      [[degraded], 'is degraded (1 atom short)'],
      [[repaired], undefined],
    ];
    for (const [rs, message] of cases) {
      const s = setup(workload('Ready'), rs);
      await s.rec.reconcile('team-a/job-train-abc12');
      if (!message) expect(s.writes).toEqual([]);
      else {
        expect(s.writes[0]!.check).toMatchObject({ state: 'Retry', message: expect.stringContaining(message) });
        expect(s.events[0]).toMatch(/^ReservationLost: /);
      }
    }
    const booked = setup(workload('Ready', { reservation: null }), []);
    await booked.rec.reconcile('team-a/job-train-abc12');
    expect(booked.writes[0]!.check).toMatchObject({ state: 'Retry', message: expect.stringContaining(`team-a/${BOOKED} is gone`) });
  });

  it('wakes the Workload a booked Reservation was booked for', () => {
    expect(CheckReconciler.workloadKeyOf(bookedCR(NOW))).toBe('team-a/job-train-abc12');
    expect(CheckReconciler.workloadKeyOf(reservationCR(NOW))).toBeUndefined();
  });
});
