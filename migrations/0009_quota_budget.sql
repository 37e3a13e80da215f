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

-- The limit in force under an override (kind NULL: none).
CREATE FUNCTION bc_quota_limit(p_max integer, p_kind text, p_amount integer) RETURNS integer LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE p_kind WHEN 'set' THEN p_amount WHEN 'add' THEN greatest(0, p_max + p_amount) ELSE p_max END
$$;

-- The first instant of `win` at which the key's charges plus `p_amount` would exceed the limit in force then (`p_max`,
-- or an override's), with the charges then and that limit; no row when the amount fits at every instant. The sweep
-- of bc_quota_peak, cut also at the overrides' bounds, with each instant's exact load (grouped by instant).
CREATE FUNCTION bc_quota_excess(p_tenant text, p_pool text, p_resource text, win tstzrange, p_amount integer,
                                p_max integer)
RETURNS TABLE (at timestamptz, charged integer, lim integer) LANGUAGE sql STABLE AS $$
  WITH overlapping AS (
    SELECT amount, during FROM quota_charges
    WHERE tenant_id = p_tenant AND pool_id = p_pool AND resource = p_resource AND during && win
  ), ov AS (
    SELECT kind, amount, during FROM quota_overrides
    WHERE tenant_id = p_tenant AND pool_id = p_pool AND resource = p_resource AND during && win
  ), events AS (
    SELECT lower(win) AS t, 0 AS delta
    UNION ALL SELECT greatest(lower(during), lower(win)), amount FROM overlapping
    UNION ALL SELECT upper(during), -amount FROM overlapping WHERE upper(during) < upper(win)
    UNION ALL SELECT lower(during), 0 FROM ov WHERE lower(during) > lower(win)
    UNION ALL SELECT upper(during), 0 FROM ov WHERE upper(during) < upper(win)
  ), instants AS (
    SELECT t, (sum(sum(delta)) OVER (ORDER BY t))::integer AS charged FROM events GROUP BY t
  )
  SELECT i.t, i.charged, l.lim FROM instants i
  CROSS JOIN LATERAL (
    SELECT bc_quota_limit(p_max, o.kind, o.amount) AS lim FROM (SELECT 1) one LEFT JOIN ov o ON o.during @> i.t
  ) l
  WHERE l.lim IS NOT NULL AND i.charged + p_amount > l.lim
  ORDER BY i.t LIMIT 1
$$;

-- The calendar period (UTC) that contains `t`.
CREATE FUNCTION bc_quota_period(p_period text, t timestamptz) RETURNS tstzrange LANGUAGE sql STABLE AS $$
  SELECT tstzrange(date_trunc(p_period, t AT TIME ZONE 'UTC') AT TIME ZONE 'UTC',
                   (date_trunc(p_period, t AT TIME ZONE 'UTC') + ('1 ' || p_period)::interval) AT TIME ZONE 'UTC', '[)')
$$;

-- Atom-hours of one key's charges inside [p_from, p_to) (both finite).
CREATE FUNCTION bc_quota_hours(p_tenant text, p_pool text, p_resource text, p_from timestamptz, p_to timestamptz)
RETURNS numeric LANGUAGE sql STABLE AS $$
  SELECT coalesce(sum(amount * (extract(epoch FROM least(upper(during), p_to)) - extract(epoch FROM greatest(lower(during), p_from)))), 0) / 3600
  FROM quota_charges
  WHERE tenant_id = p_tenant AND pool_id = p_pool AND resource = p_resource AND during && tstzrange(p_from, greatest(p_from, p_to), '[)')
$$;

-- The GPU-hour check of one booking: in each period its window touches (an open-ended window: the period it starts
-- in), used + reserved + requested must not exceed the limit. Returns the first period that would, with the numbers;
-- no row when the booking fits. Called under the key's FOR UPDATE lock.
CREATE FUNCTION bc_quota_hours_excess(p_tenant text, p_pool text, p_resource text, win tstzrange, p_amount integer,
                                      p_limit numeric, p_period text)
RETURNS TABLE (period tstzrange, used numeric, reserved numeric, requested numeric) LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_now timestamptz := compute_now();
  v_p tstzrange := bc_quota_period(p_period, lower(win));
BEGIN
  LOOP
    period := v_p;
    used := bc_quota_hours(p_tenant, p_pool, p_resource, lower(v_p), least(v_now, upper(v_p)));
    reserved := bc_quota_hours(p_tenant, p_pool, p_resource, greatest(v_now, lower(v_p)), upper(v_p));
    requested := p_amount * (extract(epoch FROM least(upper(win), upper(v_p)))
                             - extract(epoch FROM greatest(lower(win), lower(v_p)))) / 3600;
    IF used + reserved + requested > p_limit THEN
      RETURN NEXT;
      RETURN;
    END IF;
    EXIT WHEN upper(win) <= upper(v_p) OR upper(win) = 'infinity';
    v_p := bc_quota_period(p_period, upper(v_p));
  END LOOP;
END $$;

-- Replaces the key's overrides with `p_overrides` ([{"start": ms, "end": ms, "kind": "add"|"set", "amount": n}]),
-- under the key's row lock (created unlimited when missing), and keeps has_overrides true while any exist.
CREATE FUNCTION bc_set_quota_overrides(p_tenant text, p_pool text, p_resource text, p_overrides jsonb) RETURNS void
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
    SELECT 1 FROM quota_overrides WHERE tenant_id = p_tenant AND pool_id = p_pool AND resource = p_resource)
  WHERE tenant_id = p_tenant AND pool_id = p_pool AND resource = p_resource;
END $$;

-- What a quota key stands at now, for status, metrics and the CLI: the limit in force (override included), the atoms
-- charged now (used) and later (reserved), from the charges themselves (an unlimited key's counters wait for the
-- rebuild); and, with an hour limit, the hours used and reserved in the current period.
CREATE FUNCTION bc_quota_status(p_pool text DEFAULT NULL, p_tenant text DEFAULT NULL)
RETURNS TABLE (tenant_id text, pool_id text, resource text, max integer, lim integer, used integer, reserved integer,
               hour_limit numeric, hour_period text, period_start timestamptz, period_end timestamptz,
               hours_used numeric, hours_reserved numeric)
LANGUAGE sql STABLE AS $$
  SELECT q.tenant_id, q.pool_id, q.resource, q.max,
         bc_quota_limit(q.max, o.kind, o.amount),
         coalesce(c.used, 0), coalesce(c.reserved, 0),
         q.hour_limit, q.hour_period, lower(p.period), upper(p.period),
         bc_quota_hours(q.tenant_id, q.pool_id, q.resource, lower(p.period), compute_now()),
         bc_quota_hours(q.tenant_id, q.pool_id, q.resource, compute_now(), upper(p.period))
  FROM quotas q
  CROSS JOIN LATERAL (SELECT bc_quota_period(q.hour_period, compute_now()) AS period) p
  LEFT JOIN quota_overrides o ON o.tenant_id = q.tenant_id AND o.pool_id = q.pool_id AND o.resource = q.resource
    AND o.during @> compute_now()
  LEFT JOIN LATERAL (
    SELECT sum(ch.amount) FILTER (WHERE ch.during @> compute_now())::integer AS used,
           sum(ch.amount) FILTER (WHERE lower(ch.during) > compute_now())::integer AS reserved
    FROM quota_charges ch
    WHERE ch.tenant_id = q.tenant_id AND ch.pool_id = q.pool_id AND ch.resource = q.resource
      AND NOT isempty(ch.during) AND upper(ch.during) > compute_now()
  ) c ON true
  WHERE (p_pool IS NULL OR q.pool_id = p_pool) AND (p_tenant IS NULL OR q.tenant_id = p_tenant)
  ORDER BY q.pool_id, q.tenant_id, q.resource
$$;

-- The extender's filter reloads a key whose overrides come or go (it leaves such a key to bind; see ADR 0012).
CREATE TRIGGER trigger$quotas$extender_overrides AFTER UPDATE ON quotas
  FOR EACH ROW WHEN (OLD.has_overrides IS DISTINCT FROM NEW.has_overrides) EXECUTE FUNCTION bc_extender_row_changed();

-- bc_place (body of migrations/0002_booking.sql; changed: guard 5 and the refusal's details): a key is guarded when it
-- has an instantaneous limit, an hour limit or overrides. Under its FOR UPDATE lock the instantaneous check compares
-- the charges at every instant with the limit in force then (bc_quota_excess), and the hour check each period the
-- window touches (bc_quota_hours_excess). A refusal carries its numbers in `details`.
CREATE OR REPLACE FUNCTION bc_place(p jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v_now timestamptz := compute_now();
  v_start timestamptz;
  v_end timestamptz;
  v_win tstzrange;
  v_rsv jsonb := nullif(p -> 'reservation', 'null'::jsonb);
  v_rsv_id text;
  v_existing record;
  v_tenant text := p ->> 'tenantId';
  v_pool text := p ->> 'poolId';
  v_alloc jsonb;
  v_atoms text[];
  v_count integer;
  v_node text;
  v_scalar record;
  v_charge record;
  v_max integer;
  v_guarded boolean;
  v_hour_limit numeric;
  v_hour_period text;
  v_excess record;
  v_detail text;
  v_failed_node text;
BEGIN
  v_start := greatest(v_now, coalesce(to_timestamp((p ->> 'start')::bigint / 1000.0), v_now));
  v_end := CASE WHEN p ->> 'durationSeconds' IS NULL THEN 'infinity'::timestamptz
                ELSE v_start + make_interval(secs => (p ->> 'durationSeconds')::bigint) END;
  v_win := tstzrange(v_start, v_end, '[)');

  BEGIN
    -- The pool must be owned by, or offered to, the tenant; an archived pool takes no new bookings.
    PERFORM 1 FROM pools pl WHERE pl.id = v_pool AND NOT pl.archived
      AND (pl.owner_tenant = v_tenant OR EXISTS (SELECT 1 FROM pool_offerings o WHERE o.pool_id = pl.id AND o.tenant_id = v_tenant));
    IF NOT FOUND THEN
      RETURN jsonb_build_object('ok', false, 'code', 'pool_unavailable');
    END IF;
    IF v_rsv IS NOT NULL THEN
      INSERT INTO reservations (id, tenant_id, pool_id, project_id, idempotency_key, request_hash, request, state, spot,
                                binding, starts_at, ends_at, lease_expires_at, created_at, updated_at)
      VALUES (v_rsv ->> 'id', v_tenant, v_pool, v_rsv ->> 'projectId', v_rsv ->> 'idempotencyKey', v_rsv ->> 'requestHash',
              v_rsv -> 'request',
              CASE WHEN v_rsv ->> 'leaseSeconds' IS NULL THEN 'confirmed' ELSE 'held' END,
              coalesce((v_rsv ->> 'spot')::boolean, false), coalesce(v_rsv ->> 'binding', 'hold'), v_start, v_end,
              v_now + make_interval(secs => (v_rsv ->> 'leaseSeconds')::integer), v_now, v_now)
      ON CONFLICT ON CONSTRAINT unique$reservations$idempotency DO NOTHING
      RETURNING id INTO v_rsv_id;
      IF v_rsv_id IS NULL THEN
        SELECT id, request_hash, starts_at, ends_at, state INTO v_existing FROM reservations
        WHERE tenant_id = v_tenant AND idempotency_key = v_rsv ->> 'idempotencyKey';
        IF v_existing.request_hash <> v_rsv ->> 'requestHash' THEN
          RETURN jsonb_build_object('ok', false, 'code', 'idempotency_mismatch', 'reservationId', v_existing.id);
        END IF;
        RETURN jsonb_build_object('ok', true, 'existing', true, 'reservationId', v_existing.id, 'state', v_existing.state,
          'start', extract(epoch FROM v_existing.starts_at) * 1000, 'end', extract(epoch FROM v_existing.ends_at) * 1000);
      END IF;
    END IF;

    FOR v_alloc IN SELECT * FROM jsonb_array_elements(p -> 'allocations') LOOP
      v_node := v_alloc ->> 'nodeId';
      v_failed_node := v_node;
      v_atoms := ARRAY(SELECT jsonb_array_elements_text(v_alloc -> 'atoms'));

      -- Guard 4: lock the node under the schedulability predicate, and the atoms where healthy and bookable.
      PERFORM 1 FROM nodes n JOIN pools pl ON pl.id = n.pool_id
      WHERE n.id = v_node AND n.pool_id = v_pool AND n.schedulable AND NOT pl.archived
        AND (n.trust = 'platform' OR n.owner_tenant = pl.owner_tenant)
      FOR SHARE OF n;
      IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'BC001', MESSAGE = 'node_unschedulable';
      END IF;
      SELECT count(*) INTO v_count FROM (
        SELECT 1 FROM devices WHERE id = ANY (v_atoms) AND node_id = v_node AND healthy AND bookable FOR SHARE
      ) locked;
      IF v_count <> cardinality(v_atoms) THEN
        RAISE EXCEPTION USING ERRCODE = 'BC002', MESSAGE = 'atom_unavailable';
      END IF;

      INSERT INTO allocations (id, kind, reservation_id, pod_uid, node_id, pool_id, tenant_id, scalars, during, created_at)
      VALUES (v_alloc ->> 'id', CASE WHEN v_rsv IS NULL THEN 'pod' ELSE 'reservation' END, v_rsv_id, p ->> 'podUid',
              v_node, v_pool, v_tenant, coalesce(v_alloc -> 'scalars', '{}'), v_win, v_now);

      -- Guard 1: a conflicting booking makes the insert skip the row instead of raising.
      INSERT INTO device_bookings (device_id, allocation_id, during, planned)
      SELECT unnest(v_atoms), v_alloc ->> 'id', v_win, v_win
      ON CONFLICT DO NOTHING;
      GET DIAGNOSTICS v_count = ROW_COUNT;
      IF v_count <> cardinality(v_atoms) THEN
        RAISE EXCEPTION USING ERRCODE = 'BC003', MESSAGE = 'conflict';
      END IF;

      -- Guard 3: guarded scalar counters.
      FOR v_scalar IN SELECT key, value::integer AS amount FROM jsonb_each_text(coalesce(v_alloc -> 'scalars', '{}'))
                      WHERE value::integer > 0 LOOP
        UPDATE node_resources SET allocated = allocated + v_scalar.amount
        WHERE node_id = v_node AND resource = v_scalar.key AND allocated + v_scalar.amount <= floor(allocatable * ratio);
        IF NOT FOUND THEN
          RAISE EXCEPTION USING ERRCODE = 'BC004', MESSAGE = 'scalar';
        END IF;
      END LOOP;

      -- Guard 5: quota per atom class. A guarded key (an instantaneous limit, an hour limit or overrides) is checked
      -- over the whole window under its row lock, and with a `max` its counters kept exact; any other key takes only a
      -- share lock (no hot row), and the rebuild counts its use.
      FOR v_charge IN SELECT class AS resource, count(*)::integer AS amount FROM devices WHERE id = ANY (v_atoms)
                      GROUP BY class ORDER BY class LOOP
        SELECT max IS NOT NULL OR hour_limit IS NOT NULL OR has_overrides INTO v_guarded FROM quotas
        WHERE tenant_id = v_tenant AND pool_id = v_pool AND resource = v_charge.resource;
        IF NOT FOUND THEN
          INSERT INTO quotas (tenant_id, pool_id, resource, max) VALUES (v_tenant, v_pool, v_charge.resource, NULL)
          ON CONFLICT DO NOTHING;
          SELECT max IS NOT NULL OR hour_limit IS NOT NULL OR has_overrides INTO v_guarded FROM quotas
          WHERE tenant_id = v_tenant AND pool_id = v_pool AND resource = v_charge.resource;
        END IF;
        v_max := NULL;
        IF NOT v_guarded THEN
          SELECT max IS NOT NULL OR hour_limit IS NOT NULL OR has_overrides INTO v_guarded FROM quotas
          WHERE tenant_id = v_tenant AND pool_id = v_pool AND resource = v_charge.resource FOR SHARE;
          IF v_guarded THEN
            -- A limit was set meanwhile; a share lock cannot be upgraded safely, so the caller runs again.
            RAISE EXCEPTION USING ERRCODE = '40001', MESSAGE = 'quota limit changed during placement';
          END IF;
        ELSE
          SELECT max, hour_limit, hour_period INTO v_max, v_hour_limit, v_hour_period FROM quotas
          WHERE tenant_id = v_tenant AND pool_id = v_pool AND resource = v_charge.resource FOR UPDATE;
          SELECT * INTO v_excess FROM bc_quota_excess(v_tenant, v_pool, v_charge.resource, v_win, v_charge.amount, v_max);
          IF FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'BC005', MESSAGE = 'quota', DETAIL = jsonb_build_object(
              'kind', 'atoms', 'resource', v_charge.resource, 'limit', v_excess.lim, 'charged', v_excess.charged,
              'requested', v_charge.amount, 'at', extract(epoch FROM v_excess.at) * 1000)::text;
          END IF;
          IF v_hour_limit IS NOT NULL THEN
            SELECT * INTO v_excess FROM bc_quota_hours_excess(v_tenant, v_pool, v_charge.resource, v_win, v_charge.amount,
                                                              v_hour_limit, v_hour_period);
            IF FOUND THEN
              RAISE EXCEPTION USING ERRCODE = 'BC005', MESSAGE = 'quota', DETAIL = jsonb_build_object(
                'kind', 'hours', 'resource', v_charge.resource, 'limit', v_hour_limit, 'used', round(v_excess.used, 4),
                'reserved', round(v_excess.reserved, 4), 'requested', round(v_excess.requested, 4),
                'periodStart', extract(epoch FROM lower(v_excess.period)) * 1000,
                'periodEnd', extract(epoch FROM upper(v_excess.period)) * 1000)::text;
            END IF;
          END IF;
        END IF;
        INSERT INTO quota_charges (tenant_id, pool_id, resource, allocation_id, amount, during)
        VALUES (v_tenant, v_pool, v_charge.resource, v_alloc ->> 'id', v_charge.amount, v_win);
        IF v_max IS NOT NULL THEN
          PERFORM bc_refresh_quota(v_tenant, v_pool, v_charge.resource);
        END IF;
      END LOOP;
    END LOOP;
  EXCEPTION
    WHEN SQLSTATE 'BC001' OR SQLSTATE 'BC002' OR SQLSTATE 'BC003' OR SQLSTATE 'BC004' OR SQLSTATE 'BC005' THEN
      GET STACKED DIAGNOSTICS v_detail = PG_EXCEPTION_DETAIL;
      RETURN jsonb_build_object('ok', false, 'code', SQLERRM, 'nodeId', v_failed_node)
        || CASE WHEN v_detail <> '' THEN jsonb_build_object('details', v_detail::jsonb) ELSE '{}'::jsonb END;
  END;

  RETURN jsonb_build_object('ok', true, 'existing', false, 'reservationId', v_rsv_id,
    'state', CASE WHEN v_rsv IS NULL THEN NULL WHEN v_rsv ->> 'leaseSeconds' IS NULL THEN 'confirmed' ELSE 'held' END,
    'start', extract(epoch FROM v_start) * 1000,
    'end', CASE WHEN v_end = 'infinity' THEN NULL ELSE extract(epoch FROM v_end) * 1000 END,
    'leaseExpiresAt', extract(epoch FROM v_now + make_interval(secs => (v_rsv ->> 'leaseSeconds')::integer)) * 1000);
END $$;

-- bc_place_batch (body of migrations/0007_placer.sql; changed: the share-locked keys are the unguarded ones only, since
-- bc_place takes a guarded key FOR UPDATE and two batches upgrading one shared row would deadlock).
CREATE OR REPLACE FUNCTION bc_place_batch(p jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v_item jsonb;
  v_out jsonb[] := '{}';
  v_state text;
  v_message text;
  v_constraint text;
BEGIN
  PERFORM 1 FROM pools WHERE id = ANY (ARRAY(SELECT x ->> 'poolId' FROM jsonb_array_elements(p) x)) ORDER BY id
    FOR KEY SHARE;
  PERFORM 1 FROM nodes
  WHERE id = ANY (ARRAY(SELECT a ->> 'nodeId' FROM jsonb_array_elements(p) x, jsonb_array_elements(x -> 'allocations') a))
  ORDER BY id FOR SHARE;
  PERFORM 1 FROM quotas q
  WHERE (q.tenant_id, q.pool_id) IN (SELECT DISTINCT x ->> 'tenantId', x ->> 'poolId' FROM jsonb_array_elements(p) x)
    AND q.max IS NULL AND q.hour_limit IS NULL AND NOT q.has_overrides
  ORDER BY q.tenant_id, q.pool_id, q.resource FOR SHARE;
  FOR v_item IN SELECT value FROM jsonb_array_elements(p) WITH ORDINALITY ORDER BY ordinality LOOP
    BEGIN
      v_out := v_out || bc_place(v_item);
    EXCEPTION WHEN OTHERS THEN
      GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_message = MESSAGE_TEXT, v_constraint = CONSTRAINT_NAME;
      v_out := v_out || jsonb_build_object('ok', false, 'error',
        jsonb_build_object('code', v_state, 'message', v_message, 'constraint', nullif(v_constraint, '')));
    END;
  END LOOP;
  RETURN to_jsonb(v_out);
END $$;
