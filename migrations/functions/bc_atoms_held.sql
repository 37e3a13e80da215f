-- The atoms among p_atoms on node p_node that a live pod other than p_pod may still hold, with that pod: a live
-- assignment of another reservation on the node (the kubelet chose which of that reservation's atoms there its pods
-- got, so each of them counts; a Reservation's ResourceClaims are assignments too), or a live on-demand booking of
-- another pod (its namespace and name are not in the ledger: null). The end of a booking (its window, a notice's
-- deadline, a repair's cut) does not end such a holding: it ends when the pod is gone from the node (the releaser, on
-- evidence). p_reservation: the asking pod's reservation, whose other pods' atoms are its own (the kubelet keeps them
-- apart); null for an on-demand pod. What a next booking's pod waits for before it is bound (docs/booking-end.md), so
-- that the node's check of live containers (guard 6) never refuses it.
CREATE OR REPLACE FUNCTION bc_atoms_held(p_node text, p_atoms text[], p_pod text, p_reservation text)
RETURNS TABLE (atom_id text, pod_uid text, namespace text, pod_name text)
LANGUAGE sql STABLE AS $$
  SELECT DISTINCT ON (h.atom_id) h.atom_id, h.pod_uid, h.namespace, h.pod_name
  FROM (
    SELECT b.device_id AS atom_id, a.pod_uid, a.namespace, a.pod_name
    FROM reservation_pod_assignments a
    JOIN allocations al ON al.reservation_id = a.reservation_id AND al.node_id = a.node_id
    JOIN device_bookings b ON b.allocation_id = al.id AND NOT isempty(b.during)
    WHERE a.node_id = p_node AND a.released_at IS NULL AND a.pod_uid <> p_pod
      AND a.reservation_id IS DISTINCT FROM p_reservation AND b.device_id = ANY (p_atoms)
    UNION ALL
    SELECT b.device_id, al.pod_uid, NULL, NULL
    FROM allocations al JOIN device_bookings b ON b.allocation_id = al.id AND NOT isempty(b.during)
    WHERE al.node_id = p_node AND al.kind = 'pod' AND al.released_at IS NULL AND al.pod_uid <> p_pod
      AND b.device_id = ANY (p_atoms)
  ) h
  ORDER BY h.atom_id, h.pod_name NULLS LAST
$$;
