// A benchmark's database: a database of its own on DATABASE_URL's server, or on an embedded PostgreSQL in a temporary
// directory (`fast`: no fsync), migrated; stop() drops it and removes what was made.
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { startEmbedded } from '../src/db/embedded.ts';
import { migrate } from '../src/db/migrate.ts';
import { createPool, type Db } from '../src/db/pool.ts';

export interface BenchDatabase {
  db: Db;
  stop(): Promise<void>;
}

export async function benchDatabase(name: string, poolSize: number): Promise<BenchDatabase> {
  let url = process.env.DATABASE_URL;
  let stopServer = async () => undefined as void;
  let dir: string | undefined;
  if (!url) {
    dir = await fs.mkdtemp(path.join(os.tmpdir(), `bc-bench-${name}-`));
    await fs.chmod(dir, 0o755);
    const server = await startEmbedded({ dataDir: path.join(dir, 'pg'), fast: true });
    url = server.url;
    stopServer = () => server.stop();
  }
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  const dbName = `bench_${name}_${process.pid}`;
  await admin.query(`CREATE DATABASE ${dbName}`);
  const dbUrl = new URL(url);
  dbUrl.pathname = `/${dbName}`;
  const db = createPool(dbUrl.toString(), poolSize);
  const client = await db.connect();
  try {
    await migrate(client);
  } finally {
    client.release();
  }
  return {
    db,
    async stop() {
      await db.end();
      await admin.query(`DROP DATABASE ${dbName}`);
      await admin.end();
      await stopServer();
      if (dir) await fs.rm(dir, { recursive: true, force: true });
    },
  };
}
