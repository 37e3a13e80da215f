-- One run of the leader's usage job: recomputes from the watermark (at most p_max_hours hours, up to the current
-- hour) and moves the watermark to the hours that are now final. Without a watermark it starts at the first hour of
-- the booking history. The watermark row's lock keeps two runs apart. Returns what it did; `caughtUp` false means
-- more hours are waiting (a backfill), and the caller runs again.
CREATE OR REPLACE FUNCTION bc_run_usage(p_max_hours integer, p_settle interval) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v_now timestamptz := compute_now();
  v_current timestamptz := date_trunc('hour', v_now, 'UTC');
  v_final timestamptz := date_trunc('hour', v_now - p_settle, 'UTC');
  v_from timestamptz;
  v_to timestamptz;
  v_rows integer;
BEGIN
  SELECT final_until INTO v_from FROM usage_watermark FOR UPDATE;
  IF v_from IS NULL THEN
    SELECT date_trunc('hour', min(t), 'UTC') INTO v_from FROM (
      SELECT min(lower(during)) AS t FROM quota_charges WHERE NOT isempty(during)
      UNION ALL
      SELECT min(lower(during)) FROM allocations WHERE kind <> 'layout' AND tenant_id IS NOT NULL AND scalars <> '{}'
    ) x;
    v_from := least(coalesce(v_from, v_final), v_final);
  END IF;
  v_to := least(v_from + make_interval(hours => p_max_hours), v_current + interval '1 hour');
  v_rows := bc_compute_usage(v_from, greatest(v_from, v_to));
  UPDATE usage_watermark SET final_until = greatest(v_from, least(v_to, v_final));
  RETURN jsonb_build_object(
    'from', extract(epoch FROM v_from) * 1000,
    'to', extract(epoch FROM v_to) * 1000,
    'finalUntil', extract(epoch FROM greatest(v_from, least(v_to, v_final))) * 1000,
    'rows', v_rows,
    'caughtUp', v_to >= v_current + interval '1 hour');
END $$;
