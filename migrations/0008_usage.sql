-- Hourly usage windows (docs/adr/0011-usage-windows.md): per tenant, pool, resource and UTC hour, the sum over the
-- tenant's bookings of amount × the time the booking held inside the hour. Atom classes (gpu, gpu.mig, gpu.slot, ...)
-- come from quota_charges (one row per allocation and class, truncated on release like the bookings); scalars (vcpu,
-- memoryGiB, hugepages1Gi) from allocations.scalars over the allocation's range cut at released_at. Only time up to
-- compute_now() counts: a booking ahead has burned nothing yet.
--
-- Exact arithmetic: atom-seconds as numeric. Range bounds have microsecond resolution and extract(epoch ...) of an
-- interval is an exact numeric, so a month of hours sums without rounding; hours are derived (÷ 3600) when read.
CREATE TABLE usage_hours (
  tenant_id text NOT NULL,
  pool_id text NOT NULL REFERENCES pools (id),
  resource text NOT NULL,
  hour timestamptz NOT NULL CONSTRAINT check$usage_hours$hour CHECK (date_trunc('hour', hour, 'UTC') = hour),
  atom_seconds numeric NOT NULL CONSTRAINT check$usage_hours$atom_seconds CHECK (atom_seconds > 0),
  computed_at timestamptz NOT NULL,
  PRIMARY KEY (tenant_id, pool_id, resource, hour)
);
CREATE INDEX index$usage_hours$hour ON usage_hours (hour);
CREATE INDEX index$usage_hours$pool ON usage_hours (pool_id);

-- The recurring run reads only what overlaps the hours it recomputes: the history grows, those hours do not. Charges
-- are found by the GiST index on (tenant, pool, resource, during), which serves `during &&` alone; allocations get a
-- B-tree on the end of what they held (they are not truncated on release: the earlier of the range's end and the
-- release), only for those with scalars.
CREATE INDEX index$allocations$scalars_end ON allocations (least(upper(during), coalesce(released_at, 'infinity')))
  WHERE scalars <> '{}' AND kind <> 'layout';

-- Hours that start before `final_until` are final: they ended at least the settle margin ago, so no booking or release
-- in flight when they ended can still change them. Later hours (the current one among them) are recomputed by each run.
CREATE TABLE usage_watermark (
  singleton boolean PRIMARY KEY DEFAULT true CONSTRAINT check$usage_watermark$singleton CHECK (singleton),
  final_until timestamptz CONSTRAINT check$usage_watermark$hour CHECK (date_trunc('hour', final_until, 'UTC') = final_until)
);
INSERT INTO usage_watermark DEFAULT VALUES;

-- Functions, one file each in migrations/functions/ (ADR 0032): bc_compute_usage, bc_run_usage.
