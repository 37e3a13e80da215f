-- The booking ledger. Every claim on a device is a row with a time range that PostgreSQL refuses to overlap.
-- Invariants live here, as constraints, so that no bug in a process above can break them:
--   guard 1  device-time exclusivity      exclude$device_bookings$device_during
--   guard 2  the atom rule                 check$device_bookings$bookable (trigger) + layout bookings of every atom
--   guard 3  guarded scalar counters       check$node_resources$allocated
--   guard 4  linearizable eligibility      nodes.schedulable / devices.healthy+bookable locked FOR SHARE by bc_place()
--   guard 5  quota                         check$quotas$used + the peak check of bc_charge_quota()
CREATE EXTENSION IF NOT EXISTS btree_gist;

-- The only clock. Tests move time forward by changing the offset; every process reads the same value.
CREATE TABLE clock (
  singleton boolean PRIMARY KEY DEFAULT true CONSTRAINT check$clock$singleton CHECK (singleton),
  offset_ms bigint NOT NULL DEFAULT 0
);
INSERT INTO clock DEFAULT VALUES;

-- A placeholder, so that what follows can name it; its body is functions/compute_now.sql (ADR 0032).
CREATE FUNCTION compute_now() RETURNS timestamptz LANGUAGE sql STABLE AS 'SELECT now()';

CREATE TABLE pools (
  id text PRIMARY KEY CONSTRAINT check$pools$id CHECK (id ~ '^pool_[0-9a-hjkmnp-tv-z]{26,52}$'),
  name text NOT NULL CONSTRAINT unique$pools$name UNIQUE,
  owner_tenant text NOT NULL,
  gpu_model text,
  sharing text NOT NULL DEFAULT 'exclusive'
    CONSTRAINT check$pools$sharing CHECK (sharing IN ('exclusive', 'mig', 'timeslice', 'mps')),
  slots_per_gpu integer NOT NULL DEFAULT 1 CONSTRAINT check$pools$slots CHECK (slots_per_gpu BETWEEN 1 AND 64),
  topology_key text NOT NULL DEFAULT 'topology.kubernetes.io/zone',
  node_selector jsonb NOT NULL DEFAULT '{}',
  overcommit jsonb NOT NULL DEFAULT '{}',
  archived boolean NOT NULL DEFAULT false,
  created_at timestamptz NOT NULL DEFAULT compute_now(),
  updated_at timestamptz NOT NULL DEFAULT compute_now()
);

-- A tenant other than the owner sees a pool only through an offering.
CREATE TABLE pool_offerings (
  pool_id text NOT NULL REFERENCES pools (id) ON DELETE CASCADE,
  tenant_id text NOT NULL,
  PRIMARY KEY (pool_id, tenant_id)
);
CREATE INDEX index$pool_offerings$tenant ON pool_offerings (tenant_id);

CREATE TABLE nodes (
  id text PRIMARY KEY,
  pool_id text REFERENCES pools (id),
  role text NOT NULL DEFAULT 'host',
  maintenance boolean NOT NULL DEFAULT false,
  cordoned boolean NOT NULL DEFAULT false,
  provision_state text NOT NULL DEFAULT 'adopted',
  connectivity text NOT NULL DEFAULT 'connected',
  noschedule_reason text,
  converged boolean NOT NULL DEFAULT false,
  trust text NOT NULL DEFAULT 'platform'
    CONSTRAINT check$nodes$trust CHECK (trust IN ('platform', 'tenant-owned', 'tenant-controlled')),
  owner_tenant text,
  labels jsonb NOT NULL DEFAULT '{}',
  -- The schedulability predicate of the capacity guide, except the tenant-owned rule, which needs the pool.
  schedulable boolean GENERATED ALWAYS AS (
    role = 'host' AND NOT maintenance AND NOT cordoned AND provision_state IN ('adopted', 'deployed')
    AND connectivity = 'connected' AND noschedule_reason IS NULL AND converged
    AND trust IN ('platform', 'tenant-owned')
  ) STORED,
  updated_at timestamptz NOT NULL DEFAULT compute_now()
);
CREATE INDEX index$nodes$pool ON nodes (pool_id);

CREATE TABLE devices (
  id text PRIMARY KEY,
  node_id text NOT NULL REFERENCES nodes (id),
  class text NOT NULL
    CONSTRAINT check$devices$class CHECK (class IN ('gpu', 'gpu.mig', 'gpu.slot', 'nic.vf', 'disk', 'node')),
  parent_id text REFERENCES devices (id),
  attributes jsonb NOT NULL DEFAULT '{}',
  healthy boolean NOT NULL DEFAULT true,
  bookable boolean NOT NULL DEFAULT true,
  -- false once a later inventory report no longer lists the device; the row stays for history.
  present boolean NOT NULL DEFAULT true,
  CONSTRAINT check$devices$present_bookable CHECK (present OR NOT bookable),
  CONSTRAINT check$devices$child_has_parent CHECK ((class IN ('gpu.mig', 'gpu.slot')) = (parent_id IS NOT NULL))
);
CREATE INDEX index$devices$node ON devices (node_id);
CREATE INDEX index$devices$parent ON devices (parent_id);

CREATE TABLE reservations (
  id text PRIMARY KEY CONSTRAINT check$reservations$id CHECK (id ~ '^rsv_[0-9a-hjkmnp-tv-z]{26}$'),
  tenant_id text NOT NULL,
  pool_id text NOT NULL REFERENCES pools (id),
  project_id text,
  idempotency_key text NOT NULL,
  request_hash text NOT NULL,
  request jsonb NOT NULL,
  state text NOT NULL
    CONSTRAINT check$reservations$state CHECK (state IN ('held', 'confirmed', 'released', 'expired')),
  spot boolean NOT NULL DEFAULT false,
  binding text NOT NULL DEFAULT 'hold',
  starts_at timestamptz NOT NULL,
  ends_at timestamptz NOT NULL,
  lease_expires_at timestamptz,
  created_at timestamptz NOT NULL DEFAULT compute_now(),
  updated_at timestamptz NOT NULL DEFAULT compute_now(),
  ended_at timestamptz,
  CONSTRAINT unique$reservations$idempotency UNIQUE (tenant_id, idempotency_key),
  CONSTRAINT check$reservations$window CHECK (ends_at > starts_at),
  CONSTRAINT check$reservations$lease CHECK ((state = 'held') = (lease_expires_at IS NOT NULL) OR state IN ('released', 'expired'))
);
CREATE INDEX index$reservations$pool ON reservations (pool_id);
CREATE INDEX index$reservations$held ON reservations (lease_expires_at) WHERE state = 'held';

-- One allocation per node per reservation (gangs have several), or one per pod, or one per layout change.
CREATE TABLE allocations (
  id text PRIMARY KEY,
  kind text NOT NULL CONSTRAINT check$allocations$kind CHECK (kind IN ('reservation', 'pod', 'layout')),
  reservation_id text REFERENCES reservations (id),
  pod_uid text,
  node_id text NOT NULL REFERENCES nodes (id),
  pool_id text REFERENCES pools (id),
  tenant_id text,
  scalars jsonb NOT NULL DEFAULT '{}',
  during tstzrange NOT NULL,
  released_at timestamptz,
  created_at timestamptz NOT NULL DEFAULT compute_now(),
  CONSTRAINT check$allocations$owner CHECK ((kind = 'reservation') = (reservation_id IS NOT NULL))
);
CREATE INDEX index$allocations$reservation ON allocations (reservation_id);
-- A pod holds at most one live on-demand allocation.
CREATE UNIQUE INDEX unique$allocations$live_pod ON allocations (pod_uid) WHERE kind = 'pod' AND released_at IS NULL;
CREATE INDEX index$allocations$node ON allocations (node_id);

-- Guard 1. A released booking keeps its row: `during` is truncated at the release (or emptied when it had not started),
-- `planned` keeps what was booked.
CREATE TABLE device_bookings (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  device_id text NOT NULL REFERENCES devices (id),
  allocation_id text NOT NULL REFERENCES allocations (id),
  during tstzrange NOT NULL,
  planned tstzrange NOT NULL,
  CONSTRAINT exclude$device_bookings$device_during EXCLUDE USING gist (device_id WITH =, during WITH &&),
  CONSTRAINT check$device_bookings$planned CHECK (NOT isempty(planned) AND lower_inc(planned) AND NOT upper_inc(planned))
);
CREATE INDEX index$device_bookings$allocation ON device_bookings (allocation_id);

-- A placeholder, so that what follows can name it; its body is functions/bc_check_booking_target.sql (ADR 0032).
CREATE FUNCTION bc_check_booking_target() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NEW; END';
CREATE TRIGGER trigger$device_bookings$bookable BEFORE INSERT ON device_bookings
  FOR EACH ROW EXECUTE FUNCTION bc_check_booking_target();

-- Guard 3. Scalars (vcpu, memoryGiB, hugepages1Gi) may be overcommitted by `ratio`; GPUs never are.
CREATE TABLE node_resources (
  node_id text NOT NULL REFERENCES nodes (id),
  resource text NOT NULL CONSTRAINT check$node_resources$resource CHECK (resource IN ('vcpu', 'memoryGiB', 'hugepages1Gi')),
  allocatable integer NOT NULL CONSTRAINT check$node_resources$allocatable CHECK (allocatable >= 0),
  ratio numeric NOT NULL DEFAULT 1 CONSTRAINT check$node_resources$ratio CHECK (ratio >= 1),
  allocated integer NOT NULL DEFAULT 0,
  PRIMARY KEY (node_id, resource),
  CONSTRAINT check$node_resources$allocated CHECK (allocated >= 0 AND allocated <= floor(allocatable * ratio))
);

-- Guard 5. Quota per (tenant, pool, resource). `max` is the limit: at no instant may the tenant's live charges add up to
-- more. `used` counts charges that have started, `reserved` charges that start later. For a limited key both are
-- recomputed under its row lock in every booking and release; for an unlimited key (max NULL) the booking takes no
-- lock on the row (it would serialise a tenant's bookings) and bc_rebuild_quotas() counts them. Lowering `max` below use is allowed and only blocks new
-- bookings, so the backstop CHECK allows `grace` above max: the overage that existed when the limit was lowered.
CREATE TABLE quotas (
  tenant_id text NOT NULL,
  pool_id text NOT NULL REFERENCES pools (id),
  resource text NOT NULL,
  max integer CONSTRAINT check$quotas$max CHECK (max >= 0), -- NULL: no limit (usage is still counted)
  used integer NOT NULL DEFAULT 0,
  reserved integer NOT NULL DEFAULT 0 CONSTRAINT check$quotas$reserved CHECK (reserved >= 0),
  grace integer NOT NULL DEFAULT 0 CONSTRAINT check$quotas$grace CHECK (grace >= 0),
  PRIMARY KEY (tenant_id, pool_id, resource),
  CONSTRAINT check$quotas$used CHECK (used BETWEEN 0 AND max + grace)
);

-- The time-aware part of quota: each charge is a count over a time range, truncated like its bookings on release.
CREATE TABLE quota_charges (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  tenant_id text NOT NULL,
  pool_id text NOT NULL,
  resource text NOT NULL,
  allocation_id text NOT NULL REFERENCES allocations (id),
  amount integer NOT NULL CONSTRAINT check$quota_charges$amount CHECK (amount > 0),
  during tstzrange NOT NULL,
  FOREIGN KEY (tenant_id, pool_id, resource) REFERENCES quotas (tenant_id, pool_id, resource)
);
CREATE INDEX index$quota_charges$key_during ON quota_charges USING gist (tenant_id, pool_id, resource, during);
CREATE INDEX index$quota_charges$allocation ON quota_charges (allocation_id);

-- Functions, one file each in migrations/functions/ (ADR 0032): bc_quota_peak.
