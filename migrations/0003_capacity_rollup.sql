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
CREATE OR REPLACE FUNCTION compute_now() RETURNS timestamptz LANGUAGE sql STABLE AS $$
  SELECT coalesce(frozen_at, now() + make_interval(secs => offset_ms / 1000.0)) FROM clock
$$;

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

-- Where one atom (or a node's scalar capacity) counts, from its node's state.
-- An archived pool takes no new bookings: its atoms count under maintenance.
CREATE FUNCTION bc_bucket(n nodes, pool_owner text, pool_archived boolean, healthy boolean) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE
    WHEN n.role <> 'host' OR n.trust = 'tenant-controlled'
         OR (n.trust = 'tenant-owned' AND n.owner_tenant IS DISTINCT FROM pool_owner) THEN 'excluded'
    WHEN n.provision_state NOT IN ('adopted', 'deployed') OR NOT n.converged THEN 'provisioning'
    WHEN n.maintenance OR n.cordoned OR pool_archived THEN 'maintenance'
    WHEN n.connectivity <> 'connected' THEN 'unreachable'
    WHEN n.noschedule_reason IS NOT NULL OR NOT healthy THEN 'unhealthy'
    ELSE 'allocatable'
  END
$$;

-- The contribution of a set of atom images (devices) on a set of node images, with their live bookings, and of the
-- nodes' scalar counters. Used with the whole ledger by the rebuild and with before/after images by the triggers.
CREATE FUNCTION bc_contrib(p_nodes nodes[], p_devices devices[], p_resources node_resources[])
RETURNS TABLE (pool_id text, resource text, total bigint, allocatable bigint, allocated bigint, reserved bigint,
               provisioning bigint, unhealthy bigint, maintenance bigint, unreachable bigint)
LANGUAGE sql STABLE AS $$
  WITH n AS (
    SELECT x AS node, p.owner_tenant, p.archived FROM unnest(p_nodes) x JOIN pools p ON p.id = x.pool_id
  ), atoms AS (
    SELECT (n.node).pool_id, d.id, d.class AS resource, bc_bucket(n.node, n.owner_tenant, n.archived, d.healthy) AS bucket
    FROM unnest(p_devices) d JOIN n ON (n.node).id = d.node_id
    WHERE d.present AND d.bookable
  ), booked AS (
    SELECT a.id, count(*) FILTER (WHERE b.during @> compute_now()) AS live,
           count(*) FILTER (WHERE lower(b.during) > compute_now()) AS future
    FROM atoms a JOIN device_bookings b ON b.device_id = a.id
    WHERE a.bucket = 'allocatable' AND NOT isempty(b.during) AND upper(b.during) > compute_now()
    GROUP BY a.id
  ), rows AS (
    SELECT a.pool_id, a.resource, a.bucket, 1::bigint AS amount, coalesce(k.live, 0) AS live, coalesce(k.future, 0) AS future
    FROM atoms a LEFT JOIN booked k ON k.id = a.id
    UNION ALL
    SELECT (n.node).pool_id, r.resource, bc_bucket(n.node, n.owner_tenant, n.archived, true), floor(r.allocatable * r.ratio)::bigint,
           CASE WHEN bc_bucket(n.node, n.owner_tenant, n.archived, true) = 'allocatable' THEN r.allocated ELSE 0 END, 0
    FROM unnest(p_resources) r JOIN n ON (n.node).id = r.node_id
  )
  SELECT pool_id, resource,
         sum(amount) FILTER (WHERE bucket <> 'excluded'),
         sum(amount) FILTER (WHERE bucket = 'allocatable'),
         sum(live), sum(future),
         sum(amount) FILTER (WHERE bucket = 'provisioning'),
         sum(amount) FILTER (WHERE bucket = 'unhealthy'),
         sum(amount) FILTER (WHERE bucket = 'maintenance'),
         sum(amount) FILTER (WHERE bucket = 'unreachable')
  FROM rows
  GROUP BY pool_id, resource
$$;

-- Appends new-minus-old as delta rows (only the pools and resources that changed).
CREATE FUNCTION bc_append_deltas(p_old_nodes nodes[], p_old_devices devices[], p_old_resources node_resources[],
                                 p_new_nodes nodes[], p_new_devices devices[], p_new_resources node_resources[])
RETURNS void LANGUAGE sql AS $$
  INSERT INTO pool_capacity_deltas (pool_id, resource, total, allocatable, allocated, reserved, provisioning, unhealthy,
                                    maintenance, unreachable)
  SELECT pool_id, resource, sum(s * coalesce(total, 0)), sum(s * coalesce(allocatable, 0)), sum(s * coalesce(allocated, 0)),
         sum(s * coalesce(reserved, 0)), sum(s * coalesce(provisioning, 0)), sum(s * coalesce(unhealthy, 0)),
         sum(s * coalesce(maintenance, 0)), sum(s * coalesce(unreachable, 0))
  FROM (
    SELECT -1 AS s, * FROM bc_contrib(p_old_nodes, p_old_devices, p_old_resources)
    UNION ALL
    SELECT 1, * FROM bc_contrib(p_new_nodes, p_new_devices, p_new_resources)
  ) x
  GROUP BY pool_id, resource
  HAVING sum(s * coalesce(total, 0)) <> 0 OR sum(s * coalesce(allocatable, 0)) <> 0 OR sum(s * coalesce(allocated, 0)) <> 0
      OR sum(s * coalesce(reserved, 0)) <> 0 OR sum(s * coalesce(provisioning, 0)) <> 0 OR sum(s * coalesce(unhealthy, 0)) <> 0
      OR sum(s * coalesce(maintenance, 0)) <> 0 OR sum(s * coalesce(unreachable, 0)) <> 0
$$;

-- Node state or pool membership changed: its atoms and scalars, seen with the old and with the new node row.
CREATE FUNCTION bc_rollup_nodes_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM bc_append_deltas(
    ARRAY(SELECT o::nodes FROM old_rows o),
    ARRAY(SELECT d::devices FROM devices d WHERE d.node_id IN (SELECT id FROM old_rows)),
    ARRAY(SELECT r::node_resources FROM node_resources r WHERE r.node_id IN (SELECT id FROM old_rows)),
    ARRAY(SELECT n::nodes FROM new_rows n),
    ARRAY(SELECT d::devices FROM devices d WHERE d.node_id IN (SELECT id FROM new_rows)),
    ARRAY(SELECT r::node_resources FROM node_resources r WHERE r.node_id IN (SELECT id FROM new_rows)));
  RETURN NULL;
END $$;
CREATE TRIGGER trigger$nodes$rollup AFTER UPDATE ON nodes REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION bc_rollup_nodes_changed();

-- Devices (health, bookable, present) or scalar counters inserted or changed: old and new images on the current node
-- rows. Changes of one node's devices or counters and of the node itself take turns (the node row's lock), so each
-- trigger counts against a state that includes the other's change.
CREATE FUNCTION bc_rollup_node_parts_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  v_node_ids text[];
  v_nodes nodes[];
  v_old_devices devices[] := '{}';
  v_new_devices devices[] := '{}';
  v_old_resources node_resources[] := '{}';
  v_new_resources node_resources[] := '{}';
BEGIN
  IF TG_OP = 'INSERT' THEN
    v_node_ids := ARRAY(SELECT DISTINCT node_id FROM new_rows);
  ELSE
    v_node_ids := ARRAY(SELECT node_id FROM new_rows UNION SELECT node_id FROM old_rows);
  END IF;
  PERFORM 1 FROM nodes WHERE id = ANY (v_node_ids) ORDER BY id FOR SHARE;
  v_nodes := ARRAY(SELECT n::nodes FROM nodes n WHERE n.id = ANY (v_node_ids));
  IF TG_TABLE_NAME = 'devices' THEN
    v_new_devices := ARRAY(SELECT d::devices FROM new_rows d);
    IF TG_OP = 'UPDATE' THEN v_old_devices := ARRAY(SELECT d::devices FROM old_rows d); END IF;
  ELSE
    v_new_resources := ARRAY(SELECT r::node_resources FROM new_rows r);
    IF TG_OP = 'UPDATE' THEN v_old_resources := ARRAY(SELECT r::node_resources FROM old_rows r); END IF;
  END IF;
  PERFORM bc_append_deltas(v_nodes, v_old_devices, v_old_resources, v_nodes, v_new_devices, v_new_resources);
  RETURN NULL;
END $$;
CREATE TRIGGER trigger$devices$rollup_insert AFTER INSERT ON devices REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION bc_rollup_node_parts_changed();
CREATE TRIGGER trigger$devices$rollup_update AFTER UPDATE ON devices REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION bc_rollup_node_parts_changed();
CREATE TRIGGER trigger$node_resources$rollup_insert AFTER INSERT ON node_resources REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION bc_rollup_node_parts_changed();
CREATE TRIGGER trigger$node_resources$rollup_update AFTER UPDATE ON node_resources
  REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION bc_rollup_node_parts_changed();

-- Bookings: the hot path, so counted directly (allocated/reserved only, on allocatable atoms).
CREATE FUNCTION bc_booking_counts(p_bookings device_bookings[])
RETURNS TABLE (pool_id text, resource text, live bigint, future bigint) LANGUAGE sql STABLE AS $$
  SELECT n.pool_id, d.class, count(*) FILTER (WHERE b.during @> compute_now()),
         count(*) FILTER (WHERE lower(b.during) > compute_now())
  FROM unnest(p_bookings) b JOIN devices d ON d.id = b.device_id JOIN nodes n ON n.id = d.node_id
  JOIN pools p ON p.id = n.pool_id
  WHERE d.present AND d.bookable AND NOT isempty(b.during) AND upper(b.during) > compute_now()
    AND bc_bucket(n, p.owner_tenant, p.archived, d.healthy) = 'allocatable'
  GROUP BY n.pool_id, d.class
$$;

CREATE FUNCTION bc_rollup_bookings_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO pool_capacity_deltas (pool_id, resource, allocated, reserved)
  SELECT pool_id, resource, sum(s * live), sum(s * future)
  FROM (
    SELECT 1 AS s, * FROM bc_booking_counts(ARRAY(SELECT b::device_bookings FROM new_rows b))
    UNION ALL
    SELECT -1, * FROM bc_booking_counts(CASE WHEN TG_OP = 'UPDATE' THEN ARRAY(SELECT b::device_bookings FROM old_rows b) ELSE '{}'::device_bookings[] END)
  ) x
  GROUP BY pool_id, resource
  HAVING sum(s * live) <> 0 OR sum(s * future) <> 0;
  RETURN NULL;
END $$;
CREATE FUNCTION bc_rollup_bookings_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO pool_capacity_deltas (pool_id, resource, allocated, reserved)
  SELECT pool_id, resource, live, future FROM bc_booking_counts(ARRAY(SELECT b::device_bookings FROM new_rows b))
  WHERE live <> 0 OR future <> 0;
  RETURN NULL;
END $$;
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

-- The full computation from nodes, devices, bookings and counters, for every pool (or one).
CREATE FUNCTION bc_compute_rollup(p_pool text DEFAULT NULL)
RETURNS TABLE (pool_id text, resource text, total bigint, allocatable bigint, allocated bigint, reserved bigint,
               provisioning bigint, unhealthy bigint, maintenance bigint, unreachable bigint)
LANGUAGE sql STABLE AS $$
  SELECT * FROM bc_contrib(
    ARRAY(SELECT n::nodes FROM nodes n WHERE n.pool_id IS NOT NULL AND (p_pool IS NULL OR n.pool_id = p_pool)),
    ARRAY(SELECT d::devices FROM devices d JOIN nodes n ON n.id = d.node_id WHERE p_pool IS NULL OR n.pool_id = p_pool),
    ARRAY(SELECT r::node_resources FROM node_resources r JOIN nodes n ON n.id = r.node_id WHERE p_pool IS NULL OR n.pool_id = p_pool))
$$;

-- The periodic rebuild: in one statement (one snapshot), replace every rollup row by the computation and drop the
-- deltas that snapshot saw; deltas of transactions it did not see stay, and add on top.
CREATE FUNCTION bc_rebuild_rollup() RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
  v_n integer;
BEGIN
  -- One rebuild or fold at a time, across replicas; the statement below takes its snapshot after the lock.
  PERFORM pg_advisory_xact_lock(4242002);
  WITH computed AS (
    SELECT p.id AS pool_id, r.resource, coalesce(c.total, 0) AS total, coalesce(c.allocatable, 0) AS allocatable,
           coalesce(c.allocated, 0) AS allocated, coalesce(c.reserved, 0) AS reserved,
           coalesce(c.provisioning, 0) AS provisioning, coalesce(c.unhealthy, 0) AS unhealthy,
           coalesce(c.maintenance, 0) AS maintenance, coalesce(c.unreachable, 0) AS unreachable
    FROM pools p
    CROSS JOIN (SELECT DISTINCT resource FROM (
      SELECT resource FROM bc_compute_rollup() UNION SELECT resource FROM pool_capacity_rollup UNION SELECT 'gpu') x) r
    LEFT JOIN bc_compute_rollup() c ON c.pool_id = p.id AND c.resource = r.resource
  ), dropped AS (
    DELETE FROM pool_capacity_deltas RETURNING 1
  ), written AS (
    INSERT INTO pool_capacity_rollup AS t (pool_id, resource, total, allocatable, allocated, reserved, provisioning,
                                           unhealthy, maintenance, unreachable, updated_at)
    SELECT pool_id, resource, total, allocatable, allocated, reserved, provisioning, unhealthy, maintenance, unreachable,
           compute_now()
    FROM computed
    WHERE total <> 0 OR resource = 'gpu' OR EXISTS (
      SELECT 1 FROM pool_capacity_rollup x WHERE x.pool_id = computed.pool_id AND x.resource = computed.resource)
    ON CONFLICT (pool_id, resource) DO UPDATE SET total = EXCLUDED.total, allocatable = EXCLUDED.allocatable,
      allocated = EXCLUDED.allocated, reserved = EXCLUDED.reserved, provisioning = EXCLUDED.provisioning,
      unhealthy = EXCLUDED.unhealthy, maintenance = EXCLUDED.maintenance, unreachable = EXCLUDED.unreachable,
      updated_at = EXCLUDED.updated_at
    RETURNING 1
  )
  SELECT (SELECT count(*) FROM written)::integer + 0 * (SELECT count(*) FROM dropped)::integer INTO v_n;
  RETURN v_n;
END $$;

-- Folds the deltas into the rollup without recomputing (cheap; any replica may run it).
CREATE FUNCTION bc_fold_rollup() RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
  v_n integer;
BEGIN
  PERFORM pg_advisory_xact_lock(4242002);
  WITH moved AS (
    DELETE FROM pool_capacity_deltas RETURNING *
  ), sums AS (
    SELECT pool_id, resource, sum(total)::int AS total, sum(allocatable)::int AS allocatable, sum(allocated)::int AS allocated,
           sum(reserved)::int AS reserved, sum(provisioning)::int AS provisioning, sum(unhealthy)::int AS unhealthy,
           sum(maintenance)::int AS maintenance, sum(unreachable)::int AS unreachable
    FROM moved GROUP BY pool_id, resource
  ), written AS (
    INSERT INTO pool_capacity_rollup AS t (pool_id, resource, total, allocatable, allocated, reserved, provisioning,
                                           unhealthy, maintenance, unreachable, updated_at)
    SELECT s.*, compute_now() FROM sums s JOIN pools p ON p.id = s.pool_id
    ON CONFLICT (pool_id, resource) DO UPDATE SET total = t.total + EXCLUDED.total,
      allocatable = t.allocatable + EXCLUDED.allocatable, allocated = t.allocated + EXCLUDED.allocated,
      reserved = t.reserved + EXCLUDED.reserved, provisioning = t.provisioning + EXCLUDED.provisioning,
      unhealthy = t.unhealthy + EXCLUDED.unhealthy, maintenance = t.maintenance + EXCLUDED.maintenance,
      unreachable = t.unreachable + EXCLUDED.unreachable, updated_at = EXCLUDED.updated_at
    RETURNING 1
  )
  SELECT count(*)::integer FROM written INTO v_n;
  RETURN v_n;
END $$;
