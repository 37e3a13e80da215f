-- The contribution of a set of atom images (devices) on a set of node images, with their live bookings, and of the
-- nodes' scalar counters. Used with the whole ledger by the rebuild and with before/after images by the triggers.
CREATE OR REPLACE FUNCTION bc_contrib(p_nodes nodes[], p_devices devices[], p_resources node_resources[])
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
