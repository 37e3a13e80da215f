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
--
-- Only the quota rows without any limit are share-locked up front: bc_place takes a guarded key FOR UPDATE, and two
-- batches upgrading one shared row would deadlock. An item that carries "admission" takes its node's lease
-- (bc_take_admission) after bc_place's rows, the order releasePodHoldings and the moved booking take them in; while
-- another pod's lease is in flight there, the booking is undone and the item answers {"ok": false, "code":
-- "admission_busy"}. plan_cache_mode = force_generic_plan: each statement it runs, bc_place's and the triggers' they
-- fire included, is planned once per session (migrations/0017, bench:placer).
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
