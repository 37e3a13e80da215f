-- A claim's atom must be booked to the claim's owner (migrations/0019): a live booking, not lost to a repair, of the
-- on-demand allocation the row names, or of a live allocation of the Reservation it names, on the row's node, whose
-- booking holds now. So no row can hand an atom to a claim that the ledger did not book to it (ADR 0043).
CREATE OR REPLACE FUNCTION bc_check_claim_atom() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.released_at IS NULL AND NOT EXISTS (
    SELECT 1 FROM device_bookings b JOIN allocations a ON a.id = b.allocation_id
    WHERE b.device_id = NEW.device_id AND b.lost_at IS NULL AND a.released_at IS NULL AND a.node_id = NEW.node_id
      AND b.during @> compute_now()
      AND (a.id = NEW.allocation_id OR (NEW.reservation_id IS NOT NULL AND a.reservation_id = NEW.reservation_id))
  ) THEN
    RAISE EXCEPTION 'atom % on node % is not booked now to %', NEW.device_id, NEW.node_id,
      coalesce('reservation ' || NEW.reservation_id, 'allocation ' || NEW.allocation_id)
      USING ERRCODE = '23514', CONSTRAINT = 'check$claim_atoms$booked';
  END IF;
  RETURN NEW;
END $$;
