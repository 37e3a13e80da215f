-- The full computation from nodes, devices, bookings and counters, for every pool (or one).
CREATE OR REPLACE FUNCTION bc_compute_rollup(p_pool text DEFAULT NULL)
RETURNS TABLE (pool_id text, resource text, total bigint, allocatable bigint, allocated bigint, reserved bigint,
               provisioning bigint, unhealthy bigint, maintenance bigint, unreachable bigint)
LANGUAGE sql STABLE AS $$
  SELECT * FROM bc_contrib(
    ARRAY(SELECT n::nodes FROM nodes n WHERE n.pool_id IS NOT NULL AND (p_pool IS NULL OR n.pool_id = p_pool)),
    ARRAY(SELECT d::devices FROM devices d JOIN nodes n ON n.id = d.node_id WHERE p_pool IS NULL OR n.pool_id = p_pool),
    ARRAY(SELECT r::node_resources FROM node_resources r JOIN nodes n ON n.id = r.node_id WHERE p_pool IS NULL OR n.pool_id = p_pool))
$$;
