// The HTTP API: the four capacity methods and the quota method (ADR 0012), health, readiness, the OpenAPI document and (given a registry) /metrics. Routes are thin: authenticate, read the
// JSON body, validate with the zod schema, authorize on the tenant (or the pool), call the service, encode. Every
// failure goes through one translator (toErrorResponse).
import express, { type NextFunction, type Request, type RequestHandler, type Response } from 'express';
import type { Registry } from 'prom-client';
import type { z } from 'zod';
import { errorFields, type Logger } from '../log.ts';
import type { HttpMetrics } from '../metrics/registry.ts';
import { type Authorizer, type CapacityReadTarget } from './authz.ts';
import type { CapacityService } from './capacity-service.ts';
import { capDeclaredBody } from '../http/body-cap.ts';
import { requireTokenTransport } from '../http/transport.ts';
import { ApiError, invalidInput, toErrorResponse } from '../http/errors.ts';
import { OPENAPI_PATH, openApiJson } from './openapi.ts';
import { ByDomainInput, ByPoolInput, parseInput, PreviewInput, QuotaInput, SummaryInput, TimelineInput, UsageInput } from '../core/schemas.ts';
import { systemClock } from '../clock.ts';
import { bearerToken, type Principal } from '../http/identity.ts';

/** The largest request body read, in bytes; a larger one is INVALID_INPUT. */
export const MAX_BODY_BYTES = 64 * 1024;

export const CAPACITY_PATHS = {
  summary: '/api/compute/capacity/summary',
  byPool: '/api/compute/capacity/byPool',
  preview: '/api/compute/capacity/preview',
  timeline: '/api/compute/capacity/timeline',
  /** Ours, not in the spec: capacity per placement domain (docs/adr/0014-capacity-per-domain.md). */
  byDomain: '/api/compute/capacity/byDomain',
  /** Not one of the spec's four: hourly usage windows (docs/adr/0011-usage-windows.md). */
  usage: '/api/compute/capacity/usage',
  /** Not one of the spec's four: limit, used and reserved per quota key, in GPUs and GPU-hours (docs/adr/0012-gpu-hour-quota.md). */
  quota: '/api/compute/capacity/quota',
} as const;

export interface AppDeps {
  service: CapacityService;
  authorizer: Authorizer;
  /**
   * Served at GET /metrics without authentication when given (`better-compute serve`, local use). The controller
   * passes none: its metrics are on their own authenticated listener (src/controller/metrics-endpoint.ts).
   */
  registry?: Registry;
  log: Logger;
  /** Throws when the process should not get traffic (database unreachable, shutting down). */
  ready: () => Promise<void>;
  /** Throws when the process is wedged and should be restarted (GET /healthz 503); absent: always live. */
  live?: () => void;
  http?: HttpMetrics;
  maxBodyBytes?: number;
  /**
   * More routes, mounted after the capacity methods and before the fallbacks: the GPU calendar (src/ui/, mounted by the
   * process's wiring, so that the API does not import the views over it).
   */
  routes?: (app: express.Express) => void;
}

interface Locals {
  route?: string;
  principal?: Principal;
}

const locals = (res: Response) => res.locals as Locals;

export function createApp(deps: AppDeps): express.Express {
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  app.set('query parser', false);

  // One log line and one histogram observation per request.
  app.use((req, res, next) => {
    const started = systemClock.now();
    res.on('finish', () => {
      const ms = Math.round((systemClock.now() - started) * 100) / 100;
      const path = req.originalUrl.split('?')[0] ?? req.originalUrl;
      deps.log.info('request', { method: req.method, path, status: res.statusCode, ms });
      deps.http?.observe(locals(res).route ?? 'other', req.method, res.statusCode, ms / 1000);
    });
    next();
  });

  mountProbes(app, deps);
  mountCapacityMethods(app, deps);

  deps.routes?.(app);

  mountFallbacks(app, deps);
  return app;
}

/** Health, readiness, the OpenAPI document and (given a registry) /metrics: no token. */
function mountProbes(app: express.Express, deps: AppDeps): void {
  app.get('/healthz', (_req, res) => {
    locals(res).route = '/healthz';
    try {
      deps.live?.();
      res.json({ status: 'ok' });
    } catch (e) {
      res.status(503).json({ error: { code: 'UNAVAILABLE', message: `not live: ${(e as Error).message}` } });
    }
  });

  app.get('/readyz', async (_req, res) => {
    locals(res).route = '/readyz';
    try {
      await deps.ready();
      res.json({ status: 'ready' });
    } catch (e) {
      res.status(503).json({ error: { code: 'UNAVAILABLE', message: `not ready: ${(e as Error).message}` } });
    }
  });

  // The OpenAPI document (src/api/openapi.ts): the same for every caller and nothing tenant-specific, so no token (ADR 0038).
  let openapi: string | undefined;
  app.get(OPENAPI_PATH, (_req, res) => {
    locals(res).route = OPENAPI_PATH;
    openapi ??= openApiJson(CAPACITY_PATHS);
    res.type('application/json').send(openapi);
  });

  const registry = deps.registry;
  if (registry) {
    app.get('/metrics', async (_req, res) => {
      locals(res).route = '/metrics';
      const text = await registry.metrics();
      res.type(registry.contentType).send(text);
    });
  }
}

/** The capacity methods, each behind the same guards, in order: body size, token transport, token, JSON. */
function mountCapacityMethods(app: express.Express, deps: AppDeps): void {
  const maxBody = deps.maxBodyBytes ?? MAX_BODY_BYTES;
  const json = express.json({ limit: maxBody, strict: false, type: () => true });
  // A declared body over the cap is refused from its headers, before the token is reviewed (no TokenReview spent).
  const capBody = capDeclaredBody(maxBody, { status: 400, code: 'INVALID_INPUT' });

  // A token on plain HTTP that did not arrive at loopback is refused before it is reviewed (ADR 0035).
  const tokenTransport = requireTokenTransport();

  const authenticate: RequestHandler = async (req, res, next) => {
    locals(res).principal = await deps.authorizer.authenticate(bearerToken(req.get('authorization')));
    next();
  };

  const requireJson: RequestHandler = (req, _res, next) => {
    if (req.is('application/json') !== 'application/json') {
      throw invalidInput('send a JSON object with Content-Type: application/json');
    }
    next();
  };

  const guards = [capBody, tokenTransport, authenticate, requireJson, json];
  const method = <T>(path: string, schema: z.ZodType<T>, target: (input: T) => CapacityReadTarget, run: (input: T) => Promise<unknown>) =>
    mountMethod(app, deps.authorizer, guards, { path, schema, target, run });

  const onTenant = (i: { tenantId: string }) => ({ tenantId: i.tenantId });
  const onPool = (i: { tenantId: string; poolId: string }) => ({ tenantId: i.tenantId, poolId: i.poolId });
  method(CAPACITY_PATHS.summary, SummaryInput, onTenant, (i) => deps.service.summary(i));
  method(CAPACITY_PATHS.byPool, ByPoolInput, onPool, (i) => deps.service.byPool(i));
  method(CAPACITY_PATHS.preview, PreviewInput, onPool, (i) => deps.service.preview(i));
  method(CAPACITY_PATHS.timeline, TimelineInput, onPool, (i) => deps.service.timeline(i));
  method(CAPACITY_PATHS.byDomain, ByDomainInput, onPool, (i) => deps.service.byDomain(i));
  // On the tenant, and on the pool when one is named (as byPool).
  const onTenantOrPool = (i: { tenantId: string; poolId?: string | undefined }) => (i.poolId === undefined ? onTenant(i) : { tenantId: i.tenantId, poolId: i.poolId });
  method(CAPACITY_PATHS.usage, UsageInput, onTenantOrPool, (i) => deps.service.usage(i));
  // The quota method reads one pool (authorized on it) or every pool the tenant sees (on the tenant).
  const onPoolOrTenant = (i: QuotaInput) => (i.poolId ? onPool({ tenantId: i.tenantId, poolId: i.poolId }) : onTenant(i));
  method(CAPACITY_PATHS.quota, QuotaInput, onPoolOrTenant, (i) => deps.service.quota(i));
}

/** A capacity method: its route named for the metrics, the guards, then validate, authorize on the target, run. */
function mountMethod<T>(
  app: express.Express,
  authorizer: Authorizer,
  guards: RequestHandler[],
  m: { path: string; schema: z.ZodType<T>; target: (input: T) => CapacityReadTarget; run: (input: T) => Promise<unknown> },
): void {
  app.post(
    m.path,
    (_req, res, next) => {
      locals(res).route = m.path;
      next();
    },
    ...guards,
    async (req, res) => {
      const input = parseInput(m.schema, req.body);
      await authorizer.authorizeCapacityRead(locals(res).principal!, m.target(input));
      res.json(await m.run(input));
    },
  );
}

/** No route: NOT_FOUND; and the one error translator. */
function mountFallbacks(app: express.Express, deps: AppDeps): void {
  app.use((req, _res, next) => {
    next(new ApiError('NOT_FOUND', `no route ${req.method} ${req.path}`));
  });

  // The one error translator.
  app.use((err: unknown, req: Request, res: Response, _next: NextFunction) => {
    const { status, body, internal } = toErrorResponse(err);
    if (internal) deps.log.error('request failed', { method: req.method, path: req.path, ...errorFields(err) });
    if (res.headersSent) {
      res.end();
      return;
    }
    // A body that was not read (refused before parsing) must not be taken for the next request on the connection.
    if (!req.complete) res.set('Connection', 'close');
    res.status(status).json(body);
  });
}
