import type { Db } from './pool.ts';

/** Time for decisions in TypeScript: the database's compute_now(), sampled and advanced with a monotonic clock. */
export interface Clock {
  now(): number;
}

export class DbClock implements Clock {
  private base = 0;
  private sampledAt = 0;

  private constructor(private readonly db: Db) {}

  static async create(db: Db): Promise<DbClock> {
    const c = new DbClock(db);
    await c.sync();
    return c;
  }

  async sync(): Promise<void> {
    const sent = performance.now();
    const { rows } = await this.db.query<{ t: number }>('SELECT (extract(epoch FROM compute_now()) * 1000)::float8 AS t');
    this.base = rows[0]!.t;
    // The database read its clock between sending and answering: the midpoint halves the error of either end.
    this.sampledAt = (sent + performance.now()) / 2;
  }

  now(): number {
    return Math.floor(this.base + (performance.now() - this.sampledAt));
  }
}

/** Moves compute_now() by `ms` for every process (tests and demos only). */
export async function advanceClock(db: Db, ms: number): Promise<void> {
  await db.query('UPDATE clock SET offset_ms = offset_ms + $1', [Math.round(ms)]);
}
