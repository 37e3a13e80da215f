-- The only clock (migrations/0001): the database's time plus the tests' offset, or the instant tests froze it at.
-- Every process reads the same value.
CREATE OR REPLACE FUNCTION compute_now() RETURNS timestamptz LANGUAGE sql STABLE AS $$
  SELECT coalesce(frozen_at, now() + make_interval(secs => offset_ms / 1000.0)) FROM clock
$$;
