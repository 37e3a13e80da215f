-- The first instant of `win` at which the key's charges plus `p_amount` would exceed the limit in force then (`p_max`,
-- or an override's), with the charges then and that limit; no row when the amount fits at every instant. The sweep
-- of bc_quota_peak, cut also at the overrides' bounds, with each instant's exact load (grouped by instant).
CREATE OR REPLACE FUNCTION bc_quota_excess(p_tenant text, p_pool text, p_resource text, win tstzrange, p_amount integer,
                                p_max integer)
RETURNS TABLE (at timestamptz, charged integer, lim integer) LANGUAGE sql STABLE AS $$
  WITH overlapping AS (
    SELECT amount, during FROM quota_charges
    WHERE tenant_id = p_tenant AND pool_id = p_pool AND resource = p_resource AND during && win
  ), ov AS (
    SELECT kind, amount, during FROM quota_overrides
    WHERE tenant_id = p_tenant AND pool_id = p_pool AND resource = p_resource AND during && win
  ), events AS (
    SELECT lower(win) AS t, 0 AS delta
    UNION ALL SELECT greatest(lower(during), lower(win)), amount FROM overlapping
    UNION ALL SELECT upper(during), -amount FROM overlapping WHERE upper(during) < upper(win)
    UNION ALL SELECT lower(during), 0 FROM ov WHERE lower(during) > lower(win)
    UNION ALL SELECT upper(during), 0 FROM ov WHERE upper(during) < upper(win)
  ), instants AS (
    SELECT t, (sum(sum(delta)) OVER (ORDER BY t))::integer AS charged FROM events GROUP BY t
  )
  SELECT i.t, i.charged, l.lim FROM instants i
  CROSS JOIN LATERAL (
    SELECT bc_quota_limit(p_max, o.kind, o.amount) AS lim FROM (SELECT 1) one LEFT JOIN ov o ON o.during @> i.t
  ) l
  WHERE l.lim IS NOT NULL AND i.charged + p_amount > l.lim
  ORDER BY i.t LIMIT 1
$$;
