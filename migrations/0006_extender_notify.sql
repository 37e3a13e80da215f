-- The scheduler extender answers filter and prioritize from memory (src/extender/state.ts, ADR 0010). It learns what
-- changed from these notifications on channel `bc_extender`, sent at commit, and reloads only that. A payload is a JSON
-- array naming one thing:
--   ["n", node]                   a node, its devices, their bookings or its scalar counters
--   ["p", pool]                   a pool or its offerings
--   ["r", reservation]            a reservation, its allocations or its pods' assignments
--   ["u", pod uid]                what the pod holds (an on-demand allocation, or an assignment)
--   ["q", tenant, pool, resource] a quota key: its limit, or the charges of a limited key
-- Identical payloads of one transaction are sent once. The hot tables (allocations, quota_charges, devices,
-- node_resources) notify per statement from their transition tables; the others per row. Bookings are not watched:
-- every booking statement goes with one on its allocation (bc_place, bc_release_allocations, a layout change), and the
-- periodic full resync repairs anything a notification missed.

-- Functions, one file each in migrations/functions/ (ADR 0032): bc_extender_notify.

-- A placeholder, so that what follows can name it; its body is functions/bc_extender_row_changed.sql (ADR 0032).
CREATE FUNCTION bc_extender_row_changed() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NEW; END';

CREATE TRIGGER trigger$pools$extender AFTER INSERT OR UPDATE OR DELETE ON pools
  FOR EACH ROW EXECUTE FUNCTION bc_extender_row_changed();
CREATE TRIGGER trigger$pool_offerings$extender AFTER INSERT OR UPDATE OR DELETE ON pool_offerings
  FOR EACH ROW EXECUTE FUNCTION bc_extender_row_changed();
CREATE TRIGGER trigger$nodes$extender AFTER INSERT OR UPDATE OR DELETE ON nodes
  FOR EACH ROW EXECUTE FUNCTION bc_extender_row_changed();
CREATE TRIGGER trigger$reservations$extender AFTER INSERT OR UPDATE OR DELETE ON reservations
  FOR EACH ROW EXECUTE FUNCTION bc_extender_row_changed();
CREATE TRIGGER trigger$reservation_pod_assignments$extender AFTER INSERT OR UPDATE OR DELETE ON reservation_pod_assignments
  FOR EACH ROW EXECUTE FUNCTION bc_extender_row_changed();
-- Every booking of a limited key rewrites its counters (used, reserved): only a new key or a new limit matters here.
CREATE TRIGGER trigger$quotas$extender_insert AFTER INSERT OR DELETE ON quotas
  FOR EACH ROW EXECUTE FUNCTION bc_extender_row_changed();
CREATE TRIGGER trigger$quotas$extender_update AFTER UPDATE ON quotas
  FOR EACH ROW WHEN (OLD.max IS DISTINCT FROM NEW.max) EXECUTE FUNCTION bc_extender_row_changed();

-- A placeholder, so that what follows can name it; its body is functions/bc_extender_allocations_changed.sql (ADR 0032).
CREATE FUNCTION bc_extender_allocations_changed() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NEW; END';
CREATE TRIGGER trigger$allocations$extender_insert AFTER INSERT ON allocations REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION bc_extender_allocations_changed();
CREATE TRIGGER trigger$allocations$extender_update AFTER UPDATE ON allocations REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION bc_extender_allocations_changed();

-- A placeholder, so that what follows can name it; its body is functions/bc_extender_charges_changed.sql (ADR 0032).
CREATE FUNCTION bc_extender_charges_changed() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NEW; END';
CREATE TRIGGER trigger$quota_charges$extender_insert AFTER INSERT ON quota_charges REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION bc_extender_charges_changed();
CREATE TRIGGER trigger$quota_charges$extender_update AFTER UPDATE ON quota_charges REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION bc_extender_charges_changed();

-- A placeholder, so that what follows can name it; its body is functions/bc_extender_node_parts_changed.sql (ADR 0032).
CREATE FUNCTION bc_extender_node_parts_changed() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NEW; END';
CREATE TRIGGER trigger$devices$extender_insert AFTER INSERT ON devices REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION bc_extender_node_parts_changed();
CREATE TRIGGER trigger$node_resources$extender_insert AFTER INSERT ON node_resources REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION bc_extender_node_parts_changed();
CREATE TRIGGER trigger$devices$extender_update AFTER UPDATE ON devices REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION bc_extender_node_parts_changed();
CREATE TRIGGER trigger$node_resources$extender_update AFTER UPDATE ON node_resources
  REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION bc_extender_node_parts_changed();
