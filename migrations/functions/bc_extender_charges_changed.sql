-- Only a limited key's charges matter to filter. A limit set later notifies through its quota row, and its reload
-- reads the charges: bc_place holds a share lock on an unlimited key's row, so a limit waits for charges in flight.
CREATE OR REPLACE FUNCTION bc_extender_charges_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM bc_extender_notify(ARRAY(
    SELECT json_build_array('q', k.tenant_id, k.pool_id, k.resource)::text
    FROM (SELECT DISTINCT tenant_id, pool_id, resource FROM new_rows) k
    JOIN quotas q ON q.tenant_id = k.tenant_id AND q.pool_id = k.pool_id AND q.resource = k.resource
    WHERE q.max IS NOT NULL));
  RETURN NULL;
END $$;
