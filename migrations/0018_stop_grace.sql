-- The longest grace period a pod gets when its booking ends (docs/booking-end.md): its pods are stopped that long plus
-- a slack before the deadline, so the next booking on the same atoms starts on free hardware. Pool spec.stopGraceSeconds.
ALTER TABLE pools ADD COLUMN stop_grace_seconds integer NOT NULL DEFAULT 30
  CONSTRAINT check$pools$stop_grace CHECK (stop_grace_seconds BETWEEN 1 AND 3600);
