// The TLS front's thread (tls-front.ts, ADR 0048): serves HTTPS at the listener's address, reads each request's body
// whole (up to the cap, within a budget shared by all connections), and hands the request to the event loop's handler
// over the private socket, with the client's connection described in a header the loop trusts only with the secret.
// A refused body (over the cap, or the budget spent) is answered here, with the connection closed; every other
// connection stays open for the client's next request (its body was read to its end), so a caller refused on the
// loop (413, 429, 403, 503) costs no new handshake either.
import http, { type IncomingHttpHeaders, type IncomingMessage, type OutgoingHttpHeaders, type ServerResponse } from 'node:http';
import type { TLSSocket } from 'node:tls';
import { parentPort, workerData } from 'node:worker_threads';
import { declaresBodyOver } from './body-cap.ts';
import { listen } from './server.ts';
import { FRONT_HEADER_PREFIX, FRONT_HEADERS, type FrontCommand, type FrontReport, type FrontRoute, type FrontWorkerData } from './tls-front.ts';
import { niceThisThread } from './worker-thread.ts';

const port = parentPort;
if (!port) throw new Error('tls-front-worker.ts runs as the worker thread of a TLS front (tls-front.ts)');
const o = workerData as FrontWorkerData;
niceThisThread(o.nice);

/** How long the loop may take to answer a request once it has it (the listener's own request timeout). */
const ANSWER_TIMEOUT_MS = 30_000;
/** Headers of one hop only, never passed on; `expect` too: the front has read the body already. */
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'te', 'trailer', 'upgrade', 'expect', 'content-length']);

// Connections to the loop, kept open; closed idle before the loop would close them (tls-front.ts keeps them 65 s).
const agent = new http.Agent({ keepAlive: true, timeout: 60_000, scheduling: 'lifo' });
let budget = o.bufferBytes;

function refuse(res: ServerResponse, status: number, code: string, message: string): void {
  const body = JSON.stringify({ error: { code, message } });
  const headers: OutgoingHttpHeaders = { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(body), connection: 'close' };
  if (status === 503) headers['retry-after'] = '1';
  res.writeHead(status, headers).end(body);
}

/** The body, read whole within the cap and the budget (released when the answer is done); undefined: answered here. */
function readBody(req: IncomingMessage, res: ServerResponse, max: number): Promise<Buffer | undefined> {
  return new Promise((resolve) => {
    const parts: Buffer[] = [];
    let length = 0;
    let held = 0;
    res.once('close', () => {
      budget += held;
      held = 0;
    });
    const finish = (b: Buffer | undefined) => {
      req.off('data', onData).off('end', onEnd).off('error', onGone).off('aborted', onGone);
      resolve(b);
    };
    const stop = (status: number, code: string, message: string) => {
      req.pause();
      parts.length = 0;
      refuse(res, status, code, message);
      finish(undefined);
    };
    const onData = (part: Buffer) => {
      length += part.length;
      if (length > max) return stop(413, 'PAYLOAD_TOO_LARGE', tooLarge(max));
      if (budget < part.length) return stop(503, 'UNAVAILABLE', 'the listener is reading too many large bodies at once; try again');
      budget -= part.length;
      held += part.length;
      parts.push(part);
    };
    const onEnd = () => finish(parts.length === 1 ? parts[0]! : Buffer.concat(parts, length));
    const onGone = () => {
      req.destroy();
      finish(undefined);
    };
    req.on('data', onData).on('end', onEnd).on('error', onGone).on('aborted', onGone);
  });
}

/** The request's headers for the loop: end-to-end ones, the body's length, the secret and the client's connection. */
function headersForLoop(req: IncomingMessage, length: number): OutgoingHttpHeaders {
  const named = new Set((req.headers.connection ?? '').toLowerCase().split(',').map((h) => h.trim()));
  const out: OutgoingHttpHeaders = {};
  for (const [name, value] of Object.entries(req.headers)) {
    if (value === undefined || HOP_BY_HOP.has(name) || named.has(name) || name.startsWith(FRONT_HEADER_PREFIX)) continue;
    out[name] = value;
  }
  const s = req.socket as TLSSocket;
  out['content-length'] = length;
  out[FRONT_HEADERS.secret] = o.secret;
  out[FRONT_HEADERS.peer] = JSON.stringify({ address: s.remoteAddress, localAddress: s.localAddress, authorized: s.authorized === true });
  return out;
}

function headersForClient(headers: IncomingHttpHeaders): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {};
  for (const [name, value] of Object.entries(headers)) if (value !== undefined && (!HOP_BY_HOP.has(name) || name === 'content-length')) out[name] = value;
  return out;
}

/** Hands the request to the loop and its answer back; a connection to the loop found closed is tried once more. */
function forward(req: IncomingMessage, res: ServerResponse, body: Buffer, retried = false): void {
  const up = http.request({ socketPath: o.socketPath, agent, method: req.method, path: req.url, headers: headersForLoop(req, body.length), timeout: ANSWER_TIMEOUT_MS });
  up.on('response', (answer) => {
    res.writeHead(answer.statusCode ?? 502, headersForClient(answer.headers));
    answer.pipe(res);
    answer.on('aborted', () => res.destroy()).on('error', () => res.destroy());
  });
  up.on('timeout', () => up.destroy(new Error('the controller did not answer in time')));
  up.on('error', (e: NodeJS.ErrnoException) => {
    if (res.headersSent || res.destroyed) return void res.destroy();
    if (!retried && up.reusedSocket && e.code === 'ECONNRESET') return forward(req, res, body, true);
    refuse(res, 503, 'UNAVAILABLE', 'the controller did not answer; try again');
  });
  res.once('close', () => {
    if (!res.writableFinished) up.destroy();
  });
  up.end(body);
}

const tooLarge = (max: number) => `the body is too large (at most ${max} bytes)`;

/** The route the request's path is under, if any. */
function routeOf(req: IncomingMessage): FrontRoute | undefined {
  const path = (req.url ?? '').split('?')[0]!;
  return o.routes.find((r) => path === r.path || path.startsWith(`${r.path}/`));
}

async function onRequest(req: IncomingMessage, res: ServerResponse): Promise<void> {
  const route = routeOf(req);
  const refusal = route?.verifiedCallersOnly;
  if (o.clientCa && refusal !== undefined && (req.socket as TLSSocket).authorized !== true) return refuse(res, 403, 'FORBIDDEN', refusal);
  if (route?.lengthRequired && req.headers['transfer-encoding'] !== undefined) return refuse(res, 411, 'LENGTH_REQUIRED', 'send the body with a Content-Length');
  const max = route?.maxBodyBytes ?? o.maxBodyBytes;
  if (declaresBodyOver(req.headers, max)) return refuse(res, 413, 'PAYLOAD_TOO_LARGE', tooLarge(max));
  const body = await readBody(req, res, max);
  if (body) forward(req, res, body);
}

function applyTls(tls: FrontWorkerData['tls'], seq: number): void {
  let error: string | undefined;
  try {
    void server.setTls(tls);
  } catch (e) {
    error = e instanceof Error ? e.message : String(e);
  }
  port!.postMessage({ type: 'tls-applied', seq, ...(error === undefined ? {} : { error }) } satisfies FrontReport);
}

const server = await listen((req, res) => void onRequest(req, res).catch(() => res.destroy()), { host: o.host, port: o.port, tls: o.tls, ...(o.clientCa ? { clientCa: o.clientCa } : {}) });
port.on('message', (m: FrontCommand) => {
  if (m.type === 'tls') applyTls(m.tls, m.seq);
  else
    void server.close(m.drainMs).then(() => {
      agent.destroy();
      port.postMessage({ type: 'closed' } satisfies FrontReport);
    });
});
port.postMessage({ type: 'listening', port: server.port, url: server.url } satisfies FrontReport);
