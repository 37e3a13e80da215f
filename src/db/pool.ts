import pg from 'pg';
import { SQLSTATE, sqlState } from './errors.ts';

// timestamptz and bigint come back as numbers of milliseconds / numbers, not strings or Dates.
pg.types.setTypeParser(pg.types.builtins.INT8, (v) => Number(v));
pg.types.setTypeParser(pg.types.builtins.NUMERIC, (v) => Number(v));

export type Db = pg.Pool;

export function createPool(url: string, max = 10): Db {
  const pool = new pg.Pool({ connectionString: url, max });
  // An idle client's error (e.g. the server restarting) must not crash the process; the next query reconnects.
  pool.on('error', () => undefined);
  return pool;
}

export async function withTransaction<T>(db: Db, fn: (c: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await db.connect();
  try {
    await client.query('BEGIN');
    const result = await fn(client);
    await client.query('COMMIT');
    return result;
  } catch (e) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw e;
  } finally {
    client.release();
  }
}

/**
 * A transaction that PostgreSQL may abort to break a deadlock or a serialization conflict, run again until it commits
 * (a few times, with a short random pause), so that such an abort never reaches a caller.
 */
export async function withRetriedTransaction<T>(
  db: Db,
  fn: (c: pg.PoolClient) => Promise<T>,
  attempts = 8,
): Promise<T> {
  for (let i = 1; ; i++) {
    try {
      return await withTransaction(db, fn);
    } catch (e) {
      const s = sqlState(e);
      if (i >= attempts || (s !== SQLSTATE.deadlock && s !== SQLSTATE.serializationFailure)) throw e;
      await new Promise((r) => setTimeout(r, Math.random() * 10 * i));
    }
  }
}
