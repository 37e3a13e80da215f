-- Every leader-only write transaction first checks its epoch under a share lock of the fence row; after a new
-- leader's bump no write of the old one can commit.
CREATE OR REPLACE FUNCTION bc_check_fence(p_name text, p_epoch bigint) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  PERFORM 1 FROM leader_fences WHERE name = p_name AND epoch = p_epoch FOR SHARE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'leadership of % at epoch % was lost', p_name, p_epoch USING ERRCODE = 'BC009';
  END IF;
END $$;
