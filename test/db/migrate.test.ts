import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrate, migrateSchema, readFunctions, readMigrations, SchemaTooNewError } from '../../src/db/migrate.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';

let t: TestDatabase;
beforeAll(async () => {
  t = await createTestDatabase();
});
afterAll(async () => t.drop());

describe('migrations', () => {
  it('are recorded once and re-running applies nothing', async () => {
    const client = await t.db.connect();
    try {
      expect(await migrate(client)).toEqual([]);
      const { rows } = await client.query('SELECT version FROM schema_migrations ORDER BY version');
      expect(rows.map((r) => r.version)).toEqual((await readMigrations()).map((m) => m.version));
    } finally {
      client.release();
    }
  });

  it('two migrators on an empty database at once apply each migration and each function file exactly once', async () => {
    const fresh = await createTestDatabase();
    try {
      await fresh.db.query('DROP SCHEMA public CASCADE; CREATE SCHEMA public');
      const clients = [new pg.Client({ connectionString: fresh.url }), new pg.Client({ connectionString: fresh.url })];
      await Promise.all(clients.map((c) => c.connect()));
      const results = await Promise.all(clients.map((c) => migrateSchema(c)));
      await Promise.all(clients.map((c) => c.end()));
      const all = (await readMigrations()).map((m) => m.version);
      expect([...results[0]!.migrations, ...results[1]!.migrations].sort((a, b) => a - b)).toEqual(all);
      // The one that waited for the lock found everything applied, the functions included.
      expect(results.map((r) => r.functions.length).sort((a, b) => a - b)).toEqual([0, (await readFunctions()).length]);
      const { rows } = await fresh.db.query('SELECT count(*)::int AS n FROM schema_migrations');
      expect(rows[0].n).toBe(all.length);
    } finally {
      await fresh.drop();
    }
  });

  it('refuses a database whose schema is newer than the code', async () => {
    await t.db.query(`INSERT INTO schema_migrations (version, name) VALUES (9999, '9999_future')`);
    const client = await t.db.connect();
    try {
      await expect(migrate(client)).rejects.toBeInstanceOf(SchemaTooNewError);
    } finally {
      client.release();
      await t.db.query('DELETE FROM schema_migrations WHERE version = 9999');
    }
  });

  it('names every constraint by convention and uses timestamptz for every time column', async () => {
    const { rows: cols } = await t.db.query(`
      SELECT table_name, column_name, data_type FROM information_schema.columns
      WHERE table_schema = 'public' AND (column_name LIKE '%\\_at' OR column_name LIKE '%time%')`);
    for (const c of cols) expect(`${c.table_name}.${c.column_name}: ${c.data_type}`).toMatch(/timestamp with time zone$/);
    const { rows: cons } = await t.db.query(`
      SELECT conname FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace
      WHERE n.nspname = 'public' AND contype IN ('c', 'x', 'u')`);
    for (const c of cons) expect(c.conname).toMatch(/^(check|exclude|unique)\$/);
  });
});
