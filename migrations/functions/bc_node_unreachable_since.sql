-- last defined in 0010_repair.sql
CREATE OR REPLACE FUNCTION bc_node_unreachable_since() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.connectivity = 'connected' THEN
    NEW.unreachable_since := NULL;
  ELSIF TG_OP = 'INSERT' OR OLD.connectivity = 'connected' OR OLD.unreachable_since IS NULL THEN
    NEW.unreachable_since := compute_now();
  END IF;
  RETURN NEW;
END $$;
