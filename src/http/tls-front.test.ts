// The TLS front (ADR 0048): HTTPS served from a worker thread, each request handed to the event loop's handler with its
// body read whole and its client described (peerOf); bodies over the cap, or past the front's buffer budget, refused
// by the front before the loop sees them; the private socket answers only the front; a client cannot pose as the front.
import http, { type IncomingMessage } from 'node:http';
import https from 'node:https';
import { TLSSocket } from 'node:tls';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { request } from '../../test/support/http.ts';
import { issueBundle, type TlsBundle } from '../controller/certs.ts';
import { peerOf, type Peer } from './peer.ts';
import type { RunningServer } from './server.ts';
import { FRONT_HEADERS, listenBehindFront, type FrontOptions } from './tls-front.ts';

let tlsA: TlsBundle;
let tlsB: TlsBundle;
let front: RunningServer | undefined;

interface Seen {
  method: string;
  url: string;
  body: string;
  peer: Peer;
  tlsOnLoop: boolean;
  headers: http.IncomingHttpHeaders;
}
const seen: Seen[] = [];

/** Answers with what it saw; `/slow` a little later; `/refuse` 429 with the connection closed. */
function echo(req: IncomingMessage, res: http.ServerResponse): void {
  const parts: Buffer[] = [];
  req.on('data', (p: Buffer) => parts.push(p));
  req.on('end', () => {
    const s: Seen = { method: req.method!, url: req.url!, body: Buffer.concat(parts).toString(), peer: peerOf(req), tlsOnLoop: req.socket instanceof TLSSocket, headers: req.headers };
    seen.push(s);
    const answer = JSON.stringify({ url: s.url, length: s.body.length });
    const send = () => res.writeHead(201, { 'content-type': 'application/json', 'x-echo': 'yes' }).end(answer);
    if (req.url === '/refuse') res.writeHead(429, { connection: 'close' }).end();
    else if (req.url === '/slow') setTimeout(send, 50);
    else send();
  });
}

async function start(o: Partial<FrontOptions> = {}): Promise<RunningServer> {
  front = await listenBehindFront(echo, { host: '127.0.0.1', port: 0, tls: { cert: tlsA.cert, key: tlsA.key }, maxBodyBytes: 64 * 1024, ...o });
  return front;
}

/** A POST that declares (or streams, chunked) `bytes` and sends only the first 16 KiB: answered only by a server that does not wait. */
function partialBody(url: string, ca: string, o: { declare?: number; chunked?: boolean }): Promise<{ status: number; connection: string | undefined }> {
  return new Promise((resolve, reject) => {
    const headers: Record<string, string> = { 'content-type': 'application/json', ...(o.declare ? { 'content-length': String(o.declare) } : {}) };
    const req = https.request(url, { method: 'POST', agent: false, ca, servername: 'localhost', headers }, (res) => {
      res.resume();
      resolve({ status: res.statusCode ?? 0, connection: res.headers.connection });
      req.destroy();
    });
    req.on('error', reject);
    req.setTimeout(5_000, () => req.destroy(new Error('no answer while the body was still to come')));
    if (o.chunked) {
      // Past a 64 KiB cap, then nothing more.
      for (let i = 0; i < 5; i++) req.write(Buffer.alloc(16 * 1024, 'x'));
    } else {
      req.write(Buffer.alloc(16 * 1024, 'x'));
    }
  });
}

beforeAll(() => {
  tlsA = issueBundle(Date.now(), ['localhost', '127.0.0.1']);
  tlsB = issueBundle(Date.now(), ['localhost', '127.0.0.1']);
});

afterEach(async () => {
  await front?.close(0);
  front = undefined;
  seen.length = 0;
});

describe('listenBehindFront', () => {
  it('serves HTTPS from its thread: the loop gets the request, its body whole and its client as the peer; the answer comes back', async () => {
    const f = await start();
    expect(f.url).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
    const body = JSON.stringify({ hello: 'x'.repeat(40_000) });
    const r = await request(`${f.url}/admission/pods?timeout=5s`, { method: 'POST', body, ca: tlsA.caCert });
    expect(r.status).toBe(201);
    expect(r.headers['x-echo']).toBe('yes');
    expect(r.json).toEqual({ url: '/admission/pods?timeout=5s', length: body.length });
    expect(seen).toHaveLength(1);
    expect(seen[0]!.body).toBe(body);
    expect(seen[0]!.method).toBe('POST');
    // The TLS was not on the loop: its socket is the front's, and the peer is the client's connection.
    expect(seen[0]!.tlsOnLoop).toBe(false);
    expect(seen[0]!.peer).toEqual({ address: '127.0.0.1', localAddress: '127.0.0.1', encrypted: true, authorized: false });
    expect(Object.keys(seen[0]!.headers).filter((h) => h.startsWith('x-better-compute-front'))).toEqual([]);
  });

  it('keeps a client connection open across requests, a refusal of the loop with the connection closed included', async () => {
    const f = await start();
    const agent = new https.Agent({ keepAlive: true, maxSockets: 1, ca: tlsA.caCert, servername: 'localhost' });
    const one = (path: string) =>
      new Promise<{ status: number; reused: boolean }>((resolve, reject) => {
        const req = https.request(`${f.url}${path}`, { method: 'POST', agent, headers: { 'content-type': 'application/json' } }, (res) => {
          res.resume();
          res.on('end', () => resolve({ status: res.statusCode ?? 0, reused: req.reusedSocket }));
        });
        req.on('error', reject);
        req.end('{}');
      });
    try {
      expect(await one('/a')).toEqual({ status: 201, reused: false });
      expect(await one('/refuse')).toEqual({ status: 429, reused: true });
      expect(await one('/slow')).toEqual({ status: 201, reused: true });
    } finally {
      agent.destroy();
    }
  });

  it('refuses a declared body over the cap from its headers, the loop never called, the connection closed', async () => {
    const f = await start();
    const r = await partialBody(`${f.url}/admission/pods`, tlsA.caCert, { declare: 3 * 1024 * 1024 });
    expect(r).toEqual({ status: 413, connection: 'close' });
    expect(seen).toEqual([]);
  });

  it('refuses a chunked body where it passes the cap, while the rest is still to come; the loop never called', async () => {
    const f = await start();
    const r = await partialBody(`${f.url}/admission/pods`, tlsA.caCert, { chunked: true });
    expect(r).toEqual({ status: 413, connection: 'close' });
    expect(seen).toEqual([]);
  });

  it("a route's own cap: its larger bodies refused by the front, the same body taken on another path", async () => {
    const f = await start({ routes: [{ path: '/agent/v1', maxBodyBytes: 1024 }] });
    const body = JSON.stringify({ pad: 'x'.repeat(2048) });
    const r = await request(`${f.url}/agent/v1/nodes/a/state`, { method: 'POST', body, ca: tlsA.caCert });
    expect(r.status).toBe(413);
    expect(r.json).toEqual({ error: { code: 'PAYLOAD_TOO_LARGE', message: 'the body is too large (at most 1024 bytes)' } });
    expect(seen).toEqual([]);
    expect((await request(`${f.url}/agent/v1x`, { method: 'POST', body, ca: tlsA.caCert })).status).toBe(201);
  });

  it('a route that requires a length: a chunked body refused (411) from its headers, before any of it is read', async () => {
    const f = await start({ routes: [{ path: '/admission', lengthRequired: true }] });
    expect(await partialBody(`${f.url}/admission/pods`, tlsA.caCert, { chunked: true })).toEqual({ status: 411, connection: 'close' });
    expect(seen).toEqual([]);
    expect((await request(`${f.url}/admission/pods`, { method: 'POST', body: '{}', ca: tlsA.caCert })).status).toBe(201);
  });

  it('refuses bodies past its buffer budget with 503 (Retry-After), and takes them again once the budget is free', async () => {
    const f = await start({ bufferBytes: 32 * 1024 });
    const big = 'x'.repeat(48 * 1024);
    const r = await request(`${f.url}/a`, { method: 'POST', body: big, ca: tlsA.caCert });
    expect(r.status).toBe(503);
    expect(r.headers['retry-after']).toBe('1');
    expect(seen).toEqual([]);
    expect((await request(`${f.url}/a`, { method: 'POST', body: 'x'.repeat(16 * 1024), ca: tlsA.caCert })).status).toBe(201);
  });

  it('with a client CA: a path for verified callers only refuses the others before their body; other paths answer them', async () => {
    const f = await start({ clientCa: tlsB.caCert, routes: [{ path: '/admission', verifiedCallersOnly: 'verified callers only' }] });
    const r = await request(`${f.url}/admission/pods`, { method: 'POST', body: '{}', ca: tlsA.caCert });
    expect(r.status).toBe(403);
    expect(r.json).toEqual({ error: { code: 'FORBIDDEN', message: 'verified callers only' } });
    expect(await partialBody(`${f.url}/admission/pods`, tlsA.caCert, { declare: 1024 })).toEqual({ status: 403, connection: 'close' });
    expect(seen).toEqual([]);
    expect((await request(`${f.url}/admissions-elsewhere`, { method: 'POST', body: '{}', ca: tlsA.caCert })).status).toBe(201);
    expect(seen[0]!.peer.authorized).toBe(false);
  });

  it('a client cannot pose as the front: its own front headers are dropped', async () => {
    const f = await start();
    const forged = JSON.stringify({ address: '10.0.0.1', authorized: true });
    const r = await request(`${f.url}/a`, { method: 'POST', body: '{}', ca: tlsA.caCert, headers: { [FRONT_HEADERS.peer]: forged, [FRONT_HEADERS.secret]: 'guess' } });
    expect(r.status).toBe(201);
    expect(seen[0]!.peer).toMatchObject({ address: '127.0.0.1', authorized: false });
  });

  it('its private socket answers only the front: a request without the secret is refused, the handler never called', async () => {
    const f = await start();
    const socketPath = f.server.address() as string;
    const status = await new Promise<number>((resolve, reject) => {
      const req = http.request({ socketPath, path: '/a', method: 'POST', headers: { [FRONT_HEADERS.peer]: JSON.stringify({ authorized: true }) } }, (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      });
      req.on('error', reject);
      req.end('{}');
    });
    expect(status).toBe(403);
    expect(seen).toEqual([]);
  });

  it('setTls resolves once new connections get the new certificate; a key that does not fit is refused, the old kept', async () => {
    const f = await start();
    expect((await request(`${f.url}/a`, { method: 'POST', body: '{}', ca: tlsA.caCert })).status).toBe(201);
    await f.setTls({ cert: tlsB.cert, key: tlsB.key });
    // Resolved: the thread serves it to the next connection.
    expect((await request(`${f.url}/a`, { method: 'POST', body: '{}', ca: tlsB.caCert })).status).toBe(201);
    await expect(request(`${f.url}/a`, { method: 'POST', body: '{}', ca: tlsA.caCert })).rejects.toThrow();
    await expect(f.setTls({ cert: tlsA.cert, key: tlsB.key })).rejects.toThrow(/refused the new certificate/);
    expect((await request(`${f.url}/a`, { method: 'POST', body: '{}', ca: tlsB.caCert })).status).toBe(201);
  });

  it('close(): the port is free again', async () => {
    const f = await start();
    const port = f.port;
    await f.close(0);
    front = undefined;
    await expect(request(`https://127.0.0.1:${port}/a`, { ca: tlsA.caCert, timeoutMs: 2_000 })).rejects.toThrow();
    const again = await start({ port });
    expect(again.port).toBe(port);
  });
});
