import pg from 'pg';
import { SQLSTATE, sqlState } from './errors.ts';
import { HostRing, parseDbTargets, type DbTargets } from '../core/db-hosts.ts';

// timestamptz and bigint come back as numbers of milliseconds / numbers, not strings or Dates.
pg.types.setTypeParser(pg.types.builtins.INT8, (v) => Number(v));
pg.types.setTypeParser(pg.types.builtins.NUMERIC, (v) => Number(v));

export type Db = pg.Pool;

/** How long the database may take (milliseconds); see the BETTER_COMPUTE_DB_* settings in src/config.ts. */
export interface DbTimeouts {
  /** Connecting, and waiting for a free connection of the pool. */
  connectMs: number;
  /** A statement, ended by the server (0: none). Migrations lift it for their session. */
  statementMs: number;
  /** A transaction left idle, ended by the server (its locks freed). */
  idleInTransactionMs: number;
  /** An answer, given up by the client: a stalled server or network, which the server-side timeouts cannot end. */
  queryMs: number;
  /** Idle time before TCP keepalive probes start (a peer that vanished is noticed). */
  keepAliveDelayMs: number;
}

export const DEFAULT_DB_TIMEOUTS: DbTimeouts = {
  connectMs: 10_000,
  statementMs: 30_000,
  idleInTransactionMs: 60_000,
  queryMs: 40_000,
  keepAliveDelayMs: 10_000,
};

export function dbTimeoutsFrom(c: {
  dbConnectTimeoutMs: number;
  dbStatementTimeoutMs: number;
  dbIdleInTransactionTimeoutMs: number;
  dbQueryTimeoutMs: number;
  dbKeepAliveDelayMs: number;
}): DbTimeouts {
  return {
    connectMs: c.dbConnectTimeoutMs,
    statementMs: c.dbStatementTimeoutMs,
    idleInTransactionMs: c.dbIdleInTransactionTimeoutMs,
    queryMs: c.dbQueryTimeoutMs,
    keepAliveDelayMs: c.dbKeepAliveDelayMs,
  };
}

/**
 * A client class whose connections go to the ring's current host, and which refuses a server that cannot take writes
 * when the URL asks for read-write (or primary): the ring then moves on, and the pool (FailoverPool) tries the next
 * host. A standby promoted to primary is found so, with no change to the URL.
 */
function failoverClient(targets: DbTargets, ring: HostRing): typeof pg.Client {
  return class FailoverClient extends pg.Client {
    private readonly target;
    constructor(config?: string | pg.ClientConfig) {
      const target = ring.current;
      super({ ...(typeof config === 'object' ? config : {}), connectionString: targets.urlFor(target) });
      this.target = target;
    }
    // pg's overloads: a promise without a callback, the callback (the pool's way) with one.
    override connect(): Promise<pg.Client>;
    override connect(callback: ((err: Error) => void) | ((err: null, c: pg.Client) => void)): void;
    override connect(callback?: ((err: Error) => void) | ((err: null, c: pg.Client) => void)): Promise<pg.Client> | void {
      const done = this.connectToWriter().then(() => this as pg.Client);
      if (!callback) return done;
      const cb = callback as (err: Error | null, c?: pg.Client) => void;
      done.then((c) => cb(null, c), (e: Error) => cb(e));
    }
    private async connectToWriter(): Promise<void> {
      try {
        await super.connect();
      } catch (e) {
        ring.failed(this.target);
        throw e;
      }
      if (targets.sessionAttrs === 'any') return;
      const { rows } = await super.query<{ standby: boolean }>('SELECT pg_is_in_recovery() AS standby');
      if (rows[0]?.standby) {
        ring.failed(this.target);
        await this.end().catch(() => undefined);
        throw new Error(`database host ${this.target.host}:${this.target.port} is a standby (in recovery), not the primary`);
      }
    }
  };
}

type PoolCallback = (err: Error | undefined, client: pg.PoolClient | undefined, done: (release?: unknown) => void) => void;

/**
 * A pool over several hosts: a connection refused by one host (down, or a standby) is tried on the next, each host
 * at most once per connect, as libpq does; so the first connection after a failover finds the primary, wherever it
 * is in the URL's list. pg-pool's query() connects through connect(), so queries are covered too.
 */
class FailoverPool extends pg.Pool {
  constructor(
    config: pg.PoolConfig,
    private readonly hostCount: number,
  ) {
    super(config);
  }
  override connect(): Promise<pg.PoolClient>;
  override connect(callback: PoolCallback): void;
  override connect(callback?: PoolCallback): Promise<pg.PoolClient> | void {
    const done = this.connectToSomeHost();
    if (!callback) return done;
    done.then(
      (c) => callback(undefined, c, (release) => c.release(release as Error | boolean | undefined)),
      (e: Error) => callback(e, undefined, () => undefined),
    );
  }
  private async connectToSomeHost(): Promise<pg.PoolClient> {
    let last: unknown;
    for (let i = 0; i < this.hostCount; i++) {
      try {
        return await super.connect();
      } catch (e) {
        last = e;
      }
    }
    throw last;
  }
}

export function createPool(url: string, max = 10, timeouts: Partial<DbTimeouts> = {}): Db {
  const t = { ...DEFAULT_DB_TIMEOUTS, ...timeouts };
  const targets = parseDbTargets(url);
  const config: pg.PoolConfig = {
    connectionString: targets ? targets.urlFor(targets.hosts[0]!) : url,
    ...(targets ? { Client: failoverClient(targets, new HostRing(targets.hosts)) } : {}),
    max,
    connectionTimeoutMillis: t.connectMs,
    statement_timeout: t.statementMs,
    idle_in_transaction_session_timeout: t.idleInTransactionMs,
    query_timeout: t.queryMs,
    keepAlive: true,
    keepAliveInitialDelayMillis: t.keepAliveDelayMs,
  };
  const pool = targets && targets.hosts.length > 1 ? new FailoverPool(config, targets.hosts.length) : new pg.Pool(config);
  // An idle client's error (e.g. the server restarting) must not crash the process; the next query reconnects.
  pool.on('error', () => undefined);
  return pool;
}

/** pg's own client-side timeout (query_timeout): the connection is left mid-query and must not be used again. */
export function isQueryTimeout(e: unknown): boolean {
  return e instanceof Error && e.message === 'Query read timeout';
}

/** Resolves when the database answers `SELECT 1` within `timeoutMs` (waiting for a connection included), else rejects. */
export async function pingDatabase(db: Db, timeoutMs: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`the database did not answer within ${timeoutMs} ms`)), timeoutMs);
  });
  // The query's own timeout frees its connection; the race also bounds the wait for one.
  const ping = db.query({ text: 'SELECT 1', query_timeout: timeoutMs } as pg.QueryConfig);
  ping.catch(() => undefined);
  try {
    await Promise.race([ping, late]);
  } finally {
    clearTimeout(timer);
  }
}

export async function withTransaction<T>(db: Db, fn: (c: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await db.connect();
  let result: T;
  try {
    await client.query('BEGIN');
    result = await fn(client);
    await client.query('COMMIT');
  } catch (e) {
    // A connection whose answer never came (or that cannot roll back) is dropped, not handed to the next caller.
    let broken = isQueryTimeout(e);
    if (!broken) await client.query('ROLLBACK').catch(() => (broken = true));
    client.release(broken);
    throw e;
  }
  client.release();
  return result;
}

/** Runs `run` again (a few times, short random pauses) when PostgreSQL aborts it for a deadlock or a serialization conflict. */
async function retriedOnConflict<T>(run: () => Promise<T>, attempts: number): Promise<T> {
  for (let i = 1; ; i++) {
    try {
      return await run();
    } catch (e) {
      const s = sqlState(e);
      if (i >= attempts || (s !== SQLSTATE.deadlock && s !== SQLSTATE.serializationFailure)) throw e;
      await new Promise((r) => setTimeout(r, Math.random() * 10 * i));
    }
  }
}

/** One statement, its own transaction (autocommit: no BEGIN and COMMIT round trips), run again as below. */
export function withRetriedStatement<T>(db: Db, fn: (c: Db) => Promise<T>, attempts = 8): Promise<T> {
  return retriedOnConflict(() => fn(db), attempts);
}

/**
 * A transaction that PostgreSQL may abort to break a deadlock or a serialization conflict, run again until it commits
 * (a few times, with a short random pause), so that such an abort never reaches a caller.
 */
export function withRetriedTransaction<T>(db: Db, fn: (c: pg.PoolClient) => Promise<T>, attempts = 8): Promise<T> {
  return retriedOnConflict(() => withTransaction(db, fn), attempts);
}
