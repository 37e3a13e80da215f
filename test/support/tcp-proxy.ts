// A TCP proxy in front of a server, for tests: the stalled-database test, the soak (the API server for the
// controllers, the extender for kube-scheduler), and pods reaching a database on this host. It forwards to the first
// target that accepts a connection (so a forwarder in front of replicas survives a replica's death), and injects
// transport faults on demand: a stall (nothing flows in either direction, connections stay open, as in a network
// partition or a frozen server), a reset (every open connection destroyed), and a refusal (new connections closed at
// once). TLS passes through untouched, so clients keep verifying the real server.
import net from 'node:net';

export interface Target {
  host: string;
  port: number;
}

export class TcpProxy {
  private readonly server = net.createServer((c) => this.accept(c));
  private readonly open = new Set<{ client: net.Socket; upstream: net.Socket }>();
  private stalled = false;
  private refusing = false;
  private host = '127.0.0.1';
  port = 0;

  constructor(private readonly targets: () => Target[]) {}

  /** Listens on `host` (loopback by default), on a free port. */
  async listen(host = '127.0.0.1'): Promise<void> {
    this.host = host;
    await new Promise<void>((resolve) => this.server.listen(0, host, resolve));
    this.port = (this.server.address() as net.AddressInfo).port;
  }

  /** Nothing flows from now until resume(); open connections and new ones wait. */
  stall(): void {
    this.stalled = true;
    for (const p of this.open) {
      p.client.pause();
      p.upstream.pause();
    }
  }

  resume(): void {
    this.stalled = false;
    for (const p of this.open) {
      p.client.resume();
      p.upstream.resume();
    }
  }

  /** A stall of `ms`. */
  async stallFor(ms: number): Promise<void> {
    this.stall();
    await new Promise((r) => setTimeout(r, ms));
    this.resume();
  }

  /** `url` (postgres://...) with its host and port replaced by the proxy's. */
  via(url: string): string {
    const u = new URL(url);
    u.hostname = this.host;
    u.port = String(this.port);
    return u.toString();
  }

  /** Every open connection is destroyed (clients see a reset mid-request or mid-watch). */
  reset(): number {
    const n = this.open.size;
    for (const p of this.open) {
      p.client.destroy();
      p.upstream.destroy();
    }
    this.open.clear();
    return n;
  }

  /** New connections are closed at once for `ms`, and open ones reset. */
  async refuse(ms: number): Promise<void> {
    this.refusing = true;
    this.reset();
    await new Promise((r) => setTimeout(r, ms));
    this.refusing = false;
  }

  async close(): Promise<void> {
    this.reset();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private accept(client: net.Socket): void {
    if (this.refusing) {
      client.destroy();
      return;
    }
    // Until it is piped, what the client sends stays in its socket's buffer.
    client.on('error', () => undefined);
    void this.connect(this.targets()).then(
      (upstream) => {
        if (client.destroyed) {
          upstream.destroy();
          return;
        }
        const pair = { client, upstream };
        this.open.add(pair);
        const end = () => {
          this.open.delete(pair);
          client.destroy();
          upstream.destroy();
        };
        upstream.on('error', end).on('close', end);
        client.on('close', end);
        client.pipe(upstream);
        upstream.pipe(client);
        // pipe() resumes its source: a stall begun meanwhile pauses both again.
        if (this.stalled) {
          client.pause();
          upstream.pause();
        }
      },
      () => client.destroy(),
    );
  }

  private async connect(targets: Target[]): Promise<net.Socket> {
    for (const t of targets) {
      const s = await new Promise<net.Socket | undefined>((resolve) => {
        const sock = net.connect(t.port, t.host);
        const fail = () => {
          sock.destroy();
          resolve(undefined);
        };
        sock.setTimeout(2000, fail);
        sock.once('error', fail);
        sock.once('connect', () => {
          sock.setTimeout(0);
          sock.removeListener('error', fail);
          resolve(sock);
        });
      });
      if (s) return s;
    }
    throw new Error('no target accepted the connection');
  }
}

/** A proxy on loopback in front of one server, listening. */
export async function startTcpProxy(target: Target): Promise<TcpProxy> {
  const p = new TcpProxy(() => [target]);
  await p.listen();
  return p;
}
