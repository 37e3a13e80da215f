-- Recomputes the usage rows of the hours in [p_from, p_to) (whole UTC hours) from the booking history, counting time
-- up to compute_now(). Idempotent: the same history gives the same rows. Returns the number of rows written.
CREATE OR REPLACE FUNCTION bc_compute_usage(p_from timestamptz, p_to timestamptz) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
  v_now timestamptz := compute_now();
  v_win tstzrange;
  v_n integer;
BEGIN
  IF date_trunc('hour', p_from, 'UTC') <> p_from OR date_trunc('hour', p_to, 'UTC') <> p_to OR p_to < p_from THEN
    RAISE EXCEPTION 'usage hours: [%, %) is not a range of whole hours', p_from, p_to USING ERRCODE = '22023';
  END IF;
  v_win := tstzrange(p_from, greatest(p_from, least(p_to, v_now)), '[)');
  DELETE FROM usage_hours WHERE hour >= p_from AND hour < p_to;
  INSERT INTO usage_hours (tenant_id, pool_id, resource, hour, atom_seconds, computed_at)
  WITH held AS (
    SELECT c.tenant_id, c.pool_id, c.resource, c.amount::numeric AS amount, c.during * v_win AS r
    FROM quota_charges c
    WHERE NOT isempty(c.during) AND c.during && v_win
    UNION ALL
    SELECT a.tenant_id, a.pool_id, s.key, s.value::numeric, a.during * tstzrange(NULL, a.released_at, '[)') * v_win
    FROM allocations a CROSS JOIN LATERAL jsonb_each_text(a.scalars) s
    WHERE a.scalars <> '{}' AND a.kind <> 'layout' AND least(upper(a.during), coalesce(a.released_at, 'infinity')) > p_from
      AND a.tenant_id IS NOT NULL AND a.pool_id IS NOT NULL AND a.during && v_win AND s.value::numeric > 0
  ), pieces AS (
    SELECT tenant_id, pool_id, resource, h AS hour,
           amount * extract(epoch FROM least(upper(r), h + interval '1 hour') - greatest(lower(r), h)) AS atom_seconds
    FROM held CROSS JOIN LATERAL
      generate_series(date_trunc('hour', lower(r), 'UTC'), upper(r) - interval '1 microsecond', interval '1 hour') h
    WHERE NOT isempty(r)
  )
  SELECT tenant_id, pool_id, resource, hour, sum(atom_seconds), v_now
  FROM pieces GROUP BY tenant_id, pool_id, resource, hour HAVING sum(atom_seconds) > 0;
  GET DIAGNOSTICS v_n = ROW_COUNT;
  RETURN v_n;
END $$;
