// Reads of a tenant's reservations for people (the `better-compute reservations` CLI): one row per reservation with
// its pool's name, its window, its state and how many atoms it booked. Reads only.
import type { ReservationState } from './ledger.ts';
import type { Db } from './pool.ts';

export interface ReservationRow {
  id: string;
  /** The idempotency key it was booked with: a Reservation resource's metadata.uid. */
  idempotencyKey: string;
  poolId: string;
  pool: string;
  state: ReservationState;
  spot: boolean;
  start: number;
  end: number;
  leaseExpiresAt: number | null;
  /** Atoms booked (on every node), and the nodes. */
  atoms: number;
  nodes: string[];
}

/**
 * A tenant's reservations, by start: the live ones (held, confirmed), or with `all` the ended ones too; with `ids`,
 * only those (of this tenant: another tenant's id is simply not found).
 */
export async function tenantReservations(
  db: Db,
  tenantId: string,
  opts: { all?: boolean; ids?: readonly string[]; limit?: number } = {},
): Promise<ReservationRow[]> {
  const { rows } = await db.query<ReservationRow>(
    `SELECT r.id, r.idempotency_key AS "idempotencyKey", r.pool_id AS "poolId", p.name AS pool, r.state, r.spot,
            (extract(epoch FROM r.starts_at) * 1000)::float8 AS start, (extract(epoch FROM r.ends_at) * 1000)::float8 AS "end",
            (extract(epoch FROM r.lease_expires_at) * 1000)::float8 AS "leaseExpiresAt",
            -- A booking that a repair cut (lost_at) is history: its replacement is counted instead (ADR 0016).
            (SELECT count(*) FROM allocations a JOIN device_bookings b ON b.allocation_id = a.id
             WHERE a.reservation_id = r.id AND b.lost_at IS NULL)::int AS atoms,
            coalesce((SELECT array_agg(DISTINCT a.node_id ORDER BY a.node_id) FROM allocations a WHERE a.reservation_id = r.id
                        AND NOT (EXISTS (SELECT 1 FROM device_bookings b WHERE b.allocation_id = a.id AND b.lost_at IS NOT NULL)
                                 AND NOT EXISTS (SELECT 1 FROM device_bookings b WHERE b.allocation_id = a.id AND b.lost_at IS NULL))),
                     '{}') AS nodes
     FROM reservations r JOIN pools p ON p.id = r.pool_id
     WHERE r.tenant_id = $1 AND ($2 OR r.state IN ('held', 'confirmed')) AND ($3::text[] IS NULL OR r.id = ANY ($3))
     ORDER BY r.starts_at, r.id
     LIMIT $4`,
    [tenantId, opts.all === true || opts.ids !== undefined, opts.ids ? [...opts.ids] : null, opts.limit ?? 1000],
  );
  return rows;
}
