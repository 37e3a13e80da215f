import path from 'node:path';
import type { Config } from '../config.ts';
import type { Logger } from '../log.ts';
import { startEmbedded } from './embedded.ts';
import { migrate } from './migrate.ts';
import { createPool, dbTimeoutsFrom, type Db } from './pool.ts';

export interface Database {
  db: Db;
  url: string;
  embedded: boolean;
  close(): Promise<void>;
}

/**
 * The configured database: DATABASE_URL when set, else the embedded server in the data directory (started here,
 * restarted if it dies, and stopped by close()). The pool has the configured timeouts (BETTER_COMPUTE_DB_*). With
 * `migrate`, the schema is brought up to date first.
 */
export async function openDatabase(
  config: Config,
  opts: { migrate?: boolean; poolSize?: number; log?: (line: string) => void; logger?: Logger } = {},
): Promise<Database> {
  let url = config.databaseUrl;
  let stopServer = async (): Promise<void> => undefined;
  if (!url) {
    const server = await startEmbedded({
      dataDir: path.join(config.dataDir, 'postgres'),
      port: config.embeddedPort,
      ...(opts.log ? { log: opts.log } : {}),
      ...(opts.logger ? { logger: opts.logger } : {}),
    });
    url = server.url;
    stopServer = () => server.stop();
  }
  const db = createPool(url, opts.poolSize ?? 10, dbTimeoutsFrom(config));
  try {
    if (opts.migrate) {
      const client = await db.connect();
      try {
        await migrate(client);
      } finally {
        client.release();
      }
    }
  } catch (e) {
    await db.end();
    await stopServer();
    throw e;
  }
  return {
    db,
    url,
    embedded: !config.databaseUrl,
    async close() {
      await db.end();
      await stopServer();
    },
  };
}
