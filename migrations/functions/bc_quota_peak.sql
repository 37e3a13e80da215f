-- The largest sum of charges at any instant of `win` for one quota key, by a sweep over the charges' start and end
-- points (ends sort before starts at the same instant: ranges are half-open).
CREATE OR REPLACE FUNCTION bc_quota_peak(p_tenant text, p_pool text, p_resource text, win tstzrange) RETURNS integer
LANGUAGE sql STABLE AS $$
  WITH overlapping AS (
    SELECT amount, during FROM quota_charges
    WHERE tenant_id = p_tenant AND pool_id = p_pool AND resource = p_resource AND during && win
  ), events AS (
    SELECT greatest(lower(during), lower(win)) AS t, amount AS delta FROM overlapping
    UNION ALL
    SELECT upper(during), -amount FROM overlapping WHERE upper(during) < upper(win)
  )
  SELECT coalesce(max(running), 0)::integer FROM (SELECT sum(delta) OVER (ORDER BY t, delta) AS running FROM events) x
$$;
