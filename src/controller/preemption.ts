// The leader's spot preemption loop (docs/adr/0017-spot-preemption.md). The ledger chose the victims and truncated
// their bookings at the deadline when the regular reservation was booked; this delivers the rest, each step idempotent:
// - the notice: each victim's pods annotated with the deadline (bettercompute.io/preempt-at), then the victim marked
//   notified and its Reservation woken (the reconciler writes the PreemptionNotice condition and its Event);
// - at the deadline: its pods evicted through the Eviction API with their own grace period, then the victim ended.
// A step that fails is retried on the next pass.
import type { Ledger } from '../db/ledger.ts';
import type { ExtenderKube } from '../extender/kube.ts';
import { httpStatus } from '../extender/kube.ts';
import { errorFields, type Logger } from '../log.ts';
import { PREEMPT_AT_ANNOTATION } from './types.ts';

export interface PreemptionDeps {
  ledger: Pick<Ledger, 'preemptionNotices' | 'markPreemptionNotified' | 'preemptionsDue' | 'finishPreemption'>;
  kube: Pick<ExtenderKube, 'getPod' | 'annotatePod' | 'evictPod'>;
  log: Logger;
  /** Wakes these reservations' CRs (their status shows the notice, then the end). */
  wake(reservationIds: string[]): void;
  /** Grace period of a pod that names none (Kubernetes' default). */
  defaultGraceSeconds?: number;
}

export interface PreemptionPass {
  notified: string[];
  evicted: { reservationId: string; pod: string; graceSeconds: number }[];
  ended: string[];
}

/** One pass: notices first, then the victims whose deadline has come. */
export async function preemptionPass(deps: PreemptionDeps): Promise<PreemptionPass> {
  const out: PreemptionPass = { notified: [], evicted: [], ended: [] };
  for (const v of await deps.ledger.preemptionNotices()) {
    const at = new Date(v.preemptAt).toISOString();
    let all = true;
    for (const p of v.pods) {
      try {
        await deps.kube.annotatePod(p.namespace, p.podName, { [PREEMPT_AT_ANNOTATION]: at });
      } catch (e) {
        if (httpStatus(e) === 404) continue;
        all = false;
        deps.log.warn('preemption notice: pod annotation failed', { pod: `${p.namespace}/${p.podName}`, ...errorFields(e) });
      }
    }
    if (!all) continue;
    await deps.ledger.markPreemptionNotified(v.reservationId);
    deps.log.info('preemption notice delivered', { reservationId: v.reservationId, preemptAt: at, pods: v.pods.length });
    out.notified.push(v.reservationId);
  }
  for (const v of await deps.ledger.preemptionsDue()) {
    let all = true;
    for (const p of v.pods) {
      const pod = `${p.namespace}/${p.podName}`;
      try {
        const graceSeconds = graceOf(await deps.kube.getPod(p.namespace, p.podName), deps.defaultGraceSeconds ?? 30);
        if (graceSeconds === undefined) continue; // gone already
        await deps.kube.evictPod(p.namespace, p.podName, graceSeconds);
        deps.log.info('evicted pod of a preempted spot reservation', { pod, graceSeconds, reservationId: v.reservationId });
        out.evicted.push({ reservationId: v.reservationId, pod, graceSeconds });
      } catch (e) {
        if (httpStatus(e) === 404) continue;
        all = false;
        deps.log.warn('preemption: eviction failed', { pod, ...errorFields(e) });
      }
    }
    if (all && (await deps.ledger.finishPreemption(v.reservationId))) out.ended.push(v.reservationId);
  }
  const woken = [...new Set([...out.notified, ...out.ended])];
  if (woken.length) deps.wake(woken);
  return out;
}

/** The pod's own terminationGracePeriodSeconds; undefined when the pod does not exist. */
function graceOf(pod: unknown, fallback: number): number | undefined {
  if (!pod) return undefined;
  const g = (pod as { spec?: { terminationGracePeriodSeconds?: unknown } }).spec?.terminationGracePeriodSeconds;
  return typeof g === 'number' && Number.isInteger(g) && g >= 0 ? g : fallback;
}
