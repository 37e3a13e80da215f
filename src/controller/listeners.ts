// The controller's listeners, each serving one audience:
//   HOST:PORT                        HTTPS  the capacity API (authenticated), /healthz, /readyz (ADR 0035)
//   127.0.0.1:API_LOOPBACK_PORT      HTTP   the same app, optional: the CLI through `kubectl port-forward`, which
//                                           reaches the pod's loopback; never another address
//   EXTENDER_HOST:EXTENDER_PORT      HTTP   /scheduler/{filter,prioritize,bind} only; loopback by default, so that only
//                                           the scheduler container of the same pod reaches it
//   METRICS_HOST:METRICS_PORT        HTTPS  /metrics only, TokenReview + SubjectAccessReview (metrics-endpoint.ts)
//   WEBHOOK_HOST:WEBHOOK_PORT        HTTPS  the routers mounted by the caller (admission webhook, node agents' API);
//                                           with WEBHOOK_CLIENT_CA_FILE it asks for client certificates (ADR 0034);
//                                           its TLS and body reading in a thread of its own (http/tls-front.ts, ADR 0048)
// The HTTPS listeners share one certificate (tls.ts), swapped in place on rotation; the capacity API may serve a
// user-provided one instead (API_TLS_SECRET_NAME).
import express, { type NextFunction, type Request, type RequestHandler, type Response } from 'express';
import type { IncomingMessage, RequestListener } from 'node:http';
import { ApiError, toErrorResponse } from '../http/errors.ts';
import { isProbe, limitBySource } from '../http/rate-limit.ts';
import { listen, type RunningServer } from '../http/server.ts';
import { listenBehindFront, type FrontRoute } from '../http/tls-front.ts';
import { MAX_REVIEW_BYTES } from '../admission/pods.ts';
import { AGENT_API_MAX_BODY_BYTES } from '../agentapi/router.ts';
import type { DbHealth } from '../db/health.ts';
import { errorFields, type Logger } from '../log.ts';
import type { ServingTls } from './tls.ts';
import { systemClock } from '../clock.ts';

/** The largest body a route of the webhook listener takes (an AdmissionReview); larger ones its TLS front refuses. */
export const WEBHOOK_MAX_BODY_BYTES = Math.max(MAX_REVIEW_BYTES, AGENT_API_MAX_BODY_BYTES);

/** The mounts as the webhook listener's TLS front treats them (their paths' caps and callers). */
export function webhookFrontRoutes(mounts: readonly WebhookMount[]): FrontRoute[] {
  return mounts.map((m) => ({ path: m.path, maxBodyBytes: m.maxBodyBytes, verifiedCallersOnly: m.verifiedCallersOnly, lengthRequired: m.lengthRequired }));
}

/** A router mounted on the webhook listener at `path` (e.g. '/admission' or '/agent/v1'). */
export interface WebhookMount {
  path: string;
  router: RequestHandler;
  /** The largest body the router takes: larger ones the listener's TLS front refuses (413) before the router sees them. */
  maxBodyBytes?: number;
  /** With WEBHOOK_CLIENT_CA_FILE: only callers with a verified certificate are answered; the refusal's message. */
  verifiedCallersOnly?: string;
  /** Its callers always send a Content-Length: a chunked body is refused (411) from its headers by the TLS front. */
  lengthRequired?: boolean;
  /** Called when the controller stops, after the listeners have drained. */
  stop?: () => Promise<void>;
}

export interface ListenerAddresses {
  httpHost: string;
  httpPort: number;
  /** Plain HTTP on 127.0.0.1 for the capacity API too (port-forward); absent: none. */
  apiLoopbackPort?: number | undefined;
  extenderHost: string;
  extenderPort: number;
  metricsHost: string;
  metricsPort: number;
  webhookHost: string;
  webhookPort: number;
}

export interface ControllerListeners {
  api: RunningServer;
  apiLoopback: RunningServer | undefined;
  extender: RunningServer;
  metrics: RunningServer;
  webhook: RunningServer;
  /** New certificate for the HTTPS listeners (new connections get it once it resolves); the capacity API's only without its own. */
  setTls(tls: ServingTls): Promise<void>;
  /** New certificate for the capacity API when it has its own (API_TLS_SECRET_NAME). */
  setApiTls(tls: ServingTls): void;
  close(drainMs?: number): Promise<void>;
}

function notFoundHandler(what: string): RequestHandler {
  return (req, _res, next) => next(new ApiError('NOT_FOUND', `no route ${req.method} ${req.path} (this listener serves ${what})`));
}

function errorHandler(log: Logger, listener: string) {
  return (err: unknown, req: Request, res: Response, _next: NextFunction) => {
    const { status, body, internal } = toErrorResponse(err);
    if (internal) log.error('request failed', { listener, method: req.method, path: req.path, ...errorFields(err) });
    if (res.headersSent) {
      res.end();
      return;
    }
    if (!req.complete) res.set('Connection', 'close');
    res.status(status).json(body);
  };
}

/** The webhook listener's app: the given routers at their paths. Each router reads (and caps) its own bodies. */
export function createWebhookApp(mounts: readonly WebhookMount[], log: Logger): express.Express {
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  app.use((req, res, next) => {
    const started = systemClock.now();
    res.on('finish', () =>
      log.debug('webhook request', { method: req.method, path: req.originalUrl.split('?')[0], status: res.statusCode, ms: Math.round(systemClock.now() - started) }),
    );
    next();
  });
  for (const m of mounts) app.use(m.path, m.router);
  app.use(notFoundHandler(mounts.length ? mounts.map((m) => m.path).join(', ') : 'nothing yet'));
  app.use(errorHandler(log, 'webhook'));
  return app;
}

export interface HealthSources {
  db: DbHealth;
  /** The caches that must be synced before this replica takes traffic. */
  informers: readonly { name: string; hasSynced: boolean }[];
  /** How long the database may stay unreachable before liveness fails (and the kubelet restarts the process). */
  dbLivenessMs: number;
  shuttingDown: () => boolean;
}

/**
 * GET /readyz and /healthz of the API listener. Ready: not shutting down, every informer synced, and the database
 * answering a `SELECT 1` now (within the ping timeout). Live: the database answered within dbLivenessMs; a replica
 * whose database stalls that long is wedged (its leader work long stopped), and a restart is the way out.
 */
export function healthChecks(s: HealthSources): { ready(): Promise<void>; live(): void } {
  return {
    async ready() {
      if (s.shuttingDown()) throw new Error('shutting down');
      const unsynced = s.informers.filter((i) => !i.hasSynced).map((i) => i.name);
      if (unsynced.length) throw new Error(`informers not synced yet: ${unsynced.join(', ')}`);
      await s.db.check();
    },
    live() {
      const ms = s.db.unreachableForMs();
      if (ms > s.dbLivenessMs) throw new Error(`the database has not answered for ${Math.round(ms / 1000)} s: ${s.db.lastError}`);
    },
  };
}

export interface ListenerRateLimit {
  perSecond: number;
  burst: number;
  /** A refusal, by listener. */
  onLimited?: (listener: 'api' | 'metrics' | 'webhook') => void;
}

/**
 * The per-source limit (ADR 0036) in front of the listeners that take tokens: the capacity API (not its probes), /metrics
 * and the webhook listener's agents' API. Not the admission webhook: its one caller is the API server, a single
 * source, and a 429 there fails pod creation; it reviews no token, and its body is capped before it is read.
 */
export function limitListeners<T extends { api: RequestListener; metrics: RequestListener; webhook: RequestListener }>(apps: T, limit: ListenerRateLimit | undefined): T {
  if (!limit) return apps;
  const wrap = (handler: RequestListener, listener: 'api' | 'metrics' | 'webhook', exempt?: (req: IncomingMessage) => boolean) =>
    limitBySource(handler, { perSecond: limit.perSecond, burst: limit.burst, ...(exempt ? { exempt } : {}), onLimited: () => limit.onLimited?.(listener) });
  return {
    ...apps,
    api: wrap(apps.api, 'api', isProbe),
    metrics: wrap(apps.metrics, 'metrics'),
    webhook: wrap(apps.webhook, 'webhook', (req) => req.url === '/admission' || (req.url ?? '').startsWith('/admission/')),
  };
}

/** Starts the listeners; on a failure, closes the ones already started and rejects. */
export async function startListeners(o: {
  addresses: ListenerAddresses;
  api: RequestListener;
  extender: RequestListener;
  metrics: RequestListener;
  webhook: RequestListener;
  tls: ServingTls;
  /** The capacity API's own certificate; absent: it serves `tls`. */
  apiTls?: ServingTls | undefined;
  /**
   * The CA bundle (PEM) of the API server's webhook client certificate (WEBHOOK_CLIENT_CA_FILE): the webhook listener
   * asks every client for a certificate and marks the ones it signed verified, kept across setTls (ADR 0034).
   */
  webhookClientCa?: string | undefined;
  /** The webhook routers' caps and callers, for its TLS front (webhookFrontRoutes). */
  webhookRoutes?: readonly FrontRoute[] | undefined;
  /** Told when the webhook listener's TLS thread ended unexpectedly (it is started again). */
  onWebhookFrontRestart?: (error: Error) => void;
}): Promise<ControllerListeners> {
  const a = o.addresses;
  const started: RunningServer[] = [];
  const start = async (handler: RequestListener, host: string, port: number, tls?: ServingTls, clientCa?: string) => {
    const s = await listen(handler, { host, port, ...(tls ? { tls } : {}), ...(clientCa ? { clientCa } : {}) });
    started.push(s);
    return s;
  };
  try {
    const api = await start(o.api, a.httpHost, a.httpPort, o.apiTls ?? o.tls);
    const apiLoopback = a.apiLoopbackPort === undefined ? undefined : await start(o.api, '127.0.0.1', a.apiLoopbackPort);
    const extender = await start(o.extender, a.extenderHost, a.extenderPort);
    const metrics = await start(o.metrics, a.metricsHost, a.metricsPort, o.tls);
    // Its TLS in a thread of its own, off the loop that serves the extender (ADR 0048).
    const webhook = await listenBehindFront(o.webhook, {
      host: a.webhookHost,
      port: a.webhookPort,
      tls: o.tls,
      clientCa: o.webhookClientCa,
      routes: o.webhookRoutes,
      maxBodyBytes: WEBHOOK_MAX_BODY_BYTES,
      ...(o.onWebhookFrontRestart ? { onRestart: o.onWebhookFrontRestart } : {}),
    });
    started.push(webhook);
    return {
      api,
      apiLoopback,
      extender,
      metrics,
      webhook,
      async setTls(tls) {
        await Promise.all([o.apiTls ? undefined : api.setTls(tls), metrics.setTls(tls), webhook.setTls(tls)]);
      },
      setApiTls(tls) {
        if (o.apiTls) void api.setTls(tls);
      },
      async close(drainMs) {
        await Promise.all(started.map((s) => s.close(drainMs)));
      },
    };
  } catch (e) {
    await Promise.all(started.map((s) => s.close(0)));
    throw e;
  }
}
