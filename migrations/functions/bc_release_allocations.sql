-- Release allocations at p_at (default compute_now()): bookings and charges are truncated (emptied when they had not
-- started by then), scalar counters given back now (counters are not time-aware; a placement that follows in the same
-- transaction claims its own), quota counters recomputed. Idempotent. Returns the number of allocations released.
CREATE OR REPLACE FUNCTION bc_release_allocations(p_ids text[], p_at timestamptz DEFAULT NULL) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
  v_at timestamptz := coalesce(p_at, compute_now());
  v_released jsonb;
  v_row record;
BEGIN
  IF v_at < compute_now() THEN
    RAISE EXCEPTION 'release time % is in the past', v_at;
  END IF;
  -- The placer's locks, in its order: nodes, then atoms. A concurrent cordon or health flip then lands wholly before
  -- or wholly after this release, and the capacity rollup's deltas see one consistent state. Then writes in the
  -- placer's order (bookings, node counters by node, quota rows by key), so a release and a placement wait for each
  -- other at most one way.
  PERFORM 1 FROM nodes WHERE id IN (SELECT node_id FROM allocations WHERE id = ANY (p_ids)) ORDER BY id FOR SHARE;
  PERFORM 1 FROM devices WHERE id IN (SELECT device_id FROM device_bookings WHERE allocation_id = ANY (p_ids))
    ORDER BY id FOR SHARE;
  WITH released AS (
    UPDATE allocations SET released_at = v_at WHERE id = ANY (p_ids) AND released_at IS NULL RETURNING node_id, scalars
  )
  SELECT coalesce(jsonb_agg(jsonb_build_object('node_id', node_id, 'scalars', scalars)), '[]') INTO v_released FROM released;

  UPDATE device_bookings SET during = CASE WHEN lower(during) >= v_at THEN 'empty'::tstzrange
                                           ELSE tstzrange(lower(during), v_at, '[)') END
  WHERE allocation_id = ANY (p_ids) AND NOT isempty(during) AND upper(during) > v_at;

  FOR v_row IN
    SELECT r.node_id, s.key AS resource, sum(s.value::integer)::integer AS amount
    FROM jsonb_to_recordset(v_released) AS r(node_id text, scalars jsonb), jsonb_each_text(r.scalars) s
    GROUP BY r.node_id, s.key HAVING sum(s.value::integer) > 0 ORDER BY 1, 2
  LOOP
    UPDATE node_resources SET allocated = allocated - v_row.amount
    WHERE node_id = v_row.node_id AND resource = v_row.resource;
  END LOOP;

  FOR v_row IN
    WITH truncated AS (
      UPDATE quota_charges SET during = CASE WHEN lower(during) >= v_at THEN 'empty'::tstzrange
                                             ELSE tstzrange(lower(during), v_at, '[)') END
      WHERE allocation_id = ANY (p_ids) AND NOT isempty(during) AND upper(during) > v_at
      RETURNING tenant_id, pool_id, resource
    )
    SELECT DISTINCT tenant_id, pool_id, resource FROM truncated ORDER BY 1, 2, 3
  LOOP
    PERFORM 1 FROM quotas WHERE tenant_id = v_row.tenant_id AND pool_id = v_row.pool_id AND resource = v_row.resource
      AND max IS NOT NULL FOR UPDATE;
    IF FOUND THEN
      PERFORM bc_refresh_quota(v_row.tenant_id, v_row.pool_id, v_row.resource);
    END IF;
  END LOOP;
  RETURN jsonb_array_length(v_released);
END $$;
