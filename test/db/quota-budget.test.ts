// GPU-hour quota and time-bounded overrides (issue 13, ADR 0012), on a frozen clock so that every figure is computed
// by hand: now is Wednesday 2027-03-10 12:00 UTC, the current period March (UTC).
import { once } from 'node:events';
import pg from 'pg';
import { beforeAll, describe, expect, it, onTestFinished, vi } from 'vitest';
import { setQuota, setQuotaHours, setQuotaOverrides } from '../../src/db/inventory.ts';
import { Ledger, type ReserveOutcome } from '../../src/db/ledger.ts';
import { createPool } from '../../src/db/pool.ts';
import { loadQuotas, quotaHeadroom } from '../../src/db/reads.ts';
import { makeNode, makePool, reservation } from '../support/builders.ts';
import { useTestDatabase } from '../support/db.ts';

const ctx = useTestDatabase();

const at = (iso: string) => Date.parse(iso);
const HOUR = 3_600_000;
const MARCH = { periodStart: at('2027-03-01T00:00:00Z'), periodEnd: at('2027-04-01T00:00:00Z') };

beforeAll(async () => {
  await ctx.db.query(`UPDATE clock SET frozen_at = '2027-03-10T12:00:00Z'`);
  await ctx.clock.sync();
});

async function moveClock(ms: number): Promise<void> {
  await ctx.db.query('UPDATE clock SET frozen_at = frozen_at + make_interval(secs => $1)', [ms / 1000]);
  await ctx.clock.sync();
}

/** Atom-hours charged to a key inside [from, to). */
async function chargedHours(tenant: string, poolId: string, from: number, to: number): Promise<number> {
  const { rows } = await ctx.db.query(
    `SELECT bc_quota_hours($1, $2, 'gpu', to_timestamp($3 / 1000.0), to_timestamp($4 / 1000.0))::float8 AS h`,
    [tenant, poolId, from, to],
  );
  return rows[0].h;
}

function refused(outcomes: ReserveOutcome[]) {
  return outcomes.filter((o): o is Extract<ReserveOutcome, { ok: false }> => !o.ok);
}

describe('GPU-hour quota', () => {
  // 64 racers, each 1 GPU for its own hour of 2027-03-11/13 (no two want the same atom at once, so only the budget
  // decides): 40 GPU-hours left in March → exactly 40 pass.
  const racers = (poolId: string, tenantId: string) =>
    Array.from({ length: 64 }, (_, i) =>
      reservation(poolId, { tenantId, start: at('2027-03-11T00:00:00Z') + i * HOUR, duration: 3600 }),
    );

  function expectExactlyTheBudget(outcomes: ReserveOutcome[]) {
    expect(outcomes.filter((o) => o.ok)).toHaveLength(40);
    const no = refused(outcomes);
    expect(no.map((o) => o.code)).toEqual(Array(24).fill('QUOTA_EXCEEDED'));
    // Every refusal saw the whole budget booked ahead: used 0 (nothing burned yet in March), reserved 40, asking 1.
    for (const o of no) {
      expect(o.details).toEqual({ kind: 'hours', resource: 'gpu', limit: 40, used: 0, reserved: 40, requested: 1, ...MARCH });
    }
  }

  it('64 concurrent bookings from four processes race for 40 GPU-hours: exactly 40 pass', async () => {
    const poolId = await makePool('hours-race').owner('ops').offer('acme').create(ctx.db);
    await makeNode('hours-race-n').gpus(2).create(ctx.db, poolId);
    await setQuotaHours(ctx.db, 'acme', poolId, 'gpu', 40);
    const pools = Array.from({ length: 4 }, () => createPool(ctx.url, 8));
    try {
      const ledgers = pools.map((p) => new Ledger(p));
      const outcomes = await Promise.all(racers(poolId, 'acme').map((r, i) => ledgers[i % 4]!.reserve(r, ctx.clock.now())));
      expectExactlyTheBudget(outcomes);
    } finally {
      await Promise.all(pools.map((p) => p.end()));
    }
    expect(await chargedHours('acme', poolId, MARCH.periodStart, MARCH.periodEnd)).toBe(40);
  });

  it('through the group commit: 64 concurrent reserves on one Ledger take exactly the 40 GPU-hours', async () => {
    const poolId = await makePool('hours-batch').owner('ops').offer('beta').create(ctx.db);
    await makeNode('hours-batch-n').gpus(2).create(ctx.db, poolId);
    await setQuotaHours(ctx.db, 'beta', poolId, 'gpu', 40);
    const ledger = new Ledger(ctx.db);
    const outcomes = await Promise.all(racers(poolId, 'beta').map((r) => ledger.reserve(r, ctx.clock.now())));
    expectExactlyTheBudget(outcomes);
    expect(await chargedHours('beta', poolId, MARCH.periodStart, MARCH.periodEnd)).toBe(40);
  });

  it('refuses with the numbers: hours burned (used) and booked ahead (reserved) in each period the window touches', async () => {
    const poolId = await makePool('hours-numbers').owner('ops').offer('gamma').create(ctx.db);
    await makeNode('hours-numbers-n').gpus(4).create(ctx.db, poolId);
    await setQuotaHours(ctx.db, 'gamma', poolId, 'gpu', 10);
    const ledger = new Ledger(ctx.db);
    const book = (devices: number, start: number | undefined, hours: number) =>
      ledger.reserve(
        reservation(poolId, { tenantId: 'gamma', devices: [{ class: 'gpu', count: devices }], duration: hours * 3600, ...(start ? { start } : {}) }),
        ctx.clock.now(),
      );

    // 2 GPUs from now (12:00) for 3 h: 6 GPU-hours booked ahead.
    expect((await book(2, undefined, 3)).ok).toBe(true);
    await moveClock(HOUR); // 13:00: 2 burned, 4 ahead
    // 1 GPU 2027-03-31 22:00 → 04-01 02:00: 2 h in March (2 + 4 + 2 = 8 ≤ 10), 2 h in April (2 ≤ 10).
    expect((await book(1, at('2027-03-31T22:00:00Z'), 4)).ok).toBe(true);

    // March now: used 2, reserved 4 + 2 = 6. Asking 2 GPUs × 2 h = 4 → 12 > 10.
    const over = await book(2, at('2027-03-10T14:00:00Z'), 2);
    expect(over).toMatchObject({ ok: false, code: 'QUOTA_EXCEEDED' });
    if (over.ok) throw new Error('unreachable');
    expect(over.details).toEqual({ kind: 'hours', resource: 'gpu', limit: 10, used: 2, reserved: 6, requested: 4, ...MARCH });
    expect(over.message).toContain('limit 10, used 2, reserved 6, requested 4 gpu-hours');

    // April: 2 booked ahead; 1 GPU × 9 h from 04-01 → 2 + 9 = 11 > 10, refused for April although March has room.
    const april = await book(1, at('2027-04-01T00:00:00Z'), 9);
    expect(april).toMatchObject({
      ok: false,
      code: 'QUOTA_EXCEEDED',
      details: { kind: 'hours', limit: 10, used: 0, reserved: 2, requested: 9, periodStart: at('2027-04-01T00:00:00Z'), periodEnd: at('2027-05-01T00:00:00Z') },
    });

    // Exactly up to the limit passes: March 2 + 6 + 1 × 2 = 10.
    expect((await book(1, at('2027-03-10T14:00:00Z'), 2)).ok).toBe(true);
    expect(await chargedHours('gamma', poolId, MARCH.periodStart, MARCH.periodEnd)).toBe(10);
  });

  it('a lowered hour limit only blocks new bookings', async () => {
    const poolId = await makePool('hours-lowered').owner('ops').offer('delta').create(ctx.db);
    await makeNode('hours-lowered-n').gpus(2).create(ctx.db, poolId);
    await setQuotaHours(ctx.db, 'delta', poolId, 'gpu', 10);
    const ledger = new Ledger(ctx.db);
    const book = (start: string, hours: number) =>
      ledger.reserve(reservation(poolId, { tenantId: 'delta', start: at(start), duration: hours * 3600 }), ctx.clock.now());
    const kept = await book('2027-03-12T00:00:00Z', 8);
    if (!kept.ok) throw new Error(kept.message);

    await setQuotaHours(ctx.db, 'delta', poolId, 'gpu', 5); // below the 8 booked
    expect(await ledger.get(kept.reservation.id)).toMatchObject({ state: 'confirmed' });
    expect(await book('2027-03-13T00:00:00Z', 1)).toMatchObject({
      ok: false,
      code: 'QUOTA_EXCEEDED',
      details: { kind: 'hours', limit: 5, used: 0, reserved: 8, requested: 1 },
    });
    // Releasing gives the hours back (truncated before it started: nothing left), and 5 fit again.
    expect(await ledger.release(kept.reservation.id)).toBe(true);
    expect((await book('2027-03-13T00:00:00Z', 5)).ok).toBe(true);

    // Removing the limit: nothing counts hours any more.
    await setQuotaHours(ctx.db, 'delta', poolId, 'gpu', null);
    expect((await book('2027-03-14T00:00:00Z', 20)).ok).toBe(true);
  });

  it('an hour limit set while a booking waits on the key is honoured by that booking', async () => {
    const poolId = await makePool('hours-meanwhile').owner('ops').offer('eta').create(ctx.db);
    await makeNode('hours-meanwhile-n').gpus(2).create(ctx.db, poolId);
    await setQuotaHours(ctx.db, 'eta', poolId, 'gpu', null); // the key exists, unguarded
    // The limit's UPDATE holds the key's row while the booking arrives (it read the key unguarded before).
    const setter = new pg.Client({ connectionString: ctx.url });
    await setter.connect();
    onTestFinished(() => setter.end().catch(() => undefined));
    await setter.query('BEGIN');
    await setter.query(`UPDATE quotas SET hour_limit = 1 WHERE tenant_id = 'eta' AND pool_id = $1`, [poolId]);
    const booking = new Ledger(ctx.db).reserve(
      reservation(poolId, { tenantId: 'eta', start: at('2027-03-12T00:00:00Z'), duration: 2 * 3600 }),
      ctx.clock.now(),
    );
    await vi.waitFor(async () => {
      const { rows } = await ctx.db.query(
        `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%bc_place_batch%'`,
      );
      expect(rows[0].n).toBe(1);
    });
    await setter.query('COMMIT');
    expect(await booking).toMatchObject({ ok: false, code: 'QUOTA_EXCEEDED', details: { kind: 'hours', limit: 1, requested: 2 } });
    expect(await chargedHours('eta', poolId, MARCH.periodStart, MARCH.periodEnd)).toBe(0);
  });

  it('the period is configurable per key: a daily budget refuses the same hours on one day and passes them spread', async () => {
    const poolId = await makePool('hours-daily').owner('ops').offer('eps').create(ctx.db);
    await makeNode('hours-daily-n').gpus(2).create(ctx.db, poolId);
    await setQuotaHours(ctx.db, 'eps', poolId, 'gpu', 4, 'day');
    const ledger = new Ledger(ctx.db);
    const book = (start: string, hours: number) =>
      ledger.reserve(reservation(poolId, { tenantId: 'eps', devices: [{ class: 'gpu', count: 2 }], start: at(start), duration: hours * 3600 }), ctx.clock.now());
    // 2 GPUs × 3 h across midnight: 2 h × 2 = 4 on the 15th, 1 h × 2 = 2 on the 16th.
    expect((await book('2027-03-15T22:00:00Z', 3)).ok).toBe(true);
    expect(await book('2027-03-16T10:00:00Z', 2)).toMatchObject({
      ok: false,
      details: { kind: 'hours', limit: 4, used: 0, reserved: 2, requested: 4, periodStart: at('2027-03-16T00:00:00Z'), periodEnd: at('2027-03-17T00:00:00Z') },
    });
    expect((await book('2027-03-16T10:00:00Z', 1)).ok).toBe(true);
  });
});

describe('time-bounded overrides', () => {
  it('an override window lets a booking inside it pass and one outside it fail, at each instant of the window', async () => {
    const poolId = await makePool('override').owner('ops').offer('team-a').create(ctx.db);
    await makeNode('override-n').gpus(4).create(ctx.db, poolId);
    await setQuota(ctx.db, 'team-a', poolId, 'gpu', 1);
    // +2 GPUs during the conference week, and exactly 0 on 2027-03-29.
    await setQuotaOverrides(ctx.db, 'team-a', poolId, 'gpu', [
      { start: at('2027-03-20T00:00:00Z'), end: at('2027-03-27T00:00:00Z'), kind: 'add', amount: 2 },
      { start: at('2027-03-29T00:00:00Z'), end: at('2027-03-30T00:00:00Z'), kind: 'set', amount: 0 },
    ]);
    const ledger = new Ledger(ctx.db);
    const book = (count: number, start: string, hours: number) =>
      ledger.reserve(reservation(poolId, { tenantId: 'team-a', devices: [{ class: 'gpu', count }], start: at(start), duration: hours * 3600 }), ctx.clock.now());

    expect((await book(3, '2027-03-21T00:00:00Z', 24)).ok).toBe(true);
    expect(await book(3, '2027-03-28T00:00:00Z', 1)).toMatchObject({
      ok: false,
      code: 'QUOTA_EXCEEDED',
      details: { kind: 'atoms', resource: 'gpu', limit: 1, charged: 0, requested: 3, at: at('2027-03-28T00:00:00Z') },
    });
    // Inside until 03-27 00:00, outside after: refused at the instant the override ends.
    const straddling = await book(3, '2027-03-26T23:00:00Z', 2);
    expect(straddling).toMatchObject({ ok: false, details: { kind: 'atoms', limit: 1, charged: 0, requested: 3, at: at('2027-03-27T00:00:00Z') } });
    expect(straddling.ok ? '' : straddling.message).toContain('at 2027-03-27T00:00:00Z: limit 1, charged 0, requested 3');
    // Inside the window the override's limit counts the charges there: 3 booked on the 21st, 1 more does not fit.
    expect(await book(1, '2027-03-21T12:00:00Z', 1)).toMatchObject({ ok: false, details: { limit: 3, charged: 3, requested: 1 } });
    // An absolute override: 0 on the 29th, although the base limit is 1.
    expect(await book(1, '2027-03-29T06:00:00Z', 1)).toMatchObject({ ok: false, details: { limit: 0, charged: 0, at: at('2027-03-29T06:00:00Z') } });
    expect((await book(1, '2027-03-30T06:00:00Z', 1)).ok).toBe(true);
  });

  it('an override in force now lets use exceed the base limit (the counters stay within their CHECK)', async () => {
    const poolId = await makePool('override-now').owner('ops').offer('team-b').create(ctx.db);
    await makeNode('override-now-n').gpus(4).create(ctx.db, poolId);
    await setQuota(ctx.db, 'team-b', poolId, 'gpu', 1);
    await setQuotaOverrides(ctx.db, 'team-b', poolId, 'gpu', [{ start: ctx.clock.now() - HOUR, end: ctx.clock.now() + 2 * HOUR, kind: 'add', amount: 2 }]);
    const ledger = new Ledger(ctx.db);
    const now = await ledger.reserve(reservation(poolId, { tenantId: 'team-b', devices: [{ class: 'gpu', count: 3 }], duration: 3600 }), ctx.clock.now());
    expect(now.ok).toBe(true);
    const { rows } = await ctx.db.query(`SELECT max, used FROM quotas WHERE tenant_id = 'team-b' AND pool_id = $1`, [poolId]);
    expect(rows[0]).toEqual({ max: 1, used: 3 });
  });

  it('a lowered limit only blocks new bookings, and overlapping windows are refused by the ledger', async () => {
    const poolId = await makePool('override-lowered').owner('ops').offer('team-c').create(ctx.db);
    await makeNode('override-lowered-n').gpus(6).create(ctx.db, poolId);
    await setQuota(ctx.db, 'team-c', poolId, 'gpu', 1);
    const window = { start: at('2027-03-20T00:00:00Z'), end: at('2027-03-27T00:00:00Z') };
    await setQuotaOverrides(ctx.db, 'team-c', poolId, 'gpu', [{ ...window, kind: 'set', amount: 4 }]);
    const ledger = new Ledger(ctx.db);
    const book = (count: number) =>
      ledger.reserve(reservation(poolId, { tenantId: 'team-c', devices: [{ class: 'gpu', count }], start: at('2027-03-21T00:00:00Z') }), ctx.clock.now());
    const kept = await book(4);
    if (!kept.ok) throw new Error(kept.message);
    await setQuotaOverrides(ctx.db, 'team-c', poolId, 'gpu', [{ ...window, kind: 'set', amount: 2 }]);
    expect(await ledger.get(kept.reservation.id)).toMatchObject({ state: 'confirmed' });
    expect(await book(1)).toMatchObject({ ok: false, details: { limit: 2, charged: 4, requested: 1 } });

    await expect(
      setQuotaOverrides(ctx.db, 'team-c', poolId, 'gpu', [
        { ...window, kind: 'add', amount: 1 },
        { start: window.end - HOUR, end: window.end + HOUR, kind: 'add', amount: 1 },
      ]),
    ).rejects.toMatchObject({ code: '23P01', constraint: 'exclude$quota_overrides$key_during' });
  });
});

describe('the backstop (check$quotas$used, ADR 0045): grace set by a change of the limits, lowered by time', () => {
  it('a lowered limit keeps bookings now and later, an override lifts the ceiling, and grace falls as they end', async () => {
    const poolId = await makePool('backstop-grace').owner('ops').offer('kappa', { gpu: 4 }).create(ctx.db);
    await makeNode('backstop-grace-n').gpus(8).create(ctx.db, poolId);
    const ledger = new Ledger(ctx.db);
    const start = ctx.clock.now();
    const book = async (count: number, fromNow: number, hours: number) =>
      ledger.reserve(reservation(poolId, { tenantId: 'kappa', devices: [{ class: 'gpu', count }], ...(fromNow ? { start: ctx.clock.now() + fromNow } : {}), duration: hours * 3600 }), ctx.clock.now());
    const quota = async () => {
      await ctx.db.query(`SELECT bc_refresh_quota('kappa', $1, 'gpu')`, [poolId]);
      return (await ctx.db.query(`SELECT max, used, reserved, grace FROM quotas WHERE tenant_id = 'kappa' AND pool_id = $1 AND resource = 'gpu'`, [poolId])).rows[0];
    };
    onTestFinished(() => moveClock(start - ctx.clock.now()));

    expect((await book(4, 0, 1)).ok).toBe(true);
    expect((await book(4, 2 * HOUR, 1)).ok).toBe(true);
    // Lowered to 2: both bookings stand, with their peak (4) above the limit as grace; a new one is refused.
    await setQuota(ctx.db, 'kappa', poolId, 'gpu', 2);
    expect(await quota()).toEqual({ max: 2, used: 4, reserved: 4, grace: 2 });
    expect(await book(1, 30 * 60_000, 1)).toMatchObject({ ok: false, code: 'QUOTA_EXCEEDED' });
    // The later booking starts: counted in `used`, within the grace the limit change set.
    await moveClock(2.5 * HOUR);
    expect(await quota()).toEqual({ max: 2, used: 4, reserved: 0, grace: 2 });
    // Both over: grace falls to 0, and the limit alone is the ceiling again.
    await moveClock(HOUR);
    expect(await quota()).toEqual({ max: 2, used: 0, reserved: 0, grace: 0 });

    // An override in force lifts the ceiling (+2 for two hours): 4 fit for one. Taken away, grace keeps the booking.
    await setQuotaOverrides(ctx.db, 'kappa', poolId, 'gpu', [{ start: ctx.clock.now() - HOUR, end: ctx.clock.now() + 2 * HOUR, kind: 'add', amount: 2 }]);
    expect(await quota()).toMatchObject({ used: 0, grace: 2 });
    expect((await book(4, 0, 1)).ok).toBe(true);
    await setQuotaOverrides(ctx.db, 'kappa', poolId, 'gpu', []);
    expect(await quota()).toEqual({ max: 2, used: 4, reserved: 0, grace: 2 });
    expect(await book(1, 0, 1)).toMatchObject({ ok: false, code: 'QUOTA_EXCEEDED' });
    await moveClock(1.5 * HOUR);
    expect(await quota()).toEqual({ max: 2, used: 0, reserved: 0, grace: 0 });
  });
});

describe('period arithmetic (bc_quota_period, bc_quota_hours)', () => {
  it('calendar periods in UTC whatever the session time zone: ISO weeks from Monday, months of their own length', async () => {
    const c = await ctx.db.connect();
    try {
      await c.query(`SET TIME ZONE 'Europe/Berlin'`);
      const period = async (p: string, t: string) => {
        const { rows } = await c.query(
          `SELECT (extract(epoch FROM lower(r)) * 1000)::float8 AS s, (extract(epoch FROM upper(r)) * 1000)::float8 AS e
           FROM bc_quota_period($1, $2::timestamptz) r`,
          [p, t],
        );
        return [rows[0].s, rows[0].e];
      };
      // Sunday 23:30 UTC is Monday 00:30 in Berlin: still the week of Monday the 8th in UTC.
      expect(await period('week', '2027-03-14T23:30:00Z')).toEqual([at('2027-03-08T00:00:00Z'), at('2027-03-15T00:00:00Z')]);
      expect(await period('month', '2028-02-29T23:30:00Z')).toEqual([at('2028-02-01T00:00:00Z'), at('2028-03-01T00:00:00Z')]);
      expect(await period('month', '2027-12-31T23:30:00Z')).toEqual([at('2027-12-01T00:00:00Z'), at('2028-01-01T00:00:00Z')]);
      expect(await period('day', '2027-03-28T01:30:00Z')).toEqual([at('2027-03-28T00:00:00Z'), at('2027-03-29T00:00:00Z')]);
    } finally {
      c.release();
    }
  });

  it('atom-hours: a charge counts only its overlap with the range, an open-ended one up to the range end', async () => {
    const poolId = await makePool('hours-sum').owner('ops').offer('zeta').create(ctx.db);
    await makeNode('hours-sum-n').gpus(4).create(ctx.db, poolId);
    const ledger = new Ledger(ctx.db);
    // 3 GPUs 03-31 20:00 → 04-01 02:30 (4 h in March, 2.5 h in April), and 1 GPU from now (03-10 12:00 + the moves above) open-ended.
    const a = await ledger.reserve(
      reservation(poolId, { tenantId: 'zeta', devices: [{ class: 'gpu', count: 3 }], start: at('2027-03-31T20:00:00Z'), duration: 6.5 * 3600 }),
      ctx.clock.now(),
    );
    expect(a.ok).toBe(true);
    const pod = await ledger.bookPod({ tenantId: 'zeta', poolId, podUid: 'hours-sum-pod', nodeId: 'hours-sum-n', devices: [{ class: 'gpu', count: 1 }], durationSeconds: null }, ctx.clock.now());
    expect(pod.ok).toBe(true);
    const { rows } = await ctx.db.query(`SELECT (extract(epoch FROM compute_now()) * 1000)::float8 AS now`);
    const now: number = rows[0].now;
    // April: 3 × 2.5 + 1 × 720 (the open-ended pod all month).
    expect(await chargedHours('zeta', poolId, at('2027-04-01T00:00:00Z'), at('2027-05-01T00:00:00Z'))).toBe(7.5 + 720);
    // March: 3 × 4 + 1 × the hours from now to April.
    expect(await chargedHours('zeta', poolId, MARCH.periodStart, MARCH.periodEnd)).toBeCloseTo(12 + (MARCH.periodEnd - now) / HOUR, 9);
    expect(await chargedHours('zeta', poolId, MARCH.periodEnd, MARCH.periodEnd)).toBe(0);
  });
});

describe("the extender's filter", () => {
  it('leaves a key with overrides to bind: it loads as unlimited, and its overrides coming notify a reload', async () => {
    const poolId = await makePool('override-extender').owner('ops').offer('team-x').create(ctx.db);
    await setQuota(ctx.db, 'team-x', poolId, 'gpu', 1);
    const key = { tenantId: 'team-x', poolId, resource: 'gpu' };
    expect(await quotaHeadroom(ctx.db, 'team-x', poolId, ['gpu'], null)).toEqual(new Map([['gpu', { max: 1, peak: 0 }]]));

    const listener = new pg.Client({ connectionString: ctx.url });
    await listener.connect();
    try {
      await listener.query('LISTEN bc_extender');
      const notified = once(listener, 'notification');
      await setQuotaOverrides(ctx.db, 'team-x', poolId, 'gpu', [{ start: ctx.clock.now(), end: ctx.clock.now() + HOUR, kind: 'add', amount: 2 }]);
      const [n] = (await notified) as [{ payload: string }];
      expect(JSON.parse(n.payload)).toEqual(['q', 'team-x', poolId, 'gpu']);
    } finally {
      await listener.end();
    }
    expect(await quotaHeadroom(ctx.db, 'team-x', poolId, ['gpu'], null)).toEqual(new Map());
    expect(await loadQuotas(ctx.db, [key])).toMatchObject([{ ...key, max: null, charges: [] }]);
  });
});
