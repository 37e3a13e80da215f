-- Fencing for the elected leader's writes. A new leader bumps the epoch of its lease name; every leader-only write
-- transaction first checks its epoch under a share lock of the row. The bump waits for in-flight writes of the old
-- leader, and after it no write of the old leader can commit.
CREATE TABLE leader_fences (
  name text PRIMARY KEY,
  epoch bigint NOT NULL DEFAULT 0,
  holder text,
  acquired_at timestamptz
);

CREATE FUNCTION bc_take_fence(p_name text, p_holder text) RETURNS bigint LANGUAGE sql AS $$
  INSERT INTO leader_fences (name, epoch, holder, acquired_at) VALUES (p_name, 1, p_holder, compute_now())
  ON CONFLICT (name) DO UPDATE SET epoch = leader_fences.epoch + 1, holder = EXCLUDED.holder, acquired_at = EXCLUDED.acquired_at
  RETURNING epoch
$$;

CREATE FUNCTION bc_check_fence(p_name text, p_epoch bigint) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  PERFORM 1 FROM leader_fences WHERE name = p_name AND epoch = p_epoch FOR SHARE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'leadership of % at epoch % was lost', p_name, p_epoch USING ERRCODE = 'BC009';
  END IF;
END $$;
