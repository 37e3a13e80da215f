-- The limit in force under an override (kind NULL: none).
CREATE OR REPLACE FUNCTION bc_quota_limit(p_max integer, p_kind text, p_amount integer) RETURNS integer LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE p_kind WHEN 'set' THEN p_amount WHEN 'add' THEN greatest(0, p_max + p_amount) ELSE p_max END
$$;
