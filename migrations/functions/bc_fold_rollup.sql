-- Folds the deltas into the rollup without recomputing (cheap; any replica may run it).
CREATE OR REPLACE FUNCTION bc_fold_rollup() RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
  v_n integer;
BEGIN
  PERFORM pg_advisory_xact_lock(4242002);
  WITH moved AS (
    DELETE FROM pool_capacity_deltas RETURNING *
  ), sums AS (
    SELECT pool_id, resource, sum(total)::int AS total, sum(allocatable)::int AS allocatable, sum(allocated)::int AS allocated,
           sum(reserved)::int AS reserved, sum(provisioning)::int AS provisioning, sum(unhealthy)::int AS unhealthy,
           sum(maintenance)::int AS maintenance, sum(unreachable)::int AS unreachable
    FROM moved GROUP BY pool_id, resource
  ), written AS (
    INSERT INTO pool_capacity_rollup AS t (pool_id, resource, total, allocatable, allocated, reserved, provisioning,
                                           unhealthy, maintenance, unreachable, updated_at)
    SELECT s.*, compute_now() FROM sums s JOIN pools p ON p.id = s.pool_id
    ON CONFLICT (pool_id, resource) DO UPDATE SET total = t.total + EXCLUDED.total,
      allocatable = t.allocatable + EXCLUDED.allocatable, allocated = t.allocated + EXCLUDED.allocated,
      reserved = t.reserved + EXCLUDED.reserved, provisioning = t.provisioning + EXCLUDED.provisioning,
      unhealthy = t.unhealthy + EXCLUDED.unhealthy, maintenance = t.maintenance + EXCLUDED.maintenance,
      unreachable = t.unreachable + EXCLUDED.unreachable, updated_at = EXCLUDED.updated_at
    RETURNING 1
  )
  SELECT count(*)::integer FROM written INTO v_n;
  RETURN v_n;
END $$;
