// The leader's fence in the ledger (migrations/0004_leader_fence.sql). On winning the Lease the leader takes a new
// epoch with bc_take_fence; every leader write checks it in its own transaction (bc_check_fence), so once another
// replica took the fence, a deposed leader's transaction fails (FencedError) instead of committing.
// The Ledger checks the fence itself (its `fence` option); the inventory writes of src/db/inventory.ts take a Db and
// open their own transactions, so `fenced()` runs them inside one transaction that checked the fence first, turning
// their BEGIN/COMMIT/ROLLBACK into a savepoint (docs/adr/0004-leader-fencing.md).
import type pg from 'pg';
import { sqlState } from '../db/errors.ts';
import { FencedError, type Fence } from '../db/ledger.ts';
import { withTransaction, type Db } from '../db/pool.ts';

export const LEASE_NAME = 'better-compute-controller';

/** An epoch no fence ever has: writes checked against it always fail. */
const NO_EPOCH = -1;

export class FenceHolder {
  private current: Fence;

  constructor(readonly name: string = LEASE_NAME) {
    this.current = { name, epoch: NO_EPOCH };
  }

  /** The fence for the Ledger's `fence` option: never undefined, so a non-leader's fenced writes fail. */
  readonly fence = (): Fence => this.current;

  get epoch(): number {
    return this.current.epoch;
  }

  /** Takes the fence for `holder` (waits for the old leader's in-flight fenced writes). */
  async take(db: Db, holder: string): Promise<number> {
    const { rows } = await db.query<{ epoch: number }>('SELECT bc_take_fence($1, $2) AS epoch', [this.name, holder]);
    const epoch = Number(rows[0]!.epoch);
    this.current = { name: this.name, epoch };
    return epoch;
  }

  /** Leadership lost: from now on every fenced write fails. */
  revoke(): void {
    this.current = { name: this.name, epoch: NO_EPOCH };
  }
}

async function checkFence(c: pg.ClientBase, fence: Fence): Promise<void> {
  try {
    await c.query('SELECT bc_check_fence($1, $2)', [fence.name, fence.epoch]);
  } catch (e) {
    if (sqlState(e) === 'BC009') throw new FencedError((e as Error).message);
    throw e;
  }
}

/** Runs `fn` in one transaction that first checked the fence; `fn`'s own transactions become savepoints in it. */
export async function fenced<T>(db: Db, fence: Fence, fn: (tx: Db) => Promise<T>): Promise<T> {
  return withTransaction(db, async (c) => {
    await checkFence(c, fence);
    return fn(nestedDb(c));
  });
}

/** A Db whose connect() hands out the same client, with transactions as savepoints. */
function nestedDb(c: pg.PoolClient): Db {
  let depth = 0;
  const query = (text: unknown, params?: unknown) => {
    if (typeof text === 'string') {
      const verb = text.trim().toUpperCase();
      if (verb === 'BEGIN') return c.query(`SAVEPOINT bc_nested_${++depth}`);
      if (verb === 'COMMIT') return c.query(`RELEASE SAVEPOINT bc_nested_${depth--}`);
      if (verb === 'ROLLBACK') return c.query(`ROLLBACK TO SAVEPOINT bc_nested_${depth--}`);
    }
    return (c.query as (t: unknown, p?: unknown) => Promise<unknown>)(text, params);
  };
  const client = { query, release: () => undefined };
  return { query, connect: async () => client } as unknown as Db;
}
