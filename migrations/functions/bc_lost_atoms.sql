-- last defined in 0012_repair_victims.sql
-- A spot reservation under a preemption notice (0011) has its allocations' released_at set to the deadline ahead.
-- BookingRepair looked only at allocations with released_at IS NULL, so a victim that lost an atom before its deadline
-- was neither re-placed nor reported short. bc_lost_atoms (body of 0010_repair.sql; changed: the released_at test) now
-- counts an allocation until it is actually released; the repair pass reports such a victim Degraded and does not
-- re-place it (its pods cannot move, and its bookings end at the deadline anyway; ADR 0016).
CREATE OR REPLACE FUNCTION bc_lost_atoms(p_grace_seconds numeric)
RETURNS TABLE (reservation_id text, allocation_id text, node_id text, device_id text, class text, reason text)
LANGUAGE sql STABLE AS $$
  SELECT a.reservation_id, a.id, a.node_id, b.device_id, d.class,
         CASE WHEN n.pool_id IS DISTINCT FROM a.pool_id THEN 'NodeGone'
              WHEN n.maintenance THEN 'Maintenance'
              WHEN n.connectivity <> 'connected' AND n.unreachable_since <= compute_now() - make_interval(secs => p_grace_seconds)
                THEN 'NodeNotReady'
              WHEN NOT d.present OR NOT d.bookable THEN 'DeviceGone'
              ELSE 'DeviceUnhealthy' END
  FROM device_bookings b
  JOIN allocations a ON a.id = b.allocation_id
  JOIN reservations r ON r.id = a.reservation_id
  JOIN devices d ON d.id = b.device_id
  JOIN nodes n ON n.id = a.node_id
  WHERE a.kind = 'reservation' AND (a.released_at IS NULL OR a.released_at > compute_now()) AND r.state IN ('held', 'confirmed')
    AND NOT isempty(b.during) AND upper(b.during) > compute_now()
    AND (n.pool_id IS DISTINCT FROM a.pool_id OR n.maintenance
         OR (n.connectivity <> 'connected' AND n.unreachable_since <= compute_now() - make_interval(secs => p_grace_seconds))
         OR NOT d.present OR NOT d.bookable OR NOT d.healthy)
  ORDER BY 1, 2, 4
$$;
