-- One release function (docs/adr/0017-spot-preemption.md): bc_release_allocations takes the time to cut at, now when
-- none is given, and bc_preempt_allocations (0011), which copied its body with the cut moved to a deadline, is gone.
-- A cut time must not be in the past (history is not rewritten). Callers that pass one argument (the hand-off, the
-- releaser, repair's bc_repair_cut) are unchanged. IF EXISTS: a database created after ADR 0032 never had them.
DROP FUNCTION IF EXISTS bc_preempt_allocations(text[], timestamptz);
DROP FUNCTION IF EXISTS bc_release_allocations(text[]);

-- Functions, one file each in migrations/functions/ (ADR 0032): bc_release_allocations.
