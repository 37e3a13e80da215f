// Listening and graceful shutdown for the HTTP API.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { RequestListener } from 'node:http';

export interface RunningServer {
  readonly server: http.Server;
  /** e.g. http://127.0.0.1:8080 */
  readonly url: string;
  readonly port: number;
  /**
   * Stops accepting connections, lets requests in flight finish (closing idle keep-alive connections at once), and
   * after `drainMs` closes whatever is still open.
   */
  close(drainMs?: number): Promise<void>;
}

export async function listen(handler: RequestListener, opts: { host: string; port: number }): Promise<RunningServer> {
  const server = http.createServer({ keepAliveTimeout: 5_000, headersTimeout: 10_000, requestTimeout: 30_000 }, handler);
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
    url: `http://${host}:${port}`,
    close(drainMs = 10_000) {
      closing ??= new Promise<void>((resolve) => {
        const force = setTimeout(() => server.closeAllConnections(), drainMs);
        force.unref();
        server.close(() => {
          clearTimeout(force);
          resolve();
        });
        server.closeIdleConnections();
      });
      return closing;
    },
  };
}
