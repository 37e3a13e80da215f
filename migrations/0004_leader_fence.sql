-- Fencing for the elected leader's writes. A new leader bumps the epoch of its lease name; every leader-only write
-- transaction first checks its epoch under a share lock of the row. The bump waits for in-flight writes of the old
-- leader, and after it no write of the old leader can commit.
CREATE TABLE leader_fences (
  name text PRIMARY KEY,
  epoch bigint NOT NULL DEFAULT 0,
  holder text,
  acquired_at timestamptz
);

-- Functions, one file each in migrations/functions/ (ADR 0032): bc_take_fence, bc_check_fence.
