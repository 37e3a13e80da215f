import { describe, expect, it } from 'vitest';
import { FencedError } from '../../db/ledger.ts';
import type { Informer } from '../../kube/informer.ts';
import type { AdmissionCheckCR, CheckStateWrite, WorkloadCR } from '../../kube/kueue.ts';
import { keyOf, type KubeObject, type NamespaceCR, type Reservation } from '../../kube/types.ts';
import type { Logger } from '../../log.ts';
import { CheckReconciler, reservationFacts } from './check.ts';

const NOW = Date.UTC(2026, 11, 3, 12, 0);
const quiet: Logger = { debug: () => undefined, info: () => undefined, warn: () => undefined, error: () => undefined } as unknown as Logger;

/** An informer's cache, as the reconciler reads it (get by key, list). */
function cache<T extends KubeObject>(items: T[]): Informer<T> {
  const m = new Map(items.map((i) => [keyOf(i), i]));
  return { get: (k: string) => m.get(k), list: () => [...m.values()] } as unknown as Informer<T>;
}

function workload(state: string, o: { check?: string; reservation?: string } = {}): WorkloadCR {
  return {
    apiVersion: 'kueue.x-k8s.io/v1beta2',
    kind: 'Workload',
    metadata: { name: 'job-train-abc12', namespace: 'team-a', labels: { 'bettercompute.io/reservation': o.reservation ?? 'train' }, creationTimestamp: new Date(NOW - 1000).toISOString() },
    spec: { podSets: [{ name: 'main', count: 1, template: { spec: { containers: [{ name: 'c', resources: { limits: { 'bettercompute.io/gpu': '1' } } }] } } }] },
    status: { admissionChecks: [{ name: o.check ?? 'reservation', state, message: '', lastTransitionTime: new Date(NOW).toISOString() }] },
  };
}

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

function setup(w: WorkloadCR, r: Reservation[], opts: { fenced?: boolean } = {}) {
  const writes: { ns: string; name: string; check: CheckStateWrite }[] = [];
  const events: string[] = [];
  let now = NOW;
  const rec = new CheckReconciler({
    workloads: cache([w]),
    admissionChecks: cache(checks),
    reservations: cache(r),
    namespaces: cache<NamespaceCR>([{ metadata: { name: 'team-a', labels: { 'bettercompute.io/tenant': 'team-a' } } }]),
    applyCheck: async (ns, name, check) => {
      if (opts.fenced) throw new FencedError('fenced');
      writes.push({ ns, name, check });
    },
    nowMs: () => now,
    tenancyByName: false,
    log: quiet,
    event: async (_w, e) => void events.push(`${e.reason}: ${e.message}`),
  });
  return { rec, writes, events, at: (ms: number) => (now = ms) };
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

  it('answers only its own checks, and leaves Ready and Rejected as they are', async () => {
    for (const w of [workload('Pending', { check: 'provisioning' }), workload('Ready'), workload('Rejected')]) {
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
});
