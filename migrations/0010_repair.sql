-- BookingRepair (ADR 0016, docs/repair.md): atoms that leave service under a live or future reservation are re-placed,
-- in one transaction per reservation, as new bookings of the same reservation; the old ones are truncated at now.
--   nodes.unreachable_since   when the node last stopped being connected (NULL while connected): the repair's grace for
--                             a NotReady node is measured from it, on compute_now().
--   reservations.repair_*     the last repair verdict, mirrored into the Reservation's Degraded condition:
--                             repair_short atoms still on out-of-service atoms (0: whole), repair_reason why they were
--                             lost, repaired_at and repairs (how many times it was re-placed).
ALTER TABLE nodes ADD COLUMN unreachable_since timestamptz;
UPDATE nodes SET unreachable_since = updated_at WHERE connectivity <> 'connected';

-- A placeholder, so that what follows can name it; its body is functions/bc_node_unreachable_since.sql (ADR 0032).
CREATE FUNCTION bc_node_unreachable_since() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NEW; END';
CREATE TRIGGER trigger$nodes$unreachable_since BEFORE INSERT OR UPDATE OF connectivity ON nodes
  FOR EACH ROW EXECUTE FUNCTION bc_node_unreachable_since();

ALTER TABLE reservations
  ADD COLUMN repair_short integer NOT NULL DEFAULT 0 CONSTRAINT check$reservations$repair_short CHECK (repair_short >= 0),
  ADD COLUMN repair_reason text,
  ADD COLUMN repaired_at timestamptz,
  ADD COLUMN repairs integer NOT NULL DEFAULT 0;

-- A booking a repair cut (truncated at lost_at, emptied when it had not started): history, no longer the reservation's
-- current atoms (Ledger.get leaves it out of allocations).
ALTER TABLE device_bookings ADD COLUMN lost_at timestamptz;

-- Functions, one file each in migrations/functions/ (ADR 0032): bc_lost_atoms, bc_repair_cut, bc_place.
