// What a click on one of the caller's own bars shows: the Reservation's id, its name (when the controller knows the
// Kubernetes object behind it), window, atoms per node and conditions. Built only from the caller's own reservations
// (src/db/calendar.ts reads no one else's).
import type { CalendarBooking, CalendarReservation } from '../db/calendar.ts';
import type { Condition, Reservation } from '../kube/types.ts';

export interface NamedReservation {
  namespace: string;
  name: string;
  conditions: Condition[];
}

/** The Kubernetes Reservation behind a ledger reservation, by the idempotency key it booked with (its metadata.uid). */
export interface ReservationDirectory {
  lookup(idempotencyKey: string): NamedReservation | undefined;
}

/**
 * A directory over the controller's informer cache. A recurring Reservation's windows book with `${uid}:${start}`
 * (src/controller/reservation/recurring.ts), so the uid is the key up to its first colon.
 */
export function directoryOf(list: () => readonly Reservation[]): ReservationDirectory {
  return {
    lookup(key) {
      const uid = key.split(':')[0];
      const r = list().find((x) => x.metadata.uid === uid);
      if (!r?.metadata.name || !r.metadata.namespace) return undefined;
      return { namespace: r.metadata.namespace, name: r.metadata.name, conditions: r.status?.conditions ?? [] };
    },
  };
}

export interface DetailCondition {
  type: string;
  status: string;
  reason?: string;
  message?: string;
}

export interface ReservationDetail {
  id: string;
  /** namespace/name of the Kubernetes Reservation; absent for one booked through the API or unknown here. */
  name?: string;
  state: string;
  spot: boolean;
  start: number;
  end: number;
  atoms: { nodeId: string; atoms: string[] }[];
  conditions: DetailCondition[];
  /** Where the conditions come from: the Kubernetes object, or the ledger's state when there is none. */
  conditionsFrom: 'kubernetes' | 'ledger';
}

/** Conditions from the ledger alone, for a reservation with no Kubernetes object in view. */
export function ledgerConditions(r: CalendarReservation): DetailCondition[] {
  const live = r.state === 'held' || r.state === 'confirmed';
  const out: DetailCondition[] = [{ type: 'Reserved', status: live ? 'True' : 'False', reason: r.state === 'held' ? 'Held' : r.state === 'confirmed' ? 'Confirmed' : r.state === 'released' ? 'Released' : 'Expired' }];
  if (r.preemptAt !== null) out.push({ type: 'PreemptionNotice', status: 'True', message: `ends at ${new Date(r.preemptAt).toISOString()}` });
  if (r.repairShort > 0) out.push({ type: 'Repaired', status: 'False', reason: 'Short', message: `${r.repairShort} atoms short${r.repairReason ? `: ${r.repairReason}` : ''}` });
  return out;
}

export function reservationDetails(
  reservations: readonly CalendarReservation[],
  bookings: readonly CalendarBooking[],
  directory: ReservationDirectory | undefined,
): ReservationDetail[] {
  return reservations.map((r) => {
    const named = directory?.lookup(r.idempotencyKey);
    const atoms = bookings
      .filter((b) => b.reservationId === r.id && b.tenantId === r.tenantId)
      .map((b) => ({ nodeId: b.nodeId, atoms: [...b.atoms] }))
      .sort((a, b) => a.nodeId.localeCompare(b.nodeId));
    const conditions: DetailCondition[] = named
      ? named.conditions.map((c) => ({ type: c.type, status: c.status, ...(c.reason ? { reason: c.reason } : {}), ...(c.message ? { message: c.message } : {}) }))
      : ledgerConditions(r);
    return {
      id: r.id,
      ...(named ? { name: `${named.namespace}/${named.name}` } : {}),
      state: r.state,
      spot: r.spot,
      start: r.start,
      end: r.end,
      atoms,
      conditions,
      conditionsFrom: named ? 'kubernetes' : 'ledger',
    };
  });
}
