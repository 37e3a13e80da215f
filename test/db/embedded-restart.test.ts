// The embedded PostgreSQL dies (SIGKILL, as the OOM killer would do it): the supervisor starts it again on the same
// data directory, and the pool that served before serves again, with the committed rows intact.
import fs from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startEmbedded, type EmbeddedServer } from '../../src/db/embedded.ts';
import { createPool, type Db } from '../../src/db/pool.ts';
import { silentLogger } from '../../src/log.ts';
import { freePort } from '../../src/db/embedded.ts';
import { eventually } from '../support/eventually.ts';

let dir: string;
let server: EmbeddedServer | undefined;
let db: Db | undefined;

beforeAll(async () => {
  dir = await fs.mkdtemp(path.join(os.tmpdir(), 'bc-embedded-restart-'));
});

afterAll(async () => {
  await db?.end();
  await server?.stop();
  await fs.rm(dir, { recursive: true, force: true });
});

async function postmasterPid(dataDir: string): Promise<number> {
  return Number((await fs.readFile(path.join(dataDir, 'postmaster.pid'), 'utf8')).split('\n')[0]);
}

it('a killed embedded server is restarted with its data, and the same pool reads the row again', async () => {
  const dataDir = path.join(dir, 'data');
  // Below the kernel's ephemeral range (freePort): a port in it was taken by another process's connection in CI, twice,
  // and the server's first start failed.
  const port = await freePort();
  // Not `fast`: without synchronous commits a crash may lose the last commits, as documented.
  server = await startEmbedded({ dataDir, port, logger: silentLogger });
  db = createPool(server.url, 2, { connectMs: 2_000, queryMs: 5_000 });
  await db.query('CREATE TABLE kept (v text)');
  await db.query(`INSERT INTO kept VALUES ('before the crash')`);

  const pid = await postmasterPid(dataDir);
  process.kill(pid, 'SIGKILL');

  // A backend of the killed server may still answer for a moment: read through a new server only.
  const pool = db;
  const { rows } = await eventually(async () => {
    if ((await postmasterPid(dataDir)) === pid) throw new Error('not restarted yet');
    return pool.query<{ v: string }>('SELECT v FROM kept');
  }, 60_000);
  expect(rows).toEqual([{ v: 'before the crash' }]);
  expect(server.restarts).toBe(1);
});

it('free ports lie below the kernel\'s ephemeral range, and a server that cannot take its port says why', async () => {
  const low = Number((await fs.readFile('/proc/sys/net/ipv4/ip_local_port_range', 'utf8')).trim().split(/\s+/)[0]);
  const ports = await Promise.all(Array.from({ length: 20 }, () => freePort()));
  for (const p of ports) expect(p).toBeGreaterThanOrEqual(20_000);
  for (const p of ports) expect(p).toBeLessThan(Math.min(30_000, low));
  const taken = net.createServer();
  await new Promise<void>((r) => taken.listen(ports[0], '127.0.0.1', r));
  try {
    await expect(startEmbedded({ dataDir: path.join(dir, 'taken'), port: ports[0]!, logger: silentLogger })).rejects.toThrow(
      new RegExp(`embedded PostgreSQL on 127\\.0\\.0\\.1:${ports[0]} exited while starting: [\\s\\S]*Address already in use`),
    );
  } finally {
    await new Promise((r) => taken.close(r));
  }
});
