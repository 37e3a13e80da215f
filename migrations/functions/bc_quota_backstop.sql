-- Guard 5's backstop (ADR 0045), before each write of a quota row: `grace`, the overage check$quotas$used allows
-- above `max`, is the database's. A new key has none (no charge or override can exist before it). When the key's
-- limits change (its `max`, or its overrides: `overrides_version` rises) it is set from the charges and overrides
-- then (bc_quota_grace), whatever the writer put; at any other write it may only fall. So the charging path
-- (bc_refresh_quota in bc_place, or a bug there) cannot raise the ceiling it is checked against.
CREATE OR REPLACE FUNCTION bc_quota_backstop() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    NEW.grace := 0;
  ELSIF NEW.overrides_version < OLD.overrides_version THEN
    RAISE EXCEPTION USING ERRCODE = '23514', CONSTRAINT = 'trigger$quotas$backstop',
      MESSAGE = format('quota %s/%s/%s: overrides_version may not go down', NEW.tenant_id, NEW.pool_id, NEW.resource);
  ELSIF NEW.max IS DISTINCT FROM OLD.max OR NEW.overrides_version > OLD.overrides_version THEN
    NEW.grace := bc_quota_grace(NEW.tenant_id, NEW.pool_id, NEW.resource, NEW.max);
  ELSIF NEW.grace > OLD.grace THEN
    RAISE EXCEPTION USING ERRCODE = '23514', CONSTRAINT = 'trigger$quotas$backstop',
      MESSAGE = format('quota %s/%s/%s: grace may rise only with a change of the limits (%s to %s)',
                       NEW.tenant_id, NEW.pool_id, NEW.resource, OLD.grace, NEW.grace);
  END IF;
  RETURN NEW;
END $$;
