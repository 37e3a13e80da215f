import fs from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';

export const MIGRATIONS_DIR = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', '..', 'migrations');

export interface Migration {
  version: number;
  name: string;
  sql: string;
}

export class SchemaTooNewError extends Error {
  readonly code = 'SCHEMA_TOO_NEW';
  constructor(readonly databaseVersion: number, readonly codeVersion: number) {
    super(`the database schema is at version ${databaseVersion}, newer than this code knows (${codeVersion}); upgrade the code`);
  }
}

export async function readMigrations(dir = MIGRATIONS_DIR): Promise<Migration[]> {
  const files = (await fs.readdir(dir)).filter((f) => /^\d{4}_[a-z0-9_]+\.sql$/.test(f)).sort();
  const migrations: Migration[] = [];
  for (const [i, file] of files.entries()) {
    const version = Number(file.slice(0, 4));
    if (version !== i + 1) throw new Error(`migration ${file} is out of sequence: expected version ${i + 1}`);
    migrations.push({ version, name: file.replace(/\.sql$/, ''), sql: await fs.readFile(path.join(dir, file), 'utf8') });
  }
  return migrations;
}

// Any constant, the same in every process: it serialises concurrent migrators.
const MIGRATION_LOCK = 4_242_001;

// A migration (or the wait for another migrator) may legitimately outlast the pools' statement and query timeouts
// (src/db/pool.ts): this session lifts the server's for the run, and the long queries carry their own client-side one.
const LONG = { query_timeout: 2_147_483_647 };

/**
 * Applies the migrations that the database lacks, each in its own transaction and recorded in `schema_migrations`,
 * all behind a session advisory lock, so two processes starting at once are safe. Refuses a database whose schema is
 * newer. Returns the versions applied.
 */
export async function migrate(client: pg.ClientBase, migrations?: Migration[]): Promise<number[]> {
  const all = migrations ?? (await readMigrations());
  const latest = all.at(-1)?.version ?? 0;
  await client.query('SET statement_timeout = 0');
  await client.query({ text: 'SELECT pg_advisory_lock($1)', values: [MIGRATION_LOCK], ...LONG } as pg.QueryConfig);
  try {
    await client.query(`CREATE TABLE IF NOT EXISTS schema_migrations (
      version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`);
    const { rows } = await client.query<{ v: number | null }>('SELECT max(version) AS v FROM schema_migrations');
    const current = rows[0]?.v ?? 0;
    if (current > latest) throw new SchemaTooNewError(current, latest);
    const applied: number[] = [];
    for (const m of all.filter((m) => m.version > current)) {
      await client.query('BEGIN');
      try {
        await client.query({ text: m.sql, ...LONG } as pg.QueryConfig);
        await client.query('INSERT INTO schema_migrations (version, name) VALUES ($1, $2)', [m.version, m.name]);
        await client.query('COMMIT');
      } catch (e) {
        await client.query('ROLLBACK');
        throw new Error(`migration ${m.name} failed: ${(e as Error).message}`, { cause: e });
      }
      applied.push(m.version);
    }
    return applied;
  } finally {
    await client.query('SELECT pg_advisory_unlock($1)', [MIGRATION_LOCK]);
    await client.query('RESET statement_timeout');
  }
}
