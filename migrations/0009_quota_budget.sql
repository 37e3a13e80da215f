-- Time as a budget (ADR 0012): a GPU-hour limit per quota key and period, and time-bounded overrides of the
-- instantaneous limit. Both are checked in bc_place under the quota row's FOR UPDATE lock, like `max` (ADR 0002).
--   hour_limit   atom-hours per period (NULL: none). used = hours burned in the period so far, reserved = hours booked
--                ahead in it (charges' overlap with [now, period end)); a booking may not push used + reserved past the
--                limit in any period its window touches.
--   hour_period  the calendar period in UTC: 'day', 'week' (ISO, from Monday) or 'month' (the default).
--   has_overrides  the key has rows in quota_overrides; set by bc_set_quota_overrides, read by the booking to decide
--                whether the key is guarded (FOR UPDATE) or not (FOR SHARE), so it lives on the locked row.
-- A key with none of max, hour_limit and overrides stays unguarded and pays nothing new.
ALTER TABLE quotas
  ADD COLUMN hour_limit numeric CONSTRAINT check$quotas$hour_limit CHECK (hour_limit >= 0),
  ADD COLUMN hour_period text NOT NULL DEFAULT 'month'
    CONSTRAINT check$quotas$hour_period CHECK (hour_period IN ('day', 'week', 'month')),
  ADD COLUMN has_overrides boolean NOT NULL DEFAULT false;

-- The instantaneous limit in force for a window: `set` replaces `max`, `add` adds to it (an unlimited key stays
-- unlimited under `add`). Windows of one key never overlap, so at any instant at most one override is in force.
CREATE TABLE quota_overrides (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  tenant_id text NOT NULL,
  pool_id text NOT NULL,
  resource text NOT NULL,
  during tstzrange NOT NULL CONSTRAINT check$quota_overrides$during CHECK (NOT isempty(during) AND NOT lower_inf(during)),
  kind text NOT NULL CONSTRAINT check$quota_overrides$kind CHECK (kind IN ('add', 'set')),
  amount integer NOT NULL,
  CONSTRAINT check$quota_overrides$amount CHECK (kind = 'add' OR amount >= 0),
  FOREIGN KEY (tenant_id, pool_id, resource) REFERENCES quotas (tenant_id, pool_id, resource),
  CONSTRAINT exclude$quota_overrides$key_during
    EXCLUDE USING gist (tenant_id WITH =, pool_id WITH =, resource WITH =, during WITH &&)
);

-- Functions, one file each in migrations/functions/ (ADR 0032): bc_quota_limit, bc_quota_excess, bc_quota_period,
-- bc_quota_hours, bc_quota_hours_excess, bc_set_quota_overrides, bc_quota_status.

-- The extender's filter reloads a key whose overrides come or go (it leaves such a key to bind; see ADR 0012).
CREATE TRIGGER trigger$quotas$extender_overrides AFTER UPDATE ON quotas
  FOR EACH ROW WHEN (OLD.has_overrides IS DISTINCT FROM NEW.has_overrides) EXECUTE FUNCTION bc_extender_row_changed();

-- Functions, one file each in migrations/functions/ (ADR 0032): bc_place, bc_place_batch.
