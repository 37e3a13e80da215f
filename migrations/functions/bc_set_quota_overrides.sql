-- Replaces the key's overrides with `p_overrides` ([{"start": ms, "end": ms, "kind": "add"|"set", "amount": n}]),
-- under the key's row lock (created unlimited when missing), and keeps has_overrides true while any exist. A change
-- of the key's limits: overrides_version rises, and the backstop sets grace anew (ADR 0045).
CREATE OR REPLACE FUNCTION bc_set_quota_overrides(p_tenant text, p_pool text, p_resource text, p_overrides jsonb) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO quotas (tenant_id, pool_id, resource, max) VALUES (p_tenant, p_pool, p_resource, NULL) ON CONFLICT DO NOTHING;
  PERFORM 1 FROM quotas WHERE tenant_id = p_tenant AND pool_id = p_pool AND resource = p_resource FOR UPDATE;
  DELETE FROM quota_overrides WHERE tenant_id = p_tenant AND pool_id = p_pool AND resource = p_resource;
  INSERT INTO quota_overrides (tenant_id, pool_id, resource, during, kind, amount)
  SELECT p_tenant, p_pool, p_resource,
         tstzrange(to_timestamp((o ->> 'start')::bigint / 1000.0), to_timestamp((o ->> 'end')::bigint / 1000.0), '[)'),
         o ->> 'kind', (o ->> 'amount')::integer
  FROM jsonb_array_elements(coalesce(p_overrides, '[]')) o;
  UPDATE quotas SET has_overrides = EXISTS (
    SELECT 1 FROM quota_overrides WHERE tenant_id = p_tenant AND pool_id = p_pool AND resource = p_resource),
    overrides_version = overrides_version + 1
  WHERE tenant_id = p_tenant AND pool_id = p_pool AND resource = p_resource;
END $$;
