-- The commit of a placement. Runs in the caller's transaction (or autocommit), in one round trip, inside a
-- subtransaction (a savepoint): a lost race or a refused guard undoes everything it wrote and returns
-- {"ok": false, "code": ...} instead of raising, so the caller replans with fresh data. Codes:
--   node_unschedulable  a node failed the schedulability predicate when locked (guard 4)
--   atom_unavailable    an atom is unhealthy, unbookable or gone when locked (guard 4)
--   conflict            an atom was booked by someone else in the window (guard 1, a lost race)
--   scalar              a node's scalar counter would be overdrawn (guard 3)
--   quota               the tenant's quota would be exceeded (guard 5; the refusal carries its numbers in `details`)
--   idempotency_mismatch  the idempotency key was used before with a different request
--   pool_unavailable    the pool is archived, or neither owned by nor offered to the tenant
-- Guard 5 (ADR 0012): a key is guarded when it has an instantaneous limit, an hour limit or overrides. Under its FOR
-- UPDATE lock the instantaneous check compares the charges at every instant with the limit in force then
-- (bc_quota_excess), and the hour check each period the window touches (bc_quota_hours_excess); an unguarded key takes
-- only a share lock (no hot row), and the rebuild counts its use.
-- `repairOf`, a live reservation's id, books the allocations as that reservation's (kind 'reservation', no new
-- reservation row) over its own window from now on: from greatest(now, its start) to its end (ADR 0016). Every guard
-- applies as to any booking.
CREATE OR REPLACE FUNCTION bc_place(p jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v_now timestamptz := compute_now();
  v_start timestamptz;
  v_end timestamptz;
  v_win tstzrange;
  v_rsv jsonb := nullif(p -> 'reservation', 'null'::jsonb);
  v_rsv_id text := nullif(p ->> 'repairOf', '');
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
  IF v_rsv_id IS NOT NULL THEN
    -- A repair: the reservation's own window from now on (its start when that is ahead).
    SELECT greatest(v_now, starts_at), ends_at INTO v_start, v_end FROM reservations WHERE id = v_rsv_id;
  END IF;
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
      VALUES (v_alloc ->> 'id', CASE WHEN v_rsv_id IS NULL THEN 'pod' ELSE 'reservation' END, v_rsv_id, p ->> 'podUid',
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
