-- The calendar period (UTC) that contains `t`.
CREATE OR REPLACE FUNCTION bc_quota_period(p_period text, t timestamptz) RETURNS tstzrange LANGUAGE sql STABLE AS $$
  SELECT tstzrange(date_trunc(p_period, t AT TIME ZONE 'UTC') AT TIME ZONE 'UTC',
                   (date_trunc(p_period, t AT TIME ZONE 'UTC') + ('1 ' || p_period)::interval) AT TIME ZONE 'UTC', '[)')
$$;
