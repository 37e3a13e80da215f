-- The GPU-hour check of one booking: in each period its window touches (an open-ended window: the period it starts
-- in), used + reserved + requested must not exceed the limit. Returns the first period that would, with the numbers;
-- no row when the booking fits. Called under the key's FOR UPDATE lock.
CREATE OR REPLACE FUNCTION bc_quota_hours_excess(p_tenant text, p_pool text, p_resource text, win tstzrange, p_amount integer,
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
