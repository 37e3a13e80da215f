import { describe, expect, it } from 'vitest';
import { bookedReservationName, bookingFor, decideLiveCheck, decideReservationCheck, DEFAULT_KUEUE_DURATION_SECONDS, workloadLifecycle, type PoolFacts, MISSING_RESERVATION_GRACE_MS, podSetDemand, reservationNameOf, WorkloadSchema, type ReservationFacts, type Workload } from './kueue-check.ts';
import { POOL_LABEL, RESERVATION_LABEL } from './names.ts';

const NOW = Date.UTC(2026, 11, 3, 12, 0);
const MIN = 60_000;

/** A Workload builder: makeWorkload().label('train').podSet('main', 2, { gpu: 1 }).obj(). */
function makeWorkload(ns = 'team-a') {
  const labels: Record<string, string> = {};
  const podSets: unknown[] = [];
  let created = new Date(NOW - 1000).toISOString();
  const b = {
    label(name: string) {
      labels[RESERVATION_LABEL] = name;
      return b;
    },
    createdAt(ms: number) {
      created = new Date(ms).toISOString();
      return b;
    },
    podSet(name: string, count: number, gpus: Record<string, string | number> = {}, templateLabels: Record<string, string> = {}, init?: Record<string, string | number>) {
      const limits = Object.fromEntries(Object.entries(gpus).map(([k, v]) => [k === 'gpu' ? 'bettercompute.io/gpu' : `bettercompute.io/${k}`, v]));
      podSets.push({
        name,
        count,
        template: {
          metadata: { labels: templateLabels },
          spec: {
            containers: [{ name: 'main', resources: { limits: { cpu: '1', ...limits } } }],
            ...(init ? { initContainers: [{ name: 'init', resources: { requests: { 'bettercompute.io/gpu': init.gpu! } } }] } : {}),
          },
        },
      });
      return b;
    },
    obj(): Workload {
      return WorkloadSchema.parse({ metadata: { name: 'job-x-1a2b3', namespace: ns, labels, creationTimestamp: created }, spec: { podSets } });
    },
  };
  return b;
}

function reservation(o: Partial<ReservationFacts> & { start?: number; end?: number; phase?: string } = {}): ReservationFacts {
  return {
    namespace: o.namespace ?? 'team-a',
    name: o.name ?? 'train',
    tenant: 'tenant' in o ? o.tenant : 'team-a',
    deleting: o.deleting ?? false,
    devices: o.devices ?? [{ class: 'gpu', count: 2 }],
    windows: o.windows ?? [{ phase: 'phase' in o ? o.phase : 'Reserved', startMs: o.start ?? NOW - MIN, endMs: o.end ?? NOW + 60 * MIN }],
    ...(o.booked ? { booked: true } : {}),
    ...(o.preemptAtMs !== undefined ? { preemptAtMs: o.preemptAtMs } : {}),
    ...(o.degraded !== undefined ? { degraded: o.degraded } : {}),
  };
}

const decide = (workload: Workload, r: ReservationFacts | undefined, nowMs = NOW, namespaceTenant = 'team-a') =>
  decideReservationCheck({ workload, reservation: r, namespaceTenant, nowMs });

describe('the Reservation a Workload names', () => {
  it('is its own label (copied from the Job), else its pod templates’; two different names are refused', () => {
    expect(reservationNameOf(makeWorkload().label('a').podSet('main', 1).obj())).toEqual({ ok: true, name: 'a' });
    expect(reservationNameOf(makeWorkload().podSet('main', 1, {}, { [RESERVATION_LABEL]: 'b' }).obj())).toEqual({ ok: true, name: 'b' });
    expect(reservationNameOf(makeWorkload().label('a').podSet('main', 1, {}, { [RESERVATION_LABEL]: 'a' }).obj())).toEqual({ ok: true, name: 'a' });
    expect(reservationNameOf(makeWorkload().podSet('main', 1).obj())).toEqual({ ok: true, name: undefined });
    const two = reservationNameOf(makeWorkload().label('a').podSet('main', 1, {}, { [RESERVATION_LABEL]: 'b' }).obj());
    expect(two).toEqual({ ok: false, message: expect.stringContaining('more than one Reservation (a, b)') });
  });
});

describe('the devices a Workload’s pods ask for', () => {
  it('add up over containers and pods, by class; an init container needs its own at most', () => {
    const w = makeWorkload().podSet('leader', 1, { gpu: 1 }).podSet('workers', 3, { gpu: '2', 'gpu.mig': 1 }, {}, { gpu: 4 }).obj();
    const d = podSetDemand(w);
    expect(d.ok && Object.fromEntries(d.byClass)).toEqual({ gpu: 1 + 3 * 4, 'gpu.mig': 3 });
  });

  it('refuses a fraction of a device', () => {
    expect(podSetDemand(makeWorkload().podSet('main', 1, { gpu: '500m' }).obj())).toEqual({ ok: false, message: expect.stringContaining('only whole devices') });
  });
});

describe('the reservation admission check', () => {
  const w = () => makeWorkload().label('train').podSet('main', 2, { gpu: 1 }).obj();

  it('is Pending until the window starts, saying when, and looks again at the start', () => {
    const start = NOW + 2 * MIN;
    const d = decide(w(), reservation({ start }));
    expect(d).toEqual({ state: 'Pending', message: expect.stringContaining('starts at 2026-12-03T12:02:00Z: the Workload starts then'), recheckAtMs: start });
    // The same message a minute later: it is written only when it changes.
    expect(decide(w(), reservation({ start }), NOW + MIN).message).toBe(d.message);
  });

  it('is Ready from the start, with every pod set labelled with the Reservation', () => {
    const two = makeWorkload().label('train').podSet('leader', 1, { gpu: 1 }).podSet('workers', 1, { gpu: 1 }).obj();
    const d = decide(two, reservation({ start: NOW }));
    expect(d.state).toBe('Ready');
    expect(d.podSetUpdates).toEqual([
      { name: 'leader', labels: { [RESERVATION_LABEL]: 'train' } },
      { name: 'workers', labels: { [RESERVATION_LABEL]: 'train' } },
    ]);
    expect(d.message).toContain('live until 2026-12-03T13:00:00Z');
  });

  it('is Pending while the Reservation is not booked yet', () => {
    expect(decide(w(), reservation({ phase: 'Pending' }))).toMatchObject({ state: 'Pending', message: expect.stringContaining('to be booked (phase Pending)') });
    expect(decide(w(), reservation({ phase: undefined }))).toMatchObject({ state: 'Pending', message: expect.stringContaining('phase none yet') });
  });

  it('waits a grace for a Reservation that does not exist yet, then rejects', () => {
    const young = decide(w(), undefined);
    expect(young).toMatchObject({ state: 'Pending', message: expect.stringContaining('team-a/train to exist') });
    expect(young.recheckAtMs).toBeGreaterThan(NOW);
    const old = decide(makeWorkload().label('train').podSet('main', 1).createdAt(NOW - MISSING_RESERVATION_GRACE_MS).obj(), undefined);
    expect(old).toEqual({ state: 'Rejected', message: expect.stringContaining('no Reservation train in namespace team-a') });
  });

  it('rejects a Reservation of another tenant', () => {
    const d = decide(w(), reservation({ tenant: 'team-b' }));
    expect(d).toEqual({ state: 'Rejected', message: 'Reservation team-a/train is of tenant team-b; namespace team-a is of tenant team-a' });
  });

  it('rejects pods the Reservation cannot hold: too many, or another class', () => {
    const many = decide(makeWorkload().label('train').podSet('main', 3, { gpu: 1 }).obj(), reservation());
    expect(many).toEqual({ state: 'Rejected', message: expect.stringContaining('ask for 3 bettercompute.io/gpu in all, Reservation team-a/train holds 2') });
    const mig = decide(makeWorkload().label('train').podSet('main', 1, { 'gpu.mig': 1 }).obj(), reservation());
    expect(mig).toMatchObject({ state: 'Rejected', message: expect.stringContaining('holds 0 of class gpu.mig') });
    // Exactly what it holds is fine.
    expect(decide(makeWorkload().label('train').podSet('main', 2, { gpu: 1 }).obj(), reservation()).state).toBe('Ready');
  });

  it('rejects a Reservation that ended or is being deleted', () => {
    expect(decide(w(), reservation({ phase: 'Released' }))).toMatchObject({ state: 'Rejected', message: expect.stringContaining('has ended (Released)') });
    expect(decide(w(), reservation({ end: NOW }))).toMatchObject({ state: 'Rejected', message: expect.stringContaining('has ended') });
    expect(decide(w(), reservation({ deleting: true }))).toMatchObject({ state: 'Rejected', message: expect.stringContaining('being deleted') });
  });

  it('books for a Workload naming no Reservation (none booked yet), and rejects one naming two', () => {
    expect(decide(makeWorkload().podSet('main', 1).obj(), undefined)).toMatchObject({ state: 'Pending', needsBooking: true });
    // A Reservation that was not booked for it is not its.
    expect(decide(makeWorkload().podSet('main', 1).obj(), reservation())).toMatchObject({ needsBooking: true });
    expect(decide(makeWorkload().podSet('main', 1, { gpu: 1 }).obj(), reservation({ booked: true }))).toMatchObject({ state: 'Ready', message: expect.stringContaining('(booked for this Workload) is live') });
    expect(decide(makeWorkload().label('a').podSet('main', 1, {}, { [RESERVATION_LABEL]: 'b' }).obj(), reservation()).state).toBe('Rejected');
  });

  it('of a recurring Reservation, is Ready in an occurrence under way and Pending until the next one', () => {
    const occurrences = [
      { phase: 'Reserved', startMs: NOW - 10 * MIN, endMs: NOW - 5 * MIN },
      { phase: 'Reserved', startMs: NOW + 5 * MIN, endMs: NOW + 10 * MIN },
    ];
    const between = decide(w(), reservation({ windows: occurrences }));
    expect(between).toMatchObject({ state: 'Pending', recheckAtMs: NOW + 5 * MIN });
    expect(decide(w(), reservation({ windows: occurrences }), NOW + 6 * MIN)).toMatchObject({ state: 'Ready', message: expect.stringContaining('until 2026-12-03T12:10:00Z') });
  });
});

describe('a Reservation under a preemption notice or degraded', () => {
  const w = () => makeWorkload().label('train').podSet('main', 1, { gpu: 1 }).obj();
  it('is Rejected while preempted, and Pending while degraded, for a Workload not yet Ready', () => {
    expect(decide(w(), reservation({ preemptAtMs: NOW + 2 * MIN }))).toMatchObject({ state: 'Rejected', message: expect.stringContaining('is preempted: its atoms go at 2026-12-03T12:02:00Z') });
    expect(decide(w(), reservation({ degraded: '1 atom short' }))).toMatchObject({ state: 'Pending', message: expect.stringContaining('degraded (1 atom short): waiting for its repair') });
  });
});

describe('a Ready check looked at again', () => {
  it('goes to Retry when its Reservation is gone, being deleted, preempted, degraded or not live; else stays', () => {
    expect(decideLiveCheck(undefined, 'team-a/train', NOW)).toMatchObject({ state: 'Retry', message: expect.stringContaining('team-a/train is gone') });
    expect(decideLiveCheck(reservation({ deleting: true }), 'x', NOW)?.state).toBe('Retry');
    expect(decideLiveCheck(reservation({ preemptAtMs: NOW + MIN }), 'x', NOW)).toMatchObject({ state: 'Retry', message: expect.stringContaining('preempted') });
    expect(decideLiveCheck(reservation({ degraded: 'atoms lost' }), 'x', NOW)).toMatchObject({ state: 'Retry', message: expect.stringContaining('degraded (atoms lost)') });
    expect(decideLiveCheck(reservation({ phase: 'Released' }), 'x', NOW)).toMatchObject({ state: 'Retry', message: expect.stringContaining('not live any more (Released)') });
    expect(decideLiveCheck(reservation({ end: NOW }), 'x', NOW)?.state).toBe('Retry');
    expect(decideLiveCheck(reservation(), 'x', NOW)).toBeUndefined();
  });
});

describe('what a Workload that names no Reservation wants', () => {
  const pools: PoolFacts[] = [
    { name: 'a100', archived: false, ownerTenant: 'platform', offeredTo: ['team-a'], defaultDurationSeconds: 1800 },
    { name: 'old', archived: true, ownerTenant: 'platform', offeredTo: ['team-a'] },
    { name: 'h100', archived: false, ownerTenant: 'platform', offeredTo: ['team-b'] },
  ];
  const book = (w: Workload, o: { pools?: PoolFacts[]; tenant?: string; deadline?: number } = {}) =>
    bookingFor({ workload: w, pools: o.pools ?? pools, namespaceTenant: o.tenant ?? 'team-a', jobActiveDeadlineSeconds: o.deadline });

  it('books the pods’ GPUs on one node, or as a gang of alike pods in one placement domain', () => {
    expect(book(makeWorkload().podSet('main', 2, { gpu: 1 }).obj())).toEqual({
      ok: true,
      pool: 'a100',
      durationSeconds: 1800,
      durationFrom: 'Pool a100’s kueueDefaultDurationSeconds',
      shapes: [{ devices: [{ class: 'gpu', count: 2 }] }, { devices: [{ class: 'gpu', count: 1 }], gang: { size: 2 } }],
    });
    // One pod: one node. Pods that ask differently: no gang (it would book the largest for each).
    expect(book(makeWorkload().podSet('main', 1, { gpu: 4 }).obj())).toMatchObject({ shapes: [{ devices: [{ class: 'gpu', count: 4 }] }] });
    expect(book(makeWorkload().podSet('a', 1, { gpu: 1 }).podSet('b', 1, { gpu: 2 }).obj())).toMatchObject({ shapes: [{ devices: [{ class: 'gpu', count: 3 }] }] });
    // A pod set without GPUs (a Ray head) is no gang member.
    expect(book(makeWorkload().podSet('head', 1).podSet('workers', 3, { gpu: 2, 'gpu.mig': 1 }).obj())).toMatchObject({
      shapes: [{ devices: [{ class: 'gpu', count: 6 }, { class: 'gpu.mig', count: 3 }] }, { devices: [{ class: 'gpu', count: 2 }, { class: 'gpu.mig', count: 1 }], gang: { size: 3 } }],
    });
    // More than 64 of a class: only the gang.
    expect(book(makeWorkload().podSet('main', 9, { gpu: 8 }).obj())).toMatchObject({ shapes: [{ devices: [{ class: 'gpu', count: 8 }], gang: { size: 9 } }] });
    expect(book(makeWorkload().podSet('main', 1).obj())).toMatchObject({ ok: true, nothing: true });
  });

  it('lasts Kueue’s maximumExecutionTimeSeconds, else the Job’s activeDeadlineSeconds, else the Pool’s default, else an hour', () => {
    const base = makeWorkload().podSet('main', 1, { gpu: 1 }).obj();
    const max = { ...base, spec: { ...base.spec, maximumExecutionTimeSeconds: 600 } };
    expect(book(max, { deadline: 900 })).toMatchObject({ durationSeconds: 600, durationFrom: expect.stringContaining('maximumExecutionTimeSeconds') });
    expect(book(base, { deadline: 900 })).toMatchObject({ durationSeconds: 900, durationFrom: expect.stringContaining('activeDeadlineSeconds') });
    expect(book(base)).toMatchObject({ durationSeconds: 1800 });
    expect(book(base, { pools: [{ ...pools[0]!, defaultDurationSeconds: undefined }] })).toMatchObject({ durationSeconds: DEFAULT_KUEUE_DURATION_SECONDS, durationFrom: 'the default' });
  });

  it('books in the Pool the Job names, else the only one the tenant may book; refuses otherwise', () => {
    const named = makeWorkload().podSet('main', 1, { gpu: 1 }, { [POOL_LABEL]: 'h100' }).obj();
    expect(book(named, { tenant: 'team-b' })).toMatchObject({ ok: true, pool: 'h100' });
    expect(book(named)).toEqual({ ok: false, message: 'Pool h100 is not offered to tenant team-a' });
    const w = makeWorkload().podSet('main', 1, { gpu: 1 }).obj();
    expect(book(w, { tenant: 'team-c' })).toMatchObject({ ok: false, message: expect.stringContaining('no Pool is offered to tenant team-c') });
    const two = [...pools, { name: 'b200', archived: false, ownerTenant: 'team-a', offeredTo: [] }];
    expect(book(w, { pools: two })).toMatchObject({ ok: false, message: expect.stringContaining('may book 2 Pools (a100, b200): label the Job bettercompute.io/pool') });
    expect(book(makeWorkload().podSet('main', 1, { gpu: '0.5' }).obj())).toMatchObject({ ok: false, message: expect.stringContaining('only whole devices') });
  });
});

describe('a Workload’s lifecycle and its booking’s name', () => {
  const w = makeWorkload().podSet('main', 1).obj();
  const withStatus = (conditions: { type: string; status: string }[], active?: boolean): Workload => ({ ...w, spec: { ...w.spec, ...(active === undefined ? {} : { active }) }, status: { conditions } });
  it('releases for a finished, deactivated, evicted or deleted Workload', () => {
    expect(workloadLifecycle(w)).toBe('active');
    expect(workloadLifecycle(withStatus([{ type: 'Finished', status: 'True' }]))).toBe('finished');
    expect(workloadLifecycle(withStatus([], false))).toBe('deactivated');
    expect(workloadLifecycle(withStatus([{ type: 'Evicted', status: 'True' }]))).toBe('evicted');
    // Kueue sets Evicted False again when it reserves quota anew.
    expect(workloadLifecycle(withStatus([{ type: 'Evicted', status: 'False' }]))).toBe('active');
    expect(workloadLifecycle({ ...w, metadata: { ...w.metadata, deletionTimestamp: new Date(NOW).toISOString() } })).toBe('deleted');
  });

  it('names the booking after the Workload and its uid, a valid label value', () => {
    expect(bookedReservationName({ metadata: { name: 'job-train-1a2b3', uid: '0A1B2C3D-aaaa' } })).toBe('kq-job-train-1a2b3-0a1b2c3d');
    const long = bookedReservationName({ metadata: { name: `jobset.${'x'.repeat(200)}`, uid: 'ffffffff-0000' } });
    expect(long.length).toBeLessThanOrEqual(63);
    expect(long).toMatch(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/);
  });
});

