// Spot preemption in the ledger (docs/adr/0017-spot-preemption.md): the victims' bookings truncated at the deadline
// and the regular reservation booked from it, in one transaction; then what the leader's loop reads and marks (notice
// delivered, pods evicted at the deadline). Part of the ledger gateway: callers outside src/db/ reach these through
// Ledger, which adds the leader's fence.
import type pg from 'pg';

interface Queryable {
  query: pg.ClientBase['query'];
}

/** The deadline of a notice given now: compute_now() + notice, whole milliseconds (what bc_place's `start` carries). */
export async function noticeDeadline(c: Queryable, noticeMs: number): Promise<number> {
  const { rows } = await c.query<{ deadline: number }>(
    'SELECT (floor(extract(epoch FROM compute_now()) * 1000) + $1)::float8 AS deadline',
    [noticeMs],
  );
  return rows[0]!.deadline;
}

/**
 * Locks the victims and truncates their live allocations at `deadlineMs` (bc_release_allocations with that time), marking them
 * preempted by `by`. False, writing nothing, when any is no longer a live, unpreempted spot reservation (the snapshot
 * was stale): the caller plans again.
 */
export async function truncateVictims(c: Queryable, victims: readonly string[], deadlineMs: number, by: string): Promise<boolean> {
  const { rows } = await c.query<{ id: string }>(
    `SELECT id FROM reservations WHERE id = ANY ($1) AND spot AND state IN ('held', 'confirmed') AND preempt_at IS NULL
     ORDER BY id FOR UPDATE`,
    [[...victims]],
  );
  if (rows.length !== victims.length) return false;
  await c.query(
    `SELECT bc_release_allocations(ARRAY(SELECT id FROM allocations WHERE reservation_id = ANY ($1) AND released_at IS NULL ORDER BY id),
                                   to_timestamp($2 / 1000.0))`,
    [[...victims], deadlineMs],
  );
  await c.query(
    `UPDATE reservations SET preempt_at = to_timestamp($2 / 1000.0), preempted_by = $3, updated_at = compute_now()
     WHERE id = ANY ($1)`,
    [[...victims], deadlineMs, by],
  );
  return true;
}

export interface PreemptedPod {
  namespace: string;
  podName: string;
  podUid: string;
}

export interface PreemptionDue {
  reservationId: string;
  preemptAt: number;
  /** Its pods with a live assignment. */
  pods: PreemptedPod[];
}

const DUE = (where: string) => `
  SELECT r.id, (extract(epoch FROM r.preempt_at) * 1000)::float8 AS preempt_at,
         coalesce((SELECT json_agg(json_build_object('namespace', p.namespace, 'podName', p.pod_name, 'podUid', p.pod_uid)
                                   ORDER BY p.namespace, p.pod_name)
                   FROM reservation_pod_assignments p WHERE p.reservation_id = r.id AND p.released_at IS NULL), '[]') AS pods
  FROM reservations r WHERE r.preempt_at IS NOT NULL AND r.evicted_at IS NULL AND ${where} ORDER BY r.preempt_at, r.id`;

function toDue(rows: { id: string; preempt_at: number; pods: PreemptedPod[] }[]): PreemptionDue[] {
  return rows.map((r) => ({ reservationId: r.id, preemptAt: r.preempt_at, pods: r.pods }));
}

/** Victims whose notice has not been delivered yet. */
export async function noticesToDeliver(c: Queryable): Promise<PreemptionDue[]> {
  return toDue((await c.query(DUE('r.notified_at IS NULL'))).rows);
}

export async function markNotified(c: Queryable, reservationId: string): Promise<void> {
  await c.query('UPDATE reservations SET notified_at = compute_now() WHERE id = $1 AND notified_at IS NULL', [reservationId]);
}

/** Victims whose deadline has come and whose pods are not evicted yet. */
export async function evictionsDue(c: Queryable): Promise<PreemptionDue[]> {
  return toDue((await c.query(DUE('r.preempt_at <= compute_now()'))).rows);
}

/**
 * After its pods were evicted: the victim is ended (released at the deadline, its bookings already end there) and
 * marked done. Idempotent.
 */
export async function finishPreemption(c: Queryable, reservationId: string): Promise<boolean> {
  const { rowCount } = await c.query(
    `UPDATE reservations SET evicted_at = compute_now(), updated_at = compute_now(),
            state = CASE WHEN state IN ('held', 'confirmed') THEN 'released' ELSE state END,
            ended_at = CASE WHEN state IN ('held', 'confirmed') THEN preempt_at ELSE ended_at END,
            lease_expires_at = CASE WHEN state IN ('held', 'confirmed') THEN NULL ELSE lease_expires_at END
     WHERE id = $1 AND preempt_at <= compute_now() AND evicted_at IS NULL`,
    [reservationId],
  );
  return (rowCount ?? 0) > 0;
}
