// SQL for pod assignments and on-demand admission leases (migrations/0005_pod_assignments.sql): one statement each.
import type { Db } from '../db/pool.ts';

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

/** A reservation's atoms per node and its live assignments per node (two statements, one round trip each). */
export async function reservationAtoms(db: Queryable, reservationId: string): Promise<ReservationAtoms | undefined> {
  const { rows } = await db.query(
    `SELECT r.state, r.tenant_id, r.pool_id,
            (extract(epoch FROM r.starts_at) * 1000)::float8 AS start, (extract(epoch FROM r.ends_at) * 1000)::float8 AS "end",
            coalesce((SELECT json_object_agg(x.node_id, x.atoms) FROM (
               SELECT a.node_id, array_agg(b.device_id ORDER BY b.device_id) AS atoms
               FROM allocations a JOIN device_bookings b ON b.allocation_id = a.id
               WHERE a.reservation_id = r.id AND a.released_at IS NULL AND NOT isempty(b.during)
               GROUP BY a.node_id) x), '{}') AS atoms,
            coalesce((SELECT json_object_agg(y.node_id, y.n) FROM (
               SELECT node_id, sum(count)::int AS n FROM reservation_pod_assignments
               WHERE reservation_id = r.id AND released_at IS NULL GROUP BY node_id) y), '{}') AS assigned
     FROM reservations r WHERE r.id = $1`,
    [reservationId],
  );
  const r = rows[0];
  if (!r) return undefined;
  return {
    state: r.state,
    tenantId: r.tenant_id,
    poolId: r.pool_id,
    start: r.start,
    end: r.end,
    atoms: new Map(Object.entries(r.atoms as Record<string, string[]>)),
    assigned: new Map(Object.entries(r.assigned as Record<string, number>)),
  };
}

/**
 * Records a pod's assignment to `count` of its reservation's atoms on a node, if they are not all assigned already.
 * Checked here, under the reservation's row lock, with the database's clock: that the reservation is the pod's
 * tenant's (`tenantId`, of the pod's namespace), held or confirmed, and that now is inside its window. So concurrent
 * binds of one reservation count one after another, and a bind cannot land outside the window it was filtered in.
 * Idempotent per pod. Returns 'ok', 'existing' or the reason it does not fit.
 */
export async function assignPod(
  c: Queryable,
  a: { podUid: string; reservationId: string; tenantId: string; nodeId: string; namespace: string; podName: string; count: number },
): Promise<{ ok: true; existing: boolean } | { ok: false; reason: string }> {
  const { rows } = await c.query(
    `WITH r AS (SELECT id, state, tenant_id, starts_at <= compute_now() AS started, compute_now() < ends_at AS open,
                       (extract(epoch FROM starts_at) * 1000)::float8 AS start_ms, (extract(epoch FROM ends_at) * 1000)::float8 AS end_ms
                FROM reservations WHERE id = $2 FOR UPDATE),
     existing AS (SELECT node_id FROM reservation_pod_assignments WHERE pod_uid = $1 AND released_at IS NULL),
     held AS (SELECT count(*)::int AS n FROM allocations al JOIN device_bookings b ON b.allocation_id = al.id
              WHERE al.reservation_id = $2 AND al.node_id = $3 AND al.released_at IS NULL AND NOT isempty(b.during)
                AND upper(b.during) > compute_now()),
     used AS (SELECT coalesce(sum(count), 0)::int AS n FROM reservation_pod_assignments
              WHERE reservation_id = $2 AND node_id = $3 AND released_at IS NULL)
     SELECT (SELECT state FROM r) AS state, (SELECT tenant_id FROM r) AS tenant_id,
            (SELECT started FROM r) AS started, (SELECT open FROM r) AS open,
            (SELECT start_ms FROM r) AS start_ms, (SELECT end_ms FROM r) AS end_ms,
            (SELECT node_id FROM existing) AS existing, held.n AS held, used.n AS used
     FROM held, used`,
    [a.podUid, a.reservationId, a.nodeId],
  );
  const r = rows[0]!;
  if (!r.state) return { ok: false, reason: `reservation ${a.reservationId} not found` };
  // Neither the other tenant's name nor the window is told: the reason ends up in the pod's events.
  if (r.tenant_id !== a.tenantId) return { ok: false, reason: `reservation ${a.reservationId} belongs to another tenant than ${a.tenantId} (namespace ${a.namespace})` };
  if (r.state !== 'held' && r.state !== 'confirmed') return { ok: false, reason: `reservation ${a.reservationId} is ${r.state}` };
  if (!r.started) return { ok: false, reason: `reservation ${a.reservationId} starts at ${new Date(r.start_ms as number).toISOString()}` };
  if (!r.open) return { ok: false, reason: `reservation ${a.reservationId} ended at ${new Date(r.end_ms as number).toISOString()}` };
  if (r.existing) return r.existing === a.nodeId ? { ok: true, existing: true } : { ok: false, reason: `pod is assigned to ${r.existing}` };
  if (r.used + a.count > r.held) {
    return { ok: false, reason: `reservation ${a.reservationId} holds ${r.held} atoms on ${a.nodeId}, ${r.used} assigned; pod asks ${a.count}` };
  }
  await c.query(
    `INSERT INTO reservation_pod_assignments (pod_uid, reservation_id, node_id, namespace, pod_name, count)
     VALUES ($1, $2, $3, $4, $5, $6)`,
    [a.podUid, a.reservationId, a.nodeId, a.namespace, a.podName, a.count],
  );
  return { ok: true, existing: false };
}

/** Frees a pod's live assignment. Returns whether there was one. */
export async function releaseAssignment(c: Queryable, podUid: string): Promise<boolean> {
  const { rowCount } = await c.query(
    `UPDATE reservation_pod_assignments SET released_at = compute_now() WHERE pod_uid = $1 AND released_at IS NULL`,
    [podUid],
  );
  return (rowCount ?? 0) > 0;
}

/** Live assignments of a reservation (for eviction when it ends). */
export async function assignmentsOf(c: Queryable, reservationId: string): Promise<{ podUid: string; namespace: string; podName: string }[]> {
  const { rows } = await c.query(
    `SELECT pod_uid, namespace, pod_name FROM reservation_pod_assignments WHERE reservation_id = $1 AND released_at IS NULL`,
    [reservationId],
  );
  return rows.map((r) => ({ podUid: r.pod_uid, namespace: r.namespace, podName: r.pod_name }));
}

export interface Admission {
  nodeId: string;
  podUid: string;
  namespace: string;
  podName: string;
  atoms: string[];
}

/**
 * Takes the node's on-demand admission lease for a pod: free, expired, or already this pod's. Returns false when
 * another pod's admission is in flight there.
 */
export async function takeAdmission(
  c: Queryable,
  a: { nodeId: string; podUid: string; namespace: string; podName: string; ttlSeconds: number },
): Promise<boolean> {
  const { rowCount } = await c.query(
    `INSERT INTO ondemand_admissions (node_id, pod_uid, namespace, pod_name, expires_at)
     VALUES ($1, $2, $3, $4, compute_now() + make_interval(secs => $5))
     ON CONFLICT (node_id) DO UPDATE SET pod_uid = EXCLUDED.pod_uid, namespace = EXCLUDED.namespace,
       pod_name = EXCLUDED.pod_name, atoms = CASE WHEN ondemand_admissions.pod_uid = EXCLUDED.pod_uid THEN ondemand_admissions.atoms ELSE '{}' END,
       taken_at = compute_now(), expires_at = EXCLUDED.expires_at
     WHERE ondemand_admissions.pod_uid = EXCLUDED.pod_uid OR ondemand_admissions.expires_at <= compute_now()`,
    [a.nodeId, a.podUid, a.namespace, a.podName, a.ttlSeconds],
  );
  return (rowCount ?? 0) > 0;
}

export async function setAdmissionAtoms(c: Queryable, nodeId: string, podUid: string, atoms: string[]): Promise<void> {
  await c.query(`UPDATE ondemand_admissions SET atoms = $3 WHERE node_id = $1 AND pod_uid = $2`, [nodeId, podUid, atoms]);
}

/** Ends an admission (the agent allocated, the bind failed, or the pod went). Only the holder's lease is dropped. */
export async function dropAdmission(c: Queryable, nodeId: string | null, podUid: string): Promise<boolean> {
  const { rowCount } = await c.query(
    `DELETE FROM ondemand_admissions WHERE pod_uid = $2 AND ($1::text IS NULL OR node_id = $1)`,
    [nodeId, podUid],
  );
  return (rowCount ?? 0) > 0;
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

/** The tenant's peak quota use in the window and its limit, per resource (no row: unlimited). */
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
     FROM quotas q WHERE q.tenant_id = $1 AND q.pool_id = $2 AND q.resource = ANY ($3) AND q.max IS NOT NULL`,
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
 * The reservations (held or confirmed) whose window holds `atMs` and that hold atoms on a node: their live atoms
 * there. What the node's agent serves one endpoint each for.
 */
export async function activeReservationsOnNode(
  c: Queryable,
  nodeId: string,
  atMs: number,
): Promise<{ reservationId: string; start: number; end: number; atoms: string[] }[]> {
  const { rows } = await c.query(
    `SELECT r.id, (extract(epoch FROM r.starts_at) * 1000)::float8 AS start, (extract(epoch FROM r.ends_at) * 1000)::float8 AS "end",
            array_agg(DISTINCT b.device_id ORDER BY b.device_id) AS atoms
     FROM reservations r
     JOIN allocations a ON a.reservation_id = r.id AND a.node_id = $1 AND a.released_at IS NULL
     JOIN device_bookings b ON b.allocation_id = a.id AND NOT isempty(b.during)
     WHERE r.state IN ('held', 'confirmed') AND r.starts_at <= to_timestamp($2::float8 / 1000) AND r.ends_at > to_timestamp($2::float8 / 1000)
     GROUP BY r.id ORDER BY r.id`,
    [nodeId, atMs],
  );
  return rows.map((r) => ({ reservationId: r.id, start: r.start, end: r.end, atoms: r.atoms }));
}
