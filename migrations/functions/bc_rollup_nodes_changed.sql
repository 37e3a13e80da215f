-- Node state or pool membership changed: its atoms and scalars, seen with the old and with the new node row.
CREATE OR REPLACE FUNCTION bc_rollup_nodes_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM bc_append_deltas(
    ARRAY(SELECT o::nodes FROM old_rows o),
    ARRAY(SELECT d::devices FROM devices d WHERE d.node_id IN (SELECT id FROM old_rows)),
    ARRAY(SELECT r::node_resources FROM node_resources r WHERE r.node_id IN (SELECT id FROM old_rows)),
    ARRAY(SELECT n::nodes FROM new_rows n),
    ARRAY(SELECT d::devices FROM devices d WHERE d.node_id IN (SELECT id FROM new_rows)),
    ARRAY(SELECT r::node_resources FROM node_resources r WHERE r.node_id IN (SELECT id FROM new_rows)));
  RETURN NULL;
END $$;
