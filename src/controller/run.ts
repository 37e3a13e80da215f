// `better-compute controller`: every replica serves its four listeners (listeners.ts: the capacity API with health,
// the scheduler extender on loopback, /metrics over HTTPS, the webhooks over HTTPS with the routers the caller mounts)
// and keeps informer caches warm; the replica holding the Lease
// `better-compute-controller` takes the ledger fence and runs the reconcilers and the periodic jobs (rollup fold and
// rebuild, lease expiry, resync, drift reconcile, usage windows, the Kueue AdmissionCheck once Kueue is installed). Losing the Lease stops the leader work at once. Health: /readyz
// while the informers are synced and the database answers; /healthz until the database has been silent for
// BETTER_COMPUTE_DB_LIVENESS; a leader whose database is silent for a renew deadline gives the Lease up. SIGTERM: stop
// leading and release the Lease, stop the informers, drain HTTP, close the database.
import os from 'node:os';
import type { KubeConfig } from '@kubernetes/client-node';
import { createApp } from '../api/app.ts';
import { AccessReviewer, KubernetesAuthorizer, tenantNamespaces, TokenReviewer } from '../api/authz-kubernetes.ts';
import { StaticTokenAuthorizer, type Authorizer } from '../api/authz.ts';
import { CapacityService } from '../api/capacity-service.ts';
import type { Config } from '../config.ts';
import { DbClock } from '../db/clock.ts';
import { openDatabase, type Database } from '../db/connect.ts';
import { DbHealth } from '../db/health.ts';
import { Ledger } from '../db/ledger.ts';
import { repairPass } from '../db/repair.ts';
import { startCapacityJobs, type Jobs } from '../jobs/capacity.ts';
import { ClientNodeExtenderKube } from '../extender/kube.ts';
import { stopOnSignal } from '../signals.ts';
import { preemptionPass } from './preemption.ts';
import { startPodReleaser } from './releaser.ts';
import { createExtenderListener } from '../extender/listener.ts';
import { StatePreviewer } from '../extender/preview.ts';
import { setScavenges } from '../scavenge.ts';
import { ExtenderStateSync } from '../extender/state-sync.ts';
import { errorFields, type Logger } from '../log.ts';
import { registerCapacityGauges, registerDomainGauges } from '../metrics/capacity.ts';
import { registerQuotaGauges } from '../metrics/quota.ts';
import { ledgerMetrics } from '../metrics/ledger.ts';
import { createRegistry, httpMetrics } from '../metrics/registry.ts';
import { serviceSans } from './certs.ts';
import { FenceHolder, LEASE_NAME } from './fence.ts';
import { createWebhookApp, healthChecks, startListeners, type ControllerListeners, type WebhookMount } from './listeners.ts';
import { createMetricsApp } from './metrics-endpoint.ts';
import { ClientNodeTlsKube, FileTlsSource, SecretTlsSource, type TlsSource } from './tls.ts';
import { KubeClient, kubeConfigFrom } from '../kube/client.ts';
import { LeaderElector } from './leader.ts';
import { DRIFT_SERIES } from './drift-plan.ts';
import { startDriftReconcile } from './drift.ts';
import { controllerMetrics, driftMetrics, extenderMetrics, usageMetrics } from './metrics.ts';
import { startUsageWindows } from './usage.ts';
import { startKueueChecks } from './kueue/start.ts';
import { productWebhookRouters } from './webhooks.ts';
import { setupControllers, type Controllers } from './setup.ts';
import type { ControllerServices } from './services.ts';
export type { ControllerServices } from './services.ts';

export type { WebhookMount } from './listeners.ts';

export interface RunningController {
  /** The capacity API and health (HOST:PORT). */
  url: string;
  /** The scheduler extender's prefix: `${extenderUrl}/scheduler/filter` etc. */
  extenderUrl: string;
  /** HTTPS: GET `${metricsUrl}/metrics` with a bearer token allowed to get the non-resource URL /metrics. */
  metricsUrl: string;
  /** HTTPS: the webhook listener (the mounted routers at their paths). */
  webhookUrl: string;
  /** The CA bundle (PEM) clients of the HTTPS listeners trust, when known (always with the Secret). */
  caBundle(): string | undefined;
  /** Re-reads the TLS material now (the poll does it every BETTER_COMPUTE_TLS_RELOAD_EVERY). */
  reloadTls(): Promise<void>;
  identity: string;
  controllers: Controllers;
  isLeader(): boolean;
  /** Graceful stop. Idempotent. */
  stop(): Promise<void>;
}

async function authorizerFor(config: Config, kc: ReturnType<typeof kubeConfigFrom>, log: Logger, controllers: Controllers): Promise<Authorizer> {
  if (config.auth === 'kubernetes') {
    // A tenant's namespaces from the namespace informer's cache (tenants by label, ADR 0005).
    return new KubernetesAuthorizer({ kubeConfig: kc, namespacesOfTenant: (t) => tenantNamespaces(t, controllers.ctx.informers.namespaces.list()) });
  }
  if (!config.tokenFile) {
    log.warn('no token file (BETTER_COMPUTE_TOKEN_FILE): every capacity API request is refused');
    return StaticTokenAuthorizer.denyAll();
  }
  return StaticTokenAuthorizer.fromFile(config.tokenFile);
}

/** What routers mounted on the webhook listener may use. */
export interface RunControllerOptions {
  /** Default: productWebhookRouters (the agents' API and the pod admission webhook). Routers for the webhook listener (WEBHOOK_PORT, HTTPS), e.g. [{ path: '/admission', router }, { path: '/agent/v1', router }]. */
  webhookRouters?: (services: ControllerServices) => WebhookMount[] | Promise<WebhookMount[]>;
}

function tlsSourceFor(config: Config, kc: KubeConfig, log: Logger, isLeader: () => boolean): TlsSource {
  if (config.tlsCertFile && config.tlsKeyFile) {
    return new FileTlsSource(
      { cert: config.tlsCertFile, key: config.tlsKeyFile, ...(config.tlsCaFile ? { ca: config.tlsCaFile } : {}) },
      log,
      config.tlsReloadEveryMs,
    );
  }
  return new SecretTlsSource({
    kube: new ClientNodeTlsKube(kc),
    namespace: config.controllerNamespace,
    secretName: config.tlsSecretName,
    sans: [...serviceSans(config.controllerNamespace), ...config.tlsExtraSans],
    isLeader,
    log,
    reloadEveryMs: config.tlsReloadEveryMs,
    webhookConfiguration: config.webhookConfigurationName,
  });
}

export async function runController(config: Config, log: Logger, opts: RunControllerOptions = {}): Promise<RunningController> {
  const identity = config.podName ?? `${os.hostname()}-${process.pid}`;
  const kc = kubeConfigFrom(config.kubeconfig, config.kubeCallTimeoutMs);
  const kube = new KubeClient(kc, 'better-compute-controller', identity);
  const database: Database = await openDatabase(config, { migrate: true, log: (line) => log.debug('postgres', { line }), logger: log });
  const dbHealth = new DbHealth(database.db, { pingTimeoutMs: config.dbPingTimeoutMs, pingEveryMs: config.dbPingEveryMs, log });
  let listeners: ControllerListeners | undefined;
  let tls: TlsSource | undefined;
  const mounts: WebhookMount[] = [];
  let elector: LeaderElector | undefined;
  let extenderState: ExtenderStateSync | undefined;
  const isLeader = () => elector?.isLeader ?? false;
  try {
    const registry = createRegistry();
    registerCapacityGauges(registry, database.db);
    registerDomainGauges(registry, database.db);
    registerQuotaGauges(registry, database.db);
    const placement = ledgerMetrics(registry);
    const metrics = controllerMetrics(registry);
    const drift = driftMetrics(registry, DRIFT_SERIES);
    const usage = usageMetrics(registry, database.db);
    const fence = new FenceHolder(LEASE_NAME);
    const spotNoticeSeconds = config.spotNoticeMs / 1000;
    const ledger = new Ledger(database.db, { fence: fence.fence, metrics: placement, spotNoticeSeconds });
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
        recurrenceHorizonMs: config.recurrenceHorizonMs,
      },
      watchTimeoutSeconds: Math.max(1, Math.round(config.watchTimeoutMs / 1000)),
      watchLivenessMs: config.watchLivenessMs,
    });

    // The listeners, on every replica.
    let shuttingDown = false;
    const previews = new Ledger(database.db, { metrics: placement, spotNoticeSeconds });
    // The ledger in memory (ADR 0010): the extender's filter and prioritize, and capacity.preview, answer from it.
    extenderState = new ExtenderStateSync({
      db: database.db,
      log,
      resyncEveryMs: config.extenderResyncMs,
      maxStalenessMs: config.extenderMaxStalenessMs,
      callTimeoutMs: config.dbPingTimeoutMs,
    });
    const memory = extenderState;
    const health = healthChecks({
      db: dbHealth,
      informers: Object.values(controllers.ctx.informers),
      dbLivenessMs: config.dbLivenessMs,
      shuttingDown: () => shuttingDown,
    });
    const api = createApp({
      service: new CapacityService({ db: database.db, previewer: new StatePreviewer(memory, previews, { spotNoticeSeconds }), clock }),
      authorizer: await authorizerFor(config, kc, log, controllers),
      log,
      http: httpMetrics(registry),
      ready: health.ready,
      live: health.live,
    });
    // The scheduler extender on every replica, with an unfenced ledger: its binds are not leader work (the database
    // arbitrates between replicas). Filter and prioritize answer from the ledger in memory (ADR 0010).
    const extender = createExtenderListener({
      db: database.db,
      ledger: previews,
      clock,
      kube: new ClientNodeExtenderKube(kc),
      log,
      metrics: extenderMetrics(registry),
      memory,
      filterNodes: config.extenderFilterNodes,
      bestNodeOnly: config.extenderBestNodeOnly,
    });
    const tokens = new TokenReviewer({ kubeConfig: kc });
    const access = new AccessReviewer({ kubeConfig: kc });
    const metricsApp = createMetricsApp({
      registry,
      authenticate: (t) => tokens.authenticate(t),
      allowed: (p, a) => access.allowed(p, a),
      log,
    });
    mounts.push(
      ...((await (opts.webhookRouters ?? productWebhookRouters)({
        config,
        db: database.db,
        ledger: previews,
        clock,
        kc,
        kube,
        log,
        registry,
        tokens,
        access,
        isLeader,
        informers: controllers.ctx.informers,
      })) ?? []),
    );
    tls = tlsSourceFor(config, kc, log, isLeader);
    let current = await tls.start((next) => {
      current = next;
      listeners?.setTls(next);
    });
    listeners = await startListeners({
      addresses: config,
      api,
      extender,
      metrics: metricsApp,
      webhook: createWebhookApp(mounts, log),
      tls: current,
    });

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
        await controllers.wakeHeldNoMore();
      });
      // Spot preemption: notices delivered to the victims' pods, the victims ended at the deadline (ADR 0017); their pods
      // were stopped ahead of it by the releaser's stopper.
      const preemptionKube = new ClientNodeExtenderKube(kc);
      every(config.expireEveryMs, 'spot-preemption', async () => {
        const pass = await preemptionPass({ ledger, kube: preemptionKube, log, wake: (ids) => controllers.wakeReservations(ids) });
        // At the deadline the victims' bookings ended and the regular one's began by themselves: only a rebuild counts
        // that, so the Pools' capacity shows it now rather than at the next periodic rebuild.
        if (pass.ended.length) await jobs?.rebuildNow();
      });
      every(config.resyncEveryMs, 'resync', async () => controllers.resync());
      // BookingRepair: bookings on atoms out of service re-placed, Degraded when short, retried each pass (ADR 0016).
      every(config.repairEveryMs, 'repair', async () => {
        const outcomes = await repairPass(database.db, { graceSeconds: config.repairGraceMs / 1000, fence: fence.fence });
        if (outcomes.length === 0) return;
        log.info('booking repair', { outcomes });
        // A lost race changed nothing: the next pass replans it.
        const changed = outcomes.filter((o) => o.verdict !== 'contended').map((o) => o.reservationId);
        if (changed.length === 0) return;
        ledger.invalidate();
        controllers.wakeReservations(changed);
      });
      // Hourly usage windows: at once (backfilling the hours no leader computed), then every usageEvery.
      leaderServices.push(startUsageWindows({ db: database.db, fence: fence.fence, log, metrics: usage, everyMs: config.usageEveryMs }));
      // The Kueue AdmissionCheck bettercompute.io/reservation, once Kueue is installed (docs/kueue.md, ADR 0041).
      leaderServices.push(
        startKueueChecks({
          kc,
          kube,
          db: database.db,
          fence: fence.fence,
          log,
          reservations: controllers.ctx.informers.reservations,
          namespaces: controllers.ctx.informers.namespaces,
          nowMs: () => clock.now(),
          watchTimeoutSeconds: Math.max(1, Math.round(config.watchTimeoutMs / 1000)),
          watchLivenessMs: config.watchLivenessMs,
        }),
      );
      // Pods that end give their atoms back; pods of ended reservations are evicted. Then deletions no leader saw
      // (the informers have synced: startLeading waited for them), now and every driftEvery, the releaser's orphan
      // sweep among them.
      const started = (async () => {
        const releaser = await startPodReleaser({
          db: database.db,
          ledger,
          kube: new ClientNodeExtenderKube(kc),
          kubeConfig: kc,
          log,
          orphanGraceMs: config.orphanGraceMs,
        });
        leaderServices.push(releaser);
        leaderServices.push(
          startDriftReconcile({
            db: database.db,
            ledger,
            fence: fence.fence,
            log,
            metrics: drift,
            everyMs: config.driftEveryMs,
            cluster: () => controllers.clusterView(),
            setReservationFinalizers: (ns, name, finalizers, rv) => kube.setReservationFinalizers(ns, name, finalizers, rv),
            onFixed: (fix) => controllers.afterDriftFix(fix),
            sweepPods: async () => (await releaser.sweepOrphans()).released.length,
          }),
        );
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

    elector = new LeaderElector({
      client: kube,
      namespace: config.controllerNamespace,
      name: LEASE_NAME,
      identity,
      leaseDurationMs: config.leaseDurationMs,
      renewDeadlineMs: config.renewDeadlineMs,
      retryPeriodMs: config.retryPeriodMs,
      log,
      // A leader whose database has not answered for a renew deadline cannot do leader work: another replica may.
      blocker() {
        const ms = dbHealth.unreachableForMs();
        return ms > config.renewDeadlineMs ? `the database has not answered for ${Math.round(ms / 1000)} s: ${dbHealth.lastError}` : undefined;
      },
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

    dbHealth.start();
    memory.start();
    controllers.startInformers();
    elector.start();
    const l = listeners;
    const tlsSource = tls;
    const e = elector;
    log.info('controller started', {
      url: l.api.url,
      extenderUrl: l.extender.url,
      metricsUrl: l.metrics.url,
      webhookUrl: l.webhook.url,
      webhooks: mounts.map((m) => m.path),
      identity,
      namespace: config.controllerNamespace,
      lease: LEASE_NAME,
      database: database.embedded ? 'embedded' : 'external',
    });

    let stopping: Promise<void> | undefined;
    return {
      url: l.api.url,
      extenderUrl: l.extender.url,
      metricsUrl: l.metrics.url,
      webhookUrl: l.webhook.url,
      caBundle: () => current.ca,
      reloadTls: () => tlsSource.poll(),
      identity,
      controllers,
      isLeader: () => e.isLeader,
      stop() {
        stopping ??= (async () => {
          shuttingDown = true;
          log.info('shutting down');
          await e.stop();
          await controllers.stop();
          tlsSource.stop();
          await l.close(5_000);
          await memory.stop();
          for (const m of mounts) await m.stop?.().catch((err: unknown) => log.warn('webhook router stop failed', { path: m.path, ...errorFields(err) }));
          dbHealth.stop();
          await database.close();
          log.info('stopped');
        })();
        return stopping;
      },
    };
  } catch (e) {
    dbHealth.stop();
    await extenderState?.stop();
    tls?.stop();
    await listeners?.close(0);
    for (const m of mounts) await m.stop?.().catch(() => undefined);
    await database.close();
    throw e;
  }
}

/** The CLI command: runs until SIGTERM or SIGINT. */
export async function controllerCommand(config: Config, log: Logger, opts: RunControllerOptions = {}): Promise<number> {
  // The process serves the scheduler extender: its young collections on the event loop's thread by default (ADR 0029).
  setScavenges(config.scavenges);
  const running = await runController(config, log, opts);
  return stopOnSignal(() => running.stop(), log);
}
