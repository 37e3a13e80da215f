-- How far the key's overrides not over by `p_at` lift its instantaneous limit above `p_max` at most (0 when none
-- does): part of the overage check$quotas$used allows (ADR 0045).
CREATE OR REPLACE FUNCTION bc_quota_override_raise(p_tenant text, p_pool text, p_resource text, p_max integer,
                                                   p_at timestamptz) RETURNS integer LANGUAGE sql STABLE AS $$
  SELECT greatest(0, coalesce(max(bc_quota_limit(p_max, kind, amount)), p_max) - p_max)
  FROM quota_overrides
  WHERE tenant_id = p_tenant AND pool_id = p_pool AND resource = p_resource AND upper(during) > p_at
$$;
