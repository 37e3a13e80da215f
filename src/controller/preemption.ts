// The leader's spot preemption loop (docs/adr/0017-spot-preemption.md). The ledger chose the victims and truncated
// their bookings at the deadline when the regular reservation was booked; this delivers the rest, each step idempotent:
// - the notice: each victim's pods annotated with the deadline (bettercompute.io/preempt-at), then the victim marked
//   notified and its Reservation woken (the reconciler writes the PreemptionNotice condition and its Event);
// - at the deadline: the victim ended. Its pods were stopped ahead of the deadline by the stopper
//   (controller/stopper.ts), with a grace period the pool caps, like the pods of any booking that ends.
// A step that fails is retried on the next pass.
import type { Ledger } from '../db/ledger.ts';
import { httpStatus, type ExtenderKube } from '../extender/kube.ts';
import { errorFields, type Logger } from '../log.ts';
import { PREEMPT_AT_ANNOTATION } from '../core/names.ts';

export interface PreemptionDeps {
  ledger: Pick<Ledger, 'preemptionNotices' | 'markPreemptionNotified' | 'preemptionsDue' | 'finishPreemption'>;
  kube: Pick<ExtenderKube, 'annotatePod'>;
  log: Logger;
  /** Wakes these reservations' CRs (their status shows the notice, then the end). */
  wake(reservationIds: string[]): void;
}

export interface PreemptionPass {
  notified: string[];
  ended: string[];
}

/** One pass: notices first, then the victims whose deadline has come. */
export async function preemptionPass(deps: PreemptionDeps): Promise<PreemptionPass> {
  const out: PreemptionPass = { notified: [], ended: [] };
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
    if (await deps.ledger.finishPreemption(v.reservationId)) out.ended.push(v.reservationId);
  }
  const woken = [...new Set([...out.notified, ...out.ended])];
  if (woken.length) deps.wake(woken);
  return out;
}
