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

-- Recomputes the usage rows of the hours in [p_from, p_to) (whole UTC hours) from the booking history, counting time
-- up to compute_now(). Idempotent: the same history gives the same rows. Returns the number of rows written.
CREATE FUNCTION bc_compute_usage(p_from timestamptz, p_to timestamptz) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
  v_now timestamptz := compute_now();
  v_win tstzrange;
  v_n integer;
BEGIN
  IF date_trunc('hour', p_from, 'UTC') <> p_from OR date_trunc('hour', p_to, 'UTC') <> p_to OR p_to < p_from THEN
    RAISE EXCEPTION 'usage hours: [%, %) is not a range of whole hours', p_from, p_to USING ERRCODE = '22023';
  END IF;
  v_win := tstzrange(p_from, greatest(p_from, least(p_to, v_now)), '[)');
  DELETE FROM usage_hours WHERE hour >= p_from AND hour < p_to;
  INSERT INTO usage_hours (tenant_id, pool_id, resource, hour, atom_seconds, computed_at)
  WITH held AS (
    SELECT c.tenant_id, c.pool_id, c.resource, c.amount::numeric AS amount, c.during * v_win AS r
    FROM quota_charges c
    WHERE NOT isempty(c.during) AND c.during && v_win
    UNION ALL
    SELECT a.tenant_id, a.pool_id, s.key, s.value::numeric, a.during * tstzrange(NULL, a.released_at, '[)') * v_win
    FROM allocations a CROSS JOIN LATERAL jsonb_each_text(a.scalars) s
    WHERE a.scalars <> '{}' AND a.kind <> 'layout' AND least(upper(a.during), coalesce(a.released_at, 'infinity')) > p_from
      AND a.tenant_id IS NOT NULL AND a.pool_id IS NOT NULL AND a.during && v_win AND s.value::numeric > 0
  ), pieces AS (
    SELECT tenant_id, pool_id, resource, h AS hour,
           amount * extract(epoch FROM least(upper(r), h + interval '1 hour') - greatest(lower(r), h)) AS atom_seconds
    FROM held CROSS JOIN LATERAL
      generate_series(date_trunc('hour', lower(r), 'UTC'), upper(r) - interval '1 microsecond', interval '1 hour') h
    WHERE NOT isempty(r)
  )
  SELECT tenant_id, pool_id, resource, hour, sum(atom_seconds), v_now
  FROM pieces GROUP BY tenant_id, pool_id, resource, hour HAVING sum(atom_seconds) > 0;
  GET DIAGNOSTICS v_n = ROW_COUNT;
  RETURN v_n;
END $$;

-- One run of the leader's usage job: recomputes from the watermark (at most p_max_hours hours, up to the current
-- hour) and moves the watermark to the hours that are now final. Without a watermark it starts at the first hour of
-- the booking history. The watermark row's lock keeps two runs apart. Returns what it did; `caughtUp` false means
-- more hours are waiting (a backfill), and the caller runs again.
CREATE FUNCTION bc_run_usage(p_max_hours integer, p_settle interval) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v_now timestamptz := compute_now();
  v_current timestamptz := date_trunc('hour', v_now, 'UTC');
  v_final timestamptz := date_trunc('hour', v_now - p_settle, 'UTC');
  v_from timestamptz;
  v_to timestamptz;
  v_rows integer;
BEGIN
  SELECT final_until INTO v_from FROM usage_watermark FOR UPDATE;
  IF v_from IS NULL THEN
    SELECT date_trunc('hour', min(t), 'UTC') INTO v_from FROM (
      SELECT min(lower(during)) AS t FROM quota_charges WHERE NOT isempty(during)
      UNION ALL
      SELECT min(lower(during)) FROM allocations WHERE kind <> 'layout' AND tenant_id IS NOT NULL AND scalars <> '{}'
    ) x;
    v_from := least(coalesce(v_from, v_final), v_final);
  END IF;
  v_to := least(v_from + make_interval(hours => p_max_hours), v_current + interval '1 hour');
  v_rows := bc_compute_usage(v_from, greatest(v_from, v_to));
  UPDATE usage_watermark SET final_until = greatest(v_from, least(v_to, v_final));
  RETURN jsonb_build_object(
    'from', extract(epoch FROM v_from) * 1000,
    'to', extract(epoch FROM v_to) * 1000,
    'finalUntil', extract(epoch FROM greatest(v_from, least(v_to, v_final))) * 1000,
    'rows', v_rows,
    'caughtUp', v_to >= v_current + interval '1 hour');
END $$;
