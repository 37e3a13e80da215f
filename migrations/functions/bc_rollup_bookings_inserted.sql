-- Bookings inserted: the hot path, counted in this one query with compute_now() read once (not through
-- bc_booking_counts, an SQL function PostgreSQL parses and plans on every call; the counts are the same).
CREATE OR REPLACE FUNCTION bc_rollup_bookings_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  v_now timestamptz := compute_now();
BEGIN
  INSERT INTO pool_capacity_deltas (pool_id, resource, allocated, reserved)
  SELECT pool_id, resource, live, future FROM (
    SELECT n.pool_id, d.class AS resource, count(*) FILTER (WHERE b.during @> v_now) AS live,
           count(*) FILTER (WHERE lower(b.during) > v_now) AS future
    FROM new_rows b JOIN devices d ON d.id = b.device_id JOIN nodes n ON n.id = d.node_id JOIN pools p ON p.id = n.pool_id
    WHERE d.present AND d.bookable AND NOT isempty(b.during) AND upper(b.during) > v_now
      AND bc_bucket(n, p.owner_tenant, p.archived, d.healthy) = 'allocatable'
    GROUP BY n.pool_id, d.class
  ) counts
  WHERE live <> 0 OR future <> 0;
  RETURN NULL;
END $$;
