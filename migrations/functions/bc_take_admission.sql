-- last defined in 0014_bind_admission.sql
-- An on-demand pod's booking and its node's admission lease in one write (the extender's bind, issue 14): a placement
-- item of bc_place_batch that carries "admission" ({nodeId, podUid, namespace, podName, ttlSeconds}) takes the node's
-- lease for the pod, with the atoms just booked, in the same subtransaction as the booking. While another pod's lease is
-- in flight on that node, the booking is undone and the item answers {"ok": false, "code": "admission_busy"}; the
-- caller waits and tries again. Before this, the bind took the lease, booked, then wrote the atoms on the lease: three
-- transactions, two of them a BEGIN, a statement and a COMMIT each.
--
-- bc_take_admission is handoff.takeAdmission (src/db/handoff.ts) with the atoms known: the lease is taken when the node
-- has none, when it is this pod's, or when the one there has expired.
CREATE OR REPLACE FUNCTION bc_take_admission(p_node text, p_pod text, p_namespace text, p_name text, p_ttl_seconds double precision,
                                  p_atoms text[]) RETURNS boolean LANGUAGE sql AS $$
  WITH taken AS (
    INSERT INTO ondemand_admissions (node_id, pod_uid, namespace, pod_name, atoms, expires_at)
    VALUES (p_node, p_pod, p_namespace, p_name, p_atoms, compute_now() + make_interval(secs => p_ttl_seconds))
    ON CONFLICT (node_id) DO UPDATE SET pod_uid = EXCLUDED.pod_uid, namespace = EXCLUDED.namespace,
      pod_name = EXCLUDED.pod_name, atoms = EXCLUDED.atoms, taken_at = compute_now(), expires_at = EXCLUDED.expires_at
    WHERE ondemand_admissions.pod_uid = EXCLUDED.pod_uid OR ondemand_admissions.expires_at <= compute_now()
    RETURNING 1
  )
  SELECT count(*) > 0 FROM taken
$$;
