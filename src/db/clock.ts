import { systemClock, type MonotonicClock } from '../clock.ts';
import type { Db } from './pool.ts';

/**
 * Time for decisions in TypeScript: the database's compute_now(), sampled and advanced with the monotonic clock
 * (src/clock.ts).
 */
export interface Clock {
  now(): number;
}

export class DbClock implements Clock {
  private base = 0;
  private sampledAt = 0;

  private constructor(
    private readonly db: Db,
    private readonly monotonic: MonotonicClock,
  ) {}

  static async create(db: Db, monotonic: MonotonicClock = systemClock): Promise<DbClock> {
    const c = new DbClock(db, monotonic);
    await c.sync();
    return c;
  }

  async sync(): Promise<void> {
    const sent = this.monotonic.now();
    const { rows } = await this.db.query<{ t: number }>('SELECT (extract(epoch FROM compute_now()) * 1000)::float8 AS t');
    this.base = rows[0]!.t;
    // The database read its clock between sending and answering: the midpoint halves the error of either end.
    this.sampledAt = (sent + this.monotonic.now()) / 2;
  }

  now(): number {
    return Math.floor(this.base + (this.monotonic.now() - this.sampledAt));
  }
}

/** Moves compute_now() by `ms` for every process (tests and demos only). */
export async function advanceClock(db: Db, ms: number): Promise<void> {
  await db.query('UPDATE clock SET offset_ms = offset_ms + $1', [Math.round(ms)]);
}
