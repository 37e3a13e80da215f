// The reservation AdmissionCheck's reconciler: one Workload key at a time, the decision of src/core/kueue-check.ts on
// the informers' snapshot (the Workload, our AdmissionChecks, the Reservation it names, its namespace's tenant) and the
// ledger's clock, then one write: our entry of the Workload's status.admissionChecks, fenced (a deposed leader's
// write fails at the fence check before it is sent: start.ts). Only entries in Pending (or Retry) are decided: Ready and
// Rejected stay as they are (a Reservation's later changes, the lifecycle of issue 33 item 2, are not handled yet).
import {
  CHECK_CONTROLLER_NAME,
  currentCheck,
  decideReservationCheck,
  reservationNameOf,
  WorkloadSchema,
  type CheckDecision,
  type ReservationFacts,
  type ReservationWindow,
  type Workload,
} from '../../core/kueue-check.ts';
import { FencedError } from '../../db/ledger.ts';
import type { Informer } from '../../kube/informer.ts';
import { KUEUE_API_VERSION, type AdmissionCheckCR, type CheckStateWrite, type WorkloadCR } from '../../kube/kueue.ts';
import type { EventInput } from '../../kube/client.ts';
import { namespaceTenant, noTenantMessage, type NamespaceCR, type Reservation } from '../../kube/types.ts';
import type { Logger } from '../../log.ts';
import type { ReconcileResult } from '../queue.ts';

const ms = (t: string | undefined) => (t ? new Date(t).getTime() : undefined);

/** What the check reads of a Reservation: its devices, its tenant, and its window or its recurring windows. */
export function reservationFacts(r: Reservation): ReservationFacts {
  const st = r.status;
  const windows: ReservationWindow[] = st?.occurrences?.length
    ? st.occurrences.map((o) => ({ phase: o.phase, startMs: ms(o.start), endMs: ms(o.end) }))
    : [{ phase: st?.phase, startMs: ms(st?.start), endMs: ms(st?.end) }];
  return {
    namespace: r.metadata.namespace ?? '',
    name: r.metadata.name,
    tenant: st?.tenant,
    deleting: Boolean(r.metadata.deletionTimestamp),
    devices: (r.spec?.devices ?? []).map((d) => ({ class: d.class, count: d.count })),
    windows,
  };
}

/** The names of the AdmissionChecks whose controller is ours. */
export function ourChecks(checks: readonly AdmissionCheckCR[]): Set<string> {
  return new Set(checks.filter((c) => c.spec?.controllerName === CHECK_CONTROLLER_NAME).map((c) => c.metadata.name));
}

const finished = (w: WorkloadCR) =>
  ((w.status?.conditions as { type: string; status: string }[] | undefined) ?? []).some((c) => c.type === 'Finished' && c.status === 'True');

export interface CheckReconcilerDeps {
  workloads: Informer<WorkloadCR>;
  admissionChecks: Informer<AdmissionCheckCR>;
  reservations: Informer<Reservation>;
  namespaces: Informer<NamespaceCR>;
  /** Writes our entry of a Workload's status.admissionChecks, fenced (start.ts: KueueClient.applyWorkloadCheck). */
  applyCheck(namespace: string, name: string, check: CheckStateWrite): Promise<void>;
  nowMs: () => number;
  /** Whether an unlabelled namespace is the tenant named like it (TENANCY_BY_NAMESPACE_NAME, ADR 0040). */
  tenancyByName: boolean;
  log: Logger;
  event(w: WorkloadCR, e: EventInput): Promise<void>;
}

export class CheckReconciler {
  constructor(private readonly d: CheckReconcilerDeps) {}

  /** The Reservation key (namespace/name) a cached Workload names, for waking it when that Reservation changes. */
  static reservationKeyOf(w: WorkloadCR): string | undefined {
    const p = WorkloadSchema.safeParse(w);
    if (!p.success) return undefined;
    const n = reservationNameOf(p.data);
    return n.ok && n.name ? `${p.data.metadata.namespace}/${n.name}` : undefined;
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
    if (!obj || obj.metadata.deletionTimestamp || finished(obj)) return;
    const parsed = WorkloadSchema.safeParse(obj);
    if (!parsed.success) {
      this.d.log.warn('kueue check: a Workload we cannot read', { workload: key, error: parsed.error.message.slice(0, 500) });
      return;
    }
    const ours = ourChecks(this.d.admissionChecks.list());
    let recheckAt: number | undefined;
    for (const name of ours) {
      const at = await this.reconcileCheck(obj, parsed.data, name);
      if (at !== undefined) recheckAt = Math.min(recheckAt ?? at, at);
    }
    // A few ms after the instant, so that the window has started by the ledger's clock when we look.
    return recheckAt === undefined ? undefined : { requeueAfterMs: Math.max(0, recheckAt - this.d.nowMs()) + 50 };
  }

  /** Decides and writes one of our checks on the Workload; when to look again. */
  private async reconcileCheck(obj: WorkloadCR, w: Workload, checkName: string): Promise<number | undefined> {
    const cur = currentCheck(w, checkName);
    // Kueue lists the check once the Workload has quota reserved; Ready and Rejected are left as they are.
    if (!cur || (cur.state !== 'Pending' && cur.state !== 'Retry')) return undefined;
    const decision = this.decide(w);
    if (decision.state !== cur.state || decision.message !== cur.message) await this.write(obj, w, checkName, decision, cur.state);
    return decision.recheckAtMs;
  }

  private decide(w: Workload): CheckDecision {
    const ns = w.metadata.namespace;
    const named = reservationNameOf(w);
    const r = named.ok && named.name ? this.d.reservations.get(`${ns}/${named.name}`) : undefined;
    const tenant = namespaceTenant(ns, this.d.namespaces.get(ns)?.metadata.labels, this.d.tenancyByName);
    if (tenant === undefined) return { state: 'Rejected', message: noTenantMessage(ns) };
    return decideReservationCheck({ workload: w, reservation: r ? reservationFacts(r) : undefined, namespaceTenant: tenant, nowMs: this.d.nowMs() });
  }

  private async write(obj: WorkloadCR, w: Workload, checkName: string, d: CheckDecision, was: string): Promise<void> {
    const { namespace, name } = w.metadata;
    await this.d.applyCheck(namespace, name, {
      name: checkName,
      state: d.state,
      message: d.message,
      lastTransitionTime: new Date(this.d.nowMs()).toISOString().replace(/\.\d+Z$/, 'Z'),
      ...(d.podSetUpdates ? { podSetUpdates: d.podSetUpdates } : {}),
    });
    this.d.log.info('kueue check', { workload: `${namespace}/${name}`, check: checkName, state: d.state, was, message: d.message });
    // Written only when it changed: each write is worth an Event (the Workload shows when it starts).
    const reason = d.state === 'Ready' ? 'ReservationLive' : d.state === 'Rejected' ? 'ReservationRejected' : 'WaitingForReservation';
    await this.d.event({ ...obj, apiVersion: obj.apiVersion ?? KUEUE_API_VERSION }, { type: d.state === 'Rejected' ? 'Warning' : 'Normal', reason, message: d.message });
  }
}
