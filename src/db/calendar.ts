// Reads for the GPU calendar (src/ui/, docs/calendar.md): a pool's nodes with their placement domain, and every
// booking on them that overlaps a window, one row per allocation. Who may see what is decided above (src/ui/layout.ts
// masks other tenants' bookings); these reads return everything in the pool.
import type { Db } from './pool.ts';

export interface CalendarNode {
  id: string;
  /** The value of the pool's topology label on the node; null when the node has none. */
  domain: string | null;
  /** Present, bookable atoms on the node (whole GPUs, MIG instances or slots). */
  atoms: number;
}

export interface CalendarBooking {
  allocationId: string;
  kind: 'reservation' | 'pod';
  nodeId: string;
  tenantId: string | null;
  reservationId: string | null;
  /** [start, end) in epoch ms; end is Infinity for an open-ended on-demand booking. */
  start: number;
  end: number;
  atoms: string[];
}

export interface CalendarReservation {
  id: string;
  tenantId: string;
  idempotencyKey: string;
  state: string;
  spot: boolean;
  start: number;
  end: number;
  preemptAt: number | null;
  repairShort: number;
  repairReason: string | null;
}

const MS = (col: string) => `(extract(epoch FROM ${col}) * 1000)::float8`;

/** The pool's nodes, ordered by domain (unlabelled last) then id. */
export async function calendarNodes(db: Db, poolId: string): Promise<CalendarNode[]> {
  const { rows } = await db.query<{ id: string; domain: string | null; atoms: number }>(
    `SELECT n.id, n.labels ->> p.topology_key AS domain,
            (SELECT count(*)::int FROM devices d WHERE d.node_id = n.id AND d.present AND d.bookable) AS atoms
     FROM nodes n JOIN pools p ON p.id = n.pool_id WHERE n.pool_id = $1
     ORDER BY (n.labels ->> p.topology_key) NULLS LAST, n.id`,
    [poolId],
  );
  return rows;
}

/** Bookings (reservation and on-demand pod allocations, not layout changes) on the pool's nodes overlapping [from, to). */
export async function calendarBookings(db: Db, poolId: string, from: number, to: number): Promise<CalendarBooking[]> {
  const { rows } = await db.query(
    `SELECT a.id, a.kind, a.node_id, coalesce(r.tenant_id, a.tenant_id) AS tenant_id, a.reservation_id,
            min(${MS('lower(b.during)')}) AS start,
            CASE WHEN bool_or(upper_inf(b.during) OR upper(b.during) = 'infinity') THEN NULL ELSE max(${MS('upper(b.during)')}) END AS "end",
            array_agg(b.device_id ORDER BY b.device_id) AS atoms
     FROM allocations a
     JOIN nodes n ON n.id = a.node_id AND n.pool_id = $1
     JOIN device_bookings b ON b.allocation_id = a.id AND NOT isempty(b.during)
     LEFT JOIN reservations r ON r.id = a.reservation_id
     WHERE a.kind IN ('reservation', 'pod')
       AND b.during && tstzrange(to_timestamp($2::float8 / 1000), to_timestamp($3::float8 / 1000))
     GROUP BY a.id, a.kind, a.node_id, r.tenant_id, a.tenant_id, a.reservation_id
     ORDER BY a.node_id, start, a.id`,
    [poolId, from, to],
  );
  return rows.map((r) => ({
    allocationId: r.id,
    kind: r.kind,
    nodeId: r.node_id,
    tenantId: r.tenant_id,
    reservationId: r.reservation_id,
    start: r.start,
    end: r.end ?? Infinity,
    atoms: r.atoms,
  }));
}

/** The tenant's reservations among `ids` (others' are never read). */
export async function calendarReservations(db: Db, tenantId: string, ids: readonly string[]): Promise<CalendarReservation[]> {
  if (ids.length === 0) return [];
  const { rows } = await db.query(
    `SELECT id, tenant_id, idempotency_key, state, spot, ${MS('starts_at')} AS start, ${MS('ends_at')} AS "end",
            CASE WHEN preempt_at IS NULL THEN NULL ELSE ${MS('preempt_at')} END AS preempt_at, repair_short, repair_reason
     FROM reservations WHERE tenant_id = $1 AND id = ANY ($2) ORDER BY starts_at, id`,
    [tenantId, ids],
  );
  return rows.map((r) => ({
    id: r.id,
    tenantId: r.tenant_id,
    idempotencyKey: r.idempotency_key,
    state: r.state,
    spot: r.spot,
    start: r.start,
    end: r.end,
    preemptAt: r.preempt_at,
    repairShort: r.repair_short,
    repairReason: r.repair_reason,
  }));
}
