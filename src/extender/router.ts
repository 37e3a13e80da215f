// The extender's HTTP transport: cap the body, decode with zod, call the service, encode. Mounted by the controller on
// its own listener (loopback by default: only kube-scheduler in the same pod reaches it).
import express, { type NextFunction, type Request, type RequestHandler, type Response, type Router } from 'express';
import type { z } from 'zod';
import { errorFields, silentLogger, type Logger } from '../log.ts';
import { ExtenderService, type ExtenderDeps } from './service.ts';
import { ExtenderArgsSchema, ExtenderBindingArgsSchema } from './wire.ts';

export type { ExtenderDeps } from './service.ts';

/**
 * The largest request body read, in bytes. kube-scheduler (nodeCacheCapable) sends the Pod and the names of the nodes
 * that passed its own filters: for 5,000 nodes with the longest legal names (253 bytes) that is 1.3 MB, beside a Pod
 * of at most etcd's 1.5 MiB object limit. A full NodeList (nodeCacheCapable: false) does not fit and is not supported.
 */
export const EXTENDER_MAX_BODY_BYTES = 4 * 1024 * 1024;

function parser(log: Logger) {
  return <S extends z.ZodType>(schema: S, req: Request, res: Response, onError: (message: string) => unknown): z.infer<S> | undefined => {
    const r = schema.safeParse(req.body);
    if (r.success) return r.data;
    const message = `invalid extender request: ${r.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`;
    log.warn('extender request refused', { path: req.originalUrl, status: 400, error: message.slice(0, 500) });
    res.status(400).json(onError(message));
    return undefined;
  };
}

/** Refuses a request whose Content-Length is over `max` with 413, before anything of the body is read. */
export function capBody(max: number, log: Logger): RequestHandler {
  return (req, res, next) => {
    const declared = req.get('content-length');
    if (declared !== undefined && !(/^\d+$/.test(declared) && Number(declared) <= max)) {
      log.warn('extender request refused', { path: req.originalUrl, contentLength: declared, max, status: 413 });
      // The body stays unread: the connection is closed after the answer.
      res.set('Connection', 'close');
      res.status(413).json({ Error: `request body of ${declared} bytes is over the extender's limit of ${max} bytes` });
      return;
    }
    next();
  };
}

export interface ExtenderRouterOptions {
  /** Default EXTENDER_MAX_BODY_BYTES. */
  maxBodyBytes?: number;
  /** For refusals before the service is called (oversized or malformed bodies); default: the service's log. */
  log?: Logger;
}

/** POST /scheduler/filter, /scheduler/prioritize, /scheduler/bind. Pass a service, or its dependencies. */
export function createExtenderRouter(deps: ExtenderDeps | { service: ExtenderService }, opts: ExtenderRouterOptions = {}): Router {
  const service = 'service' in deps ? deps.service : new ExtenderService(deps);
  const log = opts.log ?? ('log' in deps ? deps.log : silentLogger);
  const max = opts.maxBodyBytes ?? EXTENDER_MAX_BODY_BYTES;
  const parse = parser(log);
  const router = express.Router();
  router.use(capBody(max, log));
  // A body without Content-Length (chunked) is cut off at the same size while it is read.
  router.use(express.json({ limit: max, type: () => true }));
  router.post('/filter', async (req, res) => {
    const args = parse(ExtenderArgsSchema, req, res, (m) => ({ Nodes: null, NodeNames: null, FailedNodes: {}, FailedAndUnresolvableNodes: {}, Error: m }));
    if (!args) return;
    try {
      res.json(await service.filter(args));
    } catch (e) {
      res.json({ Nodes: null, NodeNames: null, FailedNodes: {}, FailedAndUnresolvableNodes: {}, Error: (e as Error).message });
    }
  });
  router.post('/prioritize', async (req, res) => {
    const args = parse(ExtenderArgsSchema, req, res, () => []);
    if (!args) return;
    try {
      res.json(await service.prioritize(args));
    } catch (e) {
      res.status(500).json({ error: { code: 'INTERNAL', message: (e as Error).message } });
    }
  });
  router.post('/bind', async (req, res) => {
    const args = parse(ExtenderBindingArgsSchema, req, res, (m) => ({ Error: m }));
    if (!args) return;
    res.json(await service.bind(args));
  });
  // Bodies the JSON reader refused: too large (chunked), not JSON, aborted.
  router.use((err: unknown, req: Request, res: Response, next: NextFunction) => {
    const status = typeof err === 'object' && err !== null && 'status' in err && typeof err.status === 'number' ? err.status : 500;
    if (status >= 500) return next(err);
    log.warn('extender request refused', { path: req.originalUrl, status, ...errorFields(err) });
    if (!req.complete) res.set('Connection', 'close');
    res.status(status).json({ Error: `invalid extender request: ${(err as Error).message}` });
  });
  return router;
}
