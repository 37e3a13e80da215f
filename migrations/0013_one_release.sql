-- One release function (docs/adr/0017-spot-preemption.md): bc_release_allocations takes the time to cut at, now when
-- none is given, and bc_preempt_allocations (0011), which copied its body with the cut moved to a deadline, is gone.
-- The body is 0002's with compute_now() replaced by v_at; a cut time must not be in the past (history is not
-- rewritten). Callers that pass one argument (the hand-off, the releaser, repair's bc_repair_cut) are unchanged.
DROP FUNCTION IF EXISTS bc_preempt_allocations(text[], timestamptz);
DROP FUNCTION IF EXISTS bc_release_allocations(text[]);

-- bc_release_allocations: migrations/functions/bc_release_allocations.sql
