// `better-compute reservations`: a tenant's reservations (list, get), what the capacity preview says of a Reservation
// manifest, and confirming a held one; human tables or `-o json`. It talks to the database itself (embedded unless
// DATABASE_URL is set), as `migrate` does, without authorization: whoever reaches the database is trusted. Reservation
// names come from the cluster when a kubeconfig is configured (KUBECONFIG); the ledger knows only their uids.
import { systemClock } from '../clock.ts';
import fs from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { parseAllDocuments } from 'yaml';
import { z } from 'zod';
import { ApiError } from '../api/errors.ts';
import { createCapacityService } from '../api/capacity-service.ts';
import { parseInput } from '../core/schemas.ts';
import type { Config } from '../config.ts';
import { kubeConfigFrom, KubeClient } from '../kube/client.ts';
import { toCreateInput } from '../controller/reservation/reconciler.ts';
import { API_VERSION, type Reservation } from '../kube/types.ts';
import { openDatabase } from '../db/connect.ts';
import type { Db } from '../db/pool.ts';
import { tenantReservations, type ReservationRow } from '../db/reservations.ts';
import type { ReservationState } from '../db/ledger.ts';
import { DurationError, parseDuration } from '../core/duration.ts';
import { CliError, reportFailure } from './capacity.ts';
import { renderPreview } from './render.ts';
import { formatOutput, OUTPUT_HELP, outputUsageMessage, parseOutput } from './output.ts';
import { createProgress, openingStep } from './progress.ts';
import { parseWaitStates, WAIT_STATES, waitForState, WaitFailure } from './reservation-wait.ts';
import { renderReservation, renderReservationList, type ReservationDetails } from './render-reservations.ts';

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

export async function reservationsCommand(argv: string[], config: Config, io: ReservationsIo): Promise<number> {
  let values;
  let positionals: string[];
  try {
    ({ values, positionals } = parseArgs({
      args: argv,
      strict: true,
      allowPositionals: true,
      options: {
        tenant: { type: 'string' },
        output: { type: 'string', short: 'o' },
        all: { type: 'boolean' },
        filename: { type: 'string', short: 'f' },
        for: { type: 'string' },
        timeout: { type: 'string' },
        progress: { type: 'boolean' },
        help: { type: 'boolean', short: 'h' },
      },
    }));
  } catch (e) {
    io.stderr(`${(e as Error).message}\n${RESERVATIONS_USAGE}`);
    return 2;
  }
  if (values.help) {
    io.stdout(RESERVATIONS_USAGE);
    return 0;
  }
  const output = parseOutput(values.output);
  const [verb, ...args] = positionals;
  try {
    if (!output) throw usage(outputUsageMessage(values.output!));
    const tenantId = values.tenant ?? config.tenant;
    if (!tenantId) throw usage('--tenant is required (or set BETTER_COMPUTE_TENANT)');
    const arity: Record<string, number> = { list: 0, get: 1, preview: 0, confirm: 1, wait: 1 };
    if (verb === undefined || arity[verb] === undefined) throw usage(`a command: list, get ID, preview -f FILE, confirm ID or wait ID${verb ? `, not ${verb}` : ''}`);
    if (args.length !== arity[verb]) throw usage(`${verb} takes ${arity[verb] === 1 ? 'one reservation id' : 'no arguments'}`);
    if (values.all && verb !== 'list') throw usage('--all goes with list');
    const wait = verb === 'wait' ? waitOptions(values.for, values.timeout) : undefined;
    if (!wait && (values.for !== undefined || values.timeout !== undefined)) throw usage('--for and --timeout go with wait');
    if ((values.filename !== undefined) !== (verb === 'preview')) throw usage(verb === 'preview' ? 'preview needs -f FILE' : '-f goes with preview');
    // Read before opening the database: a missing file costs no database start.
    const manifest = verb === 'preview' ? await readManifest(values.filename!) : undefined;

    const progress = createProgress({ flag: values.progress, isTTY: io.stderrIsTTY, write: io.stderr });
    progress.step(io.database ? 'opening the database' : openingStep(config));
    const database = io.database ? await io.database() : await openDatabase(config, { migrate: false, poolSize: 2 });
    try {
      const { service, ledger } = await createCapacityService(database.db);
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
        const [row] = await tenantReservations(database.db, tenantId, { ids: [id] });
        if (!row) throw new ApiError('NOT_FOUND', `reservation ${id} not found for tenant ${tenantId}`);
        const view = await ledger.get(id);
        const name = (await names([row])).get(row.idempotencyKey) ?? null;
        return { ...row, name, allocations: view?.allocations ?? [], ...(view?.hold ? { hold: view.hold } : {}) };
      };

      let result: unknown;
      let render: { table: () => string; wide?: () => string };
      if (verb !== 'wait') progress.step(verb === 'list' ? 'reading the reservations' : verb === 'preview' ? 'asking the placer' : `reading reservation ${args[0]}`);
      if (verb === 'list') {
        const rows = await tenantReservations(database.db, tenantId, { all: values.all ?? false });
        const byUid = await names(rows);
        const list = rows.map((r) => ({ ...r, name: byUid.get(r.idempotencyKey) ?? null }));
        result = { tenantId, reservations: list };
        render = {
          table: () => renderReservationList(tenantId, list, values.all ?? false),
          wide: () => renderReservationList(tenantId, list, values.all ?? false, { wide: true }),
        };
      } else if (verb === 'get') {
        const r = await details(args[0]!);
        result = r;
        render = { table: () => renderReservation(r), wide: () => renderReservation(r, { wide: true }) };
      } else if (verb === 'wait') {
        const id = args[0]!;
        try {
          await waitForState(id, wait!.states, wait!.timeoutMs, {
            read: async () => (await tenantReservations(database.db, tenantId, { ids: [id] }))[0],
            progress,
            now: () => systemClock.now(),
            sleep: (ms) => systemClock.sleep(ms),
          });
        } catch (e) {
          throw e instanceof WaitFailure ? new CliError(e.code, e.message) : e;
        }
        const r = await details(id);
        result = r;
        render = { table: () => renderReservation(r), wide: () => renderReservation(r, { wide: true }) };
      } else if (verb === 'confirm') {
        const id = args[0]!;
        await details(id); // another tenant's reservation is not found, and not confirmed
        progress.step(`confirming ${id}`);
        const out = await ledger.confirm(id);
        if ('error' in out) throw new CliError('NOT_HELD', out.error);
        const r = await details(id);
        result = r;
        render = { table: () => renderReservation(r), wide: () => renderReservation(r, { wide: true }) };
      } else {
        const m = manifest!;
        const { rows } = await database.db.query<{ id: string }>('SELECT id FROM pools WHERE name = $1', [m.spec.pool]);
        if (!rows[0]) throw new ApiError('NOT_FOUND', `no pool named ${m.spec.pool}`);
        // The reconciler's own translation and schema; the uid only fills the required idempotency key.
        const input = toCreateInput({ ...m, metadata: { ...m.metadata, uid: m.metadata.uid ?? 'cli-preview' } }, tenantId, rows[0].id);
        const r = await service.preview(input);
        result = r;
        const who = `${m.metadata.namespace ? `${m.metadata.namespace}/` : ''}${m.metadata.name}`;
        render = { table: () => `Reservation ${who}: pool ${m.spec.pool} (${rows[0]!.id}), tenant ${tenantId}\n${renderPreview(r)}` };
      }
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
