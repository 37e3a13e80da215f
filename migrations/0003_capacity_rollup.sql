-- Capacity rollups: one row per pool and resource, by the capacity math of the guide.
--   allocatable = healthy, bookable atoms on schedulable nodes   (scalars: floor(allocatable × ratio))
--   allocated   = bookings on allocatable atoms whose range contains compute_now()   (scalars: node_resources.allocated)
--   reserved    = bookings on allocatable atoms that start after compute_now()
--   available   = max(0, allocatable − allocated − reserved)
--   total       = allocatable + provisioning + unhealthy + maintenance + unreachable   (excluded nodes not counted)
-- Every write that changes a number (bookings, devices, nodes, node counters) appends a delta row from a
-- statement-level trigger, in the same transaction: appending never queues writers on one hot row. Readers add the
-- deltas to the rollup; bc_fold_rollup() folds them in, bc_rebuild_rollup() recomputes everything (and is what moves
-- bookings from reserved to allocated as time passes).

-- Tests freeze time to compare the incremental rollup with a rebuild at one instant.
ALTER TABLE clock ADD COLUMN frozen_at timestamptz;
-- Functions, one file each in migrations/functions/ (ADR 0032): compute_now.

CREATE TABLE pool_capacity_rollup (
  pool_id text NOT NULL REFERENCES pools (id) ON DELETE CASCADE,
  resource text NOT NULL,
  total integer NOT NULL DEFAULT 0,
  allocatable integer NOT NULL DEFAULT 0,
  allocated integer NOT NULL DEFAULT 0,
  reserved integer NOT NULL DEFAULT 0,
  provisioning integer NOT NULL DEFAULT 0,
  unhealthy integer NOT NULL DEFAULT 0,
  maintenance integer NOT NULL DEFAULT 0,
  unreachable integer NOT NULL DEFAULT 0,
  updated_at timestamptz NOT NULL DEFAULT compute_now(),
  PRIMARY KEY (pool_id, resource),
  CONSTRAINT check$pool_capacity_rollup$total CHECK (total = allocatable + provisioning + unhealthy + maintenance + unreachable)
);

CREATE TABLE pool_capacity_deltas (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  pool_id text NOT NULL,
  resource text NOT NULL,
  total integer NOT NULL DEFAULT 0,
  allocatable integer NOT NULL DEFAULT 0,
  allocated integer NOT NULL DEFAULT 0,
  reserved integer NOT NULL DEFAULT 0,
  provisioning integer NOT NULL DEFAULT 0,
  unhealthy integer NOT NULL DEFAULT 0,
  maintenance integer NOT NULL DEFAULT 0,
  unreachable integer NOT NULL DEFAULT 0,
  created_at timestamptz NOT NULL DEFAULT compute_now()
);
CREATE INDEX index$pool_capacity_deltas$pool ON pool_capacity_deltas (pool_id, resource);

-- Functions, one file each in migrations/functions/ (ADR 0032): bc_bucket, bc_contrib, bc_append_deltas.

-- A placeholder, so that what follows can name it; its body is functions/bc_rollup_nodes_changed.sql (ADR 0032).
CREATE FUNCTION bc_rollup_nodes_changed() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NEW; END';
CREATE TRIGGER trigger$nodes$rollup AFTER UPDATE ON nodes REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION bc_rollup_nodes_changed();

-- A placeholder, so that what follows can name it; its body is functions/bc_rollup_node_parts_changed.sql (ADR 0032).
CREATE FUNCTION bc_rollup_node_parts_changed() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NEW; END';
CREATE TRIGGER trigger$devices$rollup_insert AFTER INSERT ON devices REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION bc_rollup_node_parts_changed();
CREATE TRIGGER trigger$devices$rollup_update AFTER UPDATE ON devices REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION bc_rollup_node_parts_changed();
CREATE TRIGGER trigger$node_resources$rollup_insert AFTER INSERT ON node_resources REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION bc_rollup_node_parts_changed();
CREATE TRIGGER trigger$node_resources$rollup_update AFTER UPDATE ON node_resources
  REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION bc_rollup_node_parts_changed();

-- Functions, one file each in migrations/functions/ (ADR 0032): bc_booking_counts.

-- A placeholder, so that what follows can name it; its body is functions/bc_rollup_bookings_changed.sql (ADR 0032).
CREATE FUNCTION bc_rollup_bookings_changed() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NEW; END';
-- A placeholder, so that what follows can name it; its body is functions/bc_rollup_bookings_inserted.sql (ADR 0032).
CREATE FUNCTION bc_rollup_bookings_inserted() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NEW; END';
CREATE TRIGGER trigger$device_bookings$rollup_insert AFTER INSERT ON device_bookings REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION bc_rollup_bookings_inserted();
CREATE TRIGGER trigger$device_bookings$rollup_update AFTER UPDATE ON device_bookings
  REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION bc_rollup_bookings_changed();

-- What readers see: the rollup plus the deltas not yet folded in.
CREATE VIEW pool_capacity AS
  SELECT pool_id, resource, total, allocatable, allocated, reserved,
         greatest(0, allocatable - allocated - reserved) AS available,
         provisioning, unhealthy, maintenance, unreachable, updated_at
  FROM (
    SELECT pool_id, resource, sum(total)::int AS total, sum(allocatable)::int AS allocatable, sum(allocated)::int AS allocated,
           sum(reserved)::int AS reserved, sum(provisioning)::int AS provisioning, sum(unhealthy)::int AS unhealthy,
           sum(maintenance)::int AS maintenance, sum(unreachable)::int AS unreachable, max(updated_at) AS updated_at
    FROM (
      SELECT pool_id, resource, total, allocatable, allocated, reserved, provisioning, unhealthy, maintenance, unreachable, updated_at
      FROM pool_capacity_rollup
      UNION ALL
      SELECT pool_id, resource, total, allocatable, allocated, reserved, provisioning, unhealthy, maintenance, unreachable, created_at
      FROM pool_capacity_deltas
    ) parts
    GROUP BY pool_id, resource
  ) summed;

-- Functions, one file each in migrations/functions/ (ADR 0032): bc_compute_rollup, bc_rebuild_rollup, bc_fold_rollup.
