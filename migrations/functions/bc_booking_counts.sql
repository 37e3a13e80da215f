-- Bookings: the hot path, so counted directly (allocated/reserved only, on allocatable atoms).
CREATE OR REPLACE FUNCTION bc_booking_counts(p_bookings device_bookings[])
RETURNS TABLE (pool_id text, resource text, live bigint, future bigint) LANGUAGE sql STABLE AS $$
  SELECT n.pool_id, d.class, count(*) FILTER (WHERE b.during @> compute_now()),
         count(*) FILTER (WHERE lower(b.during) > compute_now())
  FROM unnest(p_bookings) b JOIN devices d ON d.id = b.device_id JOIN nodes n ON n.id = d.node_id
  JOIN pools p ON p.id = n.pool_id
  WHERE d.present AND d.bookable AND NOT isempty(b.during) AND upper(b.during) > compute_now()
    AND bc_bucket(n, p.owner_tenant, p.archived, d.healthy) = 'allocatable'
  GROUP BY n.pool_id, d.class
$$;
