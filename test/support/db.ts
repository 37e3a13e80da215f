import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { inject } from 'vitest';
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
