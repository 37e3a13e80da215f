-- Dynamic Resource Allocation (docs/adr/0043-dra-the-ledger-allocates-the-scheduler-follows.md, docs/dra.md).
--
-- pools.handoff: how the Pool's atoms reach pods. 'devicePlugin' (the default): the device plugin and the scheduler
-- extender. 'dra': ResourceClaims the controller allocates after booking (Pool spec.handoff).
ALTER TABLE pools ADD COLUMN handoff text NOT NULL DEFAULT 'devicePlugin'
  CONSTRAINT check$pools$handoff CHECK (handoff IN ('devicePlugin', 'dra'));

-- claim_atoms: which atom is handed to which ResourceClaim, one row per atom. The atom is booked to the claim's pod
-- (on demand: the pod's allocation, allocation_id) or to the Reservation the pod belongs to (reservation_id). A claim
-- that is released (deleted, its pod ended, its Reservation's window over) keeps its rows with released_at set: the
-- history of who held what. At NodePrepareResources the controller answers from the live rows only (guard 6 for DRA).
CREATE TABLE claim_atoms (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  claim_uid text NOT NULL,
  namespace text NOT NULL,
  claim_name text NOT NULL,
  -- The claim's request name that this atom answers (status.allocation.devices.results[].request).
  request text NOT NULL,
  pod_uid text NOT NULL,
  node_id text NOT NULL REFERENCES nodes (id),
  device_id text NOT NULL REFERENCES devices (id),
  allocation_id text REFERENCES allocations (id),
  reservation_id text REFERENCES reservations (id),
  created_at timestamptz NOT NULL DEFAULT compute_now(),
  released_at timestamptz,
  CONSTRAINT check$claim_atoms$owner CHECK ((allocation_id IS NULL) <> (reservation_id IS NULL)),
  CONSTRAINT check$claim_atoms$released CHECK (released_at IS NULL OR released_at >= created_at)
);
-- An atom is held by at most one live claim.
CREATE UNIQUE INDEX unique$claim_atoms$live_device ON claim_atoms (device_id) WHERE released_at IS NULL;
CREATE INDEX index$claim_atoms$claim ON claim_atoms (claim_uid);
CREATE INDEX index$claim_atoms$pod ON claim_atoms (pod_uid) WHERE released_at IS NULL;
CREATE INDEX index$claim_atoms$node ON claim_atoms (node_id);
CREATE INDEX index$claim_atoms$device ON claim_atoms (device_id);
CREATE INDEX index$claim_atoms$allocation ON claim_atoms (allocation_id);
CREATE INDEX index$claim_atoms$reservation ON claim_atoms (reservation_id);

-- A live claim's atom is an atom booked, live, to its owner on its node: the on-demand allocation itself, or an
-- allocation of the Reservation. A placeholder, so that the trigger can name it; its body is
-- functions/bc_check_claim_atom.sql (ADR 0032).
CREATE FUNCTION bc_check_claim_atom() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NEW; END';
CREATE TRIGGER trigger$claim_atoms$booked BEFORE INSERT ON claim_atoms
  FOR EACH ROW EXECUTE FUNCTION bc_check_claim_atom();
