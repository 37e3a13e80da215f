// Usage windows on the real ledger (migrations/0008_usage.sql, src/controller/usage.ts), with figures computed by hand:
// GPU-hours across an hour boundary, a release in mid-hour, scalar hours, the current hour counted up to now, and a
// backfill after a three-hour leader outage that equals what a leader running every hour produced. Then the usage
// method of the capacity API (figures, validation, authorization) and the month-to-date gauge.
import { Registry } from 'prom-client';
import { afterAll, describe, expect, it } from 'vitest';
import { CAPACITY_PATHS } from '../../src/api/app.ts';
import type { Authorizer, CapacityReadTarget } from '../../src/api/authz.ts';
import { usageCommand } from '../../src/cli/usage.ts';
import { loadConfig } from '../../src/config.ts';
import { FencedError, Ledger } from '../../src/db/ledger.ts';
import type { Db } from '../../src/db/pool.ts';
import { computeUsageHours } from '../../src/db/usage.ts';
import { FenceHolder, LEASE_NAME } from '../../src/controller/fence.ts';
import { usageMetrics } from '../../src/controller/metrics.ts';
import { runUsage, startUsageWindows } from '../../src/controller/usage.ts';
import { silentLogger } from '../../src/log.ts';
import { startTestApi, testAuthorizer, TOKENS, type TestApi } from '../support/api.ts';
import { makeNode, makePool, reservation } from '../support/builders.ts';
import { createTestDatabase, useTestDatabase, type TestDatabase } from '../support/db.ts';
import { expectError } from '../support/http-assert.ts';
import { ensurePrometheus, promtoolCheck } from '../support/prometheus.ts';

const ctx = useTestDatabase();
const at = (iso: string) => Date.parse(iso);

/** Sets compute_now() to exactly `iso` (the test clock, frozen). */
async function freeze(db: Db, iso: string): Promise<number> {
  await db.query('UPDATE clock SET frozen_at = $1', [iso]);
  return at(iso);
}

/** Books `gpus` GPUs (and scalars) from `start` for `hours`; the clock is frozen at `now`. */
async function book(db: Db, poolId: string, o: { tenantId: string; gpus: number; start: string; hours: number; now: number; vcpu?: number }) {
  const out = await new Ledger(db).reserve(
    reservation(poolId, {
      tenantId: o.tenantId,
      devices: [{ class: 'gpu', count: o.gpus }],
      start: at(o.start),
      duration: o.hours * 3600,
      ...(o.vcpu ? { resources: { vcpu: o.vcpu } } : {}),
    }),
    o.now,
  );
  if (!out.ok) throw new Error(`booking failed: ${out.code} ${out.message}`);
  return out.reservation.id;
}

/** Every usage row as `tenant pool resource hour atomSeconds`, in order (computed_at left out). */
async function rows(db: Db, tenantId?: string): Promise<string[]> {
  const { rows: r } = await db.query<{ line: string }>(
    `SELECT concat_ws(' ', tenant_id, pool_id, resource, to_char(hour AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI"Z"'), atom_seconds::text) AS line
     FROM usage_hours WHERE $1::text IS NULL OR tenant_id = $1 ORDER BY tenant_id, pool_id, resource, hour`,
    [tenantId ?? null],
  );
  return r.map((x) => x.line);
}

/** Atom-seconds as numeric prints them: 2 GPUs × 30 min = 3600.000000 (1 GPU-hour), to the microsecond. */
const secs = (n: number) => `${n}.000000`;

let POOL: string;

describe('hourly usage from the booking history (hand-computed)', () => {
  it('across an hour boundary, a release in mid-hour, scalar hours, and the current hour up to now', async () => {
    let now = await freeze(ctx.db, '2030-01-15T10:00:00Z');
    POOL = await makePool('usage-a').owner('acme').offer('beta').create(ctx.db);
    await makeNode('usage-n1').gpus(8).scalars({ vcpu: 64 }).create(ctx.db, POOL);

    // acme: 2 GPUs 10:30–11:30. beta: 1 GPU and 8 vCPUs 10:45–12:45, released at 11:15.
    await book(ctx.db, POOL, { tenantId: 'acme', gpus: 2, start: '2030-01-15T10:30:00Z', hours: 1, now });
    const beta = await book(ctx.db, POOL, { tenantId: 'beta', gpus: 1, vcpu: 8, start: '2030-01-15T10:45:00Z', hours: 2, now });

    // At 11:10 the current hour counts up to now: acme 2 GPUs × 600 s; beta 1 GPU × 600 s and 8 vCPUs × 600 s.
    now = await freeze(ctx.db, '2030-01-15T11:10:00Z');
    await computeUsageHours(ctx.db, at('2030-01-15T10:00Z'), at('2030-01-15T12:00Z'));
    expect(await rows(ctx.db)).toEqual([
      `acme ${POOL} gpu 2030-01-15T10:00Z ${secs(2 * 1800)}`,
      `acme ${POOL} gpu 2030-01-15T11:00Z ${secs(2 * 600)}`,
      `beta ${POOL} gpu 2030-01-15T10:00Z ${secs(1 * 900)}`,
      `beta ${POOL} gpu 2030-01-15T11:00Z ${secs(1 * 600)}`,
      `beta ${POOL} vcpu 2030-01-15T10:00Z ${secs(8 * 900)}`,
      `beta ${POOL} vcpu 2030-01-15T11:00Z ${secs(8 * 600)}`,
    ]);

    now = await freeze(ctx.db, '2030-01-15T11:15:00Z');
    expect(await new Ledger(ctx.db).release(beta)).toBe(true);

    await freeze(ctx.db, '2030-01-15T13:00:00Z');
    await computeUsageHours(ctx.db, at('2030-01-15T09:00Z'), at('2030-01-15T13:00Z'));
    // acme: 2 GPUs × 30 min in hour 10 = 3600 s = 1.0 GPU-hour, and 2 × 30 min in hour 11 = 1.0 GPU-hour.
    // beta: 1 GPU 10:45–11:15 (released at 11:15, not 12:45) = 900 s = 0.25 GPU-hour in each hour; 8 vCPUs × 900 s =
    // 2.0 vCPU-hours in each.
    const expected = [
      `acme ${POOL} gpu 2030-01-15T10:00Z ${secs(3600)}`,
      `acme ${POOL} gpu 2030-01-15T11:00Z ${secs(3600)}`,
      `beta ${POOL} gpu 2030-01-15T10:00Z ${secs(900)}`,
      `beta ${POOL} gpu 2030-01-15T11:00Z ${secs(900)}`,
      `beta ${POOL} vcpu 2030-01-15T10:00Z ${secs(7200)}`,
      `beta ${POOL} vcpu 2030-01-15T11:00Z ${secs(7200)}`,
    ];
    expect(await rows(ctx.db)).toEqual(expected);
    const hours = await ctx.db.query<{ tenant_id: string; resource: string; h: string }>(
      `SELECT tenant_id, resource, (sum(atom_seconds) / 3600)::numeric(10, 2)::text AS h FROM usage_hours GROUP BY 1, 2 ORDER BY 1, 2`,
    );
    expect(hours.rows).toEqual([
      { tenant_id: 'acme', resource: 'gpu', h: '2.00' },
      { tenant_id: 'beta', resource: 'gpu', h: '0.50' },
      { tenant_id: 'beta', resource: 'vcpu', h: '4.00' },
    ]);

    // Idempotent: recomputing the same hours (or a wider range) gives the same rows.
    await computeUsageHours(ctx.db, at('2030-01-15T10:00Z'), at('2030-01-15T12:00Z'));
    await computeUsageHours(ctx.db, at('2030-01-15T00:00Z'), at('2030-01-16T00:00Z'));
    expect(await rows(ctx.db)).toEqual(expected);
  });

  it('MIG-instance hours and slot hours count per atom of their class', async () => {
    const now = await freeze(ctx.db, '2030-01-15T13:00:00Z');
    const mig = await makePool('usage-mig').owner('delta').sharing('mig').create(ctx.db);
    await makeNode('usage-m1').gpus(1).mig(7).create(ctx.db, mig);
    const slots = await makePool('usage-slots').owner('delta').sharing('timeslice', 4).create(ctx.db);
    await makeNode('usage-s1').gpus(1).create(ctx.db, slots);
    // 3 MIG instances 13:40–14:00 and 2 slots 13:30–14:15.
    const ledger = new Ledger(ctx.db);
    const m = await ledger.reserve(
      reservation(mig, { tenantId: 'delta', devices: [{ class: 'gpu.mig', count: 3 }], start: at('2030-01-15T13:40Z'), duration: 1200 }),
      now,
    );
    const sl = await ledger.reserve(
      reservation(slots, { tenantId: 'delta', devices: [{ class: 'gpu.slot', count: 2 }], start: at('2030-01-15T13:30Z'), duration: 2700 }),
      now,
    );
    expect([m.ok, sl.ok]).toEqual([true, true]);
    await freeze(ctx.db, '2030-01-15T15:00:00Z');
    await computeUsageHours(ctx.db, at('2030-01-15T13:00Z'), at('2030-01-15T15:00Z'));
    // gpu.mig: 3 × 1200 s = 1.0 MIG-instance-hour in hour 13. gpu.slot: 2 × 1800 s = 1.0 slot-hour in hour 13 and
    // 2 × 900 s = 0.5 in hour 14.
    expect(await rows(ctx.db, 'delta')).toEqual([
      `delta ${mig} gpu.mig 2030-01-15T13:00Z ${secs(3600)}`,
      `delta ${slots} gpu.slot 2030-01-15T13:00Z ${secs(3600)}`,
      `delta ${slots} gpu.slot 2030-01-15T14:00Z ${secs(1800)}`,
    ].sort());
  });

  it('an open-ended on-demand pod counts up to now, never its unbounded rest', async () => {
    const now = await freeze(ctx.db, '2030-01-15T15:00:00Z');
    const pool = await makePool('usage-pods').owner('eps').create(ctx.db);
    await makeNode('usage-p1').gpus(4).create(ctx.db, pool);
    const out = await new Ledger(ctx.db).bookPod(
      { tenantId: 'eps', poolId: pool, podUid: 'pod-usage-1', nodeId: 'usage-p1', devices: [{ class: 'gpu', count: 3 }], durationSeconds: null },
      now,
    );
    expect(out.ok).toBe(true);
    await freeze(ctx.db, '2030-01-15T16:30:00Z');
    await computeUsageHours(ctx.db, at('2030-01-15T15:00Z'), at('2030-01-15T18:00Z'));
    // 3 GPUs from 15:00, still running at 16:30: 3 × 3600 s in hour 15, 3 × 1800 s in hour 16, nothing in hour 17.
    expect(await rows(ctx.db, 'eps')).toEqual([
      `eps ${pool} gpu 2030-01-15T15:00Z ${secs(10800)}`,
      `eps ${pool} gpu 2030-01-15T16:00Z ${secs(5400)}`,
    ]);
  });

  it('refuses a range that is not whole hours', async () => {
    await expect(computeUsageHours(ctx.db, at('2030-01-15T10:30Z'), at('2030-01-15T12:00Z'))).rejects.toThrow(/whole hours/);
  });
});

describe('backfill after a three-hour leader outage', () => {
  const dbs: TestDatabase[] = [];
  afterAll(async () => {
    for (const d of dbs) await d.drop();
  });

  /**
   * One history in a fresh database: gamma books 4 GPUs 01:30–05:30 and 1 GPU 02:00–07:00, released at 04:20. The
   * leader runs the usage job at :10 past each hour in `runHours` (the first run is a leadership start). Returns the
   * database and what each run did.
   */
  async function scenario(runHours: number[]) {
    const t = await createTestDatabase(4);
    dbs.push(t);
    const day = (h: number, m = 0) => `2030-01-16T${String(h).padStart(2, '0')}:${String(m).padStart(2, '0')}:00Z`;
    const now = await freeze(t.db, day(0));
    const pool = await makePool('usage-g').owner('gamma').create(t.db);
    await makeNode('usage-g1').gpus(8).create(t.db, pool);
    await book(t.db, pool, { tenantId: 'gamma', gpus: 4, start: day(1, 30), hours: 4, now });
    const one = await book(t.db, pool, { tenantId: 'gamma', gpus: 1, start: day(2), hours: 5, now });
    const fence = new FenceHolder(LEASE_NAME);
    await fence.take(t.db, 'leader-1');
    const runs = new Map<number, Awaited<ReturnType<typeof runUsage>>>();
    for (let h = 0; h <= 6; h++) {
      if (runHours.includes(h)) {
        await freeze(t.db, day(h, 10));
        if (h === 6 && !runHours.includes(5)) {
          // The leader was down from 02:10 to 06:10: a new one takes the fence, and its job's first run backfills.
          await fence.take(t.db, 'leader-2');
          const job = startUsageWindows({ db: t.db, fence: fence.fence, log: silentLogger, everyMs: 3_600_000, maxHoursPerStep: 2 });
          const run = await job.first;
          await job.stop();
          runs.set(h, run!);
        } else {
          runs.set(h, await runUsage({ db: t.db, fence: fence.fence, log: silentLogger, maxHoursPerStep: 2 }));
        }
      }
      if (h === 4) {
        await freeze(t.db, day(4, 20));
        expect(await new Ledger(t.db).release(one)).toBe(true);
      }
    }
    return { db: t.db, pool, runs };
  }

  it('no runs for three hours, then one run fills each hour, equal to what hourly runs produced', async () => {
    const hourly = await scenario([0, 1, 2, 3, 4, 5, 6]);
    const outage = await scenario([0, 1, 2, 6]);

    // By hand: 4 GPUs 01:30–05:30 → hour 1: 4 × 1800 s; hours 2, 3, 4: 4 × 3600 s; hour 5: 4 × 1800 s.
    // 1 GPU 02:00–04:20 (released at 04:20) → hours 2, 3: 3600 s; hour 4: 1200 s. Hour 6 (to 06:10): nothing.
    const p = outage.pool;
    const expected = [
      `gamma ${p} gpu 2030-01-16T01:00Z ${secs(4 * 1800)}`,
      `gamma ${p} gpu 2030-01-16T02:00Z ${secs(4 * 3600 + 3600)}`,
      `gamma ${p} gpu 2030-01-16T03:00Z ${secs(4 * 3600 + 3600)}`,
      `gamma ${p} gpu 2030-01-16T04:00Z ${secs(4 * 3600 + 1200)}`,
      `gamma ${p} gpu 2030-01-16T05:00Z ${secs(4 * 1800)}`,
    ];
    expect(await rows(outage.db)).toEqual(expected);
    // The same pool id cannot be in two databases; compare with the pool id replaced.
    const anon = (lines: string[], id: string) => lines.map((l) => l.replace(id, 'POOL'));
    expect(anon(await rows(hourly.db), hourly.pool)).toEqual(anon(expected, p));

    // The run at 02:10 left hour 2 open (final before 02:00); the next run, four hours later, started there and went
    // to the end of the current hour in steps of two hours; hours before 06:00 are now final.
    expect(outage.runs.get(2)!.finalUntil).toBe(at('2030-01-16T02:00Z'));
    const after = outage.runs.get(6)!;
    expect(after.steps.map((s) => [new Date(s.from).toISOString(), new Date(s.to).toISOString()])).toEqual([
      ['2030-01-16T02:00:00.000Z', '2030-01-16T04:00:00.000Z'],
      ['2030-01-16T04:00:00.000Z', '2030-01-16T06:00:00.000Z'],
      ['2030-01-16T06:00:00.000Z', '2030-01-16T07:00:00.000Z'],
    ]);
    expect(after.finalUntil).toBe(at('2030-01-16T06:00Z'));
    expect(hourly.runs.get(6)!.finalUntil).toBe(at('2030-01-16T06:00Z'));
  });

  it('a deposed leader’s run writes nothing (FencedError)', async () => {
    const t = await createTestDatabase(4);
    dbs.push(t);
    const old = new FenceHolder(LEASE_NAME);
    await old.take(t.db, 'old');
    await new FenceHolder(LEASE_NAME).take(t.db, 'new');
    await expect(runUsage({ db: t.db, fence: old.fence, log: silentLogger })).rejects.toBeInstanceOf(FencedError);
    expect((await t.db.query('SELECT final_until FROM usage_watermark')).rows).toEqual([{ final_until: null }]);
  });
});

describe('the usage method of the capacity API', () => {
  let api: TestApi;
  const seen: CapacityReadTarget[] = [];
  afterAll(async () => api?.close());

  it('answers the hand-computed hours, totals and hourly rows', async () => {
    api = await startTestApi(ctx.db);
    const res = await api.client.post(CAPACITY_PATHS.usage, { tenantId: 'beta', from: '2030-01-15T10:00Z', to: '2030-01-15T13:00Z', hourly: true });
    expect(res.status).toBe(200);
    expect(res.json).toEqual({
      tenantId: 'beta',
      from: '2030-01-15T10:00:00.000Z',
      to: '2030-01-15T13:00:00.000Z',
      finalUntil: null,
      totals: [
        { poolId: POOL, resource: 'gpu', atomSeconds: 1800, hours: 0.5 },
        { poolId: POOL, resource: 'vcpu', atomSeconds: 14400, hours: 4 },
      ],
      hours: [
        { hour: '2030-01-15T10:00:00.000Z', poolId: POOL, resource: 'gpu', atomSeconds: 900, hours: 0.25 },
        { hour: '2030-01-15T10:00:00.000Z', poolId: POOL, resource: 'vcpu', atomSeconds: 7200, hours: 2 },
        { hour: '2030-01-15T11:00:00.000Z', poolId: POOL, resource: 'gpu', atomSeconds: 900, hours: 0.25 },
        { hour: '2030-01-15T11:00:00.000Z', poolId: POOL, resource: 'vcpu', atomSeconds: 7200, hours: 2 },
      ],
    });
    // A month: the current one by default (the clock is at 2030-01-15 13:00), or named; one pool.
    const month = await api.client.post(CAPACITY_PATHS.usage, { tenantId: 'acme' });
    expect(month.json).toMatchObject({ from: '2030-01-01T00:00:00.000Z', to: '2030-02-01T00:00:00.000Z', totals: [{ resource: 'gpu', hours: 2 }] });
    expect(month.json).not.toHaveProperty('hours');
    const named = await api.client.post(CAPACITY_PATHS.usage, { tenantId: 'acme', period: '2029-12', poolId: POOL });
    expect(named.json).toMatchObject({ poolId: POOL, from: '2029-12-01T00:00:00.000Z', totals: [] });
  });

  it('validates its input strictly (INVALID_INPUT)', async () => {
    const bad = [
      { tenantId: 'acme', extra: 1 },
      { tenantId: 'acme', from: '2030-01-15 10:00' },
      { tenantId: 'acme', from: 1_893_664_800_000 },
      { tenantId: 'acme', period: '2030-13' },
      { tenantId: 'acme', period: '90m' },
      { tenantId: 'acme', period: '24h', from: '2030-01-15' },
      { tenantId: 'acme', from: '2029-01-01', to: '2030-06-01' },
      { tenantId: 'acme', period: '2030-01', hourly: 'yes' },
      { tenantId: 'acme', poolId: 'pool_x' },
    ];
    for (const body of bad) expectError(await api.client.post(CAPACITY_PATHS.usage, body), 'INVALID_INPUT');
  });

  it('is authorized like the capacity reads: on the tenant, and on the pool when named', async () => {
    const acme = await startTestApi(ctx.db, { token: TOKENS.acme });
    try {
      expect((await acme.client.post(CAPACITY_PATHS.usage, { tenantId: 'acme' })).status).toBe(200);
      expectError(await acme.client.post(CAPACITY_PATHS.usage, { tenantId: 'beta' }), 'FORBIDDEN');
      expectError(await acme.client.post(CAPACITY_PATHS.usage, { tenantId: 'acme' }, ''), 'UNAUTHENTICATED');
    } finally {
      await acme.close();
    }
    const inner = testAuthorizer();
    const recording: Authorizer = {
      authenticate: (t) => inner.authenticate(t),
      async authorizeCapacityRead(p, target) {
        seen.push(target);
        return inner.authorizeCapacityRead(p, target);
      },
    };
    const rec = await startTestApi(ctx.db, { authorizer: recording });
    try {
      await rec.client.post(CAPACITY_PATHS.usage, { tenantId: 'acme' });
      await rec.client.post(CAPACITY_PATHS.usage, { tenantId: 'acme', poolId: POOL });
      // Invalid input is refused before anyone is asked.
      await rec.client.post(CAPACITY_PATHS.usage, { tenantId: 'acme', period: 'soon' });
      expect(seen).toEqual([{ tenantId: 'acme' }, { tenantId: 'acme', poolId: POOL }]);
    } finally {
      await rec.close();
    }
  });
});

describe('better-compute usage over HTTP', () => {
  it('prints the hand-computed hours as a table, and the API answer with -o json', async () => {
    const api = await startTestApi(ctx.db);
    try {
      const config = loadConfig({ BETTER_COMPUTE_SERVER: api.url, BETTER_COMPUTE_TOKEN: TOKENS.all, BETTER_COMPUTE_TENANT: 'beta' });
      let stdout = '';
      const io = { stdout: (s: string) => (stdout += s), stderr: (s: string) => (stdout += s) };
      expect(await usageCommand(['--from', '2030-01-15T10:00Z', '--to', '2030-01-15T13:00Z'], config, io)).toBe(0);
      expect(stdout).toBe(
        [
          'Tenant beta: usage 2030-01-15 10:00Z to 2030-01-15 13:00Z (no hour is final yet)',
          '',
          `${'POOL ID'.padEnd(POOL.length)}  RESOURCE  HOURS  UNIT`,
          `${POOL}  gpu       0.500  GPU-hours`,
          `${POOL}  vcpu      4.000  vCPU-hours`,
          '',
        ].join('\n'),
      );
      stdout = '';
      expect(await usageCommand(['--tenant', 'acme', '--period', '2030-01', '-o', 'json'], config, io)).toBe(0);
      expect(JSON.parse(stdout)).toMatchObject({ tenantId: 'acme', totals: [{ poolId: POOL, resource: 'gpu', atomSeconds: 7200, hours: 2 }] });
      stdout = '';
      expect(await usageCommand(['--period', 'soon'], config, io)).toBe(1);
      expect(stdout).toMatch(/^error INVALID_INPUT: period: a month/);
    } finally {
      await api.close();
    }
  });
});

describe('metrics', () => {
  it('bettercompute_usage_month_atom_seconds: this UTC month per tenant, pool and resource; promtool finds nothing', async () => {
    const registry = new Registry();
    const m = usageMetrics(registry, ctx.db);
    m.completed(1_893_657_600);
    const text = await registry.metrics();
    expect(text).toContain(`bettercompute_usage_month_atom_seconds{tenant="acme",pool="usage-a",pool_id="${POOL}",resource="gpu"} 7200`);
    expect(text).toContain(`bettercompute_usage_month_atom_seconds{tenant="beta",pool="usage-a",pool_id="${POOL}",resource="gpu"} 1800`);
    expect(text).toContain(`bettercompute_usage_month_atom_seconds{tenant="beta",pool="usage-a",pool_id="${POOL}",resource="vcpu"} 14400`);
    expect(text).toContain('bettercompute_usage_final_until_timestamp_seconds 1893657600');
    const { promtool } = await ensurePrometheus();
    expect(await promtoolCheck(promtool, text)).toEqual({ code: 0, output: '' });
  });
});
