-- The placer's statement, cheaper for PostgreSQL (bench:placer; issue 14). Same results, same guards.
--
-- 1. bc_place_batch plans each statement it runs once per session (generic plans), bc_place's and the triggers' they
--    fire included. Under the default plan_cache_mode, a PL/pgSQL statement whose custom plan looks cheaper than the
--    generic one is planned again on every execution: in a profile of the placer at 10,000 nodes about a tenth of the
--    server's CPU went to planning the same statements over and over. The setting is the function's (restored when it
--    returns); a later CREATE OR REPLACE of bc_place_batch must keep it.
ALTER FUNCTION bc_place_batch(jsonb) SET plan_cache_mode = force_generic_plan;

-- 2. The booking rollup counts the inserted bookings in its own query, with compute_now() read once, instead of
--    through the SQL function bc_booking_counts (0003), which PostgreSQL parses and plans on every call. The update
--    trigger still uses it; the counts are the same.
CREATE OR REPLACE FUNCTION bc_rollup_bookings_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  v_now timestamptz := compute_now();
BEGIN
  INSERT INTO pool_capacity_deltas (pool_id, resource, allocated, reserved)
  SELECT pool_id, resource, live, future FROM (
    SELECT n.pool_id, d.class AS resource, count(*) FILTER (WHERE b.during @> v_now) AS live,
           count(*) FILTER (WHERE lower(b.during) > v_now) AS future
    FROM new_rows b JOIN devices d ON d.id = b.device_id JOIN nodes n ON n.id = d.node_id JOIN pools p ON p.id = n.pool_id
    WHERE d.present AND d.bookable AND NOT isempty(b.during) AND upper(b.during) > v_now
      AND bc_bucket(n, p.owner_tenant, p.archived, d.healthy) = 'allocatable'
    GROUP BY n.pool_id, d.class
  ) counts
  WHERE live <> 0 OR future <> 0;
  RETURN NULL;
END $$;

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
