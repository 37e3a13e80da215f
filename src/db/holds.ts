// Holds: a reservation booked with `leaseSeconds` is `held` until it is confirmed (by its first pod that binds, in the
// transaction of that pod's assignment; or explicitly: the Reservation's annotation, the CLI) or its lease runs out
// (Ledger.expireLeases releases it). See docs/adr/0015-hold-and-confirm.md. Part of the ledger gateway: callers outside
// src/db/ reach these through Ledger, which adds the leader's fence.
import type pg from 'pg';

interface Queryable {
  query: pg.ClientBase['query'];
}

/**
 * held → confirmed, in the caller's transaction, while the lease has not run out (the database's clock decides).
 * The lease is cleared; quota charges and bookings are not touched (held and confirmed are charged alike, ADR 0015).
 * Returns whether this call confirmed it.
 */
export async function confirmHold(c: Queryable, reservationId: string): Promise<boolean> {
  const { rowCount } = await c.query(
    `UPDATE reservations SET state = 'confirmed', lease_expires_at = NULL, updated_at = compute_now()
     WHERE id = $1 AND state = 'held' AND lease_expires_at > compute_now()`,
    [reservationId],
  );
  return (rowCount ?? 0) > 0;
}

/** Of these reservations, those that are no longer held (confirmed, released or expired since someone looked). */
export async function heldNoMore(c: Queryable, reservationIds: readonly string[]): Promise<string[]> {
  if (reservationIds.length === 0) return [];
  const { rows } = await c.query<{ id: string }>(`SELECT id FROM reservations WHERE id = ANY ($1) AND state <> 'held' ORDER BY id`, [
    [...reservationIds],
  ]);
  return rows.map((r) => r.id);
}

/**
 * Takes the reservation's row lock (as a pod's bind does), then, in a statement of its own (so it sees any bind that
 * committed while it waited), says whether it is confirmed, `seconds` past its start, not ended, and never used by a pod.
 */
export async function lockIfUnused(c: Queryable, reservationId: string, seconds: number): Promise<boolean> {
  await c.query('SELECT 1 FROM reservations WHERE id = $1 FOR UPDATE', [reservationId]);
  const { rows } = await c.query<{ unused: boolean }>(
    `SELECT (state = 'confirmed' AND starts_at + make_interval(secs => $2) <= compute_now() AND ends_at > compute_now()
             AND NOT EXISTS (SELECT 1 FROM reservation_pod_assignments p WHERE p.reservation_id = r.id)) AS unused
     FROM reservations r WHERE id = $1`,
    [reservationId, seconds],
  );
  return rows[0]?.unused === true;
}
