-- Atom-hours of one key's charges inside [p_from, p_to) (both finite).
CREATE OR REPLACE FUNCTION bc_quota_hours(p_tenant text, p_pool text, p_resource text, p_from timestamptz, p_to timestamptz)
RETURNS numeric LANGUAGE sql STABLE AS $$
  SELECT coalesce(sum(amount * (extract(epoch FROM least(upper(during), p_to)) - extract(epoch FROM greatest(lower(during), p_from)))), 0) / 3600
  FROM quota_charges
  WHERE tenant_id = p_tenant AND pool_id = p_pool AND resource = p_resource AND during && tstzrange(p_from, greatest(p_from, p_to), '[)')
$$;
