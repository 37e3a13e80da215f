-- Guard 2, backstop: only atoms are booked, except by a layout change, which books every atom of a GPU, parent included.
CREATE OR REPLACE FUNCTION bc_check_booking_target() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NOT isempty(NEW.during)
     AND NOT EXISTS (SELECT 1 FROM devices d WHERE d.id = NEW.device_id AND d.bookable)
     AND NOT EXISTS (SELECT 1 FROM allocations a WHERE a.id = NEW.allocation_id AND a.kind = 'layout') THEN
    RAISE EXCEPTION 'device % is not an atom (not bookable); only a layout change may book it', NEW.device_id
      USING ERRCODE = '23514', CONSTRAINT = 'check$device_bookings$bookable';
  END IF;
  RETURN NEW;
END $$;
