-- The atoms out of service under live or future bookings of live reservations, with why: the node deleted (out of the
-- allocation's pool), in maintenance (the bettercompute.io/maintenance label), not connected for longer than the grace,
-- or the device gone (no longer present or bookable: also a MIG layout change) or unhealthy. A cordon alone is not a
-- loss (a drain keeps its bookings), nor is a node NotReady within the grace. An allocation counts until it is actually
-- released: a spot victim under a preemption notice (released_at at its deadline ahead) is reported Degraded and not
-- re-placed (its pods cannot move, its bookings end at the deadline anyway; ADR 0016).
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
