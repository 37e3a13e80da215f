// The rollup jobs of `serve`: folds pending deltas often, rebuilds periodically (which moves a booking that has
// started from reserved to allocated), never both at once, and stops cleanly.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { poolCapacity } from '../../src/db/capacity.ts';
import { advanceClock, DbClock } from '../../src/db/clock.ts';
import { Ledger } from '../../src/db/ledger.ts';
import { startCapacityJobs } from '../../src/jobs/capacity.ts';
import { silentLogger, type Logger } from '../../src/log.ts';
import { makeNode, makePool, reservation } from '../support/builders.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';

const HOUR = 3_600_000;
let t: TestDatabase;
let clock: DbClock;

beforeAll(async () => {
  t = await createTestDatabase();
  clock = await DbClock.create(t.db);
});
afterAll(async () => t?.drop());

const until = async (what: string, cond: () => Promise<boolean>, ms = 10_000) => {
  const deadline = performance.now() + ms;
  while (!(await cond())) {
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
};

const deltas = async () => (await t.db.query<{ n: number }>('SELECT count(*)::int AS n FROM pool_capacity_deltas')).rows[0]!.n;
const gpu = async (poolId: string) => (await poolCapacity(t.db, poolId)).find((r) => r.resource === 'gpu')!;

describe('capacity jobs', () => {
  it('fold empties the pending deltas; rebuild moves a started booking from reserved to allocated', async () => {
    const poolId = await makePool('jobs').create(t.db);
    await makeNode('jobs-n1').gpus(4).create(t.db, poolId);
    const ledger = new Ledger(t.db);
    expect((await ledger.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 2 }], start: clock.now() + HOUR }), clock.now())).ok).toBe(true);
    expect(await deltas()).toBeGreaterThan(0);
    await advanceClock(t.db, HOUR + 1000);
    expect(await gpu(poolId)).toMatchObject({ allocated: 0, reserved: 2 });

    let synced = 0;
    const errors: unknown[] = [];
    const log: Logger = { ...silentLogger, error: (m, f) => errors.push({ m, ...f }) };
    const jobs = startCapacityJobs({ db: t.db, rollupEveryMs: 300, foldEveryMs: 50, log, rebuildAtStart: false, afterFold: async () => void synced++ });
    try {
      await until('a fold', async () => jobs.runs.fold > 0 && (await deltas()) === 0);
      expect(synced).toBeGreaterThan(0);
      await until('a rebuild', async () => jobs.runs.rebuild > 0);
      expect(await gpu(poolId)).toMatchObject({ allocated: 2, reserved: 0, available: 2 });
    } finally {
      await jobs.stop();
    }
    const runs = { ...jobs.runs };
    await new Promise((r) => setTimeout(r, 400));
    expect(jobs.runs).toEqual(runs); // nothing runs after stop()
    expect(errors).toEqual([]);
    await clock.sync();
  });

  it('rebuildNow runs a rebuild at once, between the periodic ones', async () => {
    const poolId = await makePool('jobs-now').create(t.db);
    await makeNode('jobs-now-n1').gpus(4).create(t.db, poolId);
    const ledger = new Ledger(t.db);
    expect((await ledger.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 1 }], start: clock.now() + HOUR }), clock.now())).ok).toBe(true);
    await advanceClock(t.db, HOUR + 1000);
    expect(await gpu(poolId)).toMatchObject({ allocated: 0, reserved: 1 });
    const jobs = startCapacityJobs({ db: t.db, rollupEveryMs: 3_600_000, foldEveryMs: 3_600_000, log: silentLogger, rebuildAtStart: false });
    try {
      await jobs.rebuildNow();
      expect(jobs.runs.rebuild).toBe(1);
      expect(await gpu(poolId)).toMatchObject({ allocated: 1, reserved: 0 });
    } finally {
      await jobs.stop();
    }
    await clock.sync();
  });

  it('rebuilds at start by default', async () => {
    const jobs = startCapacityJobs({ db: t.db, rollupEveryMs: 60_000, foldEveryMs: 60_000, log: silentLogger });
    await until('the first rebuild', async () => jobs.runs.rebuild === 1);
    await jobs.stop();
  });

  it('a failing job is logged and the schedule goes on', async () => {
    const errors: Record<string, unknown>[] = [];
    const broken = { query: async () => Promise.reject(new Error('database is away')) } as unknown as typeof t.db;
    const log: Logger = { ...silentLogger, error: (m, f) => errors.push({ m, ...f }) };
    const jobs = startCapacityJobs({ db: broken, rollupEveryMs: 60_000, foldEveryMs: 20, log, rebuildAtStart: false });
    await until('two failures', async () => errors.length >= 2);
    await jobs.stop();
    expect(errors[0]).toMatchObject({ m: 'capacity job failed', job: 'fold', error: 'database is away' });
  });
});
