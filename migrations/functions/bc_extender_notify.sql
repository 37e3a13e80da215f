-- last defined in 0017_placer_plans.sql
-- 3. The extender's notifications (0006, 0016) from PL/pgSQL, whose plan is kept, instead of an SQL function parsed on
--    every call: each distinct payload once, with the writing transaction's id appended.
CREATE OR REPLACE FUNCTION bc_extender_notify(p_payloads text[]) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  v_tx text := pg_current_xact_id()::text;
  v_payload text;
BEGIN
  FOR v_payload IN SELECT DISTINCT x FROM unnest(p_payloads) x WHERE x IS NOT NULL LOOP
    PERFORM pg_notify('bc_extender', (v_payload::jsonb || jsonb_build_array(v_tx))::text);
  END LOOP;
END $$;
