-- last defined in 0015_quota_refresh_clock.sql
-- Quota counters recomputed at the moment of the refresh (docs/adr/0021-placement-batches-in-flight.md).
-- bc_refresh_quota (0002) split charges into used and reserved at compute_now(), the start of the writing transaction.
-- Placements written at once, which wait for one another on the quota row, could then count a charge that another
-- transaction committed meanwhile, starting after this transaction began, as reserved: five placements booked and
-- `used` 2 until the next rebuild. The refresh now splits at the time it runs, which is after every commit it sees.
-- Frozen time (tests) is unchanged.
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
