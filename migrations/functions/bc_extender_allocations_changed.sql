-- Per statement: allocations (node, reservation, pod), quota charges (key), devices and scalar counters (node).
CREATE OR REPLACE FUNCTION bc_extender_allocations_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM bc_extender_notify(ARRAY(
    SELECT json_build_array('n', node_id)::text FROM new_rows
    UNION SELECT json_build_array('r', reservation_id)::text FROM new_rows WHERE reservation_id IS NOT NULL
    UNION SELECT json_build_array('u', pod_uid)::text FROM new_rows WHERE kind = 'pod' AND pod_uid IS NOT NULL));
  RETURN NULL;
END $$;
