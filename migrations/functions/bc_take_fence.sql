-- Fencing for the elected leader's writes (migrations/0004): a new leader bumps the epoch of its lease name.
CREATE OR REPLACE FUNCTION bc_take_fence(p_name text, p_holder text) RETURNS bigint LANGUAGE sql AS $$
  INSERT INTO leader_fences (name, epoch, holder, acquired_at) VALUES (p_name, 1, p_holder, compute_now())
  ON CONFLICT (name) DO UPDATE SET epoch = leader_fences.epoch + 1, holder = EXCLUDED.holder, acquired_at = EXCLUDED.acquired_at
  RETURNING epoch
$$;
