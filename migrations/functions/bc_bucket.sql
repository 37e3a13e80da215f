-- Where one atom (or a node's scalar capacity) counts, from its node's state.
-- An archived pool takes no new bookings: its atoms count under maintenance.
CREATE OR REPLACE FUNCTION bc_bucket(n nodes, pool_owner text, pool_archived boolean, healthy boolean) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE
    WHEN n.role <> 'host' OR n.trust = 'tenant-controlled'
         OR (n.trust = 'tenant-owned' AND n.owner_tenant IS DISTINCT FROM pool_owner) THEN 'excluded'
    WHEN n.provision_state NOT IN ('adopted', 'deployed') OR NOT n.converged THEN 'provisioning'
    WHEN n.maintenance OR n.cordoned OR pool_archived THEN 'maintenance'
    WHEN n.connectivity <> 'connected' THEN 'unreachable'
    WHEN n.noschedule_reason IS NOT NULL OR NOT healthy THEN 'unhealthy'
    ELSE 'allocatable'
  END
$$;
