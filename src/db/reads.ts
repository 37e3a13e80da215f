// Reads for the hand-off to pods (migrations/0005_pod_assignments.sql): one statement each. The writes are the ledger
// gateway's (src/db/handoff.ts, through Ledger).
import type { Db } from './pool.ts';

interface Queryable {
  query: Db['query'];
}

export interface ReservationAtoms {
  state: string;
  tenantId: string;
  poolId: string;
  start: number;
  end: number;
  /** node → the reservation's atoms there */
  atoms: Map<string, string[]>;
  /** node → atoms counted by live pod assignments */
  assigned: Map<string, number>;
}

/** A reservation's atoms per node and its live assignments per node, in one statement. */
export async function reservationAtoms(db: Queryable, reservationId: string): Promise<ReservationAtoms | undefined> {
  return (await loadReservations(db, [reservationId])).get(reservationId);
}

/** An atom that a live pod of another booking still holds (bc_atoms_held), and that pod. */
export interface HeldAtom {
  atomId: string;
  podUid: string;
  /** The pod's namespace and name: unknown (null) for an on-demand pod's booking. */
  namespace: string | null;
  podName: string | null;
}

/**
 * Which of `atoms` on a node a live pod other than `podUid` may still hold (its booking ended, was cut or released,
 * and its containers are not yet known to be gone): what the pod must wait for. `reservationId`: the pod's reservation
 * (its other pods do not count), null for an on-demand pod.
 */
export async function atomsHeld(c: Queryable, nodeId: string, atoms: readonly string[], podUid: string, reservationId: string | null): Promise<HeldAtom[]> {
  if (atoms.length === 0) return [];
  const { rows } = await c.query('SELECT atom_id, pod_uid, namespace, pod_name FROM bc_atoms_held($1, $2, $3, $4)', [nodeId, atoms, podUid, reservationId]);
  return rows.map(heldAtom);
}

/** atomsHeld for a reservation's pod: the reservation's live atoms on the node (its live bookings there, not ended). */
export async function reservationAtomsHeld(c: Queryable, reservationId: string, nodeId: string, podUid: string): Promise<HeldAtom[]> {
  const { rows } = await c.query(
    `SELECT atom_id, pod_uid, namespace, pod_name FROM bc_atoms_held($2, ARRAY(
       SELECT b.device_id FROM allocations al JOIN device_bookings b ON b.allocation_id = al.id
       WHERE al.reservation_id = $1 AND al.node_id = $2 AND al.released_at IS NULL AND NOT isempty(b.during)
         AND upper(b.during) > compute_now()), $3, $1)`,
    [reservationId, nodeId, podUid],
  );
  return rows.map(heldAtom);
}

const heldAtom = (r: { atom_id: string; pod_uid: string; namespace: string | null; pod_name: string | null }): HeldAtom => ({
  atomId: r.atom_id,
  podUid: r.pod_uid,
  namespace: r.namespace,
  podName: r.pod_name,
});

/** The reason that starts waitsForMessage's text (a scheduling event's, a claim's condition). */
export const WAITING_FOR_POD = 'WaitingForPod';

/** Whether a refusal's text is waitsForMessage's: a wait for an earlier booking's pod. */
export const isWaitingForPod = (message: string): boolean => message.startsWith(`${WAITING_FOR_POD}:`);

/** Why a pod is not bound while another pod holds its atoms: the pod it waits for, and the atoms (a scheduling event). */
export function waitsForMessage(held: readonly HeldAtom[]): string {
  const first = held[0]!;
  const who = first.podName ? `pod ${first.namespace}/${first.podName} (uid ${first.podUid})` : `pod uid ${first.podUid}`;
  const others = new Set(held.map((h) => h.podUid)).size - 1;
  const holders = others > 0 ? `${who} and ${others} other pod${others > 1 ? 's' : ''} of an earlier booking still hold` : `${who} of an earlier booking still holds`;
  return `${WAITING_FOR_POD}: ${holders} ${held.map((h) => h.atomId).join(', ')}; this pod is bound once that is gone from the node`;
}

export interface Admission {
  nodeId: string;
  podUid: string;
  namespace: string;
  podName: string;
  atoms: string[];
}

/**
 * Where a pod holds atoms already (a bind that stopped between its booking and its Binding leaves this): the node of
 * its live on-demand booking or reservation assignment, if any.
 */
export async function podHolding(c: Queryable, podUid: string): Promise<string | undefined> {
  const { rows } = await c.query<{ node_id: string }>(
    `SELECT node_id FROM allocations WHERE pod_uid = $1 AND kind = 'pod' AND released_at IS NULL
     UNION ALL SELECT node_id FROM reservation_pod_assignments WHERE pod_uid = $1 AND released_at IS NULL LIMIT 1`,
    [podUid],
  );
  return rows[0]?.node_id;
}

/** The pods that hold anything in the ledger: a live assignment, a live on-demand booking, or an admission lease. */
export async function podsHolding(c: Queryable): Promise<string[]> {
  const { rows } = await c.query<{ uid: string }>(
    `SELECT pod_uid AS uid FROM reservation_pod_assignments WHERE released_at IS NULL
     UNION SELECT pod_uid FROM allocations WHERE kind = 'pod' AND released_at IS NULL
     UNION SELECT pod_uid FROM ondemand_admissions`,
  );
  return rows.map((r) => r.uid);
}

export interface PodToStop {
  podUid: string;
  namespace: string;
  podName: string;
  reservationId: string;
  /**
   * When its booking on the node ends: a spot notice's deadline, else the window's end (a deleted Reservation's
   * bookings stay until its pods are gone, so its end too); when that booking has ended already, that instant (past:
   * the pod gets the shortest grace). Null on a node in maintenance (its bookings there are kept until it is gone).
   */
  deadlineMs: number | null;
  /** The ledger's now (compute_now()), on the same clock as the deadline. */
  nowMs: number;
  /** The pool's cap on the grace period (pools.stop_grace_seconds). */
  stopGraceSeconds: number;
}

/**
 * Live pod assignments of reservations whose booking ends within their pool's stop grace plus `slackSeconds` (the
 * window's end, or a spot notice's deadline), or that ended already (released, expired): their pods are stopped
 * ahead of the end (core/stop.ts; docs/booking-end.md), a deleted one's with its window's end as the deadline. And,
 * stopped at once, the pods whose booking ends through repair (docs/repair.md): on a node in maintenance (no deadline:
 * their bookings there are kept until they are gone, then re-placed), or on a node where their reservation has no
 * live booking any more (re-placed while the node was NotReady, and back; or found after their booking's end: the
 * deadline is that end, past).
 */
export async function podsToStop(c: Queryable, slackSeconds: number): Promise<PodToStop[]> {
  const { rows } = await c.query(
    `SELECT a.pod_uid, a.namespace, a.pod_name, r.id AS reservation_id, p.stop_grace_seconds,
            CASE WHEN n.maintenance THEN NULL
                 WHEN NOT live.held THEN (extract(epoch FROM coalesce(live.ended, compute_now())) * 1000)::float8
                 ELSE (extract(epoch FROM least(r.ends_at, r.preempt_at)) * 1000)::float8 END AS deadline_ms,
            (extract(epoch FROM compute_now()) * 1000)::float8 AS now_ms
     FROM reservation_pod_assignments a JOIN reservations r ON r.id = a.reservation_id JOIN pools p ON p.id = r.pool_id
       JOIN nodes n ON n.id = a.node_id
       CROSS JOIN LATERAL (
         SELECT bool_or(b.during @> compute_now()) IS TRUE AS held, max(upper(b.during)) AS ended
         FROM allocations al JOIN device_bookings b ON b.allocation_id = al.id
         WHERE al.reservation_id = r.id AND al.node_id = a.node_id AND NOT isempty(b.during)
       ) live
     WHERE a.released_at IS NULL
       AND (r.state IN ('released', 'expired') OR n.maintenance OR NOT live.held
            OR least(r.ends_at, r.preempt_at) <= compute_now() + make_interval(secs => p.stop_grace_seconds + $1))
     ORDER BY a.namespace, a.pod_name`,
    [slackSeconds],
  );
  return rows.map((r) => ({
    podUid: r.pod_uid,
    namespace: r.namespace,
    podName: r.pod_name,
    reservationId: r.reservation_id,
    deadlineMs: r.deadline_ms,
    nowMs: r.now_ms,
    stopGraceSeconds: r.stop_grace_seconds,
  }));
}

/** The node's live admission, if any. */
export async function currentAdmission(c: Queryable, nodeId: string): Promise<Admission | undefined> {
  const { rows } = await c.query(
    `SELECT node_id, pod_uid, namespace, pod_name, atoms FROM ondemand_admissions
     WHERE node_id = $1 AND expires_at > compute_now()`,
    [nodeId],
  );
  const r = rows[0];
  return r ? { nodeId: r.node_id, podUid: r.pod_uid, namespace: r.namespace, podName: r.pod_name, atoms: r.atoms } : undefined;
}

/** node id → pool id for every node in the ledger. */
export async function nodePools(c: Queryable): Promise<Map<string, string | null>> {
  const { rows } = await c.query<{ id: string; pool_id: string | null }>('SELECT id, pool_id FROM nodes');
  return new Map(rows.map((r) => [r.id, r.pool_id]));
}

/**
 * The tenant's peak quota use in the window and its limit, per resource (no row: unlimited). A key with time-bounded
 * overrides is left to bind, which compares each instant with the limit in force then (ADR 0012).
 */
export async function quotaHeadroom(
  c: Queryable,
  tenantId: string,
  poolId: string,
  resources: string[],
  windowEndMs: number | null,
): Promise<Map<string, { max: number; peak: number }>> {
  const { rows } = await c.query(
    `SELECT q.resource, q.max,
            bc_quota_peak(q.tenant_id, q.pool_id, q.resource,
              tstzrange(compute_now(), CASE WHEN $4::float8 IS NULL THEN NULL ELSE to_timestamp($4::float8 / 1000) END)) AS peak
     FROM quotas q WHERE q.tenant_id = $1 AND q.pool_id = $2 AND q.resource = ANY ($3) AND q.max IS NOT NULL
       AND NOT q.has_overrides`,
    [tenantId, poolId, resources, windowEndMs],
  );
  return new Map(rows.map((r) => [r.resource as string, { max: r.max as number, peak: r.peak as number }]));
}

/** A node's present, bookable atoms of the given classes (what its agent serves), by id. */
export async function nodeAtoms(
  c: Queryable,
  nodeId: string,
  classes: readonly string[],
): Promise<{ id: string; class: string; parentId: string | null; healthy: boolean }[]> {
  const { rows } = await c.query(
    `SELECT id, class, parent_id, healthy FROM devices WHERE node_id = $1 AND present AND bookable AND class = ANY ($2) ORDER BY id`,
    [nodeId, classes],
  );
  return rows.map((r) => ({ id: r.id, class: r.class, parentId: r.parent_id, healthy: r.healthy }));
}

/**
 * How long past `atMs` a reservation is served while a pod of it is still on the node after its window ended or it was
 * released (the agent reads its state again within this; each read extends it while such a pod remains).
 */
export const DRAINING_SERVE_MS = 60_000;

/**
 * The reservations whose atoms on this node are served at `atMs`: held or confirmed ones whose window holds it, and
 * ones with a pod still assigned on the node (ended, released or preempted: its atoms stay its pods' until they are
 * gone, so a pod the kubelet admits late still gets them and is then stopped, never refused; `end` is then a serving
 * lease, DRAINING_SERVE_MS ahead). Their atoms: the node's non-empty bookings of the reservation. What the node's
 * agent serves one endpoint each for.
 */
export async function activeReservationsOnNode(
  c: Queryable,
  nodeId: string,
  atMs: number,
): Promise<{ reservationId: string; start: number; end: number; atoms: string[] }[]> {
  const { rows } = await c.query(
    `SELECT r.id, (extract(epoch FROM r.starts_at) * 1000)::float8 AS start, (extract(epoch FROM r.ends_at) * 1000)::float8 AS "end",
            NOT (r.state IN ('held', 'confirmed') AND r.ends_at > to_timestamp($2::float8 / 1000)) AS draining,
            array_agg(DISTINCT b.device_id ORDER BY b.device_id) AS atoms
     FROM reservations r
     JOIN allocations a ON a.reservation_id = r.id AND a.node_id = $1
     JOIN device_bookings b ON b.allocation_id = a.id AND NOT isempty(b.during)
     WHERE r.starts_at <= to_timestamp($2::float8 / 1000)
       AND ((r.state IN ('held', 'confirmed') AND r.ends_at > to_timestamp($2::float8 / 1000) AND a.released_at IS NULL)
            OR EXISTS (SELECT 1 FROM reservation_pod_assignments pa WHERE pa.reservation_id = r.id AND pa.node_id = $1 AND pa.released_at IS NULL))
     GROUP BY r.id ORDER BY r.id`,
    [nodeId, atMs],
  );
  return rows.map((r) => ({ reservationId: r.id, start: r.start, end: r.draining ? Math.max(r.end, atMs + DRAINING_SERVE_MS) : r.end, atoms: r.atoms }));
}

// ---- the extender's in-memory state (state-sync.ts): the same reads, for many keys at once ----------------------

/** Reservations by id (any state), or, with `ids` null, every held or confirmed one and every one with live pods. */
export async function loadReservations(c: Queryable, ids: readonly string[] | null): Promise<Map<string, ReservationAtoms>> {
  const { rows } = await c.query(
    `SELECT r.id, r.state, r.tenant_id, r.pool_id,
            (extract(epoch FROM r.starts_at) * 1000)::float8 AS start, (extract(epoch FROM r.ends_at) * 1000)::float8 AS "end",
            coalesce((SELECT json_object_agg(x.node_id, x.atoms) FROM (
               SELECT a.node_id, array_agg(b.device_id ORDER BY b.device_id) AS atoms
               FROM allocations a JOIN device_bookings b ON b.allocation_id = a.id
               WHERE a.reservation_id = r.id AND a.released_at IS NULL AND NOT isempty(b.during)
               GROUP BY a.node_id) x), '{}') AS atoms,
            coalesce((SELECT json_object_agg(y.node_id, y.n) FROM (
               SELECT node_id, sum(count)::int AS n FROM reservation_pod_assignments
               WHERE reservation_id = r.id AND released_at IS NULL GROUP BY node_id) y), '{}') AS assigned
     FROM reservations r
     WHERE CASE WHEN $1::text[] IS NULL
                THEN r.state IN ('held', 'confirmed')
                     OR EXISTS (SELECT 1 FROM reservation_pod_assignments a WHERE a.reservation_id = r.id AND a.released_at IS NULL)
                ELSE r.id = ANY ($1) END`,
    [ids],
  );
  return new Map(
    rows.map((r) => [
      r.id as string,
      {
        state: r.state,
        tenantId: r.tenant_id,
        poolId: r.pool_id,
        start: r.start,
        end: r.end,
        atoms: new Map(Object.entries(r.atoms as Record<string, string[]>)),
        assigned: new Map(Object.entries(r.assigned as Record<string, number>)),
      },
    ]),
  );
}

/** podHolding for many pods (or, with `uids` null, every pod that holds atoms): pod uid → node. */
export async function loadHoldings(c: Queryable, uids: readonly string[] | null): Promise<Map<string, string>> {
  const { rows } = await c.query<{ pod_uid: string; node_id: string }>(
    `SELECT pod_uid, node_id, 0 AS o FROM allocations
     WHERE kind = 'pod' AND released_at IS NULL AND pod_uid IS NOT NULL AND ($1::text[] IS NULL OR pod_uid = ANY ($1))
     UNION ALL SELECT pod_uid, node_id, 1 FROM reservation_pod_assignments
     WHERE released_at IS NULL AND ($1::text[] IS NULL OR pod_uid = ANY ($1))
     ORDER BY 3`,
    [uids],
  );
  const out = new Map<string, string>();
  // As podHolding: an on-demand booking first.
  for (const r of rows) if (!out.has(r.pod_uid)) out.set(r.pod_uid, r.node_id);
  return out;
}

export interface QuotaRow {
  tenantId: string;
  poolId: string;
  resource: string;
  max: number | null;
  /** Charges that have not ended, [start, end) in epoch ms (end Infinity when unbounded). */
  charges: { start: number; end: number; amount: number }[];
}

/**
 * Quota keys (every one, with `keys` null) with their limit and, when limited, their charges that have not ended. A key
 * with overrides loads as unlimited: the filter leaves it to bind (ADR 0012).
 */
export async function loadQuotas(c: Queryable, keys: readonly { tenantId: string; poolId: string; resource: string }[] | null): Promise<QuotaRow[]> {
  const { rows } = await c.query(
    `SELECT q.tenant_id, q.pool_id, q.resource, CASE WHEN q.has_overrides THEN NULL ELSE q.max END AS max,
            CASE WHEN q.max IS NULL OR q.has_overrides THEN '[]'::json ELSE coalesce((
              SELECT json_agg(json_build_array((extract(epoch FROM lower(ch.during)) * 1000)::float8,
                                               CASE WHEN upper_inf(ch.during) OR upper(ch.during) = 'infinity' THEN NULL
                                                    ELSE (extract(epoch FROM upper(ch.during)) * 1000)::float8 END,
                                               ch.amount))
              FROM quota_charges ch
              WHERE ch.tenant_id = q.tenant_id AND ch.pool_id = q.pool_id AND ch.resource = q.resource
                AND NOT isempty(ch.during) AND upper(ch.during) > compute_now()), '[]'::json) END AS charges
     FROM quotas q
     WHERE $1::jsonb IS NULL OR (q.tenant_id, q.pool_id, q.resource) IN (
       SELECT k ->> 0, k ->> 1, k ->> 2 FROM jsonb_array_elements($1::jsonb) k)`,
    [keys ? JSON.stringify(keys.map((k) => [k.tenantId, k.poolId, k.resource])) : null],
  );
  return rows.map((r) => ({
    tenantId: r.tenant_id,
    poolId: r.pool_id,
    resource: r.resource,
    max: r.max,
    charges: (r.charges as [number, number | null, number][]).map(([start, end, amount]) => ({ start, end: end ?? Infinity, amount })),
  }));
}

/** node id → pool id (null: none) for the given nodes (those not in the ledger are missing). */
export async function nodePoolsOf(c: Queryable, ids: readonly string[]): Promise<Map<string, string | null>> {
  // Named: the extender's state runs it for every node a bind changes.
  const { rows } = await c.query<{ id: string; pool_id: string | null }>({ name: 'bc_node_pools_of', text: 'SELECT id, pool_id FROM nodes WHERE id = ANY ($1)', values: [ids] });
  return new Map(rows.map((r) => [r.id, r.pool_id]));
}
