-- Per row: pools, offerings, nodes, reservations, assignments, quota limits.
CREATE OR REPLACE FUNCTION bc_extender_row_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  r record := CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
BEGIN
  IF TG_TABLE_NAME = 'pools' THEN
    PERFORM pg_notify('bc_extender', json_build_array('p', r.id)::text);
  ELSIF TG_TABLE_NAME = 'pool_offerings' THEN
    PERFORM pg_notify('bc_extender', json_build_array('p', r.pool_id)::text);
  ELSIF TG_TABLE_NAME = 'nodes' THEN
    PERFORM pg_notify('bc_extender', json_build_array('n', r.id)::text);
  ELSIF TG_TABLE_NAME = 'reservations' THEN
    PERFORM pg_notify('bc_extender', json_build_array('r', r.id)::text);
  ELSIF TG_TABLE_NAME = 'reservation_pod_assignments' THEN
    PERFORM pg_notify('bc_extender', json_build_array('r', r.reservation_id)::text);
    PERFORM pg_notify('bc_extender', json_build_array('u', r.pod_uid)::text);
  ELSIF TG_TABLE_NAME = 'quotas' THEN
    PERFORM pg_notify('bc_extender', json_build_array('q', r.tenant_id, r.pool_id, r.resource)::text);
  END IF;
  RETURN NULL;
END $$;
