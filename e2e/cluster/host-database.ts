// A PostgreSQL on this host for an installed product (deploy/overlays/external), as a platform team's own database
// would be: a real embedded server on loopback, reached by pods through a forwarder on the pod bridge's gateway
// address. The tests read the ledger through `db` (read-only checks: they reach inside only to look).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startEmbedded } from '../../src/db/embedded.ts';
import { createPool, type Db } from '../../src/db/pool.ts';
import { TcpProxy } from '../../test/support/tcp-proxy.ts';
import { clusterInfo } from './harness.ts';

export interface HostDatabase {
  /** The URL the installed controller uses (through the gateway). */
  podUrl: string;
  /** A pool for the test's own queries (loopback). */
  db: Db;
  stop(): Promise<void>;
}

export async function startHostDatabase(): Promise<HostDatabase> {
  const gateway = clusterInfo().podGateway;
  if (!gateway) throw new Error('the cluster has no pod gateway address (an external cluster): give the product a database it can reach');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bc-hostdb-'));
  fs.chmodSync(dir, 0o755);
  const server = await startEmbedded({ dataDir: path.join(dir, 'pg'), fast: true });
  const port = Number(new URL(server.url).port);
  const forwarder = new TcpProxy(() => [{ host: '127.0.0.1', port }]);
  await forwarder.listen(gateway);
  const url = new URL(server.url);
  url.hostname = gateway;
  url.port = String(forwarder.port);
  const db = createPool(server.url, 4);
  return {
    podUrl: url.toString(),
    db,
    async stop() {
      await db.end();
      await forwarder.close();
      await server.stop();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}
