// A test environment for the extender and the agent on the local cluster: an embedded PostgreSQL with the ledger,
// the extender (express on 127.0.0.1) and the pod releaser in this process, kube-scheduler restarted with the
// extender configured, and the agent in this process serving the real kubelet with simulated GPUs.
import fs from 'node:fs';
import { createServer, type Server } from 'node:http';
import os from 'node:os';
import path from 'node:path';
import express from 'express';
import YAML from 'yaml';
import { Agent } from '../../src/agent/agent.ts';
import { fileSource, simulatedSpec } from '../../src/agent/discovery.ts';
import { inProcessBackend } from '../../src/agentapi/state.ts';
import { DbClock } from '../../src/db/clock.ts';
import { startEmbedded, type EmbeddedServer } from '../../src/db/embedded.ts';
import { applyInventory, upsertNode, upsertPool } from '../../src/db/inventory.ts';
import { Ledger } from '../../src/db/ledger.ts';
import { migrate } from '../../src/db/migrate.ts';
import { createPool, type Db } from '../../src/db/pool.ts';
import { ClientNodeExtenderKube, loadKubeConfig } from '../../src/extender/kube.ts';
import { startPodReleaser, type Releaser } from '../../src/extender/releaser.ts';
import { reservationResourceName } from '../../src/extender/resources.ts';
import { createExtenderRouter } from '../../src/extender/router.ts';
import { ExtenderService } from '../../src/extender/service.ts';
import { createLogger, type Logger } from '../../src/log.ts';
import { apply, clusterInfo, defaultSchedulerConfig, kubectl, kubectlJson, restartScheduler, waitFor, type Node } from './harness.ts';

export interface ExtenderEnv {
  db: Db;
  ledger: Ledger;
  clock: DbClock;
  poolId: string;
  node: string;
  agent: Agent;
  service: ExtenderService;
  releaser: Releaser;
  url: string;
  /** Books a reservation in the ledger (the agent reads it from there, as through the agent API). */
  reserve(namespace: string, name: string, gpus: number, opts?: { tenant?: string; seconds?: number }): Promise<TestReservation>;
  waitAdvertised(resource: string, count: number): Promise<void>;
  stop(): Promise<void>;
}

export interface TestReservation {
  id: string;
  name: string;
  namespace: string;
  resource: string;
  atoms: string[];
}

/** The KubeSchedulerConfiguration of deploy/scheduler/, pointed at `url`. */
export function schedulerConfigWithExtender(url: string): string {
  const base = YAML.parse(defaultSchedulerConfig()) as Record<string, unknown>;
  const deploy = YAML.parse(fs.readFileSync(path.join(import.meta.dirname, '../../deploy/scheduler/scheduler-config.yaml'), 'utf8')) as {
    extenders: Record<string, unknown>[];
    profiles: { pluginConfig: unknown[] }[];
  };
  const extenders = deploy.extenders.map((e) => ({ ...e, urlPrefix: url, enableHTTPS: false, tlsConfig: undefined }));
  const profiles = (base.profiles as Record<string, unknown>[]).map((p) => ({ ...p, pluginConfig: deploy.profiles[0]!.pluginConfig }));
  return YAML.stringify({ ...base, extenders, profiles });
}

export async function startExtenderEnv(opts: { gpus?: number; log?: Logger; quota?: Record<string, Record<string, number>> } = {}): Promise<ExtenderEnv> {
  const c = clusterInfo();
  const log = opts.log ?? createLogger({ level: (process.env.BC_TEST_LOG as 'debug' | undefined) ?? 'warn' });
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'bc-extender-'));
  fs.chmodSync(tmp, 0o755);
  const port = 20000 + Math.floor(Math.random() * 20000);
  const pg: EmbeddedServer = await startEmbedded({ dataDir: path.join(tmp, 'pg'), port, fast: true });
  const db = createPool(pg.url, 20);
  const client = await db.connect();
  await migrate(client);
  client.release();
  const clock = await DbClock.create(db);
  const ledger = new Ledger(db);

  // CRDs (from crds/) so that Reservations and NodeDevices exist.
  const crdDir = path.join(import.meta.dirname, '../../crds');
  for (const f of ['reservations.yaml', 'nodedevices.yaml']) await apply(fs.readFileSync(path.join(crdDir, f), 'utf8'));
  await kubectl(['wait', '--for=condition=Established', 'crd/reservations.bettercompute.io', '--timeout=60s']);

  const node = c.nodeName;
  const offerings = Object.entries(opts.quota ?? {}).map(([tenantId, quota]) => ({ tenantId, quota }));
  const poolId = await upsertPool(db, { name: `e2e-${Date.now()}`, ownerTenant: 'team-a', gpuModel: 'H100', offerings });
  const spec = simulatedSpec(node, opts.gpus ?? 8);
  const devicesFile = path.join(tmp, 'devices.json');
  fs.writeFileSync(devicesFile, JSON.stringify(spec));
  await upsertNode(db, { id: node, poolId });
  await applyInventory(db, node, { gpus: spec.gpus, scalars: spec.scalars });

  const kc = loadKubeConfig(c.kubeconfig);
  const kube = new ClientNodeExtenderKube(kc);
  const service = new ExtenderService({ db, ledger, clock, kube, log, snapshotTtlMs: 200 });
  const app = express();
  app.use('/scheduler', createExtenderRouter({ service }));
  const server: Server = createServer(app);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const addr = server.address();
  const url = `http://127.0.0.1:${typeof addr === 'object' && addr ? addr.port : 0}/scheduler`;
  const releaser = await startPodReleaser({ db, ledger, kube, kubeConfig: kc, log, evictionGraceSeconds: 1, sweepEveryMs: 1000 });

  // The agent reads the node's state from this test's ledger, by the same function the controller's agent API serves.
  const agent = new Agent({
    nodeName: node,
    devicePluginDir: c.devicePluginDir,
    podResourcesSocket: c.podResourcesSocket,
    source: fileSource(devicesFile),
    backend: inProcessBackend(db, clock, node),
    log,
    kubeConfig: kc,
    reconcileEveryMs: 500,
    discoverEveryMs: 5000,
  });
  await agent.start();
  await restartScheduler(schedulerConfigWithExtender(url));

  const waitAdvertised = async (resource: string, count: number) => {
    await waitFor(
      `${node} advertising ${count} ${resource}`,
      async () => Number((await kubectlJson<Node>(['get', 'node', node])).status?.allocatable?.[resource] ?? 0) === count,
      { timeoutMs: 60_000, intervalMs: 500 },
    );
  };

  return {
    db,
    ledger,
    clock,
    poolId,
    node,
    agent,
    service,
    releaser,
    url,
    waitAdvertised,
    async reserve(namespace, name, gpus, o = {}) {
      const out = await ledger.reserve(
        {
          tenantId: o.tenant ?? namespace,
          poolId,
          devices: [{ class: 'gpu', count: gpus }],
          duration: o.seconds ?? 3600,
          binding: 'hold',
          leaseSeconds: 3600,
          idempotencyKey: `${namespace}/${name}`,
        },
        clock.now(),
      );
      if (!out.ok) throw new Error(`reserve failed: ${out.code} ${out.message}`);
      const r = out.reservation;
      const resource = reservationResourceName(r.id);
      const atoms = r.allocations.flatMap((a) => a.atoms).sort();
      await agent.reconcile();
      return { id: r.id, name, namespace, resource, atoms };
    },
    async stop() {
      await restartScheduler(defaultSchedulerConfig()).catch(() => undefined);
      await agent.stop();
      await releaser.stop();
      await new Promise((r) => server.close(r));
      server.closeAllConnections?.();
      await db.end();
      await pg.stop();
      fs.rmSync(tmp, { recursive: true, force: true });
    },
  };
}
