import os from 'node:os';
import path from 'node:path';
import { z } from 'zod';

// The one place that reads the environment. Parsed once at start into a frozen object that is passed explicitly.
const ConfigSchema = z.object({
  databaseUrl: z.string().url().optional(),
  dataDir: z.string().min(1),
  embeddedPort: z.coerce.number().int().min(1).max(65535),
  logLevel: z.enum(['debug', 'info', 'warn', 'error']),
  httpPort: z.coerce.number().int().min(0).max(65535),
  httpHost: z.string().min(1),
});
export type Config = Readonly<z.infer<typeof ConfigSchema>>;

function defaultDataDir(): string {
  // Run as root, PostgreSQL runs as the `postgres` user, which cannot enter /root: keep the data where it can.
  if (process.getuid?.() === 0) return '/var/lib/better-compute';
  return path.join(process.env.XDG_DATA_HOME ?? path.join(os.homedir(), '.local', 'share'), 'better-compute');
}

export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  return Object.freeze(
    ConfigSchema.parse({
      databaseUrl: env.DATABASE_URL || undefined,
      dataDir: env.BETTER_COMPUTE_DATA_DIR || defaultDataDir(),
      embeddedPort: env.BETTER_COMPUTE_PG_PORT || 54329,
      logLevel: env.LOG_LEVEL || 'info',
      httpPort: env.PORT || 8080,
      httpHost: env.HOST || '127.0.0.1',
    }),
  );
}
