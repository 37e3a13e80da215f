-- The overage above `p_max` that the key's use may still reach, when its limits change (ADR 0045): its charges from
-- now on at their peak, and its overrides not yet over, less the limit. A new booking only fits under the limit in
-- force at each instant, so from then on use stays within `p_max` plus this. 0 for an unlimited key.
CREATE OR REPLACE FUNCTION bc_quota_grace(p_tenant text, p_pool text, p_resource text, p_max integer) RETURNS integer
LANGUAGE sql STABLE AS $$
  SELECT CASE WHEN p_max IS NULL THEN 0 ELSE greatest(
    bc_quota_peak(p_tenant, p_pool, p_resource, tstzrange(compute_now(), 'infinity', '[)')) - p_max,
    bc_quota_override_raise(p_tenant, p_pool, p_resource, p_max, compute_now())) END
$$;
