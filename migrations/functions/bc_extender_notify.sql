-- The extender's notifications (migrations/0006) on channel bc_extender: each distinct payload once, with the
-- writing transaction's id appended (ADR 0023). PL/pgSQL, whose plan is kept, not an SQL function parsed on every call.
CREATE OR REPLACE FUNCTION bc_extender_notify(p_payloads text[]) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  v_tx text := pg_current_xact_id()::text;
  v_payload text;
BEGIN
  FOR v_payload IN SELECT DISTINCT x FROM unnest(p_payloads) x WHERE x IS NOT NULL LOOP
    PERFORM pg_notify('bc_extender', (v_payload::jsonb || jsonb_build_array(v_tx))::text);
  END LOOP;
END $$;
