-- Spot preemption (docs/adr/0017-spot-preemption.md). A regular reservation that fits only by displacing spot
-- reservations takes their atoms from a deadline (now + the notice): in one transaction the victims' bookings and
-- charges are truncated at the deadline and the regular one is booked from it, so the no-overlap guard holds at every
-- instant and nobody else can take the freed atoms in between.
--   preempt_at    the deadline; set once, when the victim is chosen.
--   preempted_by  the regular reservation that displaced it.
--   notified_at   when the leader delivered the notice (condition, Event, pod annotations).
--   evicted_at    when the leader evicted its pods at the deadline and ended it.
ALTER TABLE reservations
  ADD COLUMN preempt_at timestamptz,
  -- Deferred: the displacing reservation is inserted (bc_place) after its victims are marked, in the same transaction.
  ADD COLUMN preempted_by text REFERENCES reservations (id) DEFERRABLE INITIALLY DEFERRED,
  ADD COLUMN notified_at timestamptz,
  ADD COLUMN evicted_at timestamptz,
  ADD CONSTRAINT check$reservations$preempt_spot CHECK (preempt_at IS NULL OR spot);
CREATE INDEX index$reservations$preempting ON reservations (preempt_at) WHERE preempt_at IS NOT NULL AND evicted_at IS NULL;

-- Truncates allocations at `p_at` (a time at or after now): the body of bc_release_allocations
-- (migrations/0002_booking.sql) with compute_now() replaced by p_at, released_at included. Scalar counters are given
-- back now (counters are not time-aware: the placement that follows in the same transaction claims its own).
CREATE FUNCTION bc_preempt_allocations(p_ids text[], p_at timestamptz) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
  v_released jsonb;
  v_row record;
BEGIN
  IF p_at < compute_now() THEN
    RAISE EXCEPTION 'preemption deadline % is in the past', p_at;
  END IF;
  PERFORM 1 FROM nodes WHERE id IN (SELECT node_id FROM allocations WHERE id = ANY (p_ids)) ORDER BY id FOR SHARE;
  PERFORM 1 FROM devices WHERE id IN (SELECT device_id FROM device_bookings WHERE allocation_id = ANY (p_ids))
    ORDER BY id FOR SHARE;
  WITH released AS (
    UPDATE allocations SET released_at = p_at WHERE id = ANY (p_ids) AND released_at IS NULL RETURNING node_id, scalars
  )
  SELECT coalesce(jsonb_agg(jsonb_build_object('node_id', node_id, 'scalars', scalars)), '[]') INTO v_released FROM released;

  UPDATE device_bookings SET during = CASE WHEN lower(during) >= p_at THEN 'empty'::tstzrange
                                           ELSE tstzrange(lower(during), p_at, '[)') END
  WHERE allocation_id = ANY (p_ids) AND NOT isempty(during) AND upper(during) > p_at;

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
      UPDATE quota_charges SET during = CASE WHEN lower(during) >= p_at THEN 'empty'::tstzrange
                                             ELSE tstzrange(lower(during), p_at, '[)') END
      WHERE allocation_id = ANY (p_ids) AND NOT isempty(during) AND upper(during) > p_at
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
