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
-- Before the items, the transaction itself (no subtransaction) locks the rows that many items lock again: the pools
-- (FOR KEY SHARE, what the foreign keys of reservations and allocations take), the chosen nodes (FOR SHARE, what
-- bc_place takes), and the unlimited quota rows (FOR SHARE, what bc_place takes for them). A row a subtransaction locks
-- in a mode its top transaction already holds is not locked again; without this, every item's subtransactions join the
-- row's lockers in a MultiXact that grows with the batch. Only locks bc_place would take anyway, in its order (nodes,
-- then quota rows), taken earlier; bc_place still checks every guard under them. A quota row that gets a limit meanwhile
-- is not locked here (the limit's UPDATE and this lock wait for each other), and bc_place takes it FOR UPDATE as before.
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
  PERFORM 1 FROM pools WHERE id = ANY (ARRAY(SELECT x ->> 'poolId' FROM jsonb_array_elements(p) x)) ORDER BY id
    FOR KEY SHARE;
  PERFORM 1 FROM nodes
  WHERE id = ANY (ARRAY(SELECT a ->> 'nodeId' FROM jsonb_array_elements(p) x, jsonb_array_elements(x -> 'allocations') a))
  ORDER BY id FOR SHARE;
  PERFORM 1 FROM quotas q
  WHERE (q.tenant_id, q.pool_id) IN (SELECT DISTINCT x ->> 'tenantId', x ->> 'poolId' FROM jsonb_array_elements(p) x)
    AND q.max IS NULL
  ORDER BY q.tenant_id, q.pool_id, q.resource FOR SHARE;
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
