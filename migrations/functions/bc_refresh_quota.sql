-- Recompute one quota key's counters from its charges (used: started, reserved: starts later), split at the time the
-- refresh runs, which is after every commit it sees: placements written at once wait for one another on the quota row,
-- and a split at the transaction's start counted a charge committed meanwhile as reserved
-- (docs/adr/0021-placement-batches-in-flight.md). Frozen time (tests) is as compute_now().
-- `grace` only falls here (ADR 0045): to the most the charges not yet ended and the overrides not yet over can still
-- put above `max`, when that is less. A charge the limit never allowed makes check$quotas$used refuse the refresh.
CREATE OR REPLACE FUNCTION bc_refresh_quota(p_tenant text, p_pool text, p_resource text) RETURNS void LANGUAGE sql AS $$
  WITH t AS (SELECT coalesce(frozen_at, clock_timestamp() + make_interval(secs => offset_ms / 1000.0)) AS now FROM clock)
  UPDATE quotas q SET
    used = c.used,
    reserved = c.reserved,
    grace = CASE WHEN q.max IS NULL THEN 0 ELSE least(q.grace, greatest(c.used + c.reserved - q.max,
      CASE WHEN q.has_overrides THEN bc_quota_override_raise(p_tenant, p_pool, p_resource, q.max, t.now) ELSE 0 END)) END
  FROM t, (
    SELECT coalesce(sum(amount) FILTER (WHERE during @> t.now), 0)::integer AS used,
           coalesce(sum(amount) FILTER (WHERE lower(during) > t.now), 0)::integer AS reserved
    FROM quota_charges, t
    WHERE tenant_id = p_tenant AND pool_id = p_pool AND resource = p_resource AND NOT isempty(during)
      AND upper(during) > t.now
  ) c
  WHERE q.tenant_id = p_tenant AND q.pool_id = p_pool AND q.resource = p_resource
$$;
