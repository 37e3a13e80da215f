// `better-compute controller`: every replica serves HTTP (/healthz, /readyz, /metrics, the capacity API and the
// scheduler extender under /scheduler/) and keeps informer caches warm; the replica holding the Lease
// `better-compute-controller` takes the ledger fence and runs the reconcilers and the periodic jobs (rollup fold and
// rebuild, lease expiry, resync). Losing the Lease stops the leader work at once. SIGTERM: stop leading and release
// the Lease, stop the informers, drain HTTP, close the database.
import os from 'node:os';
import express from 'express';
import { createApp } from '../api/app.ts';
import { KubernetesAuthorizer } from '../api/authz-kubernetes.ts';
import { StaticTokenAuthorizer, type Authorizer } from '../api/authz.ts';
import { CapacityService } from '../api/capacity-service.ts';
import { listen, type RunningServer } from '../api/server.ts';
import type { Config } from '../config.ts';
import { DbClock } from '../db/clock.ts';
import { openDatabase, type Database } from '../db/connect.ts';
import { Ledger } from '../db/ledger.ts';
import { startCapacityJobs, type Jobs } from '../jobs/capacity.ts';
import { ClientNodeExtenderKube } from '../extender/kube.ts';
import { stopOnSignal } from '../cli/signals.ts';
import { startPodReleaser } from '../extender/releaser.ts';
import { createExtenderRouter } from '../extender/router.ts';
import { startNamespaceGrants } from './namespace-grants.ts';
import { errorFields, type Logger } from '../log.ts';
import { registerCapacityGauges } from '../metrics/capacity.ts';
import { ledgerMetrics } from '../metrics/ledger.ts';
import { createRegistry, httpMetrics } from '../metrics/registry.ts';
import { FenceHolder, LEASE_NAME } from './fence.ts';
import { KubeClient, kubeConfigFrom } from './kube.ts';
import { LeaderElector } from './leader.ts';
import { controllerMetrics, extenderMetrics } from './metrics.ts';
import { setupControllers, type Controllers } from './setup.ts';

export interface RunningController {
  url: string;
  identity: string;
  controllers: Controllers;
  isLeader(): boolean;
  /** Graceful stop. Idempotent. */
  stop(): Promise<void>;
}

async function authorizerFor(config: Config, kc: ReturnType<typeof kubeConfigFrom>, log: Logger): Promise<Authorizer> {
  if (config.auth === 'kubernetes') return new KubernetesAuthorizer({ kubeConfig: kc });
  if (!config.tokenFile) {
    log.warn('no token file (BETTER_COMPUTE_TOKEN_FILE): every capacity API request is refused');
    return StaticTokenAuthorizer.denyAll();
  }
  return StaticTokenAuthorizer.fromFile(config.tokenFile);
}

export async function runController(config: Config, log: Logger): Promise<RunningController> {
  const identity = config.podName ?? `${os.hostname()}-${process.pid}`;
  const kc = kubeConfigFrom(config.kubeconfig);
  const kube = new KubeClient(kc, 'better-compute-controller', identity);
  const database: Database = await openDatabase(config, { migrate: true, log: (line) => log.debug('postgres', { line }) });
  let server: RunningServer | undefined;
  try {
    const registry = createRegistry();
    registerCapacityGauges(registry, database.db);
    const placement = ledgerMetrics(registry);
    const metrics = controllerMetrics(registry);
    const fence = new FenceHolder(LEASE_NAME);
    const ledger = new Ledger(database.db, { fence: fence.fence, metrics: placement });
    const clock = await DbClock.create(database.db);
    const controllers = setupControllers({
      kc,
      kube,
      db: database.db,
      ledger,
      clock,
      log,
      fence: fence.fence,
      metrics,
      tuning: {
        capacityRefreshMs: config.capacityRefreshMs,
        pendingMaxBackoffMs: config.pendingMaxBackoffMs,
        reservationWorkers: 4,
      },
      watchTimeoutSeconds: Math.max(1, Math.round(config.watchTimeoutMs / 1000)),
      watchLivenessMs: config.watchLivenessMs,
    });

    // HTTP on every replica.
    let shuttingDown = false;
    const previews = new Ledger(database.db, { metrics: placement });
    const api = createApp({
      service: new CapacityService({ db: database.db, previewer: previews, clock }),
      authorizer: await authorizerFor(config, kc, log),
      registry,
      log,
      http: httpMetrics(registry),
      async ready() {
        if (shuttingDown) throw new Error('shutting down');
        await database.db.query('SELECT 1');
        if (!controllers.ctx.informers.nodes.hasSynced) throw new Error('informers not synced yet');
      },
    });
    const root = express();
    root.disable('x-powered-by');
    // The scheduler extender on every replica, with an unfenced ledger: its binds are not leader work (the database
    // arbitrates between replicas).
    root.use(
      '/scheduler',
      createExtenderRouter({
        db: database.db,
        ledger: previews,
        clock,
        kube: new ClientNodeExtenderKube(kc),
        log,
        metrics: extenderMetrics(registry),
      }),
    );
    root.use(api);
    server = await listen(root, { host: config.httpHost, port: config.httpPort });

    // Leader work.
    let jobs: Jobs | undefined;
    let timers: NodeJS.Timeout[] = [];
    const leaderServices: { stop(): Promise<void> }[] = [];
    let leaderStarts: Promise<void> = Promise.resolve();
    const startJobs = () => {
      jobs = startCapacityJobs({
        db: database.db,
        rollupEveryMs: config.rollupEveryMs,
        foldEveryMs: config.foldEveryMs,
        log,
        afterFold: () => clock.sync(),
      });
      const every = (ms: number, what: string, fn: () => Promise<void>) => {
        let running = false;
        const t = setInterval(() => {
          if (running) return;
          running = true;
          fn()
            .catch((e: unknown) => log.warn('leader job failed', { job: what, ...errorFields(e) }))
            .finally(() => (running = false));
        }, ms);
        t.unref?.();
        timers.push(t);
      };
      every(config.expireEveryMs, 'expire-leases', async () => {
        const expired = await ledger.expireLeases();
        if (expired.length) {
          log.info('holds expired', { reservations: expired });
          controllers.wakeReservations(expired);
        }
      });
      every(config.resyncEveryMs, 'resync', async () => controllers.resync());
      // Pods that end give their atoms back; pods of ended reservations are evicted; namespaces get the labels the
      // admission policy checks (deploy/admission/).
      const started = (async () => {
        leaderServices.push(
          await startPodReleaser({ db: database.db, ledger, kube: new ClientNodeExtenderKube(kc), kubeConfig: kc, log }),
        );
        leaderServices.push(await startNamespaceGrants({ kubeConfig: kc, log }));
      })();
      started.catch((e: unknown) => log.error('leader services failed to start', errorFields(e)));
      leaderStarts = started.catch(() => undefined);
    };
    const stopJobs = async () => {
      for (const t of timers) clearInterval(t);
      timers = [];
      await jobs?.stop();
      jobs = undefined;
      await leaderStarts;
      for (const s of leaderServices.splice(0)) await s.stop();
    };

    const elector = new LeaderElector({
      client: kube,
      namespace: config.controllerNamespace,
      name: LEASE_NAME,
      identity,
      leaseDurationMs: config.leaseDurationMs,
      renewDeadlineMs: config.renewDeadlineMs,
      retryPeriodMs: config.retryPeriodMs,
      log,
      async onStartedLeading() {
        const epoch = await fence.take(database.db, identity);
        metrics.setLeader(true, epoch);
        log.info('took the ledger fence', { epoch, identity });
        ledger.invalidate();
        await clock.sync();
        await controllers.startLeading();
        startJobs();
      },
      async onStoppedLeading() {
        fence.revoke();
        metrics.setLeader(false, -1);
        await controllers.stopLeading();
        await stopJobs();
      },
    });

    controllers.startInformers();
    elector.start();
    log.info('controller started', {
      url: server.url,
      identity,
      namespace: config.controllerNamespace,
      lease: LEASE_NAME,
      database: database.embedded ? 'embedded' : 'external',
    });

    let stopping: Promise<void> | undefined;
    const srv = server;
    return {
      url: srv.url,
      identity,
      controllers,
      isLeader: () => elector.isLeader,
      stop() {
        stopping ??= (async () => {
          shuttingDown = true;
          log.info('shutting down');
          await elector.stop();
          await controllers.stop();
          await srv.close(5_000);
          await database.close();
          log.info('stopped');
        })();
        return stopping;
      },
    };
  } catch (e) {
    await server?.close(0);
    await database.close();
    throw e;
  }
}

/** The CLI command: runs until SIGTERM or SIGINT. */
export async function controllerCommand(config: Config, log: Logger): Promise<number> {
  const running = await runController(config, log);
  return stopOnSignal(() => running.stop(), log);
}
