// API calls through a PooledKubeConfig share kept-alive TLS connections; the library's own KubeConfig opens one per
// call. Counted on a local HTTPS server as the API server would see them.
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { CoreV1Api, KubeConfig, Watch } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { issueBundle } from '../controller/certs.ts';
import { PooledKubeConfig } from './connections.ts';

let server: https.Server;
let url: string;
let caData: string;
let handshakes = 0;

beforeAll(async () => {
  const b = issueBundle(Date.now(), ['127.0.0.1', 'localhost']);
  caData = Buffer.from(b.caCert).toString('base64');
  server = https.createServer({ cert: b.cert, key: b.key }, (req, res) => {
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: req.url!.split('/').pop() } }));
  });
  server.on('secureConnection', () => handshakes++);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  url = `https://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
});

function configure<T extends KubeConfig>(kc: T, token = 't'): T {
  kc.loadFromOptions({
    clusters: [{ name: 'c', server: url, caData }],
    users: [{ name: 'u', token }],
    contexts: [{ name: 'x', cluster: 'c', user: 'u' }],
    currentContext: 'x',
  });
  return kc;
}

async function handshakesFor(kc: KubeConfig, calls: number): Promise<number> {
  const api = kc.makeApiClient(CoreV1Api);
  const before = handshakes;
  for (let i = 0; i < calls; i++) expect((await api.readNamespace({ name: `ns-${i}` })).metadata?.name).toBe(`ns-${i}`);
  return handshakes - before;
}

describe('PooledKubeConfig', () => {
  // undici frees a connection a moment after its response is read, so a call right after another may open a second
  // one; from then on they are reused.
  it('20 sequential calls make at most two TLS handshakes; the library alone makes 20', async () => {
    const pooled = configure(new PooledKubeConfig());
    expect(await handshakesFor(pooled, 20)).toBeLessThanOrEqual(2);
    expect(await handshakesFor(configure(new KubeConfig()), 20)).toBe(20);
    await pooled.closeConnections();
  });

  it('concurrent calls open only the connections they need at once, and reuse them', async () => {
    const pooled = configure(new PooledKubeConfig());
    const api = pooled.makeApiClient(CoreV1Api);
    const before = handshakes;
    for (let round = 0; round < 5; round++) await Promise.all(Array.from({ length: 4 }, (_, i) => api.readNamespace({ name: `c-${i}` })));
    expect(handshakes - before).toBeLessThanOrEqual(8); // 20 calls
    await pooled.closeConnections();
  });

  it('a watch keeps a connection of its own', async () => {
    const pooled = configure(new PooledKubeConfig());
    await handshakesFor(pooled, 3);
    const before = handshakes;
    const watch = await new Watch(pooled).watch('/api/v1/namespaces', {}, () => undefined, () => undefined);
    watch.abort();
    expect(handshakes - before).toBe(1);
    // The calls' connection was not the watch's: it still serves them.
    expect(await handshakesFor(pooled, 3)).toBe(0);
    await pooled.closeConnections();
  });

  it('renews its connections after the renewal period, and at once when the credentials change', async () => {
    let now = 0;
    const pooled = configure(new PooledKubeConfig(60_000, () => now));
    expect(await handshakesFor(pooled, 3)).toBeGreaterThan(0);
    expect(await handshakesFor(pooled, 3)).toBe(0);
    now = 61_000; // files (a CA, a rotated certificate) are read again by a new connection
    expect(await handshakesFor(pooled, 3)).toBeGreaterThan(0);
    pooled.users[0] = { name: 'u', token: 'other-token' };
    // A token is a header: the same connections serve it.
    expect(await handshakesFor(pooled, 2)).toBe(0);
    // Another server name (as another CA or server would): new connections.
    pooled.clusters[0] = { ...pooled.clusters[0]!, tlsServerName: 'localhost' };
    expect(await handshakesFor(pooled, 2)).toBeGreaterThan(0);
    await pooled.closeConnections();
  });
});
