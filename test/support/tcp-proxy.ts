// A TCP proxy on loopback in front of a server (the test PostgreSQL), which can stall: while stalled it accepts
// connections and reads what either side sends but forwards nothing, as a network partition or a frozen server would;
// resume() delivers what was held and forwards again.
import net from 'node:net';

export interface TcpProxy {
  readonly port: number;
  /** `url` (postgres://...) with its host and port replaced by the proxy's. */
  via(url: string): string;
  stall(): void;
  resume(): void;
  close(): Promise<void>;
}

export async function startTcpProxy(target: { host: string; port: number }): Promise<TcpProxy> {
  let stalled = false;
  const pipes = new Set<{ flush(): void; destroy(): void }>();
  const server = net.createServer((client) => {
    const upstream = net.connect(target.port, target.host);
    const held: [net.Socket, Buffer][] = [];
    const forward = (to: net.Socket) => (chunk: Buffer) => {
      if (stalled) held.push([to, chunk]);
      else to.write(chunk);
    };
    client.on('data', forward(upstream));
    upstream.on('data', forward(client));
    const pipe = {
      flush() {
        for (const [to, chunk] of held.splice(0)) to.write(chunk);
      },
      destroy() {
        client.destroy();
        upstream.destroy();
      },
    };
    pipes.add(pipe);
    const end = () => {
      pipes.delete(pipe);
      pipe.destroy();
    };
    for (const s of [client, upstream]) {
      s.on('error', end);
      s.on('close', end);
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as net.AddressInfo).port;
  return {
    port,
    via(url) {
      const u = new URL(url);
      u.hostname = '127.0.0.1';
      u.port = String(port);
      return u.toString();
    },
    stall() {
      stalled = true;
    },
    resume() {
      stalled = false;
      for (const p of pipes) p.flush();
    },
    async close() {
      for (const p of pipes) p.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
