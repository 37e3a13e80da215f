-- Group commit for the placer: the placements that one process has waiting are committed together, in one statement and
-- one transaction (one round trip, one WAL flush), instead of one transaction each.
--
-- Each item runs bc_place() in a subtransaction of its own, in the order given, so items see each other's writes as
-- consecutive transactions would (quota peaks, idempotency keys), and one item's failure never touches another's
-- result: a refused guard or lost race comes back as bc_place's {"ok": false, "code": ...}; an error bc_place raises
-- (a deadlock, 40001 from a quota limit set meanwhile, a unique violation) is caught here, its writes undone, and comes
-- back as {"ok": false, "error": {"code": SQLSTATE, "message", "constraint"}} for that item's caller to raise.
-- A statement timeout or cancel (which no handler catches) still fails the whole batch, as it failed one placement.
--
-- Every item takes two subtransaction ids (this block and bc_place's own); callers keep batches at or under 32 items so
-- that a transaction stays within the 64 subtransactions PostgreSQL tracks per backend in shared memory (beyond that,
-- every other session's snapshots look subtransactions up in pg_subtrans, which is slow).
CREATE FUNCTION bc_place_batch(p jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v_item jsonb;
  v_out jsonb[] := '{}';
  v_state text;
  v_message text;
  v_constraint text;
BEGIN
  FOR v_item IN SELECT value FROM jsonb_array_elements(p) WITH ORDINALITY ORDER BY ordinality LOOP
    BEGIN
      v_out := v_out || bc_place(v_item);
    EXCEPTION WHEN OTHERS THEN
      GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_message = MESSAGE_TEXT, v_constraint = CONSTRAINT_NAME;
      v_out := v_out || jsonb_build_object('ok', false, 'error',
        jsonb_build_object('code', v_state, 'message', v_message, 'constraint', nullif(v_constraint, '')));
    END;
  END LOOP;
  RETURN to_jsonb(v_out);
END $$;
