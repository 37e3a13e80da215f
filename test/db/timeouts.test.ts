// Database timeouts: a stalled database (a TCP proxy in front of the test PostgreSQL that stops forwarding) fails
// queries and new connections within the configured time instead of hanging, readiness and then liveness say so, and
// everything works again once it answers. The server-side timeouts are set on every session, and migrations, which
// may legitimately run long, lift them for their own.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApp } from '../../src/api/app.ts';
import { StaticTokenAuthorizer } from '../../src/api/authz.ts';
import type { CapacityService } from '../../src/api/capacity-service.ts';
import { listen, type RunningServer } from '../../src/http/server.ts';
import { healthChecks } from '../../src/controller/listeners.ts';
import { DbHealth } from '../../src/db/health.ts';
import { migrate } from '../../src/db/migrate.ts';
import { createPool, type Db } from '../../src/db/pool.ts';
import { silentLogger } from '../../src/log.ts';
import { createTestDatabase, useTestDatabase } from '../support/db.ts';
import { request } from '../support/http.ts';
import { startTcpProxy, type TcpProxy } from '../support/tcp-proxy.ts';

const ctx = useTestDatabase();
let proxy: TcpProxy;
const pools: Db[] = [];
let server: RunningServer | undefined;

beforeAll(async () => {
  const u = new URL(ctx.url);
  proxy = await startTcpProxy({ host: u.hostname, port: Number(u.port) });
});

afterAll(async () => {
  proxy.resume();
  await server?.close(0);
  await Promise.all(pools.map((p) => p.end()));
  await proxy.close();
});

function pool(url: string, ...args: Parameters<typeof createPool> extends [string, ...infer R] ? R : never): Db {
  const p = createPool(url, ...args);
  pools.push(p);
  return p;
}

async function timed<T>(p: Promise<T>): Promise<{ ms: number; error: unknown }> {
  const started = performance.now();
  try {
    await p;
    return { ms: performance.now() - started, error: undefined };
  } catch (e) {
    return { ms: performance.now() - started, error: e };
  }
}

describe('a stalled database', () => {
  it('fails queries and connects within the configured time, is not ready then not live, and recovers', async () => {
    const url = proxy.via(ctx.url);
    const db = pool(url, 4, { connectMs: 1_000, queryMs: 1_500 });
    const health = new DbHealth(db, { pingTimeoutMs: 500, pingEveryMs: 60_000, log: silentLogger });
    let synced = true;
    const checks = healthChecks({
      db: health,
      informers: [{ name: 'nodes', get hasSynced() { return synced; } }],
      dbLivenessMs: 1_000,
      shuttingDown: () => false,
    });
    const app = createApp({
      service: undefined as unknown as CapacityService,
      authorizer: StaticTokenAuthorizer.denyAll(),
      log: silentLogger,
      ready: checks.ready,
      live: checks.live,
    });
    server = await listen(app, { host: '127.0.0.1', port: 0 });
    const probe = async (path: string) => (await request(`${server!.url}${path}`)).status;

    await db.query('SELECT 1');
    expect(await probe('/readyz')).toBe(200);
    expect(await probe('/healthz')).toBe(200);
    synced = false;
    expect(await probe('/readyz')).toBe(503);
    synced = true;

    proxy.stall();
    // A query on an open connection: the client gives up after queryMs.
    const onOpen = await timed(db.query('SELECT 1'));
    expect(String(onOpen.error)).toMatch(/timeout/i);
    expect(onOpen.ms).toBeLessThan(10_000);
    // A new connection: given up after connectMs.
    const fresh = pool(url, 1, { connectMs: 1_000 });
    const onConnect = await timed(fresh.query('SELECT 1'));
    expect(String(onConnect.error)).toMatch(/timeout/i);
    expect(onConnect.ms).toBeLessThan(10_000);
    // Not ready at once; not live either, the database having been silent for longer than dbLivenessMs.
    expect(await probe('/readyz')).toBe(503);
    expect(await probe('/healthz')).toBe(503);
    expect(health.unreachableForMs()).toBeGreaterThan(1_000);

    proxy.resume();
    expect((await db.query<{ n: number }>('SELECT 2 AS n')).rows).toEqual([{ n: 2 }]);
    expect(await probe('/readyz')).toBe(200);
    expect(await probe('/healthz')).toBe(200);
    expect(health.unreachableForMs()).toBe(0);
  });
});

describe('server-side timeouts', () => {
  it('every session has the statement and idle-in-transaction timeouts; a long statement is cancelled', async () => {
    const db = pool(ctx.url, 1, { statementMs: 300, idleInTransactionMs: 4_000 });
    const { rows } = await db.query<{ s: string; i: string }>(
      `SELECT current_setting('statement_timeout') AS s, current_setting('idle_in_transaction_session_timeout') AS i`,
    );
    expect(rows).toEqual([{ s: '300ms', i: '4s' }]);
    await expect(db.query('SELECT pg_sleep(2)')).rejects.toMatchObject({ code: '57014' });
  });

  it('a migration longer than the statement and query timeouts runs, and the session keeps its timeout after', async () => {
    const fresh = await createTestDatabase(1);
    try {
      await fresh.db.query('DROP SCHEMA public CASCADE; CREATE SCHEMA public');
      const db = pool(fresh.url, 1, { statementMs: 300, queryMs: 600 });
      const client = await db.connect();
      try {
        const slow = { version: 1, name: '0001_slow', sql: 'SELECT pg_sleep(1); CREATE TABLE slow_done (x int)' };
        const applied = await migrate(client, { migrations: [slow], functions: [] });
        expect(applied).toEqual([1]);
        expect((await client.query(`SELECT current_setting('statement_timeout') AS s`)).rows).toEqual([{ s: '300ms' }]);
      } finally {
        client.release();
      }
      expect((await db.query(`SELECT to_regclass('slow_done') IS NOT NULL AS ok`)).rows).toEqual([{ ok: true }]);
    } finally {
      await fresh.drop();
    }
  });
});
