import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, inject } from 'vitest';
import { DbClock } from '../../src/db/clock.ts';
import { createPool, type Db } from '../../src/db/pool.ts';
import { withDatabase } from './pg-global-setup.ts';

export interface TestDatabase {
  url: string;
  db: Db;
  drop(): Promise<void>;
}

/** A fresh database cloned from the migrated template: each test file gets its own. */
export async function createTestDatabase(poolSize = 20): Promise<TestDatabase> {
  const adminUrl = inject('pgAdminUrl');
  const name = `bc_test_${randomBytes(6).toString('hex')}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name} TEMPLATE ${inject('pgTemplate')}`);
  await admin.end();
  const url = withDatabase(adminUrl, name);
  const db = createPool(url, poolSize);
  return {
    url,
    db,
    async drop() {
      await db.end();
      const c = new pg.Client({ connectionString: adminUrl });
      await c.connect();
      await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await c.end();
    },
  };
}

export interface TestContext {
  readonly db: Db;
  readonly url: string;
  readonly clock: DbClock;
}

/** Registers the file's hooks: a fresh database before its tests, dropped after; the context is filled in beforeAll. */
export function useTestDatabase(): TestContext {
  const ctx = {} as { db: Db; url: string; clock: DbClock };
  let t: TestDatabase | undefined;
  beforeAll(async () => {
    t = await createTestDatabase();
    ctx.db = t.db;
    ctx.url = t.url;
    ctx.clock = await DbClock.create(t.db);
  });
  afterAll(async () => t?.drop());
  return ctx;
}
