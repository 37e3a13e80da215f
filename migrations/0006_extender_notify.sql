-- The scheduler extender answers filter and prioritize from memory (src/extender/state.ts, ADR 0010). It learns what
-- changed from these notifications on channel `bc_extender`, sent at commit, and reloads only that. A payload is a JSON
-- array naming one thing:
--   ["n", node]                   a node, its devices, their bookings or its scalar counters
--   ["p", pool]                   a pool or its offerings
--   ["r", reservation]            a reservation, its allocations or its pods' assignments
--   ["u", pod uid]                what the pod holds (an on-demand allocation, or an assignment)
--   ["q", tenant, pool, resource] a quota key: its limit, or the charges of a limited key
-- Identical payloads of one transaction are sent once. The hot tables (allocations, quota_charges, devices,
-- node_resources) notify per statement from their transition tables; the others per row. Bookings are not watched:
-- every booking statement goes with one on its allocation (bc_place, bc_release_allocations, a layout change), and the
-- periodic full resync repairs anything a notification missed.

CREATE FUNCTION bc_extender_notify(p_payloads text[]) RETURNS void LANGUAGE sql AS $$
  SELECT pg_notify('bc_extender', x) FROM (SELECT DISTINCT unnest(p_payloads) AS x) s WHERE x IS NOT NULL
$$;

-- Per row: pools, offerings, nodes, reservations, assignments, quota limits.
CREATE FUNCTION bc_extender_row_changed() RETURNS trigger LANGUAGE plpgsql AS $$
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

CREATE TRIGGER trigger$pools$extender AFTER INSERT OR UPDATE OR DELETE ON pools
  FOR EACH ROW EXECUTE FUNCTION bc_extender_row_changed();
CREATE TRIGGER trigger$pool_offerings$extender AFTER INSERT OR UPDATE OR DELETE ON pool_offerings
  FOR EACH ROW EXECUTE FUNCTION bc_extender_row_changed();
CREATE TRIGGER trigger$nodes$extender AFTER INSERT OR UPDATE OR DELETE ON nodes
  FOR EACH ROW EXECUTE FUNCTION bc_extender_row_changed();
CREATE TRIGGER trigger$reservations$extender AFTER INSERT OR UPDATE OR DELETE ON reservations
  FOR EACH ROW EXECUTE FUNCTION bc_extender_row_changed();
CREATE TRIGGER trigger$reservation_pod_assignments$extender AFTER INSERT OR UPDATE OR DELETE ON reservation_pod_assignments
  FOR EACH ROW EXECUTE FUNCTION bc_extender_row_changed();
-- Every booking of a limited key rewrites its counters (used, reserved): only a new key or a new limit matters here.
CREATE TRIGGER trigger$quotas$extender_insert AFTER INSERT OR DELETE ON quotas
  FOR EACH ROW EXECUTE FUNCTION bc_extender_row_changed();
CREATE TRIGGER trigger$quotas$extender_update AFTER UPDATE ON quotas
  FOR EACH ROW WHEN (OLD.max IS DISTINCT FROM NEW.max) EXECUTE FUNCTION bc_extender_row_changed();

-- Per statement: allocations (node, reservation, pod), quota charges (key), devices and scalar counters (node).
CREATE FUNCTION bc_extender_allocations_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM bc_extender_notify(ARRAY(
    SELECT json_build_array('n', node_id)::text FROM new_rows
    UNION SELECT json_build_array('r', reservation_id)::text FROM new_rows WHERE reservation_id IS NOT NULL
    UNION SELECT json_build_array('u', pod_uid)::text FROM new_rows WHERE kind = 'pod' AND pod_uid IS NOT NULL));
  RETURN NULL;
END $$;
CREATE TRIGGER trigger$allocations$extender_insert AFTER INSERT ON allocations REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION bc_extender_allocations_changed();
CREATE TRIGGER trigger$allocations$extender_update AFTER UPDATE ON allocations REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION bc_extender_allocations_changed();

-- Only a limited key's charges matter to filter. A limit set later notifies through its quota row, and its reload
-- reads the charges: bc_place holds a share lock on an unlimited key's row, so a limit waits for charges in flight.
CREATE FUNCTION bc_extender_charges_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM bc_extender_notify(ARRAY(
    SELECT json_build_array('q', k.tenant_id, k.pool_id, k.resource)::text
    FROM (SELECT DISTINCT tenant_id, pool_id, resource FROM new_rows) k
    JOIN quotas q ON q.tenant_id = k.tenant_id AND q.pool_id = k.pool_id AND q.resource = k.resource
    WHERE q.max IS NOT NULL));
  RETURN NULL;
END $$;
CREATE TRIGGER trigger$quota_charges$extender_insert AFTER INSERT ON quota_charges REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION bc_extender_charges_changed();
CREATE TRIGGER trigger$quota_charges$extender_update AFTER UPDATE ON quota_charges REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION bc_extender_charges_changed();

-- An update may move a device to another node: both nodes are named.
CREATE FUNCTION bc_extender_node_parts_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'UPDATE' THEN
    PERFORM bc_extender_notify(ARRAY(SELECT json_build_array('n', node_id)::text FROM new_rows
                                     UNION SELECT json_build_array('n', node_id)::text FROM old_rows));
  ELSE
    PERFORM bc_extender_notify(ARRAY(SELECT json_build_array('n', node_id)::text FROM new_rows));
  END IF;
  RETURN NULL;
END $$;
CREATE TRIGGER trigger$devices$extender_insert AFTER INSERT ON devices REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION bc_extender_node_parts_changed();
CREATE TRIGGER trigger$devices$extender_update AFTER UPDATE ON devices REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION bc_extender_node_parts_changed();
CREATE TRIGGER trigger$node_resources$extender_insert AFTER INSERT ON node_resources REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION bc_extender_node_parts_changed();
CREATE TRIGGER trigger$node_resources$extender_update AFTER UPDATE ON node_resources
  REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION bc_extender_node_parts_changed();
