-- Keeps nodes.unreachable_since (migrations/0010): when the node last stopped being connected, NULL while it is;
-- the repair's grace for a NotReady node is measured from it.
CREATE OR REPLACE FUNCTION bc_node_unreachable_since() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.connectivity = 'connected' THEN
    NEW.unreachable_since := NULL;
  ELSIF TG_OP = 'INSERT' OR OLD.connectivity = 'connected' OR OLD.unreachable_since IS NULL THEN
    NEW.unreachable_since := compute_now();
  END IF;
  RETURN NEW;
END $$;
