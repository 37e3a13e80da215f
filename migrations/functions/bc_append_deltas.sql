-- Appends new-minus-old as delta rows (only the pools and resources that changed).
CREATE OR REPLACE FUNCTION bc_append_deltas(p_old_nodes nodes[], p_old_devices devices[], p_old_resources node_resources[],
                                 p_new_nodes nodes[], p_new_devices devices[], p_new_resources node_resources[])
RETURNS void LANGUAGE sql AS $$
  INSERT INTO pool_capacity_deltas (pool_id, resource, total, allocatable, allocated, reserved, provisioning, unhealthy,
                                    maintenance, unreachable)
  SELECT pool_id, resource, sum(s * coalesce(total, 0)), sum(s * coalesce(allocatable, 0)), sum(s * coalesce(allocated, 0)),
         sum(s * coalesce(reserved, 0)), sum(s * coalesce(provisioning, 0)), sum(s * coalesce(unhealthy, 0)),
         sum(s * coalesce(maintenance, 0)), sum(s * coalesce(unreachable, 0))
  FROM (
    SELECT -1 AS s, * FROM bc_contrib(p_old_nodes, p_old_devices, p_old_resources)
    UNION ALL
    SELECT 1, * FROM bc_contrib(p_new_nodes, p_new_devices, p_new_resources)
  ) x
  GROUP BY pool_id, resource
  HAVING sum(s * coalesce(total, 0)) <> 0 OR sum(s * coalesce(allocatable, 0)) <> 0 OR sum(s * coalesce(allocated, 0)) <> 0
      OR sum(s * coalesce(reserved, 0)) <> 0 OR sum(s * coalesce(provisioning, 0)) <> 0 OR sum(s * coalesce(unhealthy, 0)) <> 0
      OR sum(s * coalesce(maintenance, 0)) <> 0 OR sum(s * coalesce(unreachable, 0)) <> 0
$$;
