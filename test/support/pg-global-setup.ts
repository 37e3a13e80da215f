import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import type { TestProject } from 'vitest/node';
import { startEmbedded } from '../../src/db/embedded.ts';
import { migrate } from '../../src/db/migrate.ts';

declare module 'vitest' {
  export interface ProvidedContext {
    pgAdminUrl: string;
    pgTemplate: string;
  }
}

const TEMPLATE = 'bc_template';

// One real PostgreSQL for the whole run: DATABASE_URL when given, else an embedded server in a temporary directory.
// The schema is migrated once into a template database; each test file clones it (test/support/db.ts).
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  let adminUrl = process.env.DATABASE_URL;
  let stop = async (): Promise<void> => undefined;
  let dir: string | undefined;
  if (!adminUrl) {
    dir = await fs.mkdtemp(path.join(os.tmpdir(), 'bc-test-pg-'));
    const server = await startEmbedded({ dataDir: path.join(dir, 'data'), fast: true });
    adminUrl = server.url;
    stop = () => server.stop();
  }
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query(`DROP DATABASE IF EXISTS ${TEMPLATE}`);
  await admin.query(`CREATE DATABASE ${TEMPLATE}`);
  await admin.end();
  const templateClient = new pg.Client({ connectionString: withDatabase(adminUrl, TEMPLATE) });
  await templateClient.connect();
  await migrate(templateClient);
  await templateClient.end();
  project.provide('pgAdminUrl', adminUrl);
  project.provide('pgTemplate', TEMPLATE);
  return async () => {
    await stop();
    if (dir) await fs.rm(dir, { recursive: true, force: true });
  };
}

export function withDatabase(url: string, database: string): string {
  const u = new URL(url);
  u.pathname = `/${database}`;
  return u.toString();
}
