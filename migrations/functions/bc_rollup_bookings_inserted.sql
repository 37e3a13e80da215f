-- last defined in 0017_placer_plans.sql
-- 2. The booking rollup counts the inserted bookings in its own query, with compute_now() read once, instead of
--    through the SQL function bc_booking_counts (0003), which PostgreSQL parses and plans on every call. The update
--    trigger still uses it; the counts are the same.
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
