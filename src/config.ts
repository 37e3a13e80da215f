import os from 'node:os';
import path from 'node:path';
import { z } from 'zod';
import { cdiAnnotationPrefixSchema, cdiKindSchema, deviceListStrategiesSchema } from './core/device-list.ts';
import { parseDbTargets } from './core/db-hosts.ts';
import { DurationError, parseDuration } from './core/duration.ts';
import { DEFAULT_SCAVENGES, ScavengesSchema } from './scavenge.ts';

// The one place that reads the environment. Parsed once at start into a frozen object that is passed explicitly.
const ConfigSchema = z.object({
  // One host, or several (a primary and its standbys: `postgres://u:p@db-a,db-b/ledger?target_session_attrs=read-write`).
  databaseUrl: z
    .string()
    .superRefine((url, ctx) => {
      try {
        if (parseDbTargets(url)) return;
      } catch (e) {
        ctx.addIssue({ code: 'custom', message: (e as Error).message });
        return;
      }
      if (!URL.canParse(url)) ctx.addIssue({ code: 'custom', message: 'Invalid URL' });
    })
    .optional(),
  dataDir: z.string().min(1),
  embeddedPort: z.coerce.number().int().min(1).max(65535),
  logLevel: z.enum(['debug', 'info', 'warn', 'error']),
  httpPort: z.coerce.number().int().min(0).max(65535),
  httpHost: z.string().min(1),
  /**
   * `controller`: HOST:PORT serves the capacity API over HTTPS (ADR 0035); this port serves it in plain HTTP on
   * 127.0.0.1 only, for the CLI through `kubectl port-forward` (unset: no plain listener).
   */
  apiLoopbackPort: z.coerce.number().int().min(0).max(65535).optional(),
  /**
   * `controller`: a kubernetes.io/tls Secret in its namespace whose certificate the capacity API serves instead of the
   * controller's own (the Role must let it get that name: deploy/ grants `better-compute-api-tls`).
   */
  apiTlsSecretName: z.string().min(1).max(253).optional(),
  /**
   * `controller` listeners besides HOST:PORT (capacity API, health): the scheduler extender (plain HTTP, loopback by
   * default: only the scheduler container of the same pod reaches it), /metrics (HTTPS, TokenReview +
   * SubjectAccessReview) and the webhooks (HTTPS: admission, node agents). Port 0: any free port (tests).
   */
  extenderHost: z.string().min(1),
  extenderPort: z.coerce.number().int().min(0).max(65535),
  metricsHost: z.string().min(1),
  metricsPort: z.coerce.number().int().min(0).max(65535),
  webhookHost: z.string().min(1),
  webhookPort: z.coerce.number().int().min(0).max(65535),
  /** `controller` TLS of the HTTPS listeners: the Secret the controller generates and rotates (in its namespace)... */
  tlsSecretName: z.string().min(1).max(253),
  /** ...or, instead, a certificate and key from files (both, or neither) and the CA that issued them (re-read every poll). */
  tlsCertFile: z.string().min(1).optional(),
  tlsKeyFile: z.string().min(1).optional(),
  tlsCaFile: z.string().min(1).optional(),
  /**
   * `controller`: a PEM bundle of the CA(s) that sign the API server's webhook client certificate (ADR 0034). Set: the
   * webhook listener asks every client for a certificate and the admission webhook answers only a caller whose
   * certificate one of them signed (others get 403, before their body is read); the agents on the same listener send
   * none and keep authenticating with their tokens. Read once at start. Unset: the admission webhook answers anyone.
   */
  webhookClientCaFile: z.string().min(1).optional(),
  /** The MutatingWebhookConfiguration whose webhooks get the generated CA as caBundle (absent: nothing to do). */
  webhookConfigurationName: z.string().min(1).max(253),
  /** Extra subject alternative names of the generated serving certificate (DNS names or IP addresses). */
  tlsExtraSans: z.array(z.string().min(1)),
  /** How often every replica re-reads its TLS material (the Secret or the files). */
  tlsReloadEveryMs: durationMs('BETTER_COMPUTE_TLS_RELOAD_EVERY'),
  /**
   * When the generated CA is renewed (30 days before its end), how long the new CA is published beside the old one
   * (ConfigMap better-compute-ca, the webhook's caBundle) before the serving certificate is issued from it (ADR 0040):
   * longer than the kubelet takes to refresh a ConfigMap volume (about a minute) and a reload poll.
   */
  tlsCaOverlapMs: durationMs('BETTER_COMPUTE_TLS_CA_OVERLAP').refine((ms) => ms >= 0 && ms <= 7 * 86_400_000, 'BETTER_COMPUTE_TLS_CA_OVERLAP: at most 7 days'),
  /** `serve`: how requests are authorized — a static token file (local use) or Kubernetes TokenReview + SubjectAccessReview. */
  auth: z.enum(['static', 'kubernetes']),
  /** `serve` with auth=static: the token file (YAML or JSON); without one every request is refused. */
  tokenFile: z.string().min(1).optional(),
  /**
   * auth=kubernetes: the audiences a capacity API token must be minted for (TokenReview `spec.audiences`, checked in
   * `status.audiences`; ADR 0035), comma separated. Users: `kubectl create token <sa> --audience bettercompute.io`.
   */
  apiTokenAudiences: z.array(z.string().min(1).max(253)).min(1, 'API_TOKEN_AUDIENCES needs at least one audience'),
  /**
   * `controller`: the per-source request limit of the listeners that take tokens (ADR 0036): requests earned back per
   * second and the burst, per source address and listener (0 per second: no limit).
   */
  rateLimitPerSecond: z.coerce.number().min(0).max(100_000),
  rateLimitBurst: z.coerce.number().int().min(1).max(1_000_000),
  /**
   * `controller` (and `serve` with auth=kubernetes): whether a namespace without the bettercompute.io/tenant label is
   * the tenant named like it (ADR 0040). Off by default: where users may create namespaces, one named like a tenant
   * would inherit its pools and quota. The trial overlay turns it on.
   */
  tenancyByName: z.enum(['true', 'false']).transform((v) => v === 'true'),
  /** auth=kubernetes: a kubeconfig file; without one the in-cluster service account is used. */
  kubeconfig: z.string().min(1).optional(),
  /** How often `serve` rebuilds the capacity rollup, and how often it folds pending deltas (milliseconds). */
  rollupEveryMs: durationMs('BETTER_COMPUTE_ROLLUP_EVERY'),
  foldEveryMs: durationMs('BETTER_COMPUTE_FOLD_EVERY'),
  /** The CLI: the capacity API to talk to, the bearer token it sends and the tenant it asks about by default. */
  serverUrl: z.string().url(),
  token: z.string().min(1).optional(),
  tenant: z.string().min(1).optional(),
  /** The CLI: the CA bundle (PEM file) that signs an https:// server's certificate; unset: the system's CAs. */
  caFile: z.string().min(1).optional(),
  /** The CLI: the name an https:// server's certificate is checked against, when not the URL's host. */
  tlsServerName: z.string().min(1).optional(),
  /** `controller`: the namespace of its Lease (and Deployment); the replica's identity in the Lease (POD_NAME). */
  controllerNamespace: z.string().min(1).max(63),
  podName: z.string().min(1).optional(),
  /** `controller` leader election (milliseconds): lease duration, renew deadline, retry period. */
  leaseDurationMs: durationMs('BETTER_COMPUTE_LEASE_DURATION'),
  renewDeadlineMs: durationMs('BETTER_COMPUTE_RENEW_DEADLINE'),
  retryPeriodMs: durationMs('BETTER_COMPUTE_RETRY_PERIOD'),
  /** `controller` watches: server-side timeout, and how long a silent watch may stay silent before it is restarted. */
  watchTimeoutMs: durationMs('BETTER_COMPUTE_WATCH_TIMEOUT'),
  watchLivenessMs: durationMs('BETTER_COMPUTE_WATCH_LIVENESS'),
  /** `controller` leader jobs: Pool status capacity refresh, lease expiry, full resync; a Pending Reservation's longest backoff. */
  capacityRefreshMs: durationMs('BETTER_COMPUTE_CAPACITY_REFRESH'),
  expireEveryMs: durationMs('BETTER_COMPUTE_EXPIRE_EVERY'),
  resyncEveryMs: durationMs('BETTER_COMPUTE_RESYNC_EVERY'),
  pendingMaxBackoffMs: durationMs('BETTER_COMPUTE_PENDING_MAX_BACKOFF'),
  /** `controller` leader job: the drift reconcile of the ledger against the cluster (also at each leadership start). */
  driftEveryMs: durationMs('BETTER_COMPUTE_DRIFT_EVERY'),
  /** `controller` leader job: hourly usage windows from the booking history (also at each leadership start: a backfill). */
  usageEveryMs: durationMs('BETTER_COMPUTE_USAGE_EVERY'),
  /** `controller`: how far ahead the windows of a recurring Reservation are booked. */
  recurrenceHorizonMs: durationMs('BETTER_COMPUTE_RECURRENCE_HORIZON'),
  /** How far ahead a preempted spot reservation is told (its deadline = now + this; ADR 0017). */
  spotNoticeMs: durationMs('BETTER_COMPUTE_SPOT_NOTICE'),
  /** `controller` leader: a pod that holds atoms is released once two complete pod LISTs this far apart lack it. */
  orphanGraceMs: durationMs('BETTER_COMPUTE_ORPHAN_GRACE'),
  /** `controller`: how long a layout booking holds a GPU whose layout changed (guard 2, the change window). */
  layoutWindowMs: durationMs('BETTER_COMPUTE_LAYOUT_WINDOW'),
  /**
   * `controller` leader job: BookingRepair (ADR 0016) every repairEvery; a NotReady node's atoms count as lost after
   * repairGrace.
   */
  repairEveryMs: durationMs('BETTER_COMPUTE_REPAIR_EVERY'),
  repairGraceMs: durationMs('BETTER_COMPUTE_REPAIR_GRACE'),
  /**
   * Database timeouts (every pool): connecting (and waiting for a free connection); a statement, ended by the server
   * (migrations lift it for their session); a transaction left idle, ended by the server; a query's answer, given up by
   * the client (a stalled server or network: above the statement timeout, so the server normally ends it first); and
   * the delay before TCP keepalive probes start on an idle connection.
   */
  dbConnectTimeoutMs: durationMs('BETTER_COMPUTE_DB_CONNECT_TIMEOUT'),
  dbStatementTimeoutMs: durationMs('BETTER_COMPUTE_DB_STATEMENT_TIMEOUT'),
  dbIdleInTransactionTimeoutMs: durationMs('BETTER_COMPUTE_DB_IDLE_IN_TRANSACTION_TIMEOUT'),
  dbQueryTimeoutMs: durationMs('BETTER_COMPUTE_DB_QUERY_TIMEOUT'),
  dbKeepAliveDelayMs: durationMs('BETTER_COMPUTE_DB_KEEPALIVE_DELAY'),
  /**
   * `controller` database health: how often and how long a `SELECT 1` is given (readiness fails when it does not
   * answer); after how long without an answer /healthz fails, so that the kubelet restarts a wedged process (a leader
   * steps down already after its renew deadline without one).
   */
  dbPingEveryMs: durationMs('BETTER_COMPUTE_DB_PING_EVERY'),
  dbPingTimeoutMs: durationMs('BETTER_COMPUTE_DB_PING_TIMEOUT'),
  dbLivenessMs: durationMs('BETTER_COMPUTE_DB_LIVENESS'),
  /**
   * `controller` scheduler extender (ADR 0010): how often its in-memory state is reloaded in full, and how long its
   * LISTEN connection may go without an answered ping before filter reads the database instead.
   */
  extenderResyncMs: durationMs('BETTER_COMPUTE_EXTENDER_RESYNC'),
  extenderMaxStalenessMs: durationMs('BETTER_COMPUTE_EXTENDER_MAX_STALENESS'),
  /**
   * `controller` scheduler extender: the most nodes its filter passes, the best of those that fit (ADR 0022); unset:
   * DEFAULT_FILTER_NODES (src/extender/service.ts).
   */
  extenderFilterNodes: z.coerce.number().int().min(1).max(100_000).optional(),
  /**
   * `controller` scheduler extender: whether filter passes an on-demand pod without scheduling preferences of its own
   * its best node alone, so that kube-scheduler neither scores nor calls prioritize (ADR 0030); `false`: up to
   * extenderFilterNodes.
   */
  extenderBestNodeOnly: z.enum(['true', 'false']).transform((v) => v === 'true'),
  /** `controller`: where V8's young collections run, the event loop's thread alone or helper threads too (ADR 0029). */
  scavenges: ScavengesSchema,
  /** `controller`: the longest a Kubernetes API call (not a watch) may take before it is aborted. */
  kubeCallTimeoutMs: durationMs('BETTER_COMPUTE_KUBE_CALL_TIMEOUT'),
  /** `agent`: this node's name (the downward API's spec.nodeName), and where its devices come from. */
  nodeName: z.string().min(1).optional(),
  /** `agent`: a JSON file with a NodeDevices spec (simulated GPUs); without one, nvidia-smi is run. */
  devicesFile: z.string().min(1).optional(),
  devicePluginDir: z.string().min(1),
  podResourcesSocket: z.string().min(1),
  /**
   * `agent`: whether it also serves the kubelet's DRA plugin for gpu.bettercompute.io (docs/dra-node.md; off by
   * default), the DRA service's directory, the kubelet's plugin watcher directory, and where it writes CDI specs.
   */
  agentDra: z.enum(['true', 'false']).transform((v) => v === 'true'),
  draPluginDir: z.string().min(1),
  pluginsRegistryDir: z.string().min(1),
  cdiDir: z.string().min(1),
  /** `agent` with its DRA plugin: how often its node's ResourceSlices are checked even when nothing changed. */
  draSliceResyncMs: durationMs('BETTER_COMPUTE_DRA_SLICE_RESYNC'),
  /** `agent`: the controller's agent API (https://host:port); see controllerUrlFromEnv. Unset: the agent cannot start. */
  controllerUrl: z.string().url().optional(),
  /** `agent`: the CA bundle that signs the controller's serving certificate (ConfigMap better-compute-ca). */
  controllerCaFile: z.string().min(1),
  /** `agent`: the name the controller's certificate is checked against (and sent as SNI). */
  controllerServerName: z.string().min(1),
  /** `agent`: its projected ServiceAccount token, read at every call (the kubelet rotates it). */
  agentTokenFile: z.string().min(1),
  /** `agent`: touched each time the controller answers, removed when it does not (the readiness probe reads it). */
  agentReadyFile: z.string().min(1).optional(),
  /**
   * `agent`: how Allocate hands the atoms to the container runtime (docs/node-isolation.md): NVIDIA's device-list
   * strategies, comma separated (envvar, volume-mounts, cdi-annotations, cdi-cri), or `auto` (the default: cdi-cri where
   * the node's CDI specs name the devices, else volume-mounts); the CDI kind of the devices'
   * names (`<kind>=<GPU or MIG UUID>`) and the prefix of the CDI annotation keys.
   */
  deviceListStrategies: deviceListStrategiesSchema('DEVICE_LIST_STRATEGY'),
  cdiDeviceKind: cdiKindSchema('BETTER_COMPUTE_CDI_DEVICE_KIND'),
  cdiAnnotationPrefix: cdiAnnotationPrefixSchema('CDI_ANNOTATION_PREFIX'),
  /** `agent`: where it sees the node's CDI spec directories (comma separated), for `auto`. */
  hostCdiSpecDirs: z.string().transform((v) => v.split(',').map((d) => d.trim()).filter(Boolean)),
  /** `agent`: the host's /dev as the agent sees it, and a procfs showing the NVIDIA driver (GPU minors, MIG capabilities). */
  hostDevDir: z.string().min(1),
  hostProcDir: z.string().min(1),
}).refine((c) => (c.tlsCertFile === undefined) === (c.tlsKeyFile === undefined), {
  message: 'TLS_CERT_FILE and TLS_KEY_FILE go together',
  path: ['tlsCertFile'],
});
export type Config = Readonly<z.infer<typeof ConfigSchema>>;

/** A duration setting ('5m', '10s', 'PT1H' or whole seconds) as milliseconds. */
function durationMs(name: string) {
  return z.string().transform((v, ctx) => {
    try {
      return parseDuration(v) * 1000;
    } catch (err) {
      if (!(err instanceof DurationError)) throw err;
      ctx.addIssue({ code: 'custom', message: `${name}: ${err.message}` });
      return z.NEVER;
    }
  });
}

/**
 * The controller's agent API: BETTER_COMPUTE_CONTROLLER_URL, else the Service environment the kubelet injects for the
 * `better-compute-controller` Service's port named `webhook` (no cluster DNS needed); an IPv6 host is bracketed.
 */
export function controllerUrlFromEnv(env: NodeJS.ProcessEnv): string | undefined {
  if (env.BETTER_COMPUTE_CONTROLLER_URL) return env.BETTER_COMPUTE_CONTROLLER_URL;
  const host = env.BETTER_COMPUTE_CONTROLLER_SERVICE_HOST;
  const port = env.BETTER_COMPUTE_CONTROLLER_SERVICE_PORT_WEBHOOK;
  if (!host || !port) return undefined;
  return `https://${host.includes(':') ? `[${host}]` : host}:${port}`;
}

/** A comma-separated setting as its non-empty items. */
function list(v: string): string[] {
  return v.split(',').map((x) => x.trim()).filter(Boolean);
}

function defaultDataDir(): string {
  // Run as root, PostgreSQL runs as the `postgres` user, which cannot enter /root: keep the data where it can.
  if (process.getuid?.() === 0) return '/var/lib/better-compute';
  return path.join(process.env.XDG_DATA_HOME ?? path.join(os.homedir(), '.local', 'share'), 'better-compute');
}

export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  return Object.freeze(ConfigSchema.parse({ ...servingEnv(env), ...clientEnv(env), ...controllerEnv(env), ...agentEnv(env) }));
}

/** The settings of the servers: the database, where each endpoint listens, TLS, authentication, limits. */
function servingEnv(env: NodeJS.ProcessEnv): Record<string, unknown> {
  return {
    databaseUrl: env.DATABASE_URL || undefined,
    dataDir: env.BETTER_COMPUTE_DATA_DIR || defaultDataDir(),
    embeddedPort: env.BETTER_COMPUTE_PG_PORT || 54329,
    logLevel: env.LOG_LEVEL || 'info',
    httpPort: env.PORT || 8080,
    httpHost: env.HOST || '127.0.0.1',
    apiLoopbackPort: env.API_LOOPBACK_PORT || undefined,
    apiTlsSecretName: env.API_TLS_SECRET_NAME || undefined,
    extenderHost: env.EXTENDER_HOST || '127.0.0.1',
    extenderPort: env.EXTENDER_PORT || 8888,
    metricsHost: env.METRICS_HOST || env.HOST || '127.0.0.1',
    metricsPort: env.METRICS_PORT || 9090,
    webhookHost: env.WEBHOOK_HOST || env.HOST || '127.0.0.1',
    webhookPort: env.WEBHOOK_PORT || 9443,
    tlsSecretName: env.TLS_SECRET_NAME || 'better-compute-tls',
    tlsCertFile: env.TLS_CERT_FILE || undefined,
    tlsKeyFile: env.TLS_KEY_FILE || undefined,
    tlsCaFile: env.TLS_CA_FILE || undefined,
    webhookClientCaFile: env.WEBHOOK_CLIENT_CA_FILE || undefined,
    webhookConfigurationName: env.BETTER_COMPUTE_WEBHOOK_CONFIGURATION || 'better-compute',
    tlsExtraSans: list(env.TLS_EXTRA_SANS ?? ''),
    tlsReloadEveryMs: env.BETTER_COMPUTE_TLS_RELOAD_EVERY || '1m',
    tlsCaOverlapMs: env.BETTER_COMPUTE_TLS_CA_OVERLAP || '1h',
    auth: env.BETTER_COMPUTE_AUTH || 'static',
    tokenFile: env.BETTER_COMPUTE_TOKEN_FILE || undefined,
    tenancyByName: env.TENANCY_BY_NAMESPACE_NAME || 'false',
    rateLimitPerSecond: env.RATE_LIMIT_PER_SECOND || 20,
    rateLimitBurst: env.RATE_LIMIT_BURST || 40,
    apiTokenAudiences: list(env.API_TOKEN_AUDIENCES ?? 'bettercompute.io'),
    kubeconfig: env.KUBECONFIG || undefined,
  };
}

/** The CLI's settings (where the API is, as whom), and the periodic jobs'. */
function clientEnv(env: NodeJS.ProcessEnv): Record<string, unknown> {
  return {
    rollupEveryMs: env.BETTER_COMPUTE_ROLLUP_EVERY || '5m',
    foldEveryMs: env.BETTER_COMPUTE_FOLD_EVERY || '10s',
    serverUrl: env.BETTER_COMPUTE_SERVER || 'http://127.0.0.1:8080',
    token: env.BETTER_COMPUTE_TOKEN || undefined,
    tenant: env.BETTER_COMPUTE_TENANT || undefined,
    caFile: env.BETTER_COMPUTE_CA_FILE || undefined,
    tlsServerName: env.BETTER_COMPUTE_TLS_SERVER_NAME || undefined,
  };
}

/** The controller's settings: its namespace, leader election, loops and timeouts; the extender's. */
function controllerEnv(env: NodeJS.ProcessEnv): Record<string, unknown> {
  return {
    controllerNamespace: env.BETTER_COMPUTE_NAMESPACE || env.POD_NAMESPACE || 'better-compute-system',
    podName: env.POD_NAME || undefined,
    leaseDurationMs: env.BETTER_COMPUTE_LEASE_DURATION || '15s',
    renewDeadlineMs: env.BETTER_COMPUTE_RENEW_DEADLINE || '10s',
    retryPeriodMs: env.BETTER_COMPUTE_RETRY_PERIOD || '2s',
    watchTimeoutMs: env.BETTER_COMPUTE_WATCH_TIMEOUT || '60s',
    watchLivenessMs: env.BETTER_COMPUTE_WATCH_LIVENESS || '90s',
    capacityRefreshMs: env.BETTER_COMPUTE_CAPACITY_REFRESH || '30s',
    expireEveryMs: env.BETTER_COMPUTE_EXPIRE_EVERY || '10s',
    resyncEveryMs: env.BETTER_COMPUTE_RESYNC_EVERY || '5m',
    pendingMaxBackoffMs: env.BETTER_COMPUTE_PENDING_MAX_BACKOFF || '30s',
    driftEveryMs: env.BETTER_COMPUTE_DRIFT_EVERY || '5m',
    usageEveryMs: env.BETTER_COMPUTE_USAGE_EVERY || '1m',
    recurrenceHorizonMs: env.BETTER_COMPUTE_RECURRENCE_HORIZON || '7d',
    spotNoticeMs: env.BETTER_COMPUTE_SPOT_NOTICE || '2m',
    orphanGraceMs: env.BETTER_COMPUTE_ORPHAN_GRACE || '30s',
    layoutWindowMs: env.BETTER_COMPUTE_LAYOUT_WINDOW || '5m',
    repairEveryMs: env.BETTER_COMPUTE_REPAIR_EVERY || '30s',
    repairGraceMs: env.BETTER_COMPUTE_REPAIR_GRACE || '2m',
    dbConnectTimeoutMs: env.BETTER_COMPUTE_DB_CONNECT_TIMEOUT || '10s',
    dbStatementTimeoutMs: env.BETTER_COMPUTE_DB_STATEMENT_TIMEOUT || '30s',
    dbIdleInTransactionTimeoutMs: env.BETTER_COMPUTE_DB_IDLE_IN_TRANSACTION_TIMEOUT || '60s',
    dbQueryTimeoutMs: env.BETTER_COMPUTE_DB_QUERY_TIMEOUT || '40s',
    dbKeepAliveDelayMs: env.BETTER_COMPUTE_DB_KEEPALIVE_DELAY || '10s',
    dbPingEveryMs: env.BETTER_COMPUTE_DB_PING_EVERY || '5s',
    dbPingTimeoutMs: env.BETTER_COMPUTE_DB_PING_TIMEOUT || '2s',
    dbLivenessMs: env.BETTER_COMPUTE_DB_LIVENESS || '60s',
    extenderResyncMs: env.BETTER_COMPUTE_EXTENDER_RESYNC || '30s',
    extenderMaxStalenessMs: env.BETTER_COMPUTE_EXTENDER_MAX_STALENESS || '5s',
    extenderFilterNodes: env.BETTER_COMPUTE_EXTENDER_FILTER_NODES || undefined,
    extenderBestNodeOnly: env.BETTER_COMPUTE_EXTENDER_BEST_NODE_ONLY || 'true',
    scavenges: env.BETTER_COMPUTE_SCAVENGES || DEFAULT_SCAVENGES,
    kubeCallTimeoutMs: env.BETTER_COMPUTE_KUBE_CALL_TIMEOUT || '30s',
  };
}

/** The node agent's settings: its node, devices, the kubelet's sockets and directories, the controller it asks. */
function agentEnv(env: NodeJS.ProcessEnv): Record<string, unknown> {
  return {
    nodeName: env.NODE_NAME || undefined,
    devicesFile: env.BETTER_COMPUTE_DEVICES_FILE || undefined,
    devicePluginDir: env.BETTER_COMPUTE_DEVICE_PLUGIN_DIR || '/var/lib/kubelet/device-plugins',
    podResourcesSocket: env.BETTER_COMPUTE_POD_RESOURCES_SOCKET || '/var/lib/kubelet/pod-resources/kubelet.sock',
    agentDra: env.BETTER_COMPUTE_AGENT_DRA || 'false',
    draPluginDir: env.BETTER_COMPUTE_DRA_PLUGIN_DIR || '/var/lib/kubelet/plugins/gpu.bettercompute.io',
    pluginsRegistryDir: env.BETTER_COMPUTE_PLUGINS_REGISTRY_DIR || '/var/lib/kubelet/plugins_registry',
    cdiDir: env.BETTER_COMPUTE_CDI_DIR || '/var/run/cdi',
    draSliceResyncMs: env.BETTER_COMPUTE_DRA_SLICE_RESYNC || '60s',
    controllerUrl: controllerUrlFromEnv(env),
    controllerCaFile: env.BETTER_COMPUTE_CONTROLLER_CA_FILE || '/etc/better-compute/ca/ca.crt',
    controllerServerName:
      env.BETTER_COMPUTE_CONTROLLER_SERVER_NAME || `better-compute-controller.${env.BETTER_COMPUTE_NAMESPACE || env.POD_NAMESPACE || 'better-compute-system'}.svc`,
    agentTokenFile: env.BETTER_COMPUTE_AGENT_TOKEN_FILE || '/var/run/secrets/kubernetes.io/serviceaccount/token',
    agentReadyFile: env.BETTER_COMPUTE_AGENT_READY_FILE || undefined,
    deviceListStrategies: env.DEVICE_LIST_STRATEGY || 'auto',
    hostCdiSpecDirs: env.BETTER_COMPUTE_HOST_CDI_SPEC_DIRS || '/etc/cdi,/var/run/cdi',
    cdiDeviceKind: env.BETTER_COMPUTE_CDI_DEVICE_KIND || 'nvidia.com/gpu',
    cdiAnnotationPrefix: env.CDI_ANNOTATION_PREFIX || 'cdi.k8s.io/',
    hostDevDir: env.BETTER_COMPUTE_HOST_DEV_DIR || '/dev',
    hostProcDir: env.BETTER_COMPUTE_HOST_PROC_DIR || '/proc',
  };
}
