-- Devices (health, bookable, present) or scalar counters inserted or changed: old and new images on the current node
-- rows. Changes of one node's devices or counters and of the node itself take turns (the node row's lock), so each
-- trigger counts against a state that includes the other's change.
CREATE OR REPLACE FUNCTION bc_rollup_node_parts_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  v_node_ids text[];
  v_nodes nodes[];
  v_old_devices devices[] := '{}';
  v_new_devices devices[] := '{}';
  v_old_resources node_resources[] := '{}';
  v_new_resources node_resources[] := '{}';
BEGIN
  IF TG_OP = 'INSERT' THEN
    v_node_ids := ARRAY(SELECT DISTINCT node_id FROM new_rows);
  ELSE
    v_node_ids := ARRAY(SELECT node_id FROM new_rows UNION SELECT node_id FROM old_rows);
  END IF;
  PERFORM 1 FROM nodes WHERE id = ANY (v_node_ids) ORDER BY id FOR SHARE;
  v_nodes := ARRAY(SELECT n::nodes FROM nodes n WHERE n.id = ANY (v_node_ids));
  IF TG_TABLE_NAME = 'devices' THEN
    v_new_devices := ARRAY(SELECT d::devices FROM new_rows d);
    IF TG_OP = 'UPDATE' THEN v_old_devices := ARRAY(SELECT d::devices FROM old_rows d); END IF;
  ELSE
    v_new_resources := ARRAY(SELECT r::node_resources FROM new_rows r);
    IF TG_OP = 'UPDATE' THEN v_old_resources := ARRAY(SELECT r::node_resources FROM old_rows r); END IF;
  END IF;
  PERFORM bc_append_deltas(v_nodes, v_old_devices, v_old_resources, v_nodes, v_new_devices, v_new_resources);
  RETURN NULL;
END $$;
