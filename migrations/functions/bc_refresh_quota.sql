-- Recompute one quota key's counters from its charges (used: started, reserved: starts later), split at the time the
-- refresh runs, which is after every commit it sees: placements written at once wait for one another on the quota row,
-- and a split at the transaction's start counted a charge committed meanwhile as reserved
-- (docs/adr/0021-placement-batches-in-flight.md). Frozen time (tests) is as compute_now().
CREATE OR REPLACE FUNCTION bc_refresh_quota(p_tenant text, p_pool text, p_resource text) RETURNS void LANGUAGE sql AS $$
  WITH t AS (SELECT coalesce(frozen_at, clock_timestamp() + make_interval(secs => offset_ms / 1000.0)) AS now FROM clock)
  UPDATE quotas q SET
    used = c.used,
    reserved = c.reserved,
    grace = greatest(0, c.used - coalesce(q.max, c.used))
  FROM (
    SELECT coalesce(sum(amount) FILTER (WHERE during @> t.now), 0)::integer AS used,
           coalesce(sum(amount) FILTER (WHERE lower(during) > t.now), 0)::integer AS reserved
    FROM quota_charges, t
    WHERE tenant_id = p_tenant AND pool_id = p_pool AND resource = p_resource AND NOT isempty(during)
      AND upper(during) > t.now
  ) c
  WHERE q.tenant_id = p_tenant AND q.pool_id = p_pool AND q.resource = p_resource
$$;
