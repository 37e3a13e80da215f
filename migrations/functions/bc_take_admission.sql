-- handoff.takeAdmission (src/db/handoff.ts) with the atoms known: the node's on-demand admission lease is taken
-- for the pod when the node has none, when it is this pod's, or when the one there has expired. bc_place_batch takes
-- it for an item that carries "admission", in the booking's subtransaction (the extender's bind, issue 14).
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
