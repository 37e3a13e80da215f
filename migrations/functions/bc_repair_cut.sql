-- Cuts lost atoms out of a reservation's allocations at compute_now() (p_cuts: [{"allocationId", "atoms": [...]}]).
-- An allocation that keeps no live atom is released whole (bc_release_allocations: bookings and charges truncated,
-- scalars given back). Otherwise only the lost atoms' bookings are truncated (emptied when not started), and each
-- class's charge is split: the old row ends now, a new row of the same allocation charges the atoms kept from now on.
-- At no instant does the key's charge grow, so the replacement placed next in the same transaction (bc_place with
-- repairOf) is refused by quota only where the reservation itself would have been (ADR 0016).
CREATE OR REPLACE FUNCTION bc_repair_cut(p_cuts jsonb) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  v_now timestamptz := compute_now();
  v_cut jsonb;
  v_alloc text;
  v_atoms text[];
  v_left integer;
  v_class record;
  v_charge record;
BEGIN
  FOR v_cut IN SELECT value FROM jsonb_array_elements(p_cuts) ORDER BY value ->> 'allocationId' LOOP
    v_alloc := v_cut ->> 'allocationId';
    v_atoms := ARRAY(SELECT jsonb_array_elements_text(v_cut -> 'atoms'));
    SELECT count(*) INTO v_left FROM device_bookings
    WHERE allocation_id = v_alloc AND NOT isempty(during) AND upper(during) > v_now AND NOT (device_id = ANY (v_atoms));
    IF v_left = 0 THEN
      UPDATE device_bookings SET lost_at = v_now
      WHERE allocation_id = v_alloc AND NOT isempty(during) AND upper(during) > v_now;
      PERFORM bc_release_allocations(ARRAY[v_alloc]);
      CONTINUE;
    END IF;
    UPDATE device_bookings SET lost_at = v_now, during = CASE WHEN lower(during) >= v_now THEN 'empty'::tstzrange
                                                              ELSE tstzrange(lower(during), v_now, '[)') END
    WHERE allocation_id = v_alloc AND device_id = ANY (v_atoms) AND NOT isempty(during) AND upper(during) > v_now;
    FOR v_class IN SELECT d.class AS resource, count(*)::integer AS lost FROM devices d WHERE d.id = ANY (v_atoms)
                   GROUP BY d.class ORDER BY d.class LOOP
      FOR v_charge IN SELECT c.id, c.tenant_id, c.pool_id, c.amount, c.during FROM quota_charges c
                      WHERE c.allocation_id = v_alloc AND c.resource = v_class.resource AND NOT isempty(c.during)
                        AND upper(c.during) > v_now LOOP
        PERFORM 1 FROM quotas WHERE tenant_id = v_charge.tenant_id AND pool_id = v_charge.pool_id
          AND resource = v_class.resource FOR UPDATE;
        UPDATE quota_charges SET during = CASE WHEN lower(during) >= v_now THEN 'empty'::tstzrange
                                               ELSE tstzrange(lower(during), v_now, '[)') END
        WHERE id = v_charge.id;
        IF v_charge.amount > v_class.lost THEN
          INSERT INTO quota_charges (tenant_id, pool_id, resource, allocation_id, amount, during)
          VALUES (v_charge.tenant_id, v_charge.pool_id, v_class.resource, v_alloc, v_charge.amount - v_class.lost,
                  tstzrange(greatest(lower(v_charge.during), v_now), upper(v_charge.during), '[)'));
        END IF;
        PERFORM bc_refresh_quota(v_charge.tenant_id, v_charge.pool_id, v_class.resource);
      END LOOP;
    END LOOP;
  END LOOP;
END $$;
