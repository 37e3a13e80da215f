// The reservation AdmissionCheck's reconciler: one Workload key at a time, the decisions of src/core/kueue-check.ts on
// the informers' snapshot (the Workload, our AdmissionChecks, the Reservation it names or the one booked for it, the
// Pools, its namespace's tenant) and the ledger's clock, then the writes: our entry of the Workload's
// status.admissionChecks, and for a Workload that names no Reservation the Reservation booked for it (created at the
// earliest window, owned by the Workload) and its release. Every write is fenced (a deposed leader's write fails at the
// fence check before it is sent: start.ts). Pending entries are decided; Ready ones are looked at again and go to Retry
// when their Reservation can no longer carry them (Kueue then evicts and requeues the Workload); Retry and Rejected
// are Kueue's to act on.
import { bookedMessage, bookedReservationName, bookingFor, currentCheck, decideLiveCheck, decideReservationCheck, KUEUE_BOOKING_HORIZON_MS, noWindowMessage, podSetDemand, RECHECK_NO_WINDOW_MS, reservationNameOf, workloadLifecycle, WorkloadSchema, type BookingShape, type CheckDecision, type PoolFacts, type ReservationFacts, type ReservationWindow, type Workload } from '../../core/kueue-check.ts';
import type { WindowFound } from '../../core/earliest-window.ts';
import type { ReservationCreateInput } from '../../core/schemas.ts';
import { ValidationError } from '../../core/schemas.ts';
import { FencedError } from '../../db/ledger.ts';
import type { Informer } from '../../kube/informer.ts';
import { KUEUE_API_VERSION, type AdmissionCheckCR, type CheckStateWrite, type WorkloadCR } from '../../kube/kueue.ts';
import type { EventInput } from '../../kube/client.ts';
import { findCondition, namespaceTenant, noTenantMessage, type NamespaceCR, type PoolCR, type Reservation } from '../../kube/types.ts';
import type { Logger } from '../../log.ts';
import type { ReconcileResult } from '../queue.ts';
import { toCreateInput } from '../reservation/reconciler.ts';
import { API_VERSION, BOOKED_FOR_ANNOTATION, BOOKED_FOR_UID_LABEL, CHECK_CONTROLLER_NAME } from '../../core/names.ts';

const ms = (t: string | undefined) => (t ? new Date(t).getTime() : undefined);
const isoS = (t: number) => new Date(t).toISOString().replace(/\.\d+Z$/, 'Z');
/** How soon a Workload waiting for its released Reservation to go (or for its Pool to reach the ledger) looks again. */
const RECHECK_SOON_MS = 1_000;

/** What the check reads of a Reservation: its devices, its tenant, its window or recurring windows, its troubles. */
export function reservationFacts(r: Reservation, booked = false): ReservationFacts {
  const st = r.status;
  const windows: ReservationWindow[] = st?.occurrences?.length
    ? st.occurrences.map((o) => ({ phase: o.phase, startMs: ms(o.start), endMs: ms(o.end) }))
    : [{ phase: st?.phase, startMs: ms(st?.start), endMs: ms(st?.end) }];
  const degraded = findCondition(st?.conditions, 'Degraded');
  const preemptAtMs = ms(st?.preemptAt);
  return {
    namespace: r.metadata.namespace ?? '',
    name: r.metadata.name,
    tenant: st?.tenant,
    deleting: Boolean(r.metadata.deletionTimestamp),
    devices: (r.spec?.devices ?? []).map((d) => ({ class: d.class, count: d.count })),
    windows,
    ...(booked ? { booked: true } : {}),
    ...(preemptAtMs !== undefined && !Number.isNaN(preemptAtMs) ? { preemptAtMs } : {}),
    ...(degraded?.status === 'True' ? { degraded: degraded.message ?? degraded.reason ?? 'atoms short' } : {}),
  };
}

/** What the booking reads of a Pool. */
export function poolFacts(p: PoolCR): PoolFacts {
  return {
    name: p.metadata.name,
    archived: p.spec.archived === true,
    ownerTenant: p.spec.ownerTenant,
    offeredTo: (p.spec.offerings ?? []).map((o) => o.tenant),
    defaultDurationSeconds: p.spec.kueueDefaultDurationSeconds,
  };
}

/** The names of the AdmissionChecks whose controller is ours. */
export function ourChecks(checks: readonly AdmissionCheckCR[]): Set<string> {
  return new Set(checks.filter((c) => c.spec?.controllerName === CHECK_CONTROLLER_NAME).map((c) => c.metadata.name));
}

/** The Reservation the check books for a Workload: its shape from `start`, owned by the Workload (it goes with it). */
export function bookedReservation(w: Workload, pool: string, shape: BookingShape, startMs: number | undefined, durationSeconds: number): Reservation {
  const name = bookedReservationName(w);
  return {
    apiVersion: API_VERSION,
    kind: 'Reservation',
    metadata: {
      name,
      namespace: w.metadata.namespace,
      labels: { [BOOKED_FOR_UID_LABEL]: w.metadata.uid ?? '', 'app.kubernetes.io/managed-by': 'better-compute' },
      annotations: { [BOOKED_FOR_ANNOTATION]: w.metadata.name },
      ...(w.metadata.uid
        ? { ownerReferences: [{ apiVersion: KUEUE_API_VERSION, kind: 'Workload', name: w.metadata.name, uid: w.metadata.uid, controller: true }] }
        : {}),
    } as Reservation['metadata'],
    spec: {
      pool,
      devices: shape.devices.map((d) => ({ class: d.class as Reservation['spec']['devices'][number]['class'], count: d.count })),
      ...(startMs !== undefined ? { start: new Date(startMs).toISOString() } : {}),
      duration: durationSeconds,
      ...(shape.gang ? { gang: { size: shape.gang.size } } : {}),
    },
  };
}

export interface CheckReconcilerDeps {
  workloads: Informer<WorkloadCR>;
  admissionChecks: Informer<AdmissionCheckCR>;
  reservations: Informer<Reservation>;
  namespaces: Informer<NamespaceCR>;
  pools: Informer<PoolCR>;
  /** Writes our entry of a Workload's status.admissionChecks, fenced (start.ts: KueueClient.applyWorkloadCheck). */
  applyCheck(namespace: string, name: string, check: CheckStateWrite): Promise<void>;
  /** The poolId this leader put a Pool in the ledger under (context.ts poolIdOf); undefined until it has. */
  poolIdOf(poolName: string): string | undefined;
  /** Ledger.earliestWindow: the earliest start at which one of the inputs fits. */
  earliestWindow(inputs: readonly ReservationCreateInput[], nowMs: number, horizonMs: number): Promise<WindowFound>;
  /** Creates a booked Reservation, fenced; false when one of its name exists. */
  createReservation(r: Reservation): Promise<boolean>;
  /** Deletes a booked Reservation if it is still the object of `uid`, fenced. */
  deleteReservation(namespace: string, name: string, uid: string): Promise<void>;
  /** A batch/v1 Job's spec.activeDeadlineSeconds, when it sets one. */
  jobActiveDeadlineSeconds(namespace: string, name: string): Promise<number | undefined>;
  nowMs: () => number;
  /** Whether an unlabelled namespace is the tenant named like it (TENANCY_BY_NAMESPACE_NAME, ADR 0040). */
  tenancyByName: boolean;
  log: Logger;
  event(w: WorkloadCR, e: EventInput): Promise<void>;
  horizonMs?: number;
}

/** The last known name and uid of Workloads deleted from the cache, until their booked Reservation is released. */
type Tombstones = Map<string, { namespace: string; name: string; uid: string | undefined }>;

export class CheckReconciler {
  private readonly gone: Tombstones = new Map();

  constructor(private readonly d: CheckReconcilerDeps) {}

  /** The Reservation key (namespace/name) a cached Workload names, or the one booked for it, for waking it. */
  static reservationKeyOf(w: WorkloadCR): string | undefined {
    const p = WorkloadSchema.safeParse(w);
    if (!p.success) return undefined;
    const n = reservationNameOf(p.data);
    if (!n.ok) return undefined;
    return `${p.data.metadata.namespace}/${n.name ?? bookedReservationName(p.data)}`;
  }

  /** The Workload key a Reservation booked by the check belongs to. */
  static workloadKeyOf(r: Reservation): string | undefined {
    const name = r.metadata.annotations?.[BOOKED_FOR_ANNOTATION];
    return name && r.metadata.labels?.[BOOKED_FOR_UID_LABEL] !== undefined ? `${r.metadata.namespace ?? ''}/${name}` : undefined;
  }

  /** A Workload left the cache: its booked Reservation is released when its key is reconciled next. */
  forget(w: WorkloadCR): void {
    if (w.metadata.namespace) this.gone.set(`${w.metadata.namespace}/${w.metadata.name}`, { namespace: w.metadata.namespace, name: w.metadata.name, uid: w.metadata.uid });
  }

  async reconcile(key: string): Promise<ReconcileResult> {
    try {
      return await this.reconcileKey(key);
    } catch (e) {
      // Another replica leads now: nothing to retry here.
      if (e instanceof FencedError) return;
      throw e;
    }
  }

  private async reconcileKey(key: string): Promise<ReconcileResult> {
    const obj = this.d.workloads.get(key);
    if (!obj) {
      const t = this.gone.get(key);
      if (t) await this.release({ metadata: t }, 'deleted');
      this.gone.delete(key);
      return;
    }
    this.gone.delete(key);
    const parsed = WorkloadSchema.safeParse(obj);
    if (!parsed.success) {
      this.d.log.warn('kueue check: a Workload we cannot read', { workload: key, error: parsed.error.message.slice(0, 500) });
      return;
    }
    const w = parsed.data;
    const life = workloadLifecycle(w);
    if (life !== 'active') {
      await this.release(w, life, obj);
      return;
    }
    const ours = ourChecks(this.d.admissionChecks.list());
    let recheckAt: number | undefined;
    for (const name of ours) {
      const at = await this.reconcileCheck(obj, w, name);
      if (at !== undefined) recheckAt = Math.min(recheckAt ?? at, at);
    }
    // A few ms after the instant, so that the window has started by the ledger's clock when we look.
    return recheckAt === undefined ? undefined : { requeueAfterMs: Math.max(0, recheckAt - this.d.nowMs()) + 50 };
  }

  /** The Reservation booked for the Workload, when there is one and it is the Workload's (by its uid label). */
  private booked(w: { metadata: { namespace?: string | undefined; name: string; uid?: string | undefined } }): Reservation | undefined {
    const r = this.d.reservations.get(`${w.metadata.namespace ?? ''}/${bookedReservationName(w)}`);
    return r && w.metadata.uid && r.metadata.labels?.[BOOKED_FOR_UID_LABEL] === w.metadata.uid ? r : undefined;
  }

  /** Releases what was booked for a Workload that finished, was deactivated, evicted or deleted. */
  private async release(w: { metadata: { namespace?: string | undefined; name: string; uid?: string | undefined } }, why: string, obj?: WorkloadCR): Promise<void> {
    const r = this.booked(w);
    if (!r || r.metadata.deletionTimestamp || !r.metadata.uid) return;
    await this.d.deleteReservation(r.metadata.namespace ?? '', r.metadata.name, r.metadata.uid);
    const message = `released Reservation ${r.metadata.namespace}/${r.metadata.name}, booked for the Workload: it is ${why} (the rest of the window is free again)`;
    this.d.log.info('kueue check: booked Reservation released', { workload: `${w.metadata.namespace}/${w.metadata.name}`, reservation: r.metadata.name, why });
    if (obj) await this.d.event({ ...obj, apiVersion: obj.apiVersion ?? KUEUE_API_VERSION }, { type: 'Normal', reason: 'ReservationReleased', message });
  }

  /** Decides and writes one of our checks on the Workload; when to look again. */
  private async reconcileCheck(obj: WorkloadCR, w: Workload, checkName: string): Promise<number | undefined> {
    const cur = currentCheck(w, checkName);
    // Kueue lists the check once the Workload has quota reserved.
    if (!cur) return undefined;
    let decision: CheckDecision | undefined;
    if (cur.state === 'Ready') decision = this.decideLive(w);
    else if (cur.state === 'Pending') decision = await this.decidePending(obj, w);
    if (!decision) return undefined;
    if (decision.state !== cur.state || decision.message !== cur.message) await this.write(obj, w, checkName, decision, cur.state);
    return decision.recheckAtMs;
  }

  /** A Ready check: Retry when its Reservation can no longer carry the Workload, else left as it is. */
  private decideLive(w: Workload): CheckDecision | undefined {
    const named = reservationNameOf(w);
    if (!named.ok) return undefined;
    if (named.name) {
      const r = this.d.reservations.get(`${w.metadata.namespace}/${named.name}`);
      return decideLiveCheck(r ? reservationFacts(r) : undefined, `${w.metadata.namespace}/${named.name}`, this.d.nowMs());
    }
    const demand = podSetDemand(w);
    // Ready without a booking: its pods ask for no GPUs.
    if (demand.ok && [...demand.byClass.values()].every((n) => n === 0)) return undefined;
    const r = this.booked(w);
    return decideLiveCheck(r ? reservationFacts(r, true) : undefined, `${w.metadata.namespace}/${bookedReservationName(w)}`, this.d.nowMs());
  }

  private tenantOf(ns: string): string | undefined {
    return namespaceTenant(ns, this.d.namespaces.get(ns)?.metadata.labels, this.d.tenancyByName);
  }

  private async decidePending(obj: WorkloadCR, w: Workload): Promise<CheckDecision | undefined> {
    const ns = w.metadata.namespace;
    const tenant = this.tenantOf(ns);
    if (tenant === undefined) return { state: 'Rejected', message: noTenantMessage(ns) };
    const named = reservationNameOf(w);
    let r: ReservationFacts | undefined;
    if (named.ok && named.name) {
      const cr = this.d.reservations.get(`${ns}/${named.name}`);
      r = cr ? reservationFacts(cr) : undefined;
    } else if (named.ok) {
      const cr = this.booked(w);
      if (cr?.metadata.deletionTimestamp) {
        // Released (the Workload was evicted): a new one is booked once it has gone.
        return { state: 'Pending', message: `waiting for the released Reservation ${ns}/${cr.metadata.name} to go before booking again`, recheckAtMs: this.d.nowMs() + RECHECK_SOON_MS };
      }
      if (!cr && this.d.reservations.get(`${ns}/${bookedReservationName(w)}`)) {
        return { state: 'Rejected', message: `Reservation ${ns}/${bookedReservationName(w)} exists and was not booked for this Workload: delete it, or name a Reservation` };
      }
      r = cr ? reservationFacts(cr, true) : undefined;
    }
    const decision = decideReservationCheck({ workload: w, reservation: r, namespaceTenant: tenant, nowMs: this.d.nowMs() });
    return decision.needsBooking ? this.book(obj, w, tenant) : decision;
  }

  /** Books a Reservation for the Workload at the earliest window that fits; the check's state meanwhile. */
  private async book(obj: WorkloadCR, w: Workload, tenant: string): Promise<CheckDecision | undefined> {
    const ns = w.metadata.namespace;
    const now = this.d.nowMs();
    const owner = w.metadata.ownerReferences?.find((o) => o.kind === 'Job' && o.apiVersion === 'batch/v1');
    const jobDeadline = !w.spec.maximumExecutionTimeSeconds && owner ? await this.d.jobActiveDeadlineSeconds(ns, owner.name) : undefined;
    const plan = bookingFor({ workload: w, pools: this.d.pools.list().map(poolFacts), namespaceTenant: tenant, jobActiveDeadlineSeconds: jobDeadline });
    if (!plan.ok) return { state: 'Rejected', message: plan.message };
    if ('nothing' in plan) return { state: 'Ready', message: plan.message, podSetUpdates: [] };
    const poolId = this.d.poolIdOf(plan.pool);
    if (!poolId) return { state: 'Pending', message: `waiting for Pool ${plan.pool} to be in the ledger`, recheckAtMs: now + RECHECK_SOON_MS };
    let inputs: ReservationCreateInput[];
    try {
      // Validated as the Reservation reconciler will book it; the key only stands in for the uid it does not have yet.
      inputs = plan.shapes.map((s) => {
        const r = bookedReservation(w, plan.pool, s, undefined, plan.durationSeconds);
        return toCreateInput({ ...r, metadata: { ...r.metadata, uid: `kueue-window-search-${w.metadata.uid ?? ''}` } }, tenant, poolId);
      });
    } catch (e) {
      if (e instanceof ValidationError) return { state: 'Rejected', message: `the booking for the Workload is invalid: ${e.message}` };
      throw e;
    }
    const horizon = this.d.horizonMs ?? KUEUE_BOOKING_HORIZON_MS;
    const found = await this.d.earliestWindow(inputs, now, horizon);
    if (!found.ok) return { state: 'Pending', message: noWindowMessage(plan.pool, horizon, found.reason), recheckAtMs: now + RECHECK_NO_WINDOW_MS };
    const shape = plan.shapes[found.shape]!;
    const r = bookedReservation(w, plan.pool, shape, found.start, plan.durationSeconds);
    if (!(await this.d.createReservation(r))) {
      // Booked by an earlier pass that the cache has not shown yet: decided again when it shows (start.ts wakes us).
      return undefined;
    }
    const message = bookedMessage(ns, r.metadata.name, plan.pool, found.start, plan.durationSeconds, plan.durationFrom, now);
    this.d.log.info('kueue check: booked a Reservation for a Workload', {
      workload: `${ns}/${w.metadata.name}`,
      reservation: r.metadata.name,
      start: isoS(found.start),
      durationSeconds: plan.durationSeconds,
      gang: shape.gang?.size ?? 0,
      gangDomain: found.gangDomain,
    });
    await this.d.event({ ...obj, apiVersion: obj.apiVersion ?? KUEUE_API_VERSION }, { type: 'Normal', reason: 'ReservationBooked', message });
    return { state: 'Pending', message, recheckAtMs: found.start };
  }

  private async write(obj: WorkloadCR, w: Workload, checkName: string, d: CheckDecision, was: string): Promise<void> {
    const { namespace, name } = w.metadata;
    await this.d.applyCheck(namespace, name, {
      name: checkName,
      state: d.state,
      message: d.message,
      lastTransitionTime: isoS(this.d.nowMs()),
      ...(d.podSetUpdates ? { podSetUpdates: d.podSetUpdates } : {}),
    });
    this.d.log.info('kueue check', { workload: `${namespace}/${name}`, check: checkName, state: d.state, was, message: d.message });
    // Written only when it changed: each write is worth an Event (the Workload shows when it starts).
    const reason =
      d.state === 'Ready' ? 'ReservationLive' : d.state === 'Rejected' ? 'ReservationRejected' : d.state === 'Retry' ? 'ReservationLost' : 'WaitingForReservation';
    await this.d.event({ ...obj, apiVersion: obj.apiVersion ?? KUEUE_API_VERSION }, { type: d.state === 'Rejected' || d.state === 'Retry' ? 'Warning' : 'Normal', reason, message: d.message });
  }
}
