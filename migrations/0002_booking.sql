-- The commit of a placement, and its release. Both run in the caller's transaction (or autocommit), in one round trip.
-- bc_place() works inside a subtransaction (a savepoint): a lost race or a refused guard undoes everything it wrote and
-- returns {"ok": false, "code": ...} instead of raising, so the caller replans with fresh data. Codes:
--   node_unschedulable  a node failed the schedulability predicate when locked (guard 4)
--   atom_unavailable    an atom is unhealthy, unbookable or gone when locked (guard 4)
--   conflict            an atom was booked by someone else in the window (guard 1, a lost race)
--   scalar              a node's scalar counter would be overdrawn (guard 3)
--   quota               the tenant's quota would be exceeded at some instant of the window (guard 5)
--   idempotency_mismatch  the idempotency key was used before with a different request
--   pool_unavailable    the pool is archived, or neither owned by nor offered to the tenant

-- bc_refresh_quota: migrations/functions/bc_refresh_quota.sql

-- bc_rebuild_quotas: migrations/functions/bc_rebuild_quotas.sql

-- bc_place: migrations/functions/bc_place.sql

-- bc_release_allocations: migrations/functions/bc_release_allocations.sql
