-- The extender's bind applies its own booking to its in-memory state at once (src/extender/state-sync.ts, ADR 0023),
-- instead of reloading the node and the pod when their notifications come. To tell its own booking's notifications from
-- another writer's, the statement-level notifications (allocations, quota charges, devices, scalar counters: 0006) now
-- carry the writing transaction's id as their last element, e.g. ["n", node, "1234"], and bc_place_batch's caller reads
-- the same id in its statement. A notification whose transaction the state has applied is not reloaded; every other one
-- is, as before. The per-row notifications (0006) keep their payloads: without an id, they are always reloaded.
CREATE OR REPLACE FUNCTION bc_extender_notify(p_payloads text[]) RETURNS void LANGUAGE sql AS $$
  SELECT pg_notify('bc_extender', (x::jsonb || jsonb_build_array(pg_current_xact_id()::text))::text)
  FROM (SELECT DISTINCT unnest(p_payloads) AS x) s WHERE x IS NOT NULL
$$;
