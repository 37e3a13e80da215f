-- Spot preemption (docs/adr/0017-spot-preemption.md). A regular reservation that fits only by displacing spot
-- reservations takes their atoms from a deadline (now + the notice): in one transaction the victims' bookings and
-- charges are truncated at the deadline and the regular one is booked from it, so the no-overlap guard holds at every
-- instant and nobody else can take the freed atoms in between.
--   preempt_at    the deadline; set once, when the victim is chosen.
--   preempted_by  the regular reservation that displaced it.
--   notified_at   when the leader delivered the notice (condition, Event, pod annotations).
--   evicted_at    when the leader evicted its pods at the deadline and ended it.
ALTER TABLE reservations
  ADD COLUMN preempt_at timestamptz,
  -- Deferred: the displacing reservation is inserted (bc_place) after its victims are marked, in the same transaction.
  ADD COLUMN preempted_by text REFERENCES reservations (id) DEFERRABLE INITIALLY DEFERRED,
  ADD COLUMN notified_at timestamptz,
  ADD COLUMN evicted_at timestamptz,
  ADD CONSTRAINT check$reservations$preempt_spot CHECK (preempt_at IS NULL OR spot);
CREATE INDEX index$reservations$preempting ON reservations (preempt_at) WHERE preempt_at IS NOT NULL AND evicted_at IS NULL;

-- bc_preempt_allocations truncated allocations at the deadline until 0013 folded it into bc_release_allocations.
