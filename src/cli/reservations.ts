// `better-compute reservations`: a tenant's reservations (list, get), what the capacity preview says of a Reservation
// manifest, and confirming a held one; human tables or `-o json`. It talks to the database itself (embedded unless
// DATABASE_URL is set), as `migrate` does, without authorization: whoever reaches the database is trusted. Reservation
// names come from the cluster when a kubeconfig is configured (KUBECONFIG); the ledger knows only their uids.
import { systemClock } from '../clock.ts';
import fs from 'node:fs/promises';
import { parseAllDocuments } from 'yaml';
import { z } from 'zod';
import { ApiError } from '../http/errors.ts';
import { createCapacityService } from '../api/capacity-service.ts';
import { parseInput } from '../core/schemas.ts';
import type { Config } from '../config.ts';
import { kubeConfigFrom, KubeClient } from '../kube/client.ts';
import { toCreateInput } from '../controller/reservation/reconciler.ts';
import { type Reservation } from '../kube/types.ts';
import { openDatabase } from '../db/connect.ts';
import type { Db } from '../db/pool.ts';
import { tenantReservations, type ReservationRow } from '../db/reservations.ts';
import type { ReservationState } from '../db/ledger.ts';
import { DurationError, parseDuration } from '../core/duration.ts';
import { CliError, reportFailure } from './capacity.ts';
import { renderPreview } from './render.ts';
import { formatOutput, OUTPUT_HELP, outputUsageMessage, parseOutput, type Shown } from './output.ts';
import { parseFlags } from './flags.ts';
import { createProgress, openingStep, type Progress } from './progress.ts';
import { parseWaitStates, WAIT_STATES, waitForState, WaitFailure } from './reservation-wait.ts';
import { renderReservation, renderReservationList, type ReservationDetails } from './render-reservations.ts';
import { API_VERSION } from '../core/names.ts';

export const RESERVATIONS_USAGE = `usage: better-compute reservations <command> --tenant T [options]

commands:
  list                         the tenant's live reservations (--all: ended ones too): id, name, pool, state, start,
                               end, atoms
  get ID                       one reservation: state, window, hold, atoms per node
  preview -f FILE              what the capacity preview says of the first Reservation in a manifest (YAML or JSON),
                               validated as the controller validates it; nothing is booked
  confirm ID                   confirm a held reservation (as its first pod's bind, or the annotation
                               bettercompute.io/confirm=true, would); the Reservation's status follows
  wait ID                      wait until the reservation is in a state (--for, default confirmed; at most
                               --timeout, default 10m), then show it; each change is reported as progress

options:
  --tenant T                   the tenant (BETTER_COMPUTE_TENANT)
${OUTPUT_HELP}
  --all                        list: ended reservations (released, expired) too
  -f, --filename FILE          preview: the manifest
  --for STATE[,STATE]          wait: held, confirmed, released or expired
  --timeout D                  wait: how long at most (90s, 10m, 1h); then exit 1 with TIMEOUT
  --progress                   the slow steps (starting the embedded PostgreSQL, asking the cluster) on stderr;
                               the default when stderr is a terminal

It reads and writes the database directly (DATABASE_URL, else the embedded one): no authorization.
`;

const usage = (message: string) => new CliError('USAGE', message, 2);

/** A Reservation manifest as a file holds it: the envelope is checked here, the spec as the reconciler checks it. */
const ReservationManifest = z.object({
  apiVersion: z.literal(API_VERSION),
  kind: z.literal('Reservation'),
  metadata: z.looseObject({ name: z.string().min(1), namespace: z.string().min(1).optional(), uid: z.string().min(1).optional() }),
  spec: z.looseObject({ pool: z.string().min(1) }),
});

export interface ReservationsIo {
  stdout: (text: string) => void;
  stderr: (text: string) => void;
  /** Overrides the database (tests); default: openDatabase without migrating. */
  database?: () => Promise<{ db: Db; close(): Promise<void> }>;
  /** Overrides the lookup of Reservation names by metadata.uid (tests); default: the cluster's, with a kubeconfig. */
  names?: (uids: readonly string[]) => Promise<Map<string, string>>;
  /** Whether stderr is a terminal: progress is shown then (as with --progress). */
  stderrIsTTY?: boolean;
}

/** `namespace/name` of the cluster's Reservations by metadata.uid (one LIST). */
async function clusterNames(kubeconfig: string): Promise<Map<string, string>> {
  const kube = new KubeClient(kubeConfigFrom(kubeconfig, 5000), 'better-compute-cli');
  const list = await kube.listReservations();
  return new Map(list.items.flatMap((r) => (r.metadata.uid ? [[r.metadata.uid, `${r.metadata.namespace}/${r.metadata.name}`] as const] : [])));
}

const RESERVATIONS_OPTIONS = {
  tenant: { type: 'string' },
  output: { type: 'string', short: 'o' },
  all: { type: 'boolean' },
  filename: { type: 'string', short: 'f' },
  for: { type: 'string' },
  timeout: { type: 'string' },
  progress: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
} as const;

/** A verb with its arguments, `wait`'s options checked. */
interface Call {
  verb: 'list' | 'get' | 'preview' | 'confirm' | 'wait';
  args: string[];
  wait: { states: ReservationState[]; timeoutMs: number } | undefined;
}

/** What the verbs share: the tenant's database and services, the progress line, names and details of reservations. */
interface Session {
  db: Db;
  tenantId: string;
  progress: Progress;
  service: Awaited<ReturnType<typeof createCapacityService>>['service'];
  ledger: Awaited<ReturnType<typeof createCapacityService>>['ledger'];
  names: (rows: readonly ReservationRow[]) => Promise<Map<string, string>>;
  details: (id: string) => Promise<ReservationDetails>;
}

export async function reservationsCommand(argv: string[], config: Config, io: ReservationsIo): Promise<number> {
  const parsed = parseFlags(argv, RESERVATIONS_OPTIONS, true, RESERVATIONS_USAGE, io);
  if (typeof parsed === 'number') return parsed;
  const { values, positionals } = parsed;
  const output = parseOutput(values.output);
  try {
    if (!output) throw usage(outputUsageMessage(values.output!));
    const tenantId = values.tenant ?? config.tenant;
    if (!tenantId) throw usage('--tenant is required (or set BETTER_COMPUTE_TENANT)');
    const call = callOf(positionals, values);
    // Read before opening the database: a missing file costs no database start.
    const manifest = call.verb === 'preview' ? await readManifest(values.filename!) : undefined;

    const progress = createProgress({ flag: values.progress, isTTY: io.stderrIsTTY, write: io.stderr });
    progress.step(io.database ? 'opening the database' : openingStep(config));
    const database = io.database ? await io.database() : await openDatabase(config, { migrate: false, poolSize: 2 });
    try {
      const session = await openSession(database.db, tenantId, progress, config, io);
      const { result, render } = await runVerb(session, call, values.all ?? false, manifest);
      progress.done();
      io.stdout(formatOutput(output, result, render));
      return 0;
    } finally {
      await database.close();
    }
  } catch (e) {
    return reportFailure(e, output ?? 'table', io.stderr);
  }
}

/** The verb and its arguments, checked with the flags that go with it. */
function callOf(positionals: string[], values: { all?: boolean; filename?: string; for?: string; timeout?: string }): Call {
  const [verb, ...args] = positionals;
  const arity: Record<string, number> = { list: 0, get: 1, preview: 0, confirm: 1, wait: 1 };
  if (verb === undefined || arity[verb] === undefined) throw usage(`a command: list, get ID, preview -f FILE, confirm ID or wait ID${verb ? `, not ${verb}` : ''}`);
  if (args.length !== arity[verb]) throw usage(`${verb} takes ${arity[verb] === 1 ? 'one reservation id' : 'no arguments'}`);
  if (values.all && verb !== 'list') throw usage('--all goes with list');
  const wait = verb === 'wait' ? waitOptions(values.for, values.timeout) : undefined;
  if (!wait && (values.for !== undefined || values.timeout !== undefined)) throw usage('--for and --timeout go with wait');
  if ((values.filename !== undefined) !== (verb === 'preview')) throw usage(verb === 'preview' ? 'preview needs -f FILE' : '-f goes with preview');
  return { verb: verb as Call['verb'], args, wait };
}

/** The session on an open database: Reservation names from the cluster (a warning when it cannot say), details by id. */
async function openSession(db: Db, tenantId: string, progress: Progress, config: Config, io: ReservationsIo): Promise<Session> {
  const { service, ledger } = await createCapacityService(db);
  const names = async (rows: readonly ReservationRow[]): Promise<Map<string, string>> => {
    const lookup = io.names ?? (config.kubeconfig ? (uids: readonly string[]) => clusterNames(config.kubeconfig!).then((m) => pick(m, uids)) : undefined);
    if (!lookup || rows.length === 0) return new Map();
    progress.step('asking the cluster for the Reservations\' names');
    try {
      return await lookup(rows.map((r) => r.idempotencyKey));
    } catch (e) {
      io.stderr(`warning: Reservation names unavailable (${e instanceof Error ? e.message : String(e)})\n`);
      return new Map();
    }
  };
  const details = async (id: string): Promise<ReservationDetails> => {
    const [row] = await tenantReservations(db, tenantId, { ids: [id] });
    if (!row) throw new ApiError('NOT_FOUND', `reservation ${id} not found for tenant ${tenantId}`);
    const view = await ledger.get(id);
    const name = (await names([row])).get(row.idempotencyKey) ?? null;
    return { ...row, name, allocations: view?.allocations ?? [], ...(view?.hold ? { hold: view.hold } : {}) };
  };
  return { db, tenantId, progress, service, ledger, names, details };
}

/** One reservation's details, as a table or wide. */
function detailsShown(r: ReservationDetails): Shown {
  return { result: r, render: { table: () => renderReservation(r), wide: () => renderReservation(r, { wide: true }) } };
}

/** Runs the verb. */
async function runVerb(s: Session, call: Call, all: boolean, manifest: Reservation | undefined): Promise<Shown> {
  const { verb, args } = call;
  const { progress, tenantId } = s;
  if (verb !== 'wait') progress.step(verb === 'list' ? 'reading the reservations' : verb === 'preview' ? 'asking the placer' : `reading reservation ${args[0]}`);
  if (verb === 'list') {
    const rows = await tenantReservations(s.db, tenantId, { all });
    const byUid = await s.names(rows);
    const list = rows.map((r) => ({ ...r, name: byUid.get(r.idempotencyKey) ?? null }));
    return {
      result: { tenantId, reservations: list },
      render: {
        table: () => renderReservationList(tenantId, list, all),
        wide: () => renderReservationList(tenantId, list, all, { wide: true }),
      },
    };
  }
  if (verb === 'get') return detailsShown(await s.details(args[0]!));
  if (verb === 'wait') return waitFor(s, args[0]!, call.wait!);
  if (verb === 'confirm') {
    const id = args[0]!;
    await s.details(id); // another tenant's reservation is not found, and not confirmed
    progress.step(`confirming ${id}`);
    const out = await s.ledger.confirm(id);
    if ('error' in out) throw new CliError('NOT_HELD', out.error);
    return detailsShown(await s.details(id));
  }
  return previewOf(s, manifest!);
}

/** `wait`: until the reservation is in one of the states (or the timeout), then its details. */
async function waitFor(s: Session, id: string, wait: NonNullable<Call['wait']>): Promise<Shown> {
  try {
    await waitForState(id, wait.states, wait.timeoutMs, {
      read: async () => (await tenantReservations(s.db, s.tenantId, { ids: [id] }))[0],
      progress: s.progress,
      now: () => systemClock.now(),
      sleep: (ms) => systemClock.sleep(ms),
    });
  } catch (e) {
    throw e instanceof WaitFailure ? new CliError(e.code, e.message) : e;
  }
  return detailsShown(await s.details(id));
}

/** `preview -f FILE`: where the manifest's Reservation would be placed now (nothing is booked). */
async function previewOf(s: Session, m: Reservation): Promise<Shown> {
  const { rows } = await s.db.query<{ id: string }>('SELECT id FROM pools WHERE name = $1', [m.spec.pool]);
  if (!rows[0]) throw new ApiError('NOT_FOUND', `no pool named ${m.spec.pool}`);
  // The reconciler's own translation and schema; the uid only fills the required idempotency key.
  const input = toCreateInput({ ...m, metadata: { ...m.metadata, uid: m.metadata.uid ?? 'cli-preview' } }, s.tenantId, rows[0].id);
  const r = await s.service.preview(input);
  const who = `${m.metadata.namespace ? `${m.metadata.namespace}/` : ''}${m.metadata.name}`;
  return { result: r, render: { table: () => `Reservation ${who}: pool ${m.spec.pool} (${rows[0]!.id}), tenant ${s.tenantId}\n${renderPreview(r)}` } };
}

/** `wait`'s --for (default confirmed) and --timeout (default 10m), checked before the database is opened. */
function waitOptions(forText: string | undefined, timeoutText: string | undefined): { states: ReservationState[]; timeoutMs: number } {
  const states = parseWaitStates(forText ?? 'confirmed');
  if (!states) throw usage(`--for: states among ${WAIT_STATES.join(', ')}, not ${forText}`);
  try {
    return { states, timeoutMs: parseDuration(timeoutText ?? '10m') * 1000 };
  } catch (e) {
    if (e instanceof DurationError) throw usage(`--timeout: ${e.message}`);
    throw e;
  }
}

function pick(m: Map<string, string>, keys: readonly string[]): Map<string, string> {
  return new Map(keys.flatMap((k) => (m.has(k) ? [[k, m.get(k)!] as const] : [])));
}

/** The first Reservation of a YAML or JSON file (a multi-document file may hold other kinds too). */
async function readManifest(file: string): Promise<Reservation> {
  let text: string;
  try {
    text = await fs.readFile(file, 'utf8');
  } catch (e) {
    throw new CliError('FILE', `-f ${file}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  }
  const docs = parseAllDocuments(text);
  if (!Array.isArray(docs)) throw new CliError('INVALID_INPUT', `${file}: not YAML`);
  for (const d of docs) if (d.errors.length > 0) throw new CliError('INVALID_INPUT', `${file}: ${d.errors[0]!.message}`);
  const objs = docs.map((d) => d.toJS() as unknown);
  const found = objs.find((o) => (o as { kind?: unknown } | null)?.kind === 'Reservation');
  if (found === undefined) throw new CliError('INVALID_INPUT', `${file} holds no Reservation`);
  return parseInput(ReservationManifest, found) as unknown as Reservation;
}
