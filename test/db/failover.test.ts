// Issue 35: a database failover loses no booking. A primary and its synchronous standby (test/support/pg-pair.ts); the
// ledger works through the multi-host URL a controller is given; the primary is killed mid-booking and the standby
// promoted; the same pool finds the new primary.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DbClock } from '../../src/db/clock.ts';
import { Ledger } from '../../src/db/ledger.ts';
import { migrate } from '../../src/db/migrate.ts';
import { createPool, type Db } from '../../src/db/pool.ts';
import { makeNode, makePool, reservation } from '../support/builders.ts';
import { checkInvariants, CLEAN } from '../support/invariants.ts';
import { eventually } from '../support/eventually.ts';
import { startPair, type PgPair } from '../support/pg-pair.ts';

let pair: PgPair;
let db: Db;
beforeAll(async () => {
  pair = await startPair();
  db = createPool(pair.url, 8, { connectMs: 2_000, queryMs: 5_000 });
  const c = await db.connect();
  try {
    await migrate(c);
  } finally {
    c.release();
  }
}, 120_000);
afterAll(async () => {
  await db?.end();
  await pair?.stop();
}, 60_000);

describe('database failover', () => {
  it('the primary killed mid-booking and the standby promoted: every committed booking is there, none overlap, and booking goes on through the same URL', async () => {
    const poolId = await makePool('failover').create(db);
    // 128 GPUs: room for every booking the writer makes before and after the failover.
    for (let n = 0; n < 16; n++) await makeNode(`fo-${n}`).create(db, poolId);
    const clock = await DbClock.create(db);
    const ledger = new Ledger(db);
    const committed: string[] = [];
    const book = async () => {
      const r = await ledger.reserve(reservation(poolId), clock.now());
      if (!r.ok) throw new Error(`${r.code}: ${r.message}`);
      committed.push(r.reservation.id);
    };
    for (let i = 0; i < 10; i++) await book();

    // Bookings keep coming while the primary goes: some fail (the controller retries them), none that returned is lost.
    let stop = false;
    let failures = 0;
    let lastError = '';
    const writer = (async () => {
      while (!stop) {
        // A pause after a failure, as the controller's loops back off: a database that is away fails fast.
        // Paced (a booking every ~20 ms), and a pause after a failure, as the controller's loops back off.
        await book().then(
          () => new Promise((r) => setTimeout(r, 20)),
          async (e: unknown) => {
            failures++;
            lastError = (e as Error).message;
            await new Promise((r) => setTimeout(r, 100));
          },
        );
      }
    })();
    await eventually(async () => {
      if (committed.length < 20) throw new Error(`only ${committed.length} bookings before the kill`);
    }, 10_000, 200);
    const beforeKill = committed.length;
    await pair.killPrimary();
    process.stderr.write(`[failover] primary killed after ${beforeKill} bookings\n`);
    await pair.promoteStandby();
    process.stderr.write('[failover] standby promoted\n');
    // The next bookings after the promotion succeed on the same pool, with no change to its URL.
    const promotedAt = committed.length;
    await eventually(async () => {
      if (committed.length < promotedAt + 5) throw new Error(`${committed.length - promotedAt} bookings since the promotion; the last failure: ${lastError}`);
    }, 30_000, 200);
    stop = true;
    await writer;

    expect(beforeKill).toBeGreaterThanOrEqual(20);
    const { rows } = await eventually(() => db.query<{ id: string }>('SELECT id FROM reservations WHERE id = ANY($1)', [committed]), 10_000, 200);
    expect(rows.map((r) => r.id).sort()).toEqual([...committed].sort());
    const { rows: standby } = await db.query<{ standby: boolean }>('SELECT pg_is_in_recovery() AS standby');
    expect(standby[0]?.standby).toBe(false);
    expect(await checkInvariants(db)).toEqual(CLEAN);
    process.stderr.write(`[failover] ${committed.length} bookings committed (${beforeKill} before the kill), ${failures} failed while the primary was away\n`);
  }, 120_000);

  it('a new standby made from the new primary takes over at the next failover, twice: the same URL finds each primary, nothing committed is lost', async () => {
    // The last test left a promoted primary without a standby; the soak's failover fault does this every time.
    await pair.rebuildStandby();
    const poolId = await makePool('failover-again').create(db);
    for (let n = 0; n < 8; n++) await makeNode(`fo2-${n}`).create(db, poolId);
    const clock = await DbClock.create(db);
    const ledger = new Ledger(db);
    const committed: string[] = [];
    const bookSome = async (n: number) => {
      for (let i = 0; i < n; i++) {
        const r = await eventually(async () => {
          const res = await ledger.reserve(reservation(poolId), clock.now());
          if (!res.ok) throw new Error(`${res.code}: ${res.message}`);
          return res;
        }, 30_000, 200);
        committed.push(r.reservation.id);
      }
    };
    for (let round = 0; round < 2; round++) {
      await bookSome(5);
      const before = pair.primaryUrl;
      // Bookings while the primary is gone and no standby is back yet: they commit on the promoted one alone.
      await pair.failover(() => bookSome(3));
      expect(pair.primaryUrl).not.toBe(before);
      // The pool's connections reach the new primary, whose one standby streams synchronously.
      const { rows } = await eventually(() => db.query<{ sync_state: string }>('SELECT sync_state FROM pg_stat_replication'), 10_000, 200);
      expect(rows.map((r) => r.sync_state)).toEqual(['sync']);
    }
    await bookSome(5);
    const { rows } = await db.query<{ id: string }>('SELECT id FROM reservations WHERE id = ANY($1)', [committed]);
    expect(rows.map((r) => r.id).sort()).toEqual([...committed].sort());
    expect(pair.failovers).toBe(3);
    expect(await checkInvariants(db)).toEqual(CLEAN);

    // A process started now (a controller's first connection, its migration) whose URL names the standby first
    // finds the primary on its first try, as libpq does: the soak's restarted replica exited 1 on it.
    expect(new URL(pair.standbyUrl).port).toBe(pair.url.split(',')[0]!.split(':').pop());
    const fresh = createPool(pair.url, 2, { connectMs: 2_000 });
    try {
      const { rows: first } = await fresh.query<{ standby: boolean }>('SELECT pg_is_in_recovery() AS standby');
      expect(first[0]?.standby).toBe(false);
    } finally {
      await fresh.end();
    }
  }, 180_000);
});
