// `npm run db:dump`: migrates a fresh embedded PostgreSQL and writes its schema (src/db/schema-dump.ts) to
// migrations/schema.dump, or to the path given as the first argument. test/db/schema.test.ts compares with it.
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { startEmbedded } from '../../src/db/embedded.ts';
import { migrate, MIGRATIONS_DIR } from '../../src/db/migrate.ts';
import { dumpSchema, SCHEMA_DUMP_FILE } from '../../src/db/schema-dump.ts';

async function main(): Promise<void> {
  const out = process.argv[2] ?? path.join(MIGRATIONS_DIR, SCHEMA_DUMP_FILE);
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'bc-dump-'));
  const server = await startEmbedded({ dataDir: path.join(dir, 'data'), fast: true, log: () => undefined });
  try {
    const client = new pg.Client({ connectionString: server.url });
    await client.connect();
    try {
      await migrate(client);
      await fs.writeFile(out, await dumpSchema(client));
    } finally {
      await client.end();
    }
  } finally {
    await server.stop();
    await fs.rm(dir, { recursive: true, force: true });
  }
  console.log(`wrote ${path.relative(process.cwd(), out)}`);
}

await main();
