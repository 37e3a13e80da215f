// The extender's HTTP transport, the whole of the controller's extender listener: POST /scheduler/filter,
// /scheduler/prioritize and /scheduler/bind, nothing else. Caps the body, decodes with zod, calls the service, encodes.
// Plain node:http, not express: kube-scheduler makes three calls per pod, and express's routing, body parser and
// response helpers cost about as much server time per call as a bind's own answer (ADR 0025).
// Loopback by default: only kube-scheduler in the same pod reaches it.
import type { IncomingMessage, RequestListener, ServerResponse } from 'node:http';
import type { z } from 'zod';
import { toErrorResponse } from '../http/errors.ts';
import { errorFields, silentLogger, type Logger } from '../log.ts';
import { ExtenderService, type ExtenderDeps } from './service.ts';
import { ExtenderArgsSchema, ExtenderBindingArgsSchema, parseExtenderBody } from './wire.ts';

export type { ExtenderDeps } from './service.ts';

/**
 * The largest request body read, in bytes. kube-scheduler (nodeCacheCapable) sends the Pod and the names of the nodes
 * that passed its own filters: for 5,000 nodes with the longest legal names (253 bytes) that is 1.3 MB, beside a Pod
 * of at most etcd's 1.5 MiB object limit. A full NodeList (nodeCacheCapable: false) does not fit and is not supported.
 */
export const EXTENDER_MAX_BODY_BYTES = 4 * 1024 * 1024;

const EXTENDER_PATHS = '/scheduler/{filter,prioritize,bind}';

/** A JSON answer; `close`: the connection is closed after it (a body left unread). */
function send(res: ServerResponse, status: number, body: unknown, close = false): void {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    'Content-Type': 'application/json; charset=utf-8',
    'Content-Length': Buffer.byteLength(text),
    ...(close ? { Connection: 'close' } : {}),
  });
  res.end(text);
}

type BodyRead = { ok: true; body: Buffer } | { ok: false; status: number; message: string } | { ok: false; gone: true };

/**
 * The request's body, at most EXTENDER_MAX_BODY_BYTES: refused from its Content-Length before anything is read (413),
 * cut off at the cap while it is read when it comes without one (413), refused when encoded (415: kube-scheduler sends
 * it plain).
 * `gone`: the client went away; there is no one to answer.
 */
function readBody(req: IncomingMessage): Promise<BodyRead> {
  const max = EXTENDER_MAX_BODY_BYTES;
  const declared = req.headers['content-length'];
  if (declared !== undefined && !(/^\d+$/.test(declared) && Number(declared) <= max)) {
    return Promise.resolve({ ok: false, status: 413, message: `request body of ${declared} bytes is over the extender's limit of ${max} bytes` });
  }
  const encoding = req.headers['content-encoding'];
  if (encoding !== undefined && encoding.toLowerCase() !== 'identity') {
    return Promise.resolve({ ok: false, status: 415, message: `invalid extender request: content encoding ${JSON.stringify(encoding).slice(0, 100)} is not supported` });
  }
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const done = (r: BodyRead) => {
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', onGone);
      req.off('aborted', onGone);
      resolve(r);
    };
    const onData = (c: Buffer) => {
      size += c.length;
      if (size > max) {
        req.pause();
        done({ ok: false, status: 413, message: `invalid extender request: request body over the extender's limit of ${max} bytes` });
      } else chunks.push(c);
    };
    const onEnd = () => done({ ok: true, body: chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size) });
    const onGone = () => done({ ok: false, gone: true });
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('error', onGone);
    req.on('aborted', onGone);
  });
}

interface Verb {
  schema: z.ZodType;
  /** The answer to a body that does not decode. */
  refused(message: string): unknown;
  answer(args: never): Promise<{ status: number; body: unknown }>;
}

/** The three verbs by path: the schema of each one's body, its answer to a body that does not decode, its answer. */
function extenderVerbs(service: ExtenderService): Map<string, Verb> {
  const filterRefusal = (m: string) => ({ Nodes: null, NodeNames: null, FailedNodes: {}, FailedAndUnresolvableNodes: {}, Error: m });
  return new Map<string, Verb>([
    [
      '/scheduler/filter',
      {
        schema: ExtenderArgsSchema,
        refused: filterRefusal,
        // kube-scheduler reads a filter's failure from the answer's Error.
        answer: (args: z.infer<typeof ExtenderArgsSchema>) =>
          service.filter(args).then(
            (body) => ({ status: 200, body }),
            (e: unknown) => ({ status: 200, body: filterRefusal((e as Error).message) }),
          ),
      },
    ],
    [
      '/scheduler/prioritize',
      {
        schema: ExtenderArgsSchema,
        refused: () => [],
        answer: (args: z.infer<typeof ExtenderArgsSchema>) =>
          service.prioritize(args).then(
            (body) => ({ status: 200, body }),
            (e: unknown) => ({ status: 500, body: { error: { code: 'INTERNAL', message: (e as Error).message } } }),
          ),
      },
    ],
    [
      '/scheduler/bind',
      {
        schema: ExtenderBindingArgsSchema,
        refused: (m) => ({ Error: m }),
        answer: async (args: z.infer<typeof ExtenderBindingArgsSchema>) => ({ status: 200, body: await service.bind(args) }),
      },
    ],
  ]);
}

/** The extender listener. Pass a service, or its dependencies. */
export function createExtenderListener(deps: ExtenderDeps | { service: ExtenderService }): RequestListener {
  const service = 'service' in deps ? deps.service : new ExtenderService(deps);
  // Refusals before the service is called (oversized or malformed bodies) go to the dependencies' log; with a service
  // built elsewhere (tests, benches) they are not logged.
  const log: Logger = 'log' in deps ? deps.log : silentLogger;
  const verbs = extenderVerbs(service);

  const refuse = (req: IncomingMessage, res: ServerResponse, status: number, body: unknown, error: string) => {
    log.warn('extender request refused', { path: req.url, status, error: error.slice(0, 500) });
    // A body left unread closes the connection after the answer.
    send(res, status, body, !req.complete);
  };

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const q = req.url?.indexOf('?') ?? -1;
    const path = q < 0 ? req.url : req.url!.slice(0, q);
    const verb = req.method === 'POST' && path ? verbs.get(path) : undefined;
    if (!verb) {
      const message = `no route ${req.method} ${path} (this listener serves ${EXTENDER_PATHS} only)`;
      send(res, 404, { error: { code: 'NOT_FOUND', message } }, !req.complete);
      return;
    }
    const read = await readBody(req);
    if (!read.ok) {
      if ('gone' in read) return void res.destroy();
      return refuse(req, res, read.status, { Error: read.message }, read.message);
    }
    let json: unknown;
    try {
      json = parseExtenderBody(read.body);
    } catch (e) {
      const message = `invalid extender request: ${(e as Error).message}`;
      return refuse(req, res, 400, { Error: message }, message);
    }
    const r = verb.schema.safeParse(json);
    if (!r.success) {
      const message = `invalid extender request: ${r.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`;
      return refuse(req, res, 400, verb.refused(message), message);
    }
    const { status, body } = await verb.answer(r.data as never);
    send(res, status, body);
  };

  return (req, res) => {
    handle(req, res).catch((e: unknown) => {
      const { status, body, internal } = toErrorResponse(e);
      if (internal) log.error('request failed', { listener: 'extender', method: req.method, path: req.url, ...errorFields(e) });
      if (res.headersSent) res.end();
      else send(res, status, body, !req.complete);
    });
  };
}
