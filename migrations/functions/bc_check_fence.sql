-- last defined in 0004_leader_fence.sql
CREATE OR REPLACE FUNCTION bc_check_fence(p_name text, p_epoch bigint) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  PERFORM 1 FROM leader_fences WHERE name = p_name AND epoch = p_epoch FOR SHARE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'leadership of % at epoch % was lost', p_name, p_epoch USING ERRCODE = 'BC009';
  END IF;
END $$;
