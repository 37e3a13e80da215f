// An HTTPS listener whose TLS runs in a worker thread of its own (ADR 0048): the handshakes, the decryption and the
// reading of request bodies (each up to a cap) happen off the event loop that also serves the scheduler extender. The
// front (tls-front-worker.ts) answers what it can alone (a body declared or grown past the cap: 413; its buffers full:
// 503) and hands every other request, its body read whole, to this thread over a private local socket, with what it
// knows of the client's connection (peer address, client certificate verified: peer.ts). The loop's handler sees the
// same requests and answers them as it would have on its own listener.
import { randomBytes, timingSafeEqual } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import http, { type IncomingMessage, type RequestListener, type ServerResponse } from 'node:http';
import os from 'node:os';
import path from 'node:path';
import type { Worker } from 'node:worker_threads';
import { z } from 'zod';
import { setPeer } from './peer.ts';
import { closeServer, TIMEOUTS, type RunningServer, type TlsMaterial } from './server.ts';
import { siblingScript, startWorker } from './worker-thread.ts';

/** The front's nice value (a thread's own on Linux): on a pod short of CPU, the extender's loop runs first. */
export const FRONT_NICE = 10;
/** Bytes of request bodies the front holds at once, all connections together (default); past it, 503. */
export const FRONT_BUFFER_BYTES = 16 * 1024 * 1024;

/** Headers the front adds to each request it hands over (a client's own are dropped). */
export const FRONT_HEADERS = { secret: 'x-better-compute-front-secret', peer: 'x-better-compute-front-peer' } as const;
export const FRONT_HEADER_PREFIX = 'x-better-compute-front-';

/** What the front knows of a path (and those under it): its body cap, whether only verified callers are answered. */
export interface FrontRoute {
  path: string;
  /** Larger bodies are refused by the front (413); default the listener's maxBodyBytes. */
  maxBodyBytes?: number | undefined;
  /**
   * With clientCa: a caller without a verified certificate is refused (403 FORBIDDEN with this message) before its
   * body is read, as the router behind would (ADR 0034).
   */
  verifiedCallersOnly?: string | undefined;
  /**
   * A body must declare its length: one sent chunked is refused (411 LENGTH_REQUIRED) from its headers, before any of it
   * is decrypted. For a route whose callers always send a Content-Length (the API server's admission calls).
   */
  lengthRequired?: boolean | undefined;
}

export interface FrontOptions {
  host: string;
  port: number;
  tls: TlsMaterial;
  /** Ask clients for a certificate and mark those this CA bundle verifies (server.ts, ADR 0034). */
  clientCa?: string | undefined;
  /** The routes behind, as the front treats them. */
  routes?: readonly FrontRoute[] | undefined;
  /** The largest body taken on a path of no route: larger ones are refused by the front (413). */
  maxBodyBytes: number;
  /** Default FRONT_BUFFER_BYTES. */
  bufferBytes?: number;
  /** Default FRONT_NICE. */
  nice?: number;
  /** Told when the front's thread ended unexpectedly (it is started again). */
  onRestart?: (error: Error) => void;
}

/** What the worker is started with. */
export interface FrontWorkerData {
  host: string;
  port: number;
  tls: TlsMaterial;
  clientCa: string | undefined;
  routes: readonly FrontRoute[];
  socketPath: string;
  secret: string;
  maxBodyBytes: number;
  bufferBytes: number;
  nice: number;
}

export type FrontCommand = { type: 'tls'; tls: TlsMaterial; seq: number } | { type: 'close'; drainMs: number };
export type FrontReport = { type: 'listening'; port: number; url: string } | { type: 'tls-applied'; seq: number; error?: string } | { type: 'closed' };

const PeerSchema = z.object({ address: z.string().max(64).optional(), localAddress: z.string().max(64).optional(), authorized: z.boolean() });

/** Where this thread listens for the front: an abstract unix socket on Linux (no file), else one in a private folder. */
function privateSocket(): { path: string; remove(): void } {
  const name = `better-compute-front-${process.pid}-${randomBytes(8).toString('hex')}`;
  if (process.platform === 'linux') return { path: `\0${name}`, remove: () => undefined };
  const dir = mkdtempSync(path.join(os.tmpdir(), 'bc-front-'));
  return { path: path.join(dir, 'front.sock'), remove: () => rmSync(dir, { recursive: true, force: true }) };
}

function sameSecret(told: string | string[] | undefined, secret: string): boolean {
  if (typeof told !== 'string' || told.length !== secret.length) return false;
  return timingSafeEqual(Buffer.from(told), Buffer.from(secret));
}

/** The loop's side: a request from the front (its secret shown) reaches `handler` with its client as the peer. */
function fromFront(handler: RequestListener, secret: string): RequestListener {
  return (req: IncomingMessage, res: ServerResponse) => {
    const told = req.headers[FRONT_HEADERS.peer];
    let peer: z.infer<typeof PeerSchema> | undefined;
    if (sameSecret(req.headers[FRONT_HEADERS.secret], secret) && typeof told === 'string') {
      try {
        peer = PeerSchema.parse(JSON.parse(told));
      } catch {
        peer = undefined;
      }
    }
    if (!peer) {
      res.writeHead(403, { connection: 'close' }).end();
      return;
    }
    delete req.headers[FRONT_HEADERS.secret];
    delete req.headers[FRONT_HEADERS.peer];
    setPeer(req, { address: peer.address, localAddress: peer.localAddress, encrypted: true, authorized: peer.authorized });
    handler(req, res);
  };
}

/** Starts the front's worker; resolves once it listens. */
function startFront(data: FrontWorkerData): Promise<{ worker: Worker; port: number; url: string }> {
  const worker = startWorker(siblingScript(import.meta.url, 'tls-front-worker'), data);
  return new Promise((resolve, reject) => {
    const failed = (e: Error) => reject(e);
    const exited = (code: number) => reject(new Error(`the TLS front exited (code ${code}) before it listened`));
    worker.once('error', failed).once('exit', exited);
    worker.once('message', (m: FrontReport) => {
      worker.off('error', failed).off('exit', exited);
      if (m.type === 'listening') resolve({ worker, port: m.port, url: m.url });
      else reject(new Error(`the TLS front answered ${m.type} before it listened`));
    });
  });
}

async function listenInner(handler: RequestListener, secret: string): Promise<{ server: http.Server; socketPath: string; remove(): void }> {
  const socket = privateSocket();
  // Idle connections from the front are kept longer than the front keeps them (tls-front-worker.ts): it closes first.
  const server = http.createServer({ ...TIMEOUTS, keepAliveTimeout: 65_000 }, fromFront(handler, secret));
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(socket.path, () => {
      server.off('error', reject);
      resolve();
    });
  });
  return { server, socketPath: socket.path, remove: socket.remove };
}

/**
 * `handler` served over HTTPS at host:port, its TLS in a worker thread (see the top of this file). setTls and close
 * behave as listen()'s (server.ts); `server` is this thread's side (the front's requests), not the HTTPS listener.
 */
export async function listenBehindFront(handler: RequestListener, o: FrontOptions): Promise<RunningServer> {
  const secret = randomBytes(24).toString('base64url');
  const inner = await listenInner(handler, secret);
  const data: FrontWorkerData = {
    host: o.host,
    port: o.port,
    tls: o.tls,
    clientCa: o.clientCa,
    routes: o.routes ?? [],
    socketPath: inner.socketPath,
    secret,
    maxBodyBytes: o.maxBodyBytes,
    bufferBytes: o.bufferBytes ?? FRONT_BUFFER_BYTES,
    nice: o.nice ?? FRONT_NICE,
  };
  let front: Awaited<ReturnType<typeof startFront>>;
  try {
    front = await startFront(data);
  } catch (e) {
    await closeServer(inner.server, 0);
    inner.remove();
    throw e;
  }
  return frontServer(inner, data, front, o.onRestart);
}

/**
 * setTls calls waiting for the front's acknowledgement, by sequence number. `data.tls` is what a thread started again
 * serves: the newest material, or the one before it when the thread refused the newest.
 */
function tlsAcks(data: FrontWorkerData) {
  let seq = 0;
  const waiting = new Map<number, { resolve(): void; reject(e: Error): void; before: TlsMaterial }>();
  return {
    last: () => seq,
    expect(tls: TlsMaterial): { seq: number; done: Promise<void> } {
      const before = data.tls;
      data.tls = tls;
      const n = ++seq;
      return { seq: n, done: new Promise<void>((resolve, reject) => waiting.set(n, { resolve, reject, before })) };
    },
    /** Every call up to `upTo` settled: applied, or refused with `error`. */
    settle(upTo: number, error?: string): void {
      for (const [n, p] of waiting) {
        if (n > upTo) continue;
        waiting.delete(n);
        if (error === undefined) p.resolve();
        else {
          // Refused by the thread (a key that does not fit, say): it serves what it served, and so does a restart.
          if (n === seq) data.tls = p.before;
          p.reject(new Error(`the TLS front refused the new certificate: ${error}`));
        }
      }
    },
  };
}

function frontServer(
  inner: Awaited<ReturnType<typeof listenInner>>,
  data: FrontWorkerData,
  first: Awaited<ReturnType<typeof startFront>>,
  onRestart: FrontOptions['onRestart'],
): RunningServer {
  let front = first;
  let closing: Promise<void> | undefined;
  const acks = tlsAcks(data);
  const settleTls = acks.settle;
  // The port it got (port 0: any), kept across restarts.
  data.port = front.port;
  const watch = (w: Worker) => {
    w.on('message', (m: FrontReport) => m.type === 'tls-applied' && settleTls(m.seq, m.error));
    w.once('exit', (code) => {
      if (closing || w !== front.worker) return;
      onRestart?.(new Error(`the TLS front exited (code ${code})`));
      const again = () => {
        if (closing) return;
        startFront(data).then(
          (f) => {
            watch((front = f).worker);
            settleTls(acks.last());
          },
          () => setTimeout(again, 1_000).unref(),
        );
      };
      again();
    });
  };
  watch(front.worker);
  return {
    server: inner.server,
    port: front.port,
    url: front.url,
    setTls(tls) {
      const { seq, done } = acks.expect(tls);
      front.worker.postMessage({ type: 'tls', tls, seq } satisfies FrontCommand);
      return done;
    },
    close(drainMs = 10_000) {
      closing ??= (async () => {
        const w = front.worker;
        const closed = new Promise<void>((resolve) => {
          w.once('exit', () => resolve());
          w.on('message', (m: FrontReport) => m.type === 'closed' && resolve());
        });
        w.postMessage({ type: 'close', drainMs } satisfies FrontCommand);
        await closed;
        await w.terminate();
        settleTls(acks.last());
        await closeServer(inner.server, Math.min(drainMs, 1_000));
        inner.remove();
      })();
      return closing;
    },
  };
}
