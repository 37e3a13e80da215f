-- Guard 5's backstop can fire (ADR 0045). check$quotas$used (`used BETWEEN 0 AND max + grace`, migration 0001) allows
-- `grace` above the limit: the overage a lowered limit or an override leaves. Until now the only writer of `used`
-- (bc_refresh_quota) also raised `grace` in the same UPDATE, so the CHECK always held. From here `grace` belongs to
-- the database: the trigger below sets it when the key's limits change, from the charges and overrides then
-- (bc_quota_grace), and refuses any other write that raises it; bc_refresh_quota may only lower it.
--   overrides_version  counts bc_set_quota_overrides' replacements of the key's overrides: with a change of `max`,
--                      the only event that may raise `grace`. It never goes down.
ALTER TABLE quotas ADD COLUMN overrides_version integer NOT NULL DEFAULT 0
  CONSTRAINT check$quotas$overrides_version CHECK (overrides_version >= 0);

-- Existing keys: a grace that covers every charge not yet ended and every override not yet over (what the rule
-- above gives a limit set now, with the sum of the charges for their peak: a bound as safe, and the refreshes lower it).
UPDATE quotas q SET grace = greatest(0,
    coalesce((SELECT sum(c.amount) FROM quota_charges c
              WHERE (c.tenant_id, c.pool_id, c.resource) = (q.tenant_id, q.pool_id, q.resource) AND NOT isempty(c.during)
                AND upper(c.during) > (SELECT coalesce(frozen_at, now() + make_interval(secs => offset_ms / 1000.0)) FROM clock)), 0)
      - q.max,
    coalesce((SELECT max(CASE o.kind WHEN 'set' THEN o.amount ELSE q.max + o.amount END) FROM quota_overrides o
              WHERE (o.tenant_id, o.pool_id, o.resource) = (q.tenant_id, q.pool_id, q.resource)
                AND upper(o.during) > (SELECT coalesce(frozen_at, now() + make_interval(secs => offset_ms / 1000.0)) FROM clock)), q.max)
      - q.max)
WHERE q.max IS NOT NULL;

-- Functions, one file each in migrations/functions/ (ADR 0032): bc_quota_override_raise, bc_quota_grace.

-- A placeholder, so that the trigger can name it; its body is functions/bc_quota_backstop.sql (ADR 0032).
CREATE FUNCTION bc_quota_backstop() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NEW; END';

CREATE TRIGGER trigger$quotas$backstop BEFORE INSERT OR UPDATE ON quotas
  FOR EACH ROW EXECUTE FUNCTION bc_quota_backstop();
