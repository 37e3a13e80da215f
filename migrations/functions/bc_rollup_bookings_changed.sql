-- Bookings changed (a release truncates them): new minus old counts, on allocatable atoms.
CREATE OR REPLACE FUNCTION bc_rollup_bookings_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO pool_capacity_deltas (pool_id, resource, allocated, reserved)
  SELECT pool_id, resource, sum(s * live), sum(s * future)
  FROM (
    SELECT 1 AS s, * FROM bc_booking_counts(ARRAY(SELECT b::device_bookings FROM new_rows b))
    UNION ALL
    SELECT -1, * FROM bc_booking_counts(CASE WHEN TG_OP = 'UPDATE' THEN ARRAY(SELECT b::device_bookings FROM old_rows b) ELSE '{}'::device_bookings[] END)
  ) x
  GROUP BY pool_id, resource
  HAVING sum(s * live) <> 0 OR sum(s * future) <> 0;
  RETURN NULL;
END $$;
