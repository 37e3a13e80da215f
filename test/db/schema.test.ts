// The schema as the migrator builds it (ADR 0032): the checked-in dump, an upgrade from databases migrated by the
// files as they were before the functions moved to migrations/functions/ (read from git at 3d04e30), checksums of
// applied migrations, and function files applied again when they change.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs/promises';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { UNRECORDED_CHECKSUMS } from '../../src/db/migration-checksums.ts';
import { MIGRATIONS_DIR, migrateSchema, readFunctions, readMigrations, type Migration, type SqlFunction } from '../../src/db/migrate.ts';
import { dumpSchema, SCHEMA_DUMP_FILE } from '../../src/db/schema-dump.ts';
import { setQuota } from '../../src/db/inventory.ts';
import { Ledger } from '../../src/db/ledger.ts';
import { makeNode, makePool, reservation } from '../support/builders.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';

const BEFORE = '3d04e30';
const DUMP = path.join(MIGRATIONS_DIR, SCHEMA_DUMP_FILE);

function git(...args: string[]): string {
  return execFileSync('git', args, { cwd: path.dirname(MIGRATIONS_DIR), encoding: 'utf8', maxBuffer: 1 << 24 });
}

/** The `.sql` files of `dir` as they were at `rev`, from git. */
function filesAt(rev: string, dir: string, pattern: RegExp): { file: string; sql: string }[] {
  let names: string[];
  try {
    names = git('ls-tree', '--name-only', `${rev}:${dir}`).split('\n').filter((f) => pattern.test(f));
  } catch (e) {
    throw new Error(`the upgrade test reads ${dir} of ${rev} from git; fetch the full history (${(e as Error).message})`);
  }
  return names.map((file) => ({ file, sql: git('show', `${rev}:${dir}/${file}`) }));
}

/** The migration files as they were at `rev`, from git. */
function migrationsAt(rev: string): Migration[] {
  return filesAt(rev, 'migrations', /^\d{4}_.*\.sql$/).map(({ file, sql }) => ({ version: Number(file.slice(0, 4)), name: file.replace(/\.sql$/, ''), sql }));
}

/** The function files as they were at `rev`, from git. */
function functionsAt(rev: string): SqlFunction[] {
  return filesAt(rev, 'migrations/functions', /^[a-z][a-z0-9_]*\.sql$/).map(({ file, sql }) => ({ name: file.replace(/\.sql$/, ''), sql }));
}

/** What the migrator before ADR 0032 did: each migration in a transaction, a row without checksum. */
async function migrateTheOldWay(client: pg.ClientBase, migrations: Migration[]): Promise<void> {
  await client.query(`CREATE TABLE schema_migrations (
    version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`);
  for (const m of migrations) {
    await client.query('BEGIN');
    await client.query(m.sql);
    await client.query('INSERT INTO schema_migrations (version, name) VALUES ($1, $2)', [m.version, m.name]);
    await client.query('COMMIT');
  }
}

/** The dump without the migrator's own bookkeeping that ADR 0032 added (schema_functions, the checksum column). */
function withoutBookkeeping(dump: string): string {
  return dump
    .split('\n')
    .filter((l) => !l.includes('schema_functions') && !l.startsWith('column schema_migrations.checksum '))
    .join('\n');
}

async function emptyDatabase(): Promise<{ t: TestDatabase; client: pg.Client }> {
  const t = await createTestDatabase(1);
  await t.db.query('DROP SCHEMA public CASCADE; CREATE SCHEMA public');
  const client = new pg.Client({ connectionString: t.url });
  await client.connect();
  return { t, client };
}

/**
 * The last migration of BEFORE; the function files that only migrations after it need; and the commit whose function
 * files still had the bodies BEFORE's migrations ended with. A function changed after it (the quota backstop of 0020,
 * ADR 0045) is part of the upgrade, not of the schema up to LAST_OLD.
 */
const LAST_OLD = 18;
const LATER_FUNCTIONS = ['bc_check_claim_atom'];
const FUNCTIONS_AT_LAST_OLD = '26c4646';

/** The schema this code builds from the migrations up to LAST_OLD (the one BEFORE's files built, ADR 0032). */
async function dumpUpToLastOld(): Promise<string> {
  const { t: db, client } = await emptyDatabase();
  try {
    const migrations = (await readMigrations()).filter((m) => m.version <= LAST_OLD);
    const functions = functionsAt(FUNCTIONS_AT_LAST_OLD).filter((f) => !LATER_FUNCTIONS.includes(f.name));
    await migrateSchema(client, { migrations, functions });
    return withoutBookkeeping(await dumpSchema(client));
  } finally {
    await client.end();
    await db.drop();
  }
}

/** The versions after LAST_OLD, applied by an upgrade. */
const laterVersions = async () => (await readMigrations()).map((m) => m.version).filter((v) => v > LAST_OLD);

let t: TestDatabase;
let checkedIn: string;
beforeAll(async () => {
  t = await createTestDatabase(2);
  checkedIn = await fs.readFile(DUMP, 'utf8');
});
afterAll(async () => t.drop());

async function withClient<T>(db: TestDatabase, fn: (c: pg.PoolClient) => Promise<T>): Promise<T> {
  const c = await db.db.connect();
  try {
    return await fn(c);
  } finally {
    c.release();
  }
}

describe('the checked-in schema dump', () => {
  it('is what a fresh database migrates to', async () => {
    const dump = await withClient(t, dumpSchema);
    expect(dump, `migrations/${SCHEMA_DUMP_FILE} is not the migrated schema: run npm run db:dump`).toBe(checkedIn);
  });

  it('lists every function file once, with its definition', async () => {
    for (const f of await readFunctions()) {
      expect(checkedIn.split(`CREATE OR REPLACE FUNCTION public.${f.name}(`).length - 1, f.name).toBe(1);
    }
  });
});

describe('a database migrated by the files before the functions moved', () => {
  it(`(${BEFORE}, all 18) has the same schema, and upgrades without error to the dump`, async () => {
    const old = migrationsAt(BEFORE);
    expect(old.map((m) => m.name)).toEqual(Object.keys(UNRECORDED_CHECKSUMS));
    const { t: db, client } = await emptyDatabase();
    try {
      await migrateTheOldWay(client, old);
      expect(await dumpSchema(client)).toBe(await dumpUpToLastOld());
      const result = await migrateSchema(client);
      expect(result.migrations).toEqual(await laterVersions());
      expect(result.functions).toEqual((await readFunctions()).map((f) => f.name));
      expect(await dumpSchema(client)).toBe(checkedIn);
      const { rows } = await client.query('SELECT count(*)::int AS n FROM schema_migrations WHERE checksum IS NULL');
      expect(rows[0].n).toBe(0);
      expect(await migrateSchema(client)).toEqual({ migrations: [], functions: [] });
    } finally {
      await client.end();
      await db.drop();
    }
  });

  it(`(${BEFORE}, only up to 0005, with a node) applies the rewritten rest and ends at the dump`, async () => {
    const { t: db, client } = await emptyDatabase();
    try {
      await migrateTheOldWay(client, migrationsAt(BEFORE).slice(0, 5));
      // A node off the network: 0010's backfill of unreachable_since and the triggers it fires (0003's, and 0006's
      // placeholders) have a row to work on.
      await client.query(`INSERT INTO pools (id, name, owner_tenant) VALUES ('pool_${'0'.repeat(26)}', 'p', 't')`);
      await client.query(`INSERT INTO nodes (id, pool_id, connectivity) VALUES ('n1', 'pool_${'0'.repeat(26)}', 'lost')`);
      const result = await migrateSchema(client);
      expect(result.migrations).toEqual([6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, ...(await laterVersions())]);
      expect(await dumpSchema(client)).toBe(checkedIn);
      const { rows } = await client.query(`SELECT unreachable_since IS NOT NULL AS since FROM nodes`);
      expect(rows).toEqual([{ since: true }]);
    } finally {
      await client.end();
      await db.drop();
    }
  });
});

describe('migration 0020 (the quota backstop, ADR 0045) on a database with a lowered limit', () => {
  it('sets grace from the charges not yet ended, so a booking made before the limit was lowered still starts', async () => {
    const { t: db, client } = await emptyDatabase();
    try {
      await migrateSchema(client, {
        migrations: (await readMigrations()).filter((m) => m.version < 20),
        functions: functionsAt(FUNCTIONS_AT_LAST_OLD),
      });
      // Today's applyInventory keeps each node's report (node_reports, migration 0021): a table of that shape for the
      // fixtures below, dropped before 0020 and 0021 run.
      await client.query((await readMigrations()).find((m) => m.version === 21)!.sql);
      await client.query(`UPDATE clock SET frozen_at = '2027-03-10T12:00:00Z'`);
      const now = Date.parse('2027-03-10T12:00:00Z');
      const poolId = await makePool('m20').owner('ops').offer('acme', { gpu: 4 }).create(db.db);
      await makeNode('m20-n').gpus(8).create(db.db, poolId);
      const ledger = new Ledger(db.db);
      const book = (count: number, start?: number) =>
        ledger.reserve(reservation(poolId, { devices: [{ class: 'gpu', count }], ...(start ? { start } : {}) }), now);
      expect((await book(2)).ok).toBe(true);
      expect((await book(4, now + 2 * 3_600_000)).ok).toBe(true);
      await setQuota(db.db, 'acme', poolId, 'gpu', 2);
      const quota = async () => (await client.query(`SELECT max, used, reserved, grace FROM quotas WHERE tenant_id = 'acme'`)).rows[0];
      // The code before 0020 kept only today's overage (none) as grace.
      expect(await quota()).toEqual({ max: 2, used: 2, reserved: 4, grace: 0 });

      await client.query('DROP TABLE node_reports');
      expect((await migrateSchema(client)).migrations).toEqual([20, 21]);
      expect(await quota()).toEqual({ max: 2, used: 2, reserved: 4, grace: 4 });
      // The later booking starts: 4 in use under a limit of 2, within the grace (the refresh lowers it to what is left).
      await client.query(`UPDATE clock SET frozen_at = frozen_at + interval '2 hours 30 minutes'`);
      await client.query('SELECT bc_rebuild_quotas()');
      expect(await quota()).toEqual({ max: 2, used: 4, reserved: 0, grace: 2 });
    } finally {
      await client.end();
      await db.drop();
    }
  });
});

describe('checksums of applied migrations', () => {
  it('an applied migration edited afterwards is refused with MIGRATION_CHANGED, naming the file', async () => {
    const edited = (await readMigrations()).map((m) => (m.version === 5 ? { ...m, sql: `${m.sql}\n-- an edit`, checksum: undefined } : m));
    await withClient(t, async (c) => {
      await expect(migrateSchema(c, { migrations: edited })).rejects.toMatchObject({
        code: 'MIGRATION_CHANGED',
        file: '0005_pod_assignments.sql',
        message: expect.stringContaining('migration 0005_pod_assignments.sql changed after it was applied'),
      });
      // A row from before checksums: the file must be the text this code knows it was applied as.
      await c.query('UPDATE schema_migrations SET checksum = NULL WHERE version = 5');
      await expect(migrateSchema(c, { migrations: edited })).rejects.toMatchObject({ code: 'MIGRATION_CHANGED' });
      expect(await migrateSchema(c)).toEqual({ migrations: [], functions: [] });
      const { rows } = await c.query('SELECT checksum FROM schema_migrations WHERE version = 5');
      expect(rows[0].checksum).toBe(UNRECORDED_CHECKSUMS['0005_pod_assignments']);
    });
  });

  it('a migration renamed after it was applied is refused too', async () => {
    const renamed = (await readMigrations()).map((m) => (m.version === 4 ? { ...m, name: '0004_fence' } : m));
    await withClient(t, async (c) => {
      await expect(migrateSchema(c, { migrations: renamed })).rejects.toMatchObject({ code: 'MIGRATION_CHANGED', file: '0004_fence.sql' });
    });
  });
});

describe('function files', () => {
  it('an edited one is applied again, alone, and the dump then differs', async () => {
    const functions = await readFunctions();
    const edited = functions.map((f) =>
      f.name === 'bc_quota_limit' ? { ...f, sql: f.sql.replace("WHEN 'set' THEN p_amount", "WHEN 'set' THEN p_amount + 0"), checksum: undefined } : f,
    );
    await withClient(t, async (c) => {
      expect(await migrateSchema(c, { functions: edited })).toEqual({ migrations: [], functions: ['bc_quota_limit'] });
      expect(await migrateSchema(c, { functions: edited })).toEqual({ migrations: [], functions: [] });
      const { rows } = await c.query(`SELECT pg_get_functiondef('bc_quota_limit'::regproc) AS def`);
      expect(rows[0].def).toContain('p_amount + 0');
      const dump = await dumpSchema(c);
      expect(dump).not.toBe(checkedIn);
      expect(dump).toContain('p_amount + 0');
      expect(await migrateSchema(c)).toEqual({ migrations: [], functions: ['bc_quota_limit'] });
      expect(await dumpSchema(c)).toBe(checkedIn);
    });
  });

  it('a function the schema lost is created again', async () => {
    await withClient(t, async (c) => {
      await c.query('DROP FUNCTION bc_quota_period(text, timestamptz)');
      expect(await migrateSchema(c)).toEqual({ migrations: [], functions: ['bc_quota_period'] });
      expect(await dumpSchema(c)).toBe(checkedIn);
    });
  });

  it('a body that does not check fails the whole pass, naming its file, and changes nothing', async () => {
    const functions = await readFunctions();
    const broken = functions.map((f) => {
      if (f.name === 'bc_quota_hours') return { ...f, sql: f.sql.replace('FROM quota_charges', 'FROM quota_chargez'), checksum: undefined };
      if (f.name === 'bc_quota_limit') return { ...f, sql: f.sql.replace("WHEN 'set' THEN p_amount", "WHEN 'set' THEN p_amount + 0"), checksum: undefined };
      return f;
    });
    await withClient(t, async (c) => {
      await expect(migrateSchema(c, { functions: broken })).rejects.toThrow(/functions\/bc_quota_hours\.sql failed: relation "quota_chargez"/);
      expect(await dumpSchema(c)).toBe(checkedIn);
      expect(await migrateSchema(c)).toEqual({ migrations: [], functions: [] });
    });
  });
});
