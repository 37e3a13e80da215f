-- last defined in 0003_capacity_rollup.sql
CREATE OR REPLACE FUNCTION compute_now() RETURNS timestamptz LANGUAGE sql STABLE AS $$
  SELECT coalesce(frozen_at, now() + make_interval(secs => offset_ms / 1000.0)) FROM clock
$$;
