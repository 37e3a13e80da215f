-- What a quota key stands at now, for status, metrics and the CLI: the limit in force (override included), the atoms
-- charged now (used) and later (reserved), from the charges themselves (an unlimited key's counters wait for the
-- rebuild); and, with an hour limit, the hours used and reserved in the current period.
CREATE OR REPLACE FUNCTION bc_quota_status(p_pool text DEFAULT NULL, p_tenant text DEFAULT NULL)
RETURNS TABLE (tenant_id text, pool_id text, resource text, max integer, lim integer, used integer, reserved integer,
               hour_limit numeric, hour_period text, period_start timestamptz, period_end timestamptz,
               hours_used numeric, hours_reserved numeric)
LANGUAGE sql STABLE AS $$
  SELECT q.tenant_id, q.pool_id, q.resource, q.max,
         bc_quota_limit(q.max, o.kind, o.amount),
         coalesce(c.used, 0), coalesce(c.reserved, 0),
         q.hour_limit, q.hour_period, lower(p.period), upper(p.period),
         bc_quota_hours(q.tenant_id, q.pool_id, q.resource, lower(p.period), compute_now()),
         bc_quota_hours(q.tenant_id, q.pool_id, q.resource, compute_now(), upper(p.period))
  FROM quotas q
  CROSS JOIN LATERAL (SELECT bc_quota_period(q.hour_period, compute_now()) AS period) p
  LEFT JOIN quota_overrides o ON o.tenant_id = q.tenant_id AND o.pool_id = q.pool_id AND o.resource = q.resource
    AND o.during @> compute_now()
  LEFT JOIN LATERAL (
    SELECT sum(ch.amount) FILTER (WHERE ch.during @> compute_now())::integer AS used,
           sum(ch.amount) FILTER (WHERE lower(ch.during) > compute_now())::integer AS reserved
    FROM quota_charges ch
    WHERE ch.tenant_id = q.tenant_id AND ch.pool_id = q.pool_id AND ch.resource = q.resource
      AND NOT isempty(ch.during) AND upper(ch.during) > compute_now()
  ) c ON true
  WHERE (p_pool IS NULL OR q.pool_id = p_pool) AND (p_tenant IS NULL OR q.tenant_id = p_tenant)
  ORDER BY q.pool_id, q.tenant_id, q.resource
$$;
