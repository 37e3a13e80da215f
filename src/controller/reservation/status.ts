// What a Reservation's status says (pure): the mirror of its booking as the ledger has it, the verdict behind its
// Reserved condition and Event, and the conditions that verdict sets. The reconciler (reconciler.ts) decides and writes.
import { z } from 'zod';
import { parseInput } from '../../core/schemas.ts';
import type { ReservationView } from '../../db/ledger.ts';
import { findCondition, sameJson, setCondition, type Condition, type Reservation, type ReservationPhase, type ReservationStatus } from '../../kube/types.ts';
import { CONFIRM_ANNOTATION, reservationResourceName } from '../../core/names.ts';

export const iso = (ms: number | null | undefined): string | undefined =>
  ms === null || ms === undefined || !Number.isFinite(ms) ? undefined : new Date(ms).toISOString();
/**
 * An end as status shows it: the ledger keeps microseconds, RFC 3339 here milliseconds, so an end is rounded up. A
 * user who books the next window from a Reservation's `status.end` then starts at or after its true end, never a
 * fraction of a millisecond inside it (which the no-overlap guard would refuse).
 */
export const isoEnd = (ms: number | null | undefined): string | undefined => iso(ms === null || ms === undefined ? ms : Math.ceil(ms));

const ReleaseIfUnused = z.object({ releaseIfUnusedSeconds: z.number().int().min(60).max(31_622_400).optional() });

/** releaseIfUnusedMs for a Reservation already booked (validated before booking): an invalid value counts as none. */
export function unusedAfterMs(r: Reservation): number | undefined {
  try {
    return releaseIfUnusedMs(r);
  } catch {
    return undefined;
  }
}

/** spec.releaseIfUnusedSeconds in milliseconds (the CRD's bounds, checked again at this boundary), or undefined. */
export function releaseIfUnusedMs(r: Reservation): number | undefined {
  const seconds = parseInput(ReleaseIfUnused, { releaseIfUnusedSeconds: r.spec.releaseIfUnusedSeconds })
    .releaseIfUnusedSeconds;
  return seconds === undefined ? undefined : seconds * 1000;
}

/** The Reservation asks for its hold to be confirmed (the annotation; any value but "true" asks nothing). */
export function confirmRequested(r: Reservation): boolean {
  return r.metadata.annotations?.[CONFIRM_ANNOTATION] === 'true';
}

export const PHASE_OF_STATE: Record<ReservationView['state'], ReservationPhase> = {
  held: 'Reserved',
  confirmed: 'Reserved',
  released: 'Released',
  expired: 'Expired',
};

export interface Verdict {
  phase: ReservationPhase;
  status: 'True' | 'False';
  reason: string;
  message: string;
  /** Event type; Normal for progress, Warning for refusals. */
  eventType: 'Normal' | 'Warning';
  /** A preempted spot reservation: the PreemptionNotice condition (True), with a Warning Event when it first appears. */
  notice?: { reason: string; message: string };
}

/** The condition a preempted spot reservation carries (ADR 0017). */
export const PREEMPTION_NOTICE = 'PreemptionNotice';

/** When and by whom a hold was confirmed: its first pod's bind (the ledger names the pod), else the annotation (or the CLI). */
function confirmationOf(r: Reservation, view: ReservationView): { confirmedAt?: string; confirmedBy?: string } {
  const confirmedAt = view.state === 'confirmed' ? iso(view.hold?.confirmedAt) : undefined;
  if (!confirmedAt) return {};
  const confirmedBy = view.hold?.confirmedByPod
    ? `pod ${view.hold.confirmedByPod}`
    : confirmRequested(r)
      ? `annotation ${CONFIRM_ANNOTATION}`
      : undefined;
  return { confirmedAt, ...(confirmedBy ? { confirmedBy } : {}) };
}

/** Released by releaseIfUnused: never used by a pod, ended at or after start + the spec's time, before its end. */
function releasedUnused(view: ReservationView, unusedMs: number | undefined): boolean {
  return (
    view.state === 'released' &&
    unusedMs !== undefined &&
    view.everUsed === false &&
    typeof view.endedAt === 'number' &&
    view.endedAt >= view.start + unusedMs &&
    view.endedAt < view.end
  );
}

/** The status of a booked Reservation: its booking as the ledger has it. */
export function bookedStatus(r: Reservation, view: ReservationView, tenant: string): ReservationStatus {
  const { confirmedAt, confirmedBy } = confirmationOf(r, view);
  // A preempted spot reservation (ADR 0017): its deadline, from the ledger.
  const preemptAt = iso(view.preemption?.at);
  return {
    phase: PHASE_OF_STATE[view.state],
    reservationId: view.id,
    resourceName: reservationResourceName(view.id),
    tenant,
    poolId: view.poolId,
    allocations: view.allocations.map((a) => ({ node: a.nodeId, atoms: [...a.atoms] })),
    atoms: view.allocations.reduce((n, a) => n + a.atoms.length, 0),
    nodes: view.allocations.map((a) => a.nodeId).join(','),
    ...(iso(view.start) ? { start: iso(view.start) } : {}),
    ...(isoEnd(view.end) ? { end: isoEnd(view.end) } : {}),
    ...(iso(view.leaseExpiresAt) ? { leaseExpiresAt: iso(view.leaseExpiresAt) } : {}),
    state: view.state,
    ...(confirmedAt ? { confirmedAt } : {}),
    ...(confirmedBy ? { confirmedBy } : {}),
    ...(preemptAt ? { preemptAt } : {}),
  };
}

/** The verdict on a booked Reservation at `now`: Reserved (held or confirmed), Released (and why) or Expired. */
export function bookedVerdict(r: Reservation, view: ReservationView, now: number): Verdict {
  const phase = PHASE_OF_STATE[view.state];
  const { confirmedAt, confirmedBy } = confirmationOf(r, view);
  const unusedMs = unusedAfterMs(r);
  const unused = releasedUnused(view, unusedMs);
  const preemptAt = iso(view.preemption?.at);
  const preempted = view.state === 'released' && preemptAt !== undefined;
  const atoms = view.allocations.reduce((n, a) => n + a.atoms.length, 0);
  const nodes = view.allocations.map((a) => a.nodeId);
  const held = view.state === 'held' ? `, held until ${iso(view.leaseExpiresAt)} unless confirmed` : '';
  const confirmed = confirmedAt ? `; hold confirmed at ${confirmedAt}${confirmedBy ? ` by ${confirmedBy}` : ''}` : '';
  const messages: Record<ReservationPhase, string> = {
    Reserved: `${atoms} atoms on ${nodes.join(', ')} from ${iso(view.start)} to ${isoEnd(view.end)}${held}${confirmed}`,
    Released: preempted
      ? `preempted at ${preemptAt} by reservation ${view.preemption!.by}; its pods were evicted`
      : unused
        ? `released ${view.id}: no pod used it within ${unusedMs! / 1000}s of its start at ${iso(view.start)}`
        : view.end <= now
          ? `the window of ${view.id} ended at ${isoEnd(view.end)}`
          : `released ${view.id}`,
    Expired: `the hold of ${view.id} ran out before it was confirmed`,
    Pending: '',
    Failed: '',
  };
  const reasons: Record<ReservationPhase, string> = {
    Reserved: view.state === 'held' ? 'Held' : confirmedAt ? 'Confirmed' : 'Reserved',
    Released: preempted ? 'Preempted' : unused ? 'Unused' : 'Released',
    Expired: 'Expired',
    Pending: '',
    Failed: '',
  };
  const notice = preemptAt && {
    reason: 'Preempted',
    message: `a regular reservation (${view.preemption!.by}) displaces this spot reservation: its bookings end and its pods are evicted at ${preemptAt}`,
  };
  const status = phase === 'Reserved' ? 'True' : 'False';
  return { phase, status, reason: reasons[phase], message: messages[phase], eventType: 'Normal', ...(notice ? { notice } : {}) };
}

/**
 * The Degraded condition of a booking that BookingRepair touched (ADR 0016): True while atoms are short (on atoms out
 * of service that nothing replaced yet), False once it was re-placed or its atoms came back. None before any loss.
 */
export function degradedVerdict(view: ReservationView): Omit<Verdict, 'phase'> | undefined {
  const rp = view.repair;
  if (!rp) return undefined;
  const lost = rp.reason ?? 'unknown';
  if (rp.short > 0) {
    return {
      status: 'True',
      reason: 'AtomsLost',
      message: `${rp.short} atoms short: lost to ${lost}; it keeps its other atoms and is re-placed as soon as capacity appears`,
      eventType: 'Warning',
    };
  }
  const nodes = view.allocations.map((a) => a.nodeId).join(', ');
  return {
    status: 'False',
    reason: 'Repaired',
    message:
      rp.repairs > 0
        ? `re-placed after losing atoms (${lost}) at ${iso(rp.repairedAt)}, ${rp.repairs} time(s); now on ${nodes}`
        : `its atoms lost to ${lost} are back in service since ${iso(rp.repairedAt)}; on ${nodes}`,
    eventType: 'Normal',
  };
}

/** The conditions after a verdict: Reserved, Degraded when there is one, PreemptionNotice when the verdict has one. */
export function conditionsAfter(
  prev: Condition[] | undefined,
  generation: number,
  v: Verdict,
  degraded: Omit<Verdict, 'phase'> | undefined,
  nowIso: string,
): Condition[] {
  let conditions = setCondition(prev, { type: 'Reserved', status: v.status, reason: v.reason, message: v.message, observedGeneration: generation }, nowIso);
  if (degraded) {
    const { status, reason, message } = degraded;
    conditions = setCondition(conditions, { type: 'Degraded', status, reason, message, observedGeneration: generation }, nowIso);
  }
  if (v.notice) {
    const notice = { type: PREEMPTION_NOTICE, status: 'True' as const, ...v.notice, observedGeneration: generation };
    conditions = setCondition(conditions, notice, nowIso);
  }
  return conditions;
}

/** Each change of the Degraded verdict counts: a second repair (a new time, new nodes) as much as a first. */
export function degradedChanged(prev: ReservationStatus, degraded: Omit<Verdict, 'phase'> | undefined): boolean {
  const before = findCondition(prev.conditions, 'Degraded');
  return degraded !== undefined && (before?.status !== degraded.status || before.reason !== degraded.reason || before.message !== degraded.message);
}

/** Whether the status to write says anything the previous one did not. */
export function statusChanged(prev: ReservationStatus, next: ReservationStatus, v: Verdict, degraded: Omit<Verdict, 'phase'> | undefined): boolean {
  const prevCond = findCondition(prev.conditions, 'Reserved');
  const prevNotice = findCondition(prev.conditions, PREEMPTION_NOTICE);
  return (
    prev.phase !== next.phase ||
    prevCond?.reason !== v.reason ||
    prevCond?.message !== v.message ||
    prev.observedGeneration !== next.observedGeneration ||
    degradedChanged(prev, degraded) ||
    (v.notice !== undefined && prevNotice?.message !== v.notice.message) ||
    !sameJson({ ...prev, conditions: undefined }, { ...next, conditions: undefined })
  );
}
