// Listening and graceful shutdown for the HTTP(S) listeners.
import http from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import type { RequestListener } from 'node:http';

/** A serving certificate chain and its key (PEM), and optionally the CA bundle clients are told about. */
export interface TlsMaterial {
  cert: string;
  key: string;
  ca?: string;
}

export interface RunningServer {
  readonly server: http.Server | https.Server;
  /** e.g. http://127.0.0.1:8080 or https://127.0.0.1:9443 */
  readonly url: string;
  readonly port: number;
  /**
   * HTTPS only: replaces the certificate and key for new connections (rotation); resolves once new connections get them
   * (at once here; a TLS front's thread first acknowledges); throws on a plain HTTP server.
   */
  setTls(tls: TlsMaterial): Promise<void>;
  /**
   * Stops accepting connections, lets requests in flight finish (closing idle keep-alive connections at once), and
   * after `drainMs` closes whatever is still open.
   */
  close(drainMs?: number): Promise<void>;
}

export const TIMEOUTS = { keepAliveTimeout: 5_000, headersTimeout: 10_000, requestTimeout: 30_000 };

/**
 * HTTP, or HTTPS with `tls`. With `clientCa` too (PEM), every client is asked for a certificate and the ones that CA
 * signed are marked verified (`socket.authorized`); a client that sends none, or another, still connects: the routers
 * decide (ADR 0034). The client CA is part of the secure context, so setTls keeps it.
 */
export async function listen(
  handler: RequestListener,
  opts: { host: string; port: number; tls?: TlsMaterial; clientCa?: string },
): Promise<RunningServer> {
  if (opts.clientCa && !opts.tls) throw new Error('a client CA needs TLS');
  const clientCa = opts.clientCa;
  const context = (tls: TlsMaterial) => ({ cert: tls.cert, key: tls.key, minVersion: 'TLSv1.2' as const, ...(clientCa ? { ca: clientCa } : {}) });
  const server: http.Server | https.Server = opts.tls
    ? https.createServer({ ...TIMEOUTS, ...context(opts.tls), ...(clientCa ? { requestCert: true, rejectUnauthorized: false } : {}) }, handler)
    : http.createServer(TIMEOUTS, handler);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port, opts.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const { port } = server.address() as AddressInfo;
  const host = opts.host.includes(':') ? `[${opts.host}]` : opts.host;
  let closing: Promise<void> | undefined;
  return {
    server,
    port,
    url: `${opts.tls ? 'https' : 'http'}://${host}:${port}`,
    setTls(tls) {
      if (!(server instanceof https.Server)) throw new Error('setTls on a plain HTTP listener');
      server.setSecureContext(context(tls));
      return Promise.resolve();
    },
    close(drainMs = 10_000) {
      closing ??= closeServer(server, drainMs);
      return closing;
    },
  };
}

/**
 * Stops accepting connections, lets requests in flight finish (closing idle keep-alive connections at once), and after
 * `drainMs` closes whatever is still open.
 */
export function closeServer(server: http.Server, drainMs: number): Promise<void> {
  return new Promise<void>((resolve) => {
    const force = setTimeout(() => server.closeAllConnections(), drainMs);
    force.unref();
    server.close(() => {
      clearTimeout(force);
      resolve();
    });
    server.closeIdleConnections();
  });
}
