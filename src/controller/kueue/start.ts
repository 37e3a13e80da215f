// Starts the reservation AdmissionCheck on the leader, once Kueue is installed: the controller runs without Kueue, so
// this asks every `pollMs` whether Kueue's API is served, and only then starts informers on Workloads and
// AdmissionChecks, marks our AdmissionChecks Active (Kueue keeps a ClusterQueue that uses a check inactive until its
// controller does), and runs one work queue of Workload keys (check.ts). A Reservation that changes wakes the
// Workloads that name it, and a booked one the Workload it was booked for; a check's window start wakes its Workload by
// the queue's delay; a deleted Workload is reconciled once more to release what was booked for it. Stopped with the
// leadership.
import type { KubeConfig } from '@kubernetes/client-node';
import type { WindowFound } from '../../core/earliest-window.ts';
import type { ReservationCreateInput } from '../../core/schemas.ts';
import type { Fence } from '../../db/ledger.ts';
import type { Db } from '../../db/pool.ts';
import type { KubeClient } from '../../kube/client.ts';
import { Informer } from '../../kube/informer.ts';
import { KUEUE_GROUP, KUEUE_PLURALS, KUEUE_VERSION, KueueClient, type AdmissionCheckCR, type WorkloadCR } from '../../kube/kueue.ts';
import { findCondition, keyOf, type NamespaceCR, type PoolCR, type Reservation } from '../../kube/types.ts';
import { errorFields, type Logger } from '../../log.ts';
import { CHECK_CONTROLLER_NAME } from '../../core/names.ts';
import { fenced } from '../fence.ts';
import { WorkQueue } from '../queue.ts';
import { startWhenServed } from '../when-served.ts';
import { CheckReconciler, ourChecks } from './check.ts';

export interface KueueCheckOptions {
  kc: KubeConfig;
  kube: KubeClient;
  db: Db;
  fence: () => Fence;
  log: Logger;
  /** The controller's informers (every replica keeps them warm). */
  reservations: Informer<Reservation>;
  namespaces: Informer<NamespaceCR>;
  pools: Informer<PoolCR>;
  /** The poolId this leader put a Pool in the ledger under. */
  poolIdOf(poolName: string): string | undefined;
  /** The fenced Ledger's earliestWindow (reads only). */
  earliestWindow(inputs: readonly ReservationCreateInput[], nowMs: number, horizonMs: number): Promise<WindowFound>;
  nowMs: () => number;
  tenancyByName: boolean;
  watchTimeoutSeconds: number;
  watchLivenessMs: number;
  /** How often to ask whether Kueue is installed, until it is (default 30 s). */
  pollMs?: number;
}

interface Running {
  workloads: Informer<WorkloadCR>;
  checks: Informer<AdmissionCheckCR>;
  queue: WorkQueue;
  reconciler: CheckReconciler;
}

/** Starts waiting for Kueue; `stop()` ends the wait or the check. */
export function startKueueChecks(o: KueueCheckOptions): { stop(): Promise<void> } {
  const kueue = new KueueClient(o.kc);
  let saidForbidden = false;
  const work = startWhenServed<Running>({
    what: 'kueue check',
    served: async () => {
      const state = await kueue.installed();
      // Kueue without deploy/kueue's RBAC: said once, asked again (the RBAC may come).
      if (state === 'forbidden' && !saidForbidden) o.log.info('kueue check: Kueue is installed, but deploy/kueue is not (no RBAC on its objects); waiting for it');
      saidForbidden ||= state === 'forbidden';
      return state === 'installed';
    },
    start: () => start(o, kueue),
    stopRunning: async (r) => {
      await r.queue.stop();
      await Promise.all([r.workloads.stop(), r.checks.stop()]);
    },
    log: o.log,
    pollMs: o.pollMs,
  });
  // A Reservation that changes (booked, its window, deleted) wakes the Workloads naming it. The informer keeps its
  // handlers: this one does nothing once stopped.
  const wake = (r: Reservation) => {
    const running = work.running();
    if (!running) return;
    const owner = CheckReconciler.workloadKeyOf(r);
    if (owner) return running.queue.add(owner);
    const key = keyOf(r);
    for (const w of running.workloads.list()) if (CheckReconciler.reservationKeyOf(w) === key) running.queue.add(keyOf(w));
  };
  o.reservations.on({ add: wake, update: (_a, b) => wake(b), delete: wake });
  return { stop: () => work.stop() };
}

function start(o: KueueCheckOptions, kueue: KueueClient): Running {
  const informer = <T extends Parameters<typeof keyOf>[0]>(name: string, plural: string, list: () => Promise<{ items: T[] }>) =>
    new Informer<T>({ name, kc: o.kc, path: `/apis/${KUEUE_GROUP}/${KUEUE_VERSION}/${plural}`, list, log: o.log, watchTimeoutSeconds: o.watchTimeoutSeconds, livenessMs: o.watchLivenessMs });
  const workloads = informer<WorkloadCR>('kueue-workloads', KUEUE_PLURALS.workloads, kueue.listWorkloads);
  const checks = informer<AdmissionCheckCR>('kueue-admissionchecks', KUEUE_PLURALS.admissionChecks, kueue.listAdmissionChecks);
  const queue = new WorkQueue({ name: 'kueue-workloads', workers: 2, log: o.log, maxDelayMs: 30_000 });
  const reconciler = new CheckReconciler({
    workloads,
    admissionChecks: checks,
    reservations: o.reservations,
    namespaces: o.namespaces,
    pools: o.pools,
    applyCheck: (ns, name, check) => fenced(o.db, o.fence(), () => kueue.applyWorkloadCheck(ns, name, check)),
    poolIdOf: o.poolIdOf,
    earliestWindow: o.earliestWindow,
    createReservation: (r) => fenced(o.db, o.fence(), () => kueue.createReservation(r)),
    deleteReservation: (ns, name, uid) => fenced(o.db, o.fence(), () => kueue.deleteReservation(ns, name, uid)),
    jobActiveDeadlineSeconds: (ns, name) => kueue.jobActiveDeadlineSeconds(ns, name),
    nowMs: o.nowMs,
    tenancyByName: o.tenancyByName,
    log: o.log,
    event: async (w, e) => {
      try {
        await o.kube.event(w, 'Workload', e);
      } catch (err) {
        o.log.warn('writing an event failed', { object: keyOf(w), reason: e.reason, ...errorFields(err) });
      }
    },
  });
  const all = () => {
    for (const w of workloads.list()) queue.add(keyOf(w));
  };
  workloads.on({
    add: (w) => queue.add(keyOf(w)),
    update: (_a, b) => queue.add(keyOf(b)),
    delete: (w) => {
      reconciler.forget(w);
      queue.add(keyOf(w));
    },
  });
  checks.on({
    add: (c) => void activate(o, kueue, c).then(all),
    update: (_a, c) => void activate(o, kueue, c).then(all),
  });
  workloads.start();
  checks.start();
  void Promise.all([workloads.synced, checks.synced]).then(() => queue.start((k) => reconciler.reconcile(k)));
  o.log.info('kueue check started: Kueue is installed', { controllerName: CHECK_CONTROLLER_NAME });
  return { workloads, checks, queue, reconciler };
}

/** Marks one of our AdmissionChecks Active (once: an Active one is left alone). Never throws. */
async function activate(o: KueueCheckOptions, kueue: KueueClient, c: AdmissionCheckCR): Promise<void> {
  if (!ourChecks([c]).has(c.metadata.name)) return;
  const active = findCondition(c.status?.conditions, 'Active');
  if (active?.status === 'True' && active.observedGeneration === c.metadata.generation) return;
  try {
    await fenced(o.db, o.fence(), () =>
      kueue.applyAdmissionCheckActive(c.metadata.name, {
        type: 'Active',
        status: 'True',
        reason: 'Active',
        message: 'The better-compute controller answers this check: a Workload waits for the Reservation it names',
        lastTransitionTime: new Date(o.nowMs()).toISOString().replace(/\.\d+Z$/, 'Z'),
        ...(c.metadata.generation !== undefined ? { observedGeneration: c.metadata.generation } : {}),
      }),
    );
    o.log.info('kueue check: AdmissionCheck active', { admissionCheck: c.metadata.name });
  } catch (e) {
    o.log.warn('kueue check: could not mark the AdmissionCheck Active', { admissionCheck: c.metadata.name, ...errorFields(e) });
  }
}
