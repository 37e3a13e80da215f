-- Handing atoms to pods (src/extender/, src/agent/).
--
-- reservation_pod_assignments: a pod of a reservation, bound by the extender to a node, counts `count` of that
-- reservation's atoms there. The filter admits a pod only where the reservation's atoms on the node minus the live
-- assignments cover its request; the kubelet (one resource per reservation) picks which atoms. A pod that ends frees
-- its row (released_at); the row stays for audit.
CREATE TABLE reservation_pod_assignments (
  pod_uid text NOT NULL,
  reservation_id text NOT NULL REFERENCES reservations (id),
  node_id text NOT NULL REFERENCES nodes (id),
  namespace text NOT NULL,
  pod_name text NOT NULL,
  count integer NOT NULL CONSTRAINT check$reservation_pod_assignments$count CHECK (count > 0),
  created_at timestamptz NOT NULL DEFAULT compute_now(),
  released_at timestamptz
);
-- A pod holds at most one live assignment.
CREATE UNIQUE INDEX unique$reservation_pod_assignments$live_pod
  ON reservation_pod_assignments (pod_uid) WHERE released_at IS NULL;
CREATE INDEX index$reservation_pod_assignments$reservation_node
  ON reservation_pod_assignments (reservation_id, node_id) WHERE released_at IS NULL;
CREATE INDEX index$reservation_pod_assignments$node ON reservation_pod_assignments (node_id);

-- ondemand_admissions: at most one on-demand admission in flight per node (the primary key). The extender's bind takes
-- it for a pod before booking, the node's agent reads it to know whom GetPreferredAllocation/Allocate serve, and
-- deletes it as soon as it has allocated. A lease that nobody released runs out at expires_at; a new bind may take
-- over an expired lease. It is never held for longer than one admission.
CREATE TABLE ondemand_admissions (
  node_id text PRIMARY KEY REFERENCES nodes (id),
  pod_uid text NOT NULL,
  namespace text NOT NULL,
  pod_name text NOT NULL,
  -- The atoms booked for the pod (empty until the booking committed).
  atoms text[] NOT NULL DEFAULT '{}',
  taken_at timestamptz NOT NULL DEFAULT compute_now(),
  expires_at timestamptz NOT NULL,
  CONSTRAINT check$ondemand_admissions$expiry CHECK (expires_at > taken_at)
);
