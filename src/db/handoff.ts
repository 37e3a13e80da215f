// Writes of the hand-off to pods (migrations/0005_pod_assignments.sql): a reservation's pod assignments, the nodes'
// on-demand admission leases, and the release of everything a pod holds. Part of the ledger gateway: callers outside
// src/db/ reach these through Ledger (src/db/ledger.ts), which adds the leader's fence and its cache upkeep; the
// agent API drops admissions with dropAdmission directly (it holds no booking).
import type pg from 'pg';
import { DEFAULT_STOP_SLACK_SECONDS } from '../core/stop.ts';
import { confirmHold } from './holds.ts';
import { reservationAtomsHeld, waitsForMessage } from './reads.ts';

interface Queryable {
  query: pg.ClientBase['query'];
}

/** The reason that starts a refused bind's text when the booking is already stopping its pods. */
export const BOOKING_STOPPING = 'BookingStopping';

export interface AssignmentRequest {
  podUid: string;
  reservationId: string;
  tenantId: string;
  nodeId: string;
  namespace: string;
  podName: string;
  count: number;
}

export type AssignOutcome =
  | { ok: true; existing: boolean; movedFrom?: string; /** This assignment confirmed the reservation's hold. */ confirmed?: boolean }
  | { ok: false; reason: string };

/**
 * Records a pod's assignment to `count` of its reservation's atoms on a node, if they are not all assigned already.
 * Run inside a transaction. Checked here, under the reservation's row lock, with the database's clock: that the
 * reservation is the pod's tenant's (`tenantId`, of the pod's namespace), held or confirmed, and that now is inside
 * its window, before its pods are stopped (its end or preemption deadline less the pool's stop grace and the slack). So concurrent binds of one reservation count one after another, and a bind cannot land outside the
 * window it was filtered in. Idempotent per pod: the pod's live assignment on this node is honoured ('existing'); one
 * on another node (a bind that stopped before its Binding) is moved here in the same transaction. The first pod of a
 * held reservation confirms its hold in this transaction (ADR 0015); a hold whose lease ran out takes no pod (the
 * leader's expiry releases it).
 */
export async function assignPod(c: Queryable, a: AssignmentRequest): Promise<AssignOutcome> {
  const { rows } = await c.query(
    `WITH r AS (SELECT id, state, tenant_id, starts_at <= compute_now() AS started, compute_now() < ends_at AS open,
                       (extract(epoch FROM starts_at) * 1000)::float8 AS start_ms, (extract(epoch FROM ends_at) * 1000)::float8 AS end_ms,
                       (state = 'held' AND lease_expires_at <= compute_now()) AS lease_ran_out,
                       (extract(epoch FROM lease_expires_at) * 1000)::float8 AS lease_ms,
                       least(ends_at, preempt_at) <= compute_now() + make_interval(secs => p.lead_s) AS stopping,
                       (extract(epoch FROM least(ends_at, preempt_at)) * 1000)::float8 AS deadline_ms, p.lead_s
                FROM reservations
                  CROSS JOIN LATERAL (SELECT stop_grace_seconds + $4 AS lead_s FROM pools WHERE pools.id = reservations.pool_id) p
                WHERE id = $2 FOR UPDATE OF reservations),
     existing AS (SELECT node_id, reservation_id FROM reservation_pod_assignments WHERE pod_uid = $1 AND released_at IS NULL),
     held AS (SELECT count(*)::int AS n FROM allocations al JOIN device_bookings b ON b.allocation_id = al.id
              WHERE al.reservation_id = $2 AND al.node_id = $3 AND al.released_at IS NULL AND NOT isempty(b.during)
                AND upper(b.during) > compute_now()),
     used AS (SELECT coalesce(sum(count), 0)::int AS n FROM reservation_pod_assignments
              WHERE reservation_id = $2 AND node_id = $3 AND released_at IS NULL)
     SELECT (SELECT state FROM r) AS state, (SELECT tenant_id FROM r) AS tenant_id,
            (SELECT started FROM r) AS started, (SELECT open FROM r) AS open,
            (SELECT start_ms FROM r) AS start_ms, (SELECT end_ms FROM r) AS end_ms,
            (SELECT lease_ran_out FROM r) AS lease_ran_out, (SELECT lease_ms FROM r) AS lease_ms,
            (SELECT stopping FROM r) AS stopping, (SELECT deadline_ms FROM r) AS deadline_ms, (SELECT lead_s FROM r) AS lead_s,
            (SELECT node_id FROM existing) AS existing, (SELECT reservation_id FROM existing) AS existing_reservation,
            held.n AS held, used.n AS used
     FROM held, used`,
    [a.podUid, a.reservationId, a.nodeId, DEFAULT_STOP_SLACK_SECONDS],
  );
  const r = rows[0]!;
  if (!r.state) return { ok: false, reason: `reservation ${a.reservationId} not found` };
  // Neither the other tenant's name nor the window is told: the reason ends up in the pod's events.
  if (r.tenant_id !== a.tenantId) return { ok: false, reason: `reservation ${a.reservationId} belongs to another tenant than ${a.tenantId} (namespace ${a.namespace})` };
  if (r.state !== 'held' && r.state !== 'confirmed') return { ok: false, reason: `reservation ${a.reservationId} is ${r.state}` };
  if (r.lease_ran_out) {
    return { ok: false, reason: `the hold of reservation ${a.reservationId} ran out at ${new Date(r.lease_ms as number).toISOString()} before it was confirmed` };
  }
  if (!r.started) return { ok: false, reason: `reservation ${a.reservationId} starts at ${new Date(r.start_ms as number).toISOString()}` };
  if (!r.open) return { ok: false, reason: `reservation ${a.reservationId} ended at ${new Date(r.end_ms as number).toISOString()}` };
  if (r.existing === a.nodeId && r.existing_reservation === a.reservationId) return { ok: true, existing: true };
  // Its pods are being stopped (core/stop.ts: the pool's stop grace plus the slack before its end or its preemption
  // deadline): a pod bound now would be told to stop at once, and one the kubelet admits after the end would fail.
  if (r.stopping) {
    const deadline = new Date(r.deadline_ms as number).toISOString();
    return { ok: false, reason: `${BOOKING_STOPPING}: reservation ${a.reservationId} ends at ${deadline} and stops its pods from ${r.lead_s} s before; no new pod starts on it` };
  }
  if (r.used + a.count > r.held) {
    return { ok: false, reason: `reservation ${a.reservationId} holds ${r.held} atoms on ${a.nodeId}, ${r.used} assigned; pod asks ${a.count}` };
  }
  // A pod of an earlier booking that still holds some of these atoms (its container stopping past its booking's
  // end): this pod waits, unbound, rather than be refused by the node (guard 6) and fail.
  const held = await reservationAtomsHeld(c, a.reservationId, a.nodeId, a.podUid);
  if (held.length) return { ok: false, reason: waitsForMessage(held) };
  // The pod's assignment elsewhere is left over from a bind that stopped before its Binding (the pod is not bound:
  // the caller checked): freed in this transaction, so the pod never holds two and never loses one to a failed move.
  if (r.existing) await releaseAssignment(c, a.podUid);
  await c.query(
    `INSERT INTO reservation_pod_assignments (pod_uid, reservation_id, node_id, namespace, pod_name, count)
     VALUES ($1, $2, $3, $4, $5, $6)`,
    [a.podUid, a.reservationId, a.nodeId, a.namespace, a.podName, a.count],
  );
  // Under the row lock taken above, with the lease checked on the same clock: the first pod confirms the hold.
  const confirmed = r.state === 'held' && (await confirmHold(c, a.reservationId));
  return { ok: true, existing: false, ...(r.existing ? { movedFrom: r.existing as string } : {}), ...(confirmed ? { confirmed } : {}) };
}

/** Frees a pod's live assignment. Returns its reservation when there was one. */
export async function releaseAssignment(c: Queryable, podUid: string): Promise<string | undefined> {
  const { rows } = await c.query<{ reservation_id: string }>(
    `UPDATE reservation_pod_assignments SET released_at = compute_now() WHERE pod_uid = $1 AND released_at IS NULL
     RETURNING reservation_id`,
    [podUid],
  );
  return rows[0]?.reservation_id;
}

/**
 * Releases the allocations of an ended reservation (released or expired) on the nodes where none of its pods holds
 * them any more (no live assignment there): the rest keep their bookings, so that no other booking is placed on atoms
 * a stopping container still holds, and are released with their last pod (releaseAfterPod). Returns what it released.
 */
export async function releaseIdleAllocations(c: Queryable, reservationId: string): Promise<{ node_id: string; pool_id: string }[]> {
  const { rows } = await c.query<{ id: string; node_id: string; pool_id: string }>(
    `SELECT al.id, al.node_id, al.pool_id FROM allocations al JOIN reservations r ON r.id = al.reservation_id
     WHERE al.reservation_id = $1 AND al.released_at IS NULL AND r.state IN ('released', 'expired')
       AND NOT EXISTS (SELECT 1 FROM reservation_pod_assignments a
                       WHERE a.reservation_id = al.reservation_id AND a.node_id = al.node_id AND a.released_at IS NULL)
     ORDER BY al.id`,
    [reservationId],
  );
  if (rows.length) await c.query('SELECT bc_release_allocations($1)', [rows.map((r) => r.id)]);
  return rows.map((r) => ({ node_id: r.node_id, pool_id: r.pool_id }));
}

/** Frees a pod's live assignment, and its ended reservation's bookings on that node when it was the last pod there. */
export async function releaseAfterPod(c: Queryable, podUid: string): Promise<{ assignment: boolean; bookings: { node_id: string; pool_id: string }[] }> {
  const reservationId = await releaseAssignment(c, podUid);
  return { assignment: reservationId !== undefined, bookings: reservationId ? await releaseIdleAllocations(c, reservationId) : [] };
}

/**
 * Takes a node's on-demand admission lease for a pod, with the atoms booked for it (bc_take_admission,
 * migrations/functions/bc_take_admission.sql): when the node has none, when it is this pod's, or when the one there has expired. False while
 * another pod's admission is in flight there.
 */
export async function takeAdmission(
  c: Queryable,
  a: { nodeId: string; podUid: string; namespace: string; podName: string; ttlSeconds: number; atoms: readonly string[] },
): Promise<boolean> {
  const { rows } = await c.query<{ taken: boolean }>('SELECT bc_take_admission($1, $2, $3, $4, $5, $6) AS taken', [
    a.nodeId,
    a.podUid,
    a.namespace,
    a.podName,
    a.ttlSeconds,
    a.atoms,
  ]);
  return rows[0]?.taken === true;
}

/** Ends an admission (the agent allocated, the bind failed, or the pod went). Only the holder's lease is dropped. */
export async function dropAdmission(c: Queryable, nodeId: string | null, podUid: string): Promise<boolean> {
  const { rowCount } = await c.query(
    `DELETE FROM ondemand_admissions WHERE pod_uid = $2 AND ($1::text IS NULL OR node_id = $1)`,
    [nodeId, podUid],
  );
  return (rowCount ?? 0) > 0;
}

export interface PodRelease {
  assignment: boolean;
  /** The pod's on-demand allocations released (their nodes and pools, for cache upkeep). */
  bookings: { node_id: string; pool_id: string }[];
  admission: boolean;
}

/**
 * Everything a pod holds, given back in the caller's transaction: its ResourceClaims' atoms, its reservation
 * assignment freed (and its ended reservation's bookings on the node, when it was the last pod there), its on-demand booking truncated (counters and rollup with it, bc_release_allocations), its admission lease dropped. Idempotent.
 */
export async function releasePodHoldings(c: Queryable, podUid: string): Promise<PodRelease> {
  // Its ResourceClaims' atoms too (DRA, migrations/0019): what stands behind them is released just below.
  await c.query('UPDATE claim_atoms SET released_at = compute_now() WHERE pod_uid = $1 AND released_at IS NULL', [podUid]);
  const after = await releaseAfterPod(c, podUid);
  const { rows } = await c.query<{ id: string; node_id: string; pool_id: string }>(
    `SELECT id, node_id, pool_id FROM allocations WHERE pod_uid = $1 AND kind = 'pod' AND released_at IS NULL`,
    [podUid],
  );
  if (rows.length) await c.query('SELECT bc_release_allocations($1)', [rows.map((r) => r.id)]);
  const admission = await dropAdmission(c, null, podUid);
  return { assignment: after.assignment, bookings: [...after.bookings, ...rows.map((r) => ({ node_id: r.node_id, pool_id: r.pool_id }))], admission };
}
