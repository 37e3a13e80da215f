-- The periodic rebuild: in one statement (one snapshot), replace every rollup row by the computation and drop the
-- deltas that snapshot saw; deltas of transactions it did not see stay, and add on top.
CREATE OR REPLACE FUNCTION bc_rebuild_rollup() RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
  v_n integer;
BEGIN
  -- One rebuild or fold at a time, across replicas; the statement below takes its snapshot after the lock.
  PERFORM pg_advisory_xact_lock(4242002);
  WITH computed AS (
    SELECT p.id AS pool_id, r.resource, coalesce(c.total, 0) AS total, coalesce(c.allocatable, 0) AS allocatable,
           coalesce(c.allocated, 0) AS allocated, coalesce(c.reserved, 0) AS reserved,
           coalesce(c.provisioning, 0) AS provisioning, coalesce(c.unhealthy, 0) AS unhealthy,
           coalesce(c.maintenance, 0) AS maintenance, coalesce(c.unreachable, 0) AS unreachable
    FROM pools p
    CROSS JOIN (SELECT DISTINCT resource FROM (
      SELECT resource FROM bc_compute_rollup() UNION SELECT resource FROM pool_capacity_rollup UNION SELECT 'gpu') x) r
    LEFT JOIN bc_compute_rollup() c ON c.pool_id = p.id AND c.resource = r.resource
  ), dropped AS (
    DELETE FROM pool_capacity_deltas RETURNING 1
  ), written AS (
    INSERT INTO pool_capacity_rollup AS t (pool_id, resource, total, allocatable, allocated, reserved, provisioning,
                                           unhealthy, maintenance, unreachable, updated_at)
    SELECT pool_id, resource, total, allocatable, allocated, reserved, provisioning, unhealthy, maintenance, unreachable,
           compute_now()
    FROM computed
    WHERE total <> 0 OR resource = 'gpu' OR EXISTS (
      SELECT 1 FROM pool_capacity_rollup x WHERE x.pool_id = computed.pool_id AND x.resource = computed.resource)
    ON CONFLICT (pool_id, resource) DO UPDATE SET total = EXCLUDED.total, allocatable = EXCLUDED.allocatable,
      allocated = EXCLUDED.allocated, reserved = EXCLUDED.reserved, provisioning = EXCLUDED.provisioning,
      unhealthy = EXCLUDED.unhealthy, maintenance = EXCLUDED.maintenance, unreachable = EXCLUDED.unreachable,
      updated_at = EXCLUDED.updated_at
    RETURNING 1
  )
  SELECT (SELECT count(*) FROM written)::integer + 0 * (SELECT count(*) FROM dropped)::integer INTO v_n;
  RETURN v_n;
END $$;
