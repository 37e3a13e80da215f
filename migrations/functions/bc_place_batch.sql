-- last defined in 0014_bind_admission.sql
-- bc_place_batch as 0009 left it (0007's comments: the locks taken first, one subtransaction per item; 0009's: only
-- quota rows without any limit are locked FOR SHARE up front), with the admission step.
-- The lease row is locked after bc_place's rows, the order releasePodHoldings and the moved booking take them in.
CREATE OR REPLACE FUNCTION bc_place_batch(p jsonb) RETURNS jsonb LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  v_item jsonb;
  v_result jsonb;
  v_admission jsonb;
  v_out jsonb[] := '{}';
  v_state text;
  v_message text;
  v_constraint text;
BEGIN
  PERFORM 1 FROM pools WHERE id = ANY (ARRAY(SELECT x ->> 'poolId' FROM jsonb_array_elements(p) x)) ORDER BY id
    FOR KEY SHARE;
  PERFORM 1 FROM nodes
  WHERE id = ANY (ARRAY(SELECT a ->> 'nodeId' FROM jsonb_array_elements(p) x, jsonb_array_elements(x -> 'allocations') a))
  ORDER BY id FOR SHARE;
  PERFORM 1 FROM quotas q
  WHERE (q.tenant_id, q.pool_id) IN (SELECT DISTINCT x ->> 'tenantId', x ->> 'poolId' FROM jsonb_array_elements(p) x)
    AND q.max IS NULL AND q.hour_limit IS NULL AND NOT q.has_overrides
  ORDER BY q.tenant_id, q.pool_id, q.resource FOR SHARE;
  FOR v_item IN SELECT value FROM jsonb_array_elements(p) WITH ORDINALITY ORDER BY ordinality LOOP
    BEGIN
      v_result := bc_place(v_item - 'admission');
      v_admission := v_item -> 'admission';
      IF v_admission IS NOT NULL AND (v_result ->> 'ok')::boolean THEN
        IF jsonb_array_length(v_item -> 'allocations') <> 1 OR v_admission ->> 'nodeId' <> v_item -> 'allocations' -> 0 ->> 'nodeId' THEN
          RAISE EXCEPTION 'an admission goes with one allocation on its node';
        END IF;
        IF NOT bc_take_admission(v_admission ->> 'nodeId', v_admission ->> 'podUid', v_admission ->> 'namespace',
                                 v_admission ->> 'podName', (v_admission ->> 'ttlSeconds')::double precision,
                                 ARRAY(SELECT jsonb_array_elements_text(v_item -> 'allocations' -> 0 -> 'atoms'))) THEN
          RAISE EXCEPTION 'another on-demand admission is in flight on node %', v_admission ->> 'nodeId' USING ERRCODE = 'BC010';
        END IF;
      END IF;
      v_out := v_out || v_result;
    EXCEPTION WHEN OTHERS THEN
      GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_message = MESSAGE_TEXT, v_constraint = CONSTRAINT_NAME;
      IF v_state = 'BC010' THEN
        v_out := v_out || jsonb_build_object('ok', false, 'code', 'admission_busy', 'nodeId', v_admission ->> 'nodeId');
      ELSE
        v_out := v_out || jsonb_build_object('ok', false, 'error',
          jsonb_build_object('code', v_state, 'message', v_message, 'constraint', nullif(v_constraint, '')));
      END IF;
    END;
  END LOOP;
  RETURN to_jsonb(v_out);
END $$;
