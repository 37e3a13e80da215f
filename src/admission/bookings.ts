// What admission asks the ledger about a reservation: which booking a Reservation's uid made (the reconciler books
// with idempotency key = metadata.uid under the Reservation's tenant, src/controller/reservation/reconciler.ts), whose
// a booking id is, and its window (what the DRA claim allocator decides on, in the same read). Read straight from the
// reservations table; status fields of the Reservation are never trusted for this.
import type { Db } from '../db/pool.ts';

export interface Booking {
  /** rsv_<ulid> */
  id: string;
  tenantId: string;
  /** For a Reservation's booking: the Reservation's metadata.uid (a recurring one's window: `${uid}:${start}`). */
  idempotencyKey: string;
  state: 'held' | 'confirmed' | 'released' | 'expired';
  /** Released, expired, its hold ran out, or its window is over (the database's clock). */
  ended: boolean;
  /** Its window, epoch milliseconds. */
  start: number;
  end: number;
}

export interface BookingLookup {
  /** The booking a Reservation (by metadata.uid) made under `tenantId`, if any. */
  byReservationUid(tenantId: string, uid: string): Promise<Booking | undefined>;
  /** A booking by its id, if any. */
  byId(id: string): Promise<Booking | undefined>;
}

const COLUMNS = `id, tenant_id, idempotency_key, state,
  (state IN ('released', 'expired') OR ends_at <= compute_now()
   OR (state = 'held' AND lease_expires_at <= compute_now())) AS ended,
  (extract(epoch FROM starts_at) * 1000)::float8 AS start_ms, (extract(epoch FROM ends_at) * 1000)::float8 AS end_ms`;

interface Row {
  id: string;
  tenant_id: string;
  idempotency_key: string;
  state: Booking['state'];
  ended: boolean;
  start_ms: number;
  end_ms: number;
}

const toBooking = (r: Row | undefined): Booking | undefined =>
  r && { id: r.id, tenantId: r.tenant_id, idempotencyKey: r.idempotency_key, state: r.state, ended: r.ended, start: r.start_ms, end: r.end_ms };

/**
 * Lookups on the ledger's database (one indexed read each: the idempotency key's unique index, the primary key; a
 * recurring Reservation's windows, a second read).
 */
export function ledgerBookings(db: Db): BookingLookup {
  return {
    async byReservationUid(tenantId, uid) {
      const { rows } = await db.query<Row>(`SELECT ${COLUMNS} FROM reservations WHERE tenant_id = $1 AND idempotency_key = $2`, [tenantId, uid]);
      if (rows[0]) return toBooking(rows[0]);
      // A recurring Reservation's windows are keyed `${uid}:${start}` (ADR 0013): the window under way, else the next
      // one booked, else the last that ended. Only asked when the one-shot key is not there; a scan of the tenant's keys.
      const windows = await db.query<Row>(
        `SELECT * FROM (SELECT ${COLUMNS}, starts_at FROM reservations WHERE tenant_id = $1 AND starts_with(idempotency_key, $2)) w
         ORDER BY ended, CASE WHEN NOT ended THEN starts_at END, starts_at DESC LIMIT 1`,
        [tenantId, `${uid}:`],
      );
      return toBooking(windows.rows[0]);
    },
    async byId(id) {
      const { rows } = await db.query<Row>(`SELECT ${COLUMNS} FROM reservations WHERE id = $1`, [id]);
      return toBooking(rows[0]);
    },
  };
}
