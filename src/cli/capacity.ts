// `better-compute capacity`: the tenant summary, one pool's rows, a placement preview or a GPU timeline, as human
// tables (or a chart) or `-o json`. It talks to the capacity API (`--server`, a bearer token from `--token` or
// BETTER_COMPUTE_TOKEN); with `--direct` it reads the database itself, through the same service and schemas but
// without authorization (whoever can reach the database can read it all).
import fs from 'node:fs';
import { CAPACITY_PATHS } from '../api/app.ts';
import { ApiError } from '../http/errors.ts';
import {
  createCapacityService,
  type ByDomainResult,
  type ByPoolResult,
  type PreviewResult,
  type QuotaResult,
  type TimelineResult,
} from '../api/capacity-service.ts';
import { ByDomainInput, ByPoolInput, parseInput, PreviewInput, QuotaInput, SummaryInput, TimelineInput, ValidationError } from '../core/schemas.ts';
import type { Config } from '../config.ts';
import { SelectorError } from '../core/selector.ts';
import type { Summary } from '../db/capacity.ts';
import { openDatabase } from '../db/connect.ts';
import { renderDomains, renderPoolRows, renderPreview, renderQuota, renderSummary, renderTimeline } from './render.ts';
import { formatFailure, formatOutput, OUTPUT_HELP, outputUsageMessage, parseOutput, type Shown } from './output.ts';
import { createProgress, openingStep, type Progress } from './progress.ts';
import { selectorTextToObject } from './selector-object.ts';
import { CLIENT_OPTIONS, parseFlags, type FlagValues } from './flags.ts';
import { postJson, tokenTransportProblem, type ClientTls } from './http-post.ts';

export const CAPACITY_USAGE = `usage: better-compute capacity --tenant T [what] [options]

what:
  (nothing)                    the tenant's summary: every pool it owns or is offered, with totals per GPU model
  --pool P                     one pool's rollup rows
  --domains --pool P           one pool's capacity per placement domain: nodes, free whole nodes, rows per resource
      --topology-key K         the node label that names a domain (default: the pool's; also for --gang)
  --preview --pool P           would a request fit now, and where (nothing is booked)
      --gpus N                 whole GPUs (default 1); --class C for another device class
      --for D                  duration, e.g. 1d, 8h, PT90M (default 1h)
      --start T                start time: epoch milliseconds or ISO 8601 (default now)
      --selector S             device selector, e.g. "vramGiB >= 80 && gpuModel == \\"H100\\""
      --gang N                 N nodes in one placement domain (--topology-key K)
      --binding B              hold (default) or node
      --spot                   a spot request
  --timeline --pool P          whole GPUs booked per time bucket, as a chart
      --from T --to T          window (default: this hour, for 24 hours)
      --step M                 bucket minutes (default 60)
  --quota [--pool P]           quota per pool and resource: GPUs (limit in force, used, reserved) and GPU-hours of
                               the current period (limit, used, reserved)

options:
  --tenant T                   the tenant (BETTER_COMPUTE_TENANT)
${OUTPUT_HELP}
  --server URL                 the capacity API (BETTER_COMPUTE_SERVER, default http://127.0.0.1:8080)
  --token TOKEN                bearer token (BETTER_COMPUTE_TOKEN): kubectl create token <sa> --audience bettercompute.io
  --ca-file FILE               the CA that signs an https:// server's certificate (BETTER_COMPUTE_CA_FILE); the
                               controller's: kubectl -n better-compute-system get configmap better-compute-ca
                               -o jsonpath='{.data.ca\\.crt}'
  --tls-server-name NAME       check the certificate against NAME (BETTER_COMPUTE_TLS_SERVER_NAME), e.g.
                               better-compute-controller.better-compute-system.svc for a ClusterIP URL
  --direct                     read the database directly instead of the API (no authorization)
  --progress                   the slow steps (starting the embedded PostgreSQL with --direct, the call) on stderr;
                               the default when stderr is a terminal
`;

export class CliError extends Error {
  constructor(
    readonly code: string,
    message: string,
    readonly exitCode = 1,
  ) {
    super(message);
    this.name = 'CliError';
  }
}

/**
 * How a CLI command reports a failure it knows (a usage error, an API answer, invalid input): one line on stderr (as
 * JSON or YAML with `-o json`/`-o yaml`), and its exit code (2 for usage, 1 otherwise). Anything else is rethrown.
 */
export function reportFailure(e: unknown, output: string, stderr: (text: string) => void): number {
  let failure: { code: string; message: string; exitCode: number };
  if (e instanceof CliError) failure = { code: e.code, message: e.message, exitCode: e.exitCode };
  else if (e instanceof ApiError || e instanceof ValidationError) failure = { code: e.code, message: e.message, exitCode: 1 };
  else throw e;
  stderr(formatFailure(output, failure.code, failure.message));
  return failure.exitCode;
}

const usage = (message: string) => new CliError('USAGE', message, 2);

/** The capacity calls (the spec's four, byDomain and quota), over HTTP or directly on the database. */
export interface CapacityClient {
  summary(body: unknown): Promise<Summary>;
  byPool(body: unknown): Promise<ByPoolResult>;
  preview(body: unknown): Promise<PreviewResult>;
  timeline(body: unknown): Promise<TimelineResult>;
  byDomain(body: unknown): Promise<ByDomainResult>;
  quota(body: unknown): Promise<QuotaResult>;
  close(): Promise<void>;
}

/** One POST to the capacity API; an error answer becomes a CliError with its code. */
export async function httpCall<T>(serverUrl: string, token: string | undefined, path: string, body: unknown, tls: ClientTls = {}): Promise<T> {
  const base = serverUrl.replace(/\/+$/, '');
  const url = new URL(`${base}${path}`);
  const problem = tokenTransportProblem(url, token);
  if (problem) throw new CliError('TLS_REQUIRED', problem);
  let res: { status: number; text: string };
  try {
    res = await postJson(url, { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) }, JSON.stringify(body), tls);
  } catch (e) {
    throw new CliError('UNREACHABLE', `cannot reach ${base}: ${(e as { code?: string }).code ?? (e as Error).message}`);
  }
  let json: unknown;
  try {
    json = JSON.parse(res.text);
  } catch {
    throw new CliError('BAD_RESPONSE', `${base}${path} answered ${res.status} with a body that is not JSON`);
  }
  if (res.status < 200 || res.status > 299) {
    const err = (json as { error?: { code?: unknown; message?: unknown } }).error;
    throw new CliError(String(err?.code ?? `HTTP_${res.status}`), String(err?.message ?? `HTTP ${res.status}`));
  }
  return json as T;
}

/** The flags every API command shares: where, who, over what TLS, and whether to show progress. */
export interface ClientFlags {
  direct?: boolean | undefined;
  server?: string | undefined;
  token?: string | undefined;
  progress?: boolean | undefined;
  'ca-file'?: string | undefined;
  'tls-server-name'?: string | undefined;
}

/**
 * A command's client: `--direct` the database (opened with a progress step), else the API at --server with the CLI's
 * TLS settings; `made` (a test's) replaces both. The progress reports the call as the next step.
 */
export async function openClient<C>(o: {
  values: ClientFlags;
  config: Config;
  io: { stderr: (text: string) => void; stderrIsTTY?: boolean | undefined };
  made: ((c: { direct: boolean; server: string; token: string | undefined }) => Promise<C>) | undefined;
  direct: () => Promise<C> | C;
  http: (server: string, token: string | undefined, tls: ClientTls) => C;
}): Promise<{ client: C; progress: Progress }> {
  const { values, config } = o;
  const progress = createProgress({ flag: values.progress, isTTY: o.io.stderrIsTTY, write: o.io.stderr });
  const server = values.server ?? config.serverUrl;
  const token = values.token ?? config.token;
  const direct = values.direct ?? false;
  if (direct) progress.step(openingStep(config));
  const client = o.made
    ? await o.made({ direct, server, token })
    : direct
      ? await o.direct()
      : o.http(server, token, clientTls(values['ca-file'] ?? config.caFile, values['tls-server-name'] ?? config.tlsServerName));
  progress.step(direct ? 'reading the database' : `asking ${server}`);
  return { client, progress };
}

/** The CLI's TLS settings: the CA file (--ca-file, BETTER_COMPUTE_CA_FILE) read once, the name to check. */
export function clientTls(caFile: string | undefined, servername?: string): ClientTls {
  const name = servername ? { servername } : {};
  if (!caFile) return name;
  try {
    return { ca: fs.readFileSync(caFile, 'utf8'), ...name };
  } catch (e) {
    throw new CliError('INVALID_INPUT', `cannot read the CA file ${caFile}: ${(e as Error).message}`, 2);
  }
}

export function httpClient(serverUrl: string, token: string | undefined, tls: ClientTls = {}): CapacityClient {
  const call = <T>(path: string, body: unknown) => httpCall<T>(serverUrl, token, path, body, tls);
  return {
    summary: (b) => call(CAPACITY_PATHS.summary, b),
    byPool: (b) => call(CAPACITY_PATHS.byPool, b),
    preview: (b) => call(CAPACITY_PATHS.preview, b),
    timeline: (b) => call(CAPACITY_PATHS.timeline, b),
    byDomain: (b) => call(CAPACITY_PATHS.byDomain, b),
    quota: (b) => call(CAPACITY_PATHS.quota, b),
    async close() {},
  };
}

export async function directClient(config: Config): Promise<CapacityClient> {
  const database = await openDatabase(config, { migrate: false, poolSize: 2 });
  try {
    const { service } = await createCapacityService(database.db);
    return {
      summary: async (b) => service.summary(parseInput(SummaryInput, b)),
      byPool: async (b) => service.byPool(parseInput(ByPoolInput, b)),
      preview: async (b) => service.preview(parseInput(PreviewInput, b)),
      timeline: async (b) => service.timeline(parseInput(TimelineInput, b)),
      byDomain: async (b) => service.byDomain(parseInput(ByDomainInput, b)),
      quota: async (b) => service.quota(parseInput(QuotaInput, b)),
      close: () => database.close(),
    };
  } catch (e) {
    await database.close();
    throw e;
  }
}

/** Epoch milliseconds, or an ISO 8601 date-time with a zone (or a bare date, taken as UTC). */
export function parseTime(flag: string, text: string): number {
  if (/^\d+$/.test(text)) return Number(text);
  if (/^\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2}))?$/.test(text)) {
    const ms = Date.parse(text);
    if (Number.isFinite(ms)) return ms;
  }
  throw usage(`--${flag}: not a time (epoch milliseconds or ISO 8601 with a zone, e.g. 2026-01-15T10:00Z): ${text}`);
}

function parseInteger(flag: string, text: string): number {
  if (!/^-?\d+$/.test(text)) throw usage(`--${flag}: not a whole number: ${text}`);
  return Number(text);
}

export interface CapacityIo {
  stdout: (text: string) => void;
  stderr: (text: string) => void;
  /** Overrides how the client is made (tests); default: HTTP, or the database with --direct. */
  client?: (opts: { direct: boolean; server: string; token: string | undefined }) => Promise<CapacityClient>;
  /** Whether stderr is a terminal: progress is shown then (as with --progress). */
  stderrIsTTY?: boolean;
}

const CAPACITY_OPTIONS = {
  tenant: { type: 'string' },
  pool: { type: 'string' },
  preview: { type: 'boolean' },
  timeline: { type: 'boolean' },
  domains: { type: 'boolean' },
  quota: { type: 'boolean' },
  gpus: { type: 'string' },
  class: { type: 'string' },
  for: { type: 'string' },
  start: { type: 'string' },
  selector: { type: 'string' },
  gang: { type: 'string' },
  'topology-key': { type: 'string' },
  binding: { type: 'string' },
  spot: { type: 'boolean' },
  from: { type: 'string' },
  to: { type: 'string' },
  step: { type: 'string' },
  ...CLIENT_OPTIONS,
} as const;

type CapacityFlags = FlagValues<typeof CAPACITY_OPTIONS>;

export async function capacityCommand(argv: string[], config: Config, io: CapacityIo): Promise<number> {
  const parsed = parseFlags(argv, CAPACITY_OPTIONS, false, CAPACITY_USAGE, io);
  if (typeof parsed === 'number') return parsed;
  const { values } = parsed;
  const output = parseOutput(values.output);
  try {
    if (!output) throw usage(outputUsageMessage(values.output!));
    const tenantId = capacityTenant(values, config);
    const { client, progress } = await openClient({ values, config, io, made: io.client, direct: () => directClient(config), http: httpClient });
    try {
      const { result, render } = await capacityView(client, values, tenantId);
      progress.done();
      io.stdout(formatOutput(output, result, render));
      return 0;
    } finally {
      await client.close();
    }
  } catch (e) {
    return reportFailure(e, output ?? 'table', io.stderr);
  }
}

/** The tenant (--tenant, else the config's), once the flags are checked to go together. */
function capacityTenant(values: CapacityFlags, config: Config): string {
  const tenantId = values.tenant ?? config.tenant;
  if (!tenantId) throw usage('--tenant is required (or set BETTER_COMPUTE_TENANT)');
  const views = (['preview', 'timeline', 'domains', 'quota'] as const).filter((v) => values[v]);
  if (views.length > 1) throw usage(`--${views[0]} and --${views[1]} do not go together`);
  const previewOnly = ['gpus', 'class', 'for', 'start', 'selector', 'gang', 'binding', 'spot'] as const;
  const timelineOnly = ['from', 'to', 'step'] as const;
  for (const f of previewOnly) if (values[f] !== undefined && !values.preview) throw usage(`--${f} needs --preview`);
  for (const f of timelineOnly) if (values[f] !== undefined && !values.timeline) throw usage(`--${f} needs --timeline`);
  if (values['topology-key'] !== undefined && !values.preview && !values.domains) throw usage('--topology-key needs --preview or --domains');
  if (views[0] && views[0] !== 'quota' && !values.pool) throw usage(`--${views[0]} needs --pool`); // quota: every pool the tenant sees, or one
  return tenantId;
}

/** The view the flags ask for, read through the client. */
async function capacityView(client: CapacityClient, values: CapacityFlags, tenantId: string): Promise<Shown> {
  if (values.preview) {
    const r = await client.preview(previewBody(values, tenantId));
    return { result: r, render: { table: () => renderPreview(r) } };
  }
  if (values.timeline) {
    const r = await client.timeline({
      tenantId,
      poolId: values.pool,
      ...(values.from !== undefined ? { from: parseTime('from', values.from) } : {}),
      ...(values.to !== undefined ? { to: parseTime('to', values.to) } : {}),
      ...(values.step !== undefined ? { stepMinutes: parseInteger('step', values.step) } : {}),
    });
    return { result: r, render: { table: () => renderTimeline(r) } };
  }
  if (values.domains) {
    const r = await client.byDomain({
      tenantId,
      poolId: values.pool,
      ...(values['topology-key'] !== undefined ? { topologyKey: values['topology-key'] } : {}),
    });
    return { result: r, render: { table: () => renderDomains(r) } };
  }
  if (values.quota) {
    const r = await client.quota({ tenantId, ...(values.pool ? { poolId: values.pool } : {}) });
    return { result: r, render: { table: () => renderQuota(r) } };
  }
  if (values.pool) {
    const r = await client.byPool({ tenantId, poolId: values.pool });
    return { result: r, render: { table: () => renderPoolRows(r) } };
  }
  const r = await client.summary({ tenantId });
  return { result: r, render: { table: () => renderSummary(r), wide: () => renderSummary(r, { wide: true }) } };
}

/** --preview's request: one device request (--gpus of --class, --selector), its time, binding and gang. */
function previewBody(values: CapacityFlags, tenantId: string): Record<string, unknown> {
  let selector: Record<string, unknown> | undefined;
  if (values.selector !== undefined) {
    try {
      selector = selectorTextToObject(values.selector);
    } catch (e) {
      if (e instanceof SelectorError) throw usage(`--selector: ${e.message}`);
      throw e;
    }
  }
  const device = {
    class: values.class ?? 'gpu',
    count: values.gpus === undefined ? 1 : parseInteger('gpus', values.gpus),
    ...(selector ? { selector } : {}),
  };
  return {
    tenantId,
    poolId: values.pool,
    devices: [device],
    duration: values.for ?? '1h',
    ...(values.start !== undefined ? { start: parseTime('start', values.start) } : {}),
    ...(values.binding !== undefined ? { binding: values.binding } : {}),
    ...(values.spot ? { spot: true } : {}),
    ...(values.gang !== undefined
      ? { gang: { size: parseInteger('gang', values.gang), ...(values['topology-key'] ? { topologyKey: values['topology-key'] } : {}) } }
      : {}),
    // Required by the schema; nothing is written, so any key does.
    idempotencyKey: 'cli-preview',
  };
}
