// Read-only ledger lookups the Reservation reconciler needs that the Ledger does not offer (yet): the reservation a
// tenant's idempotency key (the Reservation's metadata.uid) booked. Used on deletion when the status never recorded
// the id (a crash between the booking and the status write). To move into src/db/ledger.ts (asked of its owner).
import type { Db } from '../../db/pool.ts';

export async function reservationIdByKey(db: Db, tenantId: string, idempotencyKey: string): Promise<string | undefined> {
  const { rows } = await db.query<{ id: string }>(
    'SELECT id FROM reservations WHERE tenant_id = $1 AND idempotency_key = $2',
    [tenantId, idempotencyKey],
  );
  return rows[0]?.id;
}
