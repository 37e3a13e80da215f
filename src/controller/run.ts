// `better-compute controller`: every replica serves its four listeners (listeners.ts: the capacity API with health,
// the scheduler extender on loopback, /metrics over HTTPS, the webhooks over HTTPS with the routers the caller mounts)
// and keeps informer caches warm; the replica holding the Lease
// `better-compute-controller` takes the ledger fence and runs the reconcilers and the periodic jobs (rollup fold and
// rebuild, lease expiry, resync, drift reconcile, usage windows). Losing the Lease stops the leader work at once. Health: /readyz
// while the informers are synced and the database answers; /healthz until the database has been silent for
// BETTER_COMPUTE_DB_LIVENESS; a leader whose database is silent for a renew deadline gives the Lease up. SIGTERM: stop
// leading and release the Lease, stop the informers, drain HTTP, close the database. The leader's work: leader-work.ts.
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
import { ClientNodeExtenderKube } from '../extender/kube.ts';
import { stopOnSignal } from '../signals.ts';
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
import { createWebhookApp, healthChecks, webhookFrontRoutes, limitListeners, startListeners, type ControllerListeners, type WebhookMount } from './listeners.ts';
import { createMetricsApp } from './metrics-endpoint.ts';
import { ClientNodeTlsKube, FileTlsSource, ProvidedSecretTlsSource, readClientCaBundle, SecretTlsSource, type TlsSource } from './tls.ts';
import { KubeClient, kubeConfigFrom } from '../kube/client.ts';
import { LeaderElector } from './leader.ts';
import { LeaderWork } from './leader-work.ts';
import { DRIFT_SERIES } from './drift-plan.ts';
import { controllerMetrics, driftMetrics, extenderMetrics, rateLimitMetrics, usageMetrics } from './metrics.ts';
import { productWebhookRouters } from './webhooks.ts';
import { setupControllers, type Controllers } from './setup.ts';
import type { ControllerServices } from './services.ts';
import { directoryOf } from '../ui/reservations.ts';
import { mountCalendar } from '../ui/routes.ts';
export type { ControllerServices } from './services.ts';

export type { WebhookMount } from './listeners.ts';

export interface RunningController {
  /** HTTPS: the capacity API and health (HOST:PORT), with the controller's certificate or API_TLS_SECRET_NAME's. */
  url: string;
  /** Plain HTTP on loopback: the same app (API_LOOPBACK_PORT), when configured. */
  apiLoopbackUrl?: string;
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
    return new KubernetesAuthorizer({
      kubeConfig: kc,
      audiences: [...config.apiTokenAudiences],
      namespacesOfTenant: (t) => tenantNamespaces(t, controllers.ctx.informers.namespaces.list(), config.tenancyByName),
    });
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
    caOverlapMs: config.tlsCaOverlapMs,
    webhookConfiguration: config.webhookConfigurationName,
  });
}

/** The capacity API's own certificate (API_TLS_SECRET_NAME); none: it serves the controller's. */
function apiTlsSourceFor(config: Config, kc: KubeConfig, log: Logger): TlsSource | undefined {
  if (!config.apiTlsSecretName) return undefined;
  return new ProvidedSecretTlsSource({
    kube: new ClientNodeTlsKube(kc),
    namespace: config.controllerNamespace,
    secretName: config.apiTlsSecretName,
    log,
    reloadEveryMs: config.tlsReloadEveryMs,
  });
}

/** What the wiring built before any listener or loop started: the process's shared services. */
interface Core {
  identity: string;
  kc: KubeConfig;
  kube: KubeClient;
  database: Database;
  dbHealth: DbHealth;
  registry: ReturnType<typeof createRegistry>;
  metrics: ReturnType<typeof controllerMetrics>;
  fence: FenceHolder;
  /** Fenced: the leader's writes. */
  ledger: Ledger;
  /** Unfenced: previews and the extender's binds, every replica's (the database arbitrates). */
  previews: Ledger;
  clock: DbClock;
  controllers: Controllers;
  spotNoticeSeconds: number;
}

/** What was started, for the stop (or the cleanup of a failed start). */
interface Started {
  listeners?: ControllerListeners;
  tls?: TlsSource;
  apiTls?: TlsSource;
  mounts: WebhookMount[];
  extenderState?: ExtenderStateSync;
  elector?: LeaderElector;
  shuttingDown: boolean;
}

async function buildCore(config: Config, log: Logger, database: Database, dbHealth: DbHealth): Promise<Core & { leaderWork: LeaderWork }> {
  const identity = config.podName ?? `${os.hostname()}-${process.pid}`;
  const kc = kubeConfigFrom(config.kubeconfig, config.kubeCallTimeoutMs);
  const kube = new KubeClient(kc, 'better-compute-controller', identity);
  const registry = createRegistry();
  registerCapacityGauges(registry, database.db);
  registerDomainGauges(registry, database.db);
  registerQuotaGauges(registry, database.db);
  const placement = ledgerMetrics(registry);
  const metrics = controllerMetrics(registry);
  const fence = new FenceHolder(LEASE_NAME);
  const spotNoticeSeconds = config.spotNoticeMs / 1000;
  const ledger = new Ledger(database.db, { fence: fence.fence, metrics: placement, spotNoticeSeconds });
  const previews = new Ledger(database.db, { metrics: placement, spotNoticeSeconds });
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
      tenancyByName: config.tenancyByName,
      layoutWindowMs: config.layoutWindowMs,
    },
    watchTimeoutSeconds: Math.max(1, Math.round(config.watchTimeoutMs / 1000)),
    watchLivenessMs: config.watchLivenessMs,
  });
  const drift = driftMetrics(registry, DRIFT_SERIES);
  const usage = usageMetrics(registry, database.db);
  const leaderWork = new LeaderWork({ config, db: database.db, ledger, clock, kc, kube, log, fence, controllers, drift, usage });
  return { identity, kc, kube, database, dbHealth, registry, metrics, fence, ledger, previews, clock, controllers, spotNoticeSeconds, leaderWork };
}

/** The capacity API (with health), the scheduler extender and /metrics: every replica's apps. */
async function createApps(config: Config, log: Logger, core: Core, started: Started) {
  const { database, registry, previews, clock, kc } = core;
  // The ledger in memory (ADR 0010): the extender's filter and prioritize, and capacity.preview, answer from it.
  const memory = (started.extenderState = new ExtenderStateSync({
    db: database.db,
    log,
    resyncEveryMs: config.extenderResyncMs,
    maxStalenessMs: config.extenderMaxStalenessMs,
    callTimeoutMs: config.dbPingTimeoutMs,
  }));
  const health = healthChecks({
    db: core.dbHealth,
    informers: Object.values(core.controllers.ctx.informers),
    dbLivenessMs: config.dbLivenessMs,
    shuttingDown: () => started.shuttingDown,
  });
  const service = new CapacityService({ db: database.db, previewer: new StatePreviewer(memory, previews, { spotNoticeSeconds: core.spotNoticeSeconds }), clock });
  const authorizer = await authorizerFor(config, kc, log, core.controllers);
  const api = createApp({
    service,
    authorizer,
    log,
    http: httpMetrics(registry),
    ready: health.ready,
    live: health.live,
    // The GPU calendar (src/ui/, docs/calendar.md): GET /calendar, its sign-in and assets, on the API's listener.
    routes: (app) => mountCalendar(app, { service, authorizer, log, directory: directoryOf(() => core.controllers.ctx.informers.reservations.list()) }),
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
    tenancyByName: config.tenancyByName,
  });
  const tokens = new TokenReviewer({ kubeConfig: kc });
  const access = new AccessReviewer({ kubeConfig: kc });
  const metricsApp = createMetricsApp({ registry, authenticate: (t) => tokens.authenticate(t), allowed: (p, a) => access.allowed(p, a), log });
  return { api, extender, metricsApp, tokens, access };
}

/** Every replica's four listeners, the webhook routers mounted, with the TLS material (swapped in place on rotation). */
async function serve(config: Config, log: Logger, core: Core, started: Started, opts: RunControllerOptions) {
  const { api, extender, metricsApp, tokens, access } = await createApps(config, log, core, started);
  const isLeader = () => started.elector?.isLeader ?? false;
  const { database, previews, clock, kc, kube, registry } = core;
  // Read before anything is served: a bundle that cannot verify anyone stops the start (ADR 0034).
  const clientCa = config.webhookClientCaFile ? await readClientCaBundle(config.webhookClientCaFile) : undefined;
  if (clientCa) log.info('the admission webhook answers only callers with a client certificate from WEBHOOK_CLIENT_CA_FILE', { file: config.webhookClientCaFile, cas: clientCa.subjects });
  const services: ControllerServices = { config, db: database.db, ledger: previews, clock, kc, kube, log, registry, tokens, access, isLeader, informers: core.controllers.ctx.informers };
  started.mounts.push(...((await (opts.webhookRouters ?? productWebhookRouters)(services)) ?? []));
  const tls = (started.tls = tlsSourceFor(config, kc, log, isLeader));
  let current = await tls.start((next) => {
    current = next;
    return started.listeners?.setTls(next);
  });
  const apiTlsSource = (started.apiTls = apiTlsSourceFor(config, kc, log));
  const apiTls = await apiTlsSource?.start((next) => started.listeners?.setApiTls(next));
  const limits = rateLimitMetrics(registry);
  const apps = limitListeners(
    { api, metrics: metricsApp, webhook: createWebhookApp(started.mounts, log) },
    config.rateLimitPerSecond > 0 ? { perSecond: config.rateLimitPerSecond, burst: config.rateLimitBurst, onLimited: limits.limited } : undefined,
  );
  started.listeners = await startListeners({
    addresses: config,
    ...apps,
    extender,
    tls: current,
    apiTls,
    webhookClientCa: clientCa?.pem,
    webhookRoutes: webhookFrontRoutes(started.mounts),
    onWebhookFrontRestart: (e) => log.error('the webhook listener\'s TLS thread ended; starting it again', errorFields(e)),
  });
  return { listeners: started.listeners, tls, caBundle: () => current.ca };
}

/** The Lease: the replica holding it takes the ledger fence and does the leader's work; losing it stops the work. */
function electorFor(config: Config, log: Logger, core: Core & { leaderWork: LeaderWork }): LeaderElector {
  const { database, dbHealth, fence, metrics, ledger, clock, controllers, identity } = core;
  return new LeaderElector({
    client: core.kube,
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
      core.leaderWork.start();
    },
    async onStoppedLeading() {
      fence.revoke();
      metrics.setLeader(false, -1);
      await controllers.stopLeading();
      await core.leaderWork.stop();
    },
  });
}

/** The graceful stop: leading first (the Lease released), then the informers, the listeners drained, the database. */
async function shutdown(log: Logger, core: Core, started: Started): Promise<void> {
  started.shuttingDown = true;
  log.info('shutting down');
  await started.elector?.stop();
  await core.controllers.stop();
  started.tls?.stop();
  started.apiTls?.stop();
  await started.listeners?.close(5_000);
  await started.extenderState?.stop();
  for (const m of started.mounts) await m.stop?.().catch((err: unknown) => log.warn('webhook router stop failed', { path: m.path, ...errorFields(err) }));
  core.dbHealth.stop();
  await core.database.close();
  log.info('stopped');
}

/** A start that failed part way: what was started is stopped, without draining. */
async function abandon(database: Database, dbHealth: DbHealth, started: Started): Promise<void> {
  dbHealth.stop();
  await started.extenderState?.stop();
  started.tls?.stop();
  started.apiTls?.stop();
  await started.listeners?.close(0);
  for (const m of started.mounts) await m.stop?.().catch(() => undefined);
  await database.close();
}

export async function runController(config: Config, log: Logger, opts: RunControllerOptions = {}): Promise<RunningController> {
  const database: Database = await openDatabase(config, { migrate: true, log: (line) => log.debug('postgres', { line }), logger: log });
  const dbHealth = new DbHealth(database.db, { pingTimeoutMs: config.dbPingTimeoutMs, pingEveryMs: config.dbPingEveryMs, log });
  const started: Started = { mounts: [], shuttingDown: false };
  try {
    const core = await buildCore(config, log, database, dbHealth);
    const served = await serve(config, log, core, started, opts);
    const elector = (started.elector = electorFor(config, log, core));
    dbHealth.start();
    started.extenderState!.start();
    core.controllers.startInformers();
    elector.start();
    const l = served.listeners;
    log.info('controller started', {
      url: l.api.url,
      apiLoopbackUrl: l.apiLoopback?.url,
      extenderUrl: l.extender.url,
      metricsUrl: l.metrics.url,
      webhookUrl: l.webhook.url,
      webhooks: started.mounts.map((m) => m.path),
      identity: core.identity,
      namespace: config.controllerNamespace,
      lease: LEASE_NAME,
      database: database.embedded ? 'embedded' : 'external',
    });
    let stopping: Promise<void> | undefined;
    return {
      url: l.api.url,
      ...(l.apiLoopback ? { apiLoopbackUrl: l.apiLoopback.url } : {}),
      extenderUrl: l.extender.url,
      metricsUrl: l.metrics.url,
      webhookUrl: l.webhook.url,
      caBundle: served.caBundle,
      reloadTls: () => served.tls.poll(),
      identity: core.identity,
      controllers: core.controllers,
      isLeader: () => elector.isLeader,
      stop: () => (stopping ??= shutdown(log, core, started)),
    };
  } catch (e) {
    await abandon(database, dbHealth, started);
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
