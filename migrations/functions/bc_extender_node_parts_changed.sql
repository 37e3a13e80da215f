-- An update may move a device to another node: both nodes are named.
CREATE OR REPLACE FUNCTION bc_extender_node_parts_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'UPDATE' THEN
    PERFORM bc_extender_notify(ARRAY(SELECT json_build_array('n', node_id)::text FROM new_rows
                                     UNION SELECT json_build_array('n', node_id)::text FROM old_rows));
  ELSE
    PERFORM bc_extender_notify(ARRAY(SELECT json_build_array('n', node_id)::text FROM new_rows));
  END IF;
  RETURN NULL;
END $$;
