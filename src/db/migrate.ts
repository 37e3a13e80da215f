// The schema's migrator (ADR 0032). Two kinds of files under migrations/:
//   NNNN_name.sql         numbered migrations: tables, columns, constraints, indexes, triggers and data. Applied once,
//                         in order, each in its own transaction, recorded in schema_migrations with its checksum; an
//                         applied file must never change (MIGRATION_CHANGED).
//   functions/<name>.sql  one SQL function each, its current definition (CREATE OR REPLACE). Applied after the numbered
//                         migrations, all that changed in one transaction, recorded in schema_functions with their
//                         checksums: a change to a function is an edit of its one file (and `npm run db:dump`).
import { createHash } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import { UNRECORDED_CHECKSUMS } from './migration-checksums.ts';

export const MIGRATIONS_DIR = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', '..', 'migrations');
export const FUNCTIONS_DIR = path.join(MIGRATIONS_DIR, 'functions');

export interface Migration {
  version: number;
  name: string;
  sql: string;
  /** sha256 of the file's text (line ends normalised); default: computed from sql. */
  checksum?: string;
}

export interface SqlFunction {
  /** The function's name, which is also its file's (functions/<name>.sql). */
  name: string;
  sql: string;
  checksum?: string;
}

export interface MigrateResult {
  /** The numbered migrations applied, by version. */
  migrations: number[];
  /** The function files applied (new or changed), by name. */
  functions: string[];
}

export class SchemaTooNewError extends Error {
  readonly code = 'SCHEMA_TOO_NEW';
  constructor(readonly databaseVersion: number, readonly codeVersion: number) {
    super(`the database schema is at version ${databaseVersion}, newer than this code knows (${codeVersion}); upgrade the code`);
  }
}

/** An applied numbered migration whose file is no longer the text that was applied. */
export class MigrationChangedError extends Error {
  readonly code = 'MIGRATION_CHANGED';
  constructor(readonly file: string, detail: string) {
    super(`migration ${file} changed after it was applied (${detail}); restore it and put the change in a new migration`);
  }
}

/** sha256 of a file's text, CRLF read as LF (a checkout's line ends are no change). */
export function checksumOf(sql: string): string {
  return createHash('sha256').update(sql.replace(/\r\n/g, '\n')).digest('hex');
}

export async function readMigrations(dir = MIGRATIONS_DIR): Promise<Migration[]> {
  const files = (await fs.readdir(dir)).filter((f) => /^\d{4}_[a-z0-9_]+\.sql$/.test(f)).sort();
  const migrations: Migration[] = [];
  for (const [i, file] of files.entries()) {
    const version = Number(file.slice(0, 4));
    if (version !== i + 1) throw new Error(`migration ${file} is out of sequence: expected version ${i + 1}`);
    const sql = await fs.readFile(path.join(dir, file), 'utf8');
    migrations.push({ version, name: file.replace(/\.sql$/, ''), sql, checksum: checksumOf(sql) });
  }
  return migrations;
}

/** Refuses a function file that does not define exactly the one function its name says, with CREATE OR REPLACE. */
export function checkFunctionFile(file: string, sql: string): void {
  const name = file.replace(/\.sql$/, '');
  const creates = [...sql.matchAll(/^\s*CREATE\s+(OR\s+REPLACE\s+)?FUNCTION\s+([a-z0-9_]+)\s*\(/gim)];
  if (creates.length !== 1) throw new Error(`functions/${file} must define one function, not ${creates.length}`);
  const [, replace, defined] = creates[0]!;
  if (!replace) throw new Error(`functions/${file} must say CREATE OR REPLACE FUNCTION (it is applied again when it changes)`);
  if (defined !== name) throw new Error(`functions/${file} defines ${defined}, not ${name}`);
}

export async function readFunctions(dir = FUNCTIONS_DIR): Promise<SqlFunction[]> {
  const files = (await fs.readdir(dir)).filter((f) => f.endsWith('.sql')).sort();
  const functions: SqlFunction[] = [];
  for (const file of files) {
    if (!/^[a-z][a-z0-9_]*\.sql$/.test(file)) throw new Error(`functions/${file}: a function file is named <function>.sql`);
    const sql = await fs.readFile(path.join(dir, file), 'utf8');
    checkFunctionFile(file, sql);
    functions.push({ name: file.replace(/\.sql$/, ''), sql, checksum: checksumOf(sql) });
  }
  return functions;
}

// Any constant, the same in every process: it serialises concurrent migrators.
const MIGRATION_LOCK = 4_242_001;

// A migration (or the wait for another migrator) may legitimately outlast the pools' statement and query timeouts
// (src/db/pool.ts): this session lifts the server's for the run, and the long queries carry their own client-side one.
const LONG = { query_timeout: 2_147_483_647 };

async function ensureBookkeeping(client: pg.ClientBase): Promise<void> {
  await client.query(`CREATE TABLE IF NOT EXISTS schema_migrations (
    version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`);
  // Rows written before checksums were recorded (ADR 0032) keep NULL until verified once.
  await client.query('ALTER TABLE schema_migrations ADD COLUMN IF NOT EXISTS checksum text');
  await client.query(`CREATE TABLE IF NOT EXISTS schema_functions (
    name text PRIMARY KEY, checksum text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`);
}

interface AppliedRow {
  version: number;
  name: string;
  checksum: string | null;
}

/**
 * Every applied migration that the code knows must still be the text that was applied: its recorded checksum, or for
 * a row recorded before checksums, the text this code knows it as (UNRECORDED_CHECKSUMS), which is then recorded.
 */
async function verifyApplied(client: pg.ClientBase, all: Migration[], applied: AppliedRow[]): Promise<void> {
  const byVersion = new Map(all.map((m) => [m.version, m]));
  for (const row of applied) {
    const m = byVersion.get(row.version);
    if (!m) continue;
    const sum = m.checksum ?? checksumOf(m.sql);
    const file = `${m.name}.sql`;
    if (row.name !== m.name) throw new MigrationChangedError(file, `version ${row.version} was applied as ${row.name}.sql`);
    if (row.checksum === null) {
      const known = UNRECORDED_CHECKSUMS[m.name];
      if (known !== undefined && known !== sum) {
        throw new MigrationChangedError(file, 'it differs from the text applied before checksums were recorded');
      }
      await client.query('UPDATE schema_migrations SET checksum = $1 WHERE version = $2', [sum, row.version]);
    } else if (row.checksum !== sum) {
      throw new MigrationChangedError(file, `checksum ${sum.slice(0, 12)}, applied as ${row.checksum.slice(0, 12)}`);
    }
  }
}

async function applyMigrations(client: pg.ClientBase, pending: Migration[]): Promise<number[]> {
  const applied: number[] = [];
  for (const m of pending) {
    await client.query('BEGIN');
    try {
      await client.query({ text: m.sql, ...LONG } as pg.QueryConfig);
      await client.query('INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)', [
        m.version,
        m.name,
        m.checksum ?? checksumOf(m.sql),
      ]);
      await client.query('COMMIT');
    } catch (e) {
      await client.query('ROLLBACK');
      throw new Error(`migration ${m.name} failed: ${(e as Error).message}`, { cause: e });
    }
    applied.push(m.version);
  }
  return applied;
}

/** The function files whose checksum differs from the recorded one, or whose function the schema lacks. */
async function changedFunctions(client: pg.ClientBase, all: SqlFunction[]): Promise<SqlFunction[]> {
  const { rows } = await client.query<{ name: string; checksum: string | null }>(
    `SELECT f.name, s.checksum FROM unnest($1::text[]) AS f(name)
     LEFT JOIN schema_functions s ON s.name = f.name
     WHERE EXISTS (SELECT 1 FROM pg_proc p WHERE p.proname = f.name AND p.pronamespace = current_schema()::regnamespace)`,
    [all.map((f) => f.name)],
  );
  const recorded = new Map(rows.map((r) => [r.name, r.checksum]));
  return all.filter((f) => recorded.get(f.name) !== (f.checksum ?? checksumOf(f.sql)));
}

/**
 * Applies the changed function files in one transaction, twice in name order: first without checking bodies (an SQL
 * function may call one created later), then with (every body checked against the functions and tables that now all
 * exist). Forgets the rows of function files that are gone (a numbered migration drops such a function).
 */
async function applyFunctions(client: pg.ClientBase, all: SqlFunction[]): Promise<string[]> {
  const changed = await changedFunctions(client, all);
  await client.query('BEGIN');
  try {
    for (const check of ['off', 'on']) {
      await client.query(`SET LOCAL check_function_bodies = ${check}`);
      for (const f of changed) {
        await client.query({ text: f.sql, ...LONG } as pg.QueryConfig).catch((e: Error) => {
          throw new Error(`function file functions/${f.name}.sql failed: ${e.message}`, { cause: e });
        });
      }
    }
    for (const f of changed) {
      await client.query(
        `INSERT INTO schema_functions (name, checksum) VALUES ($1, $2)
         ON CONFLICT (name) DO UPDATE SET checksum = EXCLUDED.checksum, applied_at = now()`,
        [f.name, f.checksum ?? checksumOf(f.sql)],
      );
    }
    await client.query('DELETE FROM schema_functions WHERE NOT (name = ANY ($1::text[]))', [all.map((f) => f.name)]);
    await client.query('COMMIT');
  } catch (e) {
    await client.query('ROLLBACK');
    throw e;
  }
  return changed.map((f) => f.name);
}

/**
 * Applies the numbered migrations that the database lacks, then the function files that changed, all behind a
 * session advisory lock, so two processes starting at once are safe. Refuses a database whose schema is newer, and
 * one whose applied migrations no longer match their files (MigrationChangedError).
 */
export async function migrateSchema(
  client: pg.ClientBase,
  source: { migrations?: Migration[]; functions?: SqlFunction[] } = {},
): Promise<MigrateResult> {
  const all = source.migrations ?? (await readMigrations());
  const functions = source.functions ?? (await readFunctions());
  const latest = all.at(-1)?.version ?? 0;
  await client.query('SET statement_timeout = 0');
  await client.query({ text: 'SELECT pg_advisory_lock($1)', values: [MIGRATION_LOCK], ...LONG } as pg.QueryConfig);
  try {
    await ensureBookkeeping(client);
    const { rows } = await client.query<AppliedRow>('SELECT version, name, checksum FROM schema_migrations ORDER BY version');
    const current = rows.at(-1)?.version ?? 0;
    if (current > latest) throw new SchemaTooNewError(current, latest);
    await verifyApplied(client, all, rows);
    const migrations = await applyMigrations(client, all.filter((m) => m.version > current));
    return { migrations, functions: await applyFunctions(client, functions) };
  } finally {
    await client.query('SELECT pg_advisory_unlock($1)', [MIGRATION_LOCK]);
    await client.query('RESET statement_timeout');
  }
}

/** migrateSchema, answering the numbered migrations applied. */
export async function migrate(client: pg.ClientBase, source?: { migrations?: Migration[]; functions?: SqlFunction[] }): Promise<number[]> {
  return (await migrateSchema(client, source)).migrations;
}
