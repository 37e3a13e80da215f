-- The placer's statement, cheaper for PostgreSQL (bench:placer; issue 14). Same results, same guards.
--
-- 1. bc_place_batch plans each statement it runs once per session (generic plans), bc_place's and the triggers' they
--    fire included. Under the default plan_cache_mode, a PL/pgSQL statement whose custom plan looks cheaper than the
--    generic one is planned again on every execution: in a profile of the placer at 10,000 nodes about a tenth of the
--    server's CPU went to planning the same statements over and over. The setting is the function's (restored when it
--    returns): the SET clause of migrations/functions/bc_place_batch.sql.

-- bc_rollup_bookings_inserted: migrations/functions/bc_rollup_bookings_inserted.sql

-- bc_extender_notify: migrations/functions/bc_extender_notify.sql
