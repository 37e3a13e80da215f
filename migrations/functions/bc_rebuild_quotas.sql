-- The periodic quota rebuild: moves charges that have started from reserved to used, drops ended ones.
CREATE OR REPLACE FUNCTION bc_rebuild_quotas() RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
  v_key record;
  v_n integer := 0;
BEGIN
  FOR v_key IN SELECT tenant_id, pool_id, resource FROM quotas ORDER BY 1, 2, 3 FOR UPDATE LOOP
    PERFORM bc_refresh_quota(v_key.tenant_id, v_key.pool_id, v_key.resource);
    v_n := v_n + 1;
  END LOOP;
  RETURN v_n;
END $$;
