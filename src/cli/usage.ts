// `better-compute usage`: a tenant's hourly usage windows (GPU-hours, MIG-instance hours, slot hours, scalar hours)
// over a period, as totals per pool and resource (with --hourly, one row per hour) or `-o json`. Like `capacity`, it
// talks to the capacity API, or with --direct reads the database through the same service and schema.
import { CAPACITY_PATHS } from '../api/app.ts';
import { createCapacityService, type UsageResult } from '../api/capacity-service.ts';
import { parseInput, UsageInput } from '../core/schemas.ts';
import type { Config } from '../config.ts';
import { openDatabase } from '../db/connect.ts';
import { CliError, httpCall, openClient, reportFailure } from './capacity.ts';
import type { ClientTls } from './http-post.ts';
import { CLIENT_OPTIONS, parseFlags } from './flags.ts';
import { formatOutput, OUTPUT_HELP, outputUsageMessage, parseOutput } from './output.ts';
import { renderUsage } from './render.ts';

export const USAGE_USAGE = `usage: better-compute usage --tenant T [period] [options]

period (default: the current UTC month):
  --period P                   a UTC month (2026-11) or the hours up to now (24h, 7d)
  --from T [--to T]            ISO 8601 times (2026-11-01, 2026-11-01T10:00Z); --to defaults to the end of this hour
                               (widened to whole UTC hours; at most 366 days)

options:
  --tenant T                   the tenant (BETTER_COMPUTE_TENANT)
  --pool P                     one pool only
  --hourly                     one row per hour (a window of at most 31 days)
${OUTPUT_HELP}
  --server URL                 the capacity API (BETTER_COMPUTE_SERVER, default http://127.0.0.1:8080)
  --token TOKEN                bearer token (BETTER_COMPUTE_TOKEN): kubectl create token <sa> --audience bettercompute.io
  --ca-file FILE               the CA that signs an https:// server's certificate (BETTER_COMPUTE_CA_FILE)
  --tls-server-name NAME       check the certificate against NAME (BETTER_COMPUTE_TLS_SERVER_NAME)
  --direct                     read the database directly instead of the API (no authorization)
  --progress                   the slow steps (starting the embedded PostgreSQL with --direct, the call) on stderr;
                               the default when stderr is a terminal
`;

export interface UsageClient {
  usage(body: unknown): Promise<UsageResult>;
  close(): Promise<void>;
}

export function httpUsageClient(serverUrl: string, token: string | undefined, tls: ClientTls = {}): UsageClient {
  return { usage: (b) => httpCall(serverUrl, token, CAPACITY_PATHS.usage, b, tls), async close() {} };
}

export async function directUsageClient(config: Config): Promise<UsageClient> {
  const database = await openDatabase(config, { migrate: false, poolSize: 2 });
  try {
    const { service } = await createCapacityService(database.db);
    return { usage: async (b) => service.usage(parseInput(UsageInput, b)), close: () => database.close() };
  } catch (e) {
    await database.close();
    throw e;
  }
}

export interface UsageIo {
  stdout: (text: string) => void;
  stderr: (text: string) => void;
  /** Overrides how the client is made (tests); default: HTTP, or the database with --direct. */
  client?: (opts: { direct: boolean; server: string; token: string | undefined }) => Promise<UsageClient>;
  /** Whether stderr is a terminal: progress is shown then (as with --progress). */
  stderrIsTTY?: boolean;
}

const usage = (message: string) => new CliError('USAGE', message, 2);

const USAGE_OPTIONS = {
  tenant: { type: 'string' },
  pool: { type: 'string' },
  period: { type: 'string' },
  from: { type: 'string' },
  to: { type: 'string' },
  hourly: { type: 'boolean' },
  ...CLIENT_OPTIONS,
} as const;

export async function usageCommand(argv: string[], config: Config, io: UsageIo): Promise<number> {
  const parsed = parseFlags(argv, USAGE_OPTIONS, false, USAGE_USAGE, io);
  if (typeof parsed === 'number') return parsed;
  const { values } = parsed;
  const output = parseOutput(values.output);
  try {
    if (!output) throw usage(outputUsageMessage(values.output!));
    const body = usageBody(values, config);
    const { client, progress } = await openClient({ values, config, io, made: io.client, direct: () => directUsageClient(config), http: httpUsageClient });
    try {
      const r = await client.usage(body);
      progress.done();
      io.stdout(formatOutput(output, r, { table: () => renderUsage(r), wide: () => renderUsage(r, { wide: true }) }));
      return 0;
    } finally {
      await client.close();
    }
  } catch (e) {
    return reportFailure(e, output ?? 'table', io.stderr);
  }
}

/** The usage call's body from the flags (the tenant from the config when no --tenant), checked for flags that clash. */
function usageBody(
  values: { tenant?: string; pool?: string; period?: string; from?: string; to?: string; hourly?: boolean },
  config: Config,
): Record<string, unknown> & { tenantId: string } {
  const tenantId = values.tenant ?? config.tenant;
  if (!tenantId) throw usage('--tenant is required (or set BETTER_COMPUTE_TENANT)');
  if (values.period !== undefined && (values.from !== undefined || values.to !== undefined)) {
    throw usage('--period and --from/--to do not go together');
  }
  if (values.to !== undefined && values.from === undefined) throw usage('--to needs --from');
  // Times go to the API as given: it validates them (ISO 8601) as it does for every caller.
  return {
    tenantId,
    ...(values.pool !== undefined ? { poolId: values.pool } : {}),
    ...(values.period !== undefined ? { period: values.period } : {}),
    ...(values.from !== undefined ? { from: values.from } : {}),
    ...(values.to !== undefined ? { to: values.to } : {}),
    ...(values.hourly ? { hourly: true } : {}),
  };
}
