// Which atom is handed to which ResourceClaim (migrations/0019_dra_claims.sql, ADR 0043): the rows of claim_atoms,
// written after the ledger booked the atoms to the claim's pod (on demand) or while the claim's Reservation holds them
// (its window). Part of the ledger gateway: callers outside src/db/ reach these through Ledger (src/db/ledger.ts),
// which adds the leader's fence; the agent API reads a claim's holding with claimHolding directly.
import type pg from 'pg';
import { assignPod, releaseAfterPod } from './handoff.ts';
import { atomsHeld, waitsForMessage } from './reads.ts';

interface Queryable {
  query: pg.ClientBase['query'];
}

/** The claim and its pod, as the API server names them. */
export interface ClaimIdentity {
  claimUid: string;
  namespace: string;
  claimName: string;
  podUid: string;
  podName: string;
}

/** One request of a claim: its name, how many devices, and of which class ('any': whatever its Reservation holds). */
export interface ClaimRequest {
  name: string;
  count: number;
  class: 'gpu' | 'gpu.mig' | 'gpu.slot' | 'any';
}

export type ClaimOwner = { kind: 'pod'; podUid: string; allocationId: string } | { kind: 'reservation'; reservationId: string };

/** A claim's live atoms, on one node, booked to its owner. */
export interface ClaimHolding {
  claimUid: string;
  namespace: string;
  claimName: string;
  podUid: string;
  nodeId: string;
  owner: ClaimOwner;
  devices: { request: string; atomId: string }[];
  /** Epoch milliseconds: the booking's start and end (end null: open-ended, an on-demand pod's). */
  start: number;
  end: number | null;
  /** Whether the booking holds now (a Reservation: inside its window and live; on demand: the allocation live). */
  now: boolean;
}

/** The claim's live holding, if any (one indexed read). */
export async function claimHolding(c: Queryable, claimUid: string): Promise<ClaimHolding | undefined> {
  const { rows } = await c.query(
    `SELECT ca.claim_uid, ca.namespace, ca.claim_name, ca.pod_uid, ca.node_id, ca.allocation_id, ca.reservation_id,
            json_agg(json_build_object('request', ca.request, 'atomId', ca.device_id) ORDER BY ca.request, ca.device_id) AS devices,
            (extract(epoch FROM coalesce(r.starts_at, lower(al.during))) * 1000)::float8 AS start_ms,
            (extract(epoch FROM coalesce(r.ends_at, CASE WHEN upper_inf(al.during) THEN NULL ELSE upper(al.during) END)) * 1000)::float8 AS end_ms,
            CASE WHEN ca.reservation_id IS NOT NULL
                 THEN r.state IN ('held', 'confirmed') AND r.starts_at <= compute_now() AND compute_now() < r.ends_at
                 ELSE al.released_at IS NULL AND al.during @> compute_now() END
            -- and every atom still booked to it now (not cut by a repair).
            AND bool_and(EXISTS (SELECT 1 FROM device_bookings b JOIN allocations a2 ON a2.id = b.allocation_id
                                 WHERE b.device_id = ca.device_id AND b.lost_at IS NULL AND a2.released_at IS NULL
                                   AND b.during @> compute_now()
                                   AND (a2.id = ca.allocation_id OR a2.reservation_id = ca.reservation_id))) AS holds_now
     FROM claim_atoms ca
     LEFT JOIN reservations r ON r.id = ca.reservation_id
     LEFT JOIN allocations al ON al.id = ca.allocation_id
     WHERE ca.claim_uid = $1 AND ca.released_at IS NULL
     GROUP BY ca.claim_uid, ca.namespace, ca.claim_name, ca.pod_uid, ca.node_id, ca.allocation_id, ca.reservation_id,
              r.starts_at, r.ends_at, r.state, al.during, al.released_at`,
    [claimUid],
  );
  const r = rows[0];
  if (!r) return undefined;
  if (rows.length > 1) throw new Error(`claim ${claimUid} holds atoms of ${rows.length} owners or nodes`);
  return {
    claimUid: r.claim_uid,
    namespace: r.namespace,
    claimName: r.claim_name,
    podUid: r.pod_uid,
    nodeId: r.node_id,
    owner: r.reservation_id ? { kind: 'reservation', reservationId: r.reservation_id } : { kind: 'pod', podUid: r.pod_uid, allocationId: r.allocation_id },
    devices: r.devices,
    start: r.start_ms,
    end: r.end_ms === null || !Number.isFinite(r.end_ms) ? null : r.end_ms,
    now: r.holds_now === true,
  };
}

/** Which of `atoms` (with their classes) answers which request: each request takes its count of its class, in order. */
export function matchRequests(requests: readonly ClaimRequest[], atoms: readonly { id: string; class: string }[]): { request: string; atomId: string }[] | undefined {
  const left = [...atoms];
  const out: { request: string; atomId: string }[] = [];
  for (const req of requests) {
    for (let k = 0; k < req.count; k++) {
      const i = left.findIndex((a) => req.class === 'any' || a.class === req.class);
      if (i < 0) return undefined;
      out.push({ request: req.name, atomId: left[i]!.id });
      left.splice(i, 1);
    }
  }
  return out;
}

async function insertRows(c: Queryable, id: ClaimIdentity, nodeId: string, owner: ClaimOwner, devices: { request: string; atomId: string }[]): Promise<void> {
  await c.query(
    `INSERT INTO claim_atoms (claim_uid, namespace, claim_name, pod_uid, node_id, request, device_id, allocation_id, reservation_id)
     SELECT $1, $2, $3, $4, $5, d.request, d.atom, $8, $9 FROM unnest($6::text[], $7::text[]) AS d(request, atom)`,
    [
      id.claimUid,
      id.namespace,
      id.claimName,
      id.podUid,
      nodeId,
      devices.map((d) => d.request),
      devices.map((d) => d.atomId),
      owner.kind === 'pod' ? owner.allocationId : null,
      owner.kind === 'reservation' ? owner.reservationId : null,
    ],
  );
}

/**
 * Hands an on-demand pod's booking (its allocation, already committed) to its claim: one row per atom, each request
 * taking atoms of its class. Run in a transaction. The claim's live holding, when it has one, is answered as is.
 */
export async function recordOnDemandClaim(
  c: Queryable,
  id: ClaimIdentity,
  requests: readonly ClaimRequest[],
  booking: { allocationId: string; nodeId: string; atoms: readonly string[] },
): Promise<ClaimHolding> {
  const existing = await claimHolding(c, id.claimUid);
  if (existing) return existing;
  // The pod's booking is one allocation: it answers one claim. A second on-demand claim of ours is refused, not booked.
  const other = await c.query<{ claim_name: string }>(
    'SELECT claim_name FROM claim_atoms WHERE pod_uid = $1 AND allocation_id IS NOT NULL AND claim_uid <> $2 AND released_at IS NULL LIMIT 1',
    [id.podUid, id.claimUid],
  );
  if (other.rows[0]) throw new ClaimRefusal(`pod ${id.podName} already holds on-demand claim ${other.rows[0].claim_name} of ours: one on-demand claim per pod`);
  // Atoms whose earlier holder's container may still run: the claim waits (its pod keeps the booking) until it is gone.
  const held = await atomsHeld(c, booking.nodeId, booking.atoms, id.podUid, null);
  if (held.length) throw new ClaimRefusal(waitsForMessage(held));
  const { rows } = await c.query<{ id: string; class: string }>('SELECT id, class FROM devices WHERE id = ANY ($1) ORDER BY id', [booking.atoms]);
  const devices = matchRequests(requests, rows);
  if (!devices) throw new Error(`the booking of pod ${id.podUid} (${booking.atoms.join(', ')}) does not answer the requests of claim ${id.namespace}/${id.claimName}`);
  await insertRows(c, id, booking.nodeId, { kind: 'pod', podUid: id.podUid, allocationId: booking.allocationId }, devices);
  return (await claimHolding(c, id.claimUid))!;
}

/** A refusal found after the transaction wrote something: thrown so that it rolls back, answered by the Ledger. */
export class ClaimRefusal extends Error {
  readonly code = 'CLAIM_REFUSED';
}

export type AssignClaimOutcome = { ok: true; holding: ClaimHolding; existing: boolean } | { ok: false; reason: string };

/**
 * Assigns a claim of a Reservation's pod atoms of that Reservation on one node: the first node (by name) where the
 * Reservation's live bookings hold enough atoms no other live claim holds. Run in a transaction. Under the
 * Reservation's row lock (taken first, as a device-plugin bind takes it), so two claims of one Reservation choose one
 * after the other; the pod's assignment (handoff.assignPod: tenant, state and window checked on the database's clock)
 * is written in the same transaction, so the releaser, the stopper and the hold's confirmation see the pod as in
 * device-plugin mode. The claim's live holding, when it has one, is answered as is.
 */
export async function assignReservationClaim(
  c: Queryable,
  a: { id: ClaimIdentity; reservationId: string; tenantId: string; requests: readonly ClaimRequest[] },
): Promise<AssignClaimOutcome> {
  const existing = await claimHolding(c, a.id.claimUid);
  if (existing) return { ok: true, holding: existing, existing: true };
  await c.query('SELECT 1 FROM reservations WHERE id = $1 FOR UPDATE', [a.reservationId]);
  const want = a.requests.reduce((n, r) => n + r.count, 0);
  // The Reservation's atoms no other live claim of it holds; `stale`: those still held by a claim of another owner
  // (an earlier booking's claim not yet released at its end), which the unique index would refuse.
  const { rows } = await c.query<{ node_id: string; atoms: { id: string; class: string; stale: boolean }[] }>(
    `SELECT al.node_id,
            json_agg(json_build_object('id', b.device_id, 'class', d.class,
                                       'stale', EXISTS (SELECT 1 FROM claim_atoms o WHERE o.device_id = b.device_id AND o.released_at IS NULL))
                     ORDER BY b.device_id) AS atoms
     FROM allocations al JOIN device_bookings b ON b.allocation_id = al.id JOIN devices d ON d.id = b.device_id
     WHERE al.reservation_id = $1 AND al.released_at IS NULL AND b.lost_at IS NULL AND NOT isempty(b.during)
       AND upper(b.during) > compute_now()
       AND NOT EXISTS (SELECT 1 FROM claim_atoms ca WHERE ca.device_id = b.device_id AND ca.reservation_id = $1 AND ca.released_at IS NULL)
     GROUP BY al.node_id ORDER BY al.node_id`,
    [a.reservationId],
  );
  const fit = rows.map((r) => ({ nodeId: r.node_id, devices: matchRequests(a.requests, r.atoms) })).find((r) => r.devices);
  if (!fit?.devices) return { ok: false, reason: `reservation ${a.reservationId} holds no node with ${want} atoms that no other claim of it holds` };
  const assigned = await assignPod(c, {
    podUid: a.id.podUid,
    reservationId: a.reservationId,
    tenantId: a.tenantId,
    nodeId: fit.nodeId,
    namespace: a.id.namespace,
    podName: a.id.podName,
    count: want,
  });
  if (!assigned.ok) return { ok: false, reason: assigned.reason };
  const stale = rows.find((r) => r.node_id === fit.nodeId)!.atoms.filter((x) => x.stale && fit.devices!.some((d) => d.atomId === x.id));
  // Thrown, not answered: the pod's assignment just written is rolled back with it.
  if (stale.length) throw new ClaimRefusal(`atoms ${stale.map((x) => x.id).join(', ')} of reservation ${a.reservationId} are still held by an earlier booking's claim`);
  await insertRows(c, a.id, fit.nodeId, { kind: 'reservation', reservationId: a.reservationId }, fit.devices);
  return { ok: true, holding: (await claimHolding(c, a.id.claimUid))!, existing: false };
}

export interface ClaimRelease {
  /** Whether the claim held atoms. */
  released: boolean;
  /** Allocations given back with it (on demand, or an ended Reservation's last on the node), for cache upkeep. */
  bookings: { node_id: string; pool_id: string }[];
}

/**
 * Releases a claim in the caller's transaction: its rows, and what stands behind them once no other live claim of
 * the pod uses it: the pod's on-demand allocation (truncated, bc_release_allocations) or its Reservation assignment.
 * Idempotent.
 */
export async function releaseClaim(c: Queryable, claimUid: string): Promise<ClaimRelease> {
  const { rows } = await c.query<{ pod_uid: string; allocation_id: string | null; reservation_id: string | null }>(
    `UPDATE claim_atoms SET released_at = compute_now() WHERE claim_uid = $1 AND released_at IS NULL
     RETURNING pod_uid, allocation_id, reservation_id`,
    [claimUid],
  );
  const first = rows[0];
  if (!first) return { released: false, bookings: [] };
  const others = await c.query('SELECT 1 FROM claim_atoms WHERE pod_uid = $1 AND released_at IS NULL LIMIT 1', [first.pod_uid]);
  if (others.rows.length) return { released: true, bookings: [] };
  if (first.reservation_id) return { released: true, bookings: (await releaseAfterPod(c, first.pod_uid)).bookings };
  const allocs = await c.query<{ id: string; node_id: string; pool_id: string }>(
    `SELECT id, node_id, pool_id FROM allocations WHERE id = $1 AND released_at IS NULL`,
    [first.allocation_id],
  );
  if (allocs.rows.length) await c.query('SELECT bc_release_allocations($1)', [allocs.rows.map((r) => r.id)]);
  return { released: true, bookings: allocs.rows.map((r) => ({ node_id: r.node_id, pool_id: r.pool_id })) };
}

/** The pools in DRA mode that a tenant may book on demand in (owned, or offered and not archived), by name. */
export async function draPoolsOf(c: Queryable, tenantId: string): Promise<string[]> {
  const { rows } = await c.query<{ id: string }>(
    `SELECT p.id FROM pools p WHERE p.handoff = 'dra' AND NOT p.archived
       AND (p.owner_tenant = $1 OR EXISTS (SELECT 1 FROM pool_offerings o WHERE o.pool_id = p.id AND o.tenant_id = $1))
     ORDER BY p.name`,
    [tenantId],
  );
  return rows.map((r) => r.id);
}
