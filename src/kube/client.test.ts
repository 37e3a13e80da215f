// Every Kubernetes API call of the controller's client is aborted after its timeout, and a Lease call also when the
// caller's signal says so: an API server that accepts a request and never answers must not hang the caller.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { KubeCallTimeoutError, KubeClient, TimedKubeConfig } from './client.ts';

let server: http.Server;
let url: string;
const hung: http.ServerResponse[] = [];

beforeAll(async () => {
  // Reads the request, never answers.
  server = http.createServer((_req, res) => void hung.push(res));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  for (const res of hung) res.destroy();
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
});

function client(timeoutMs: number): KubeClient {
  const kc = new TimedKubeConfig(timeoutMs);
  kc.loadFromOptions({
    clusters: [{ name: 'c', server: url, skipTLSVerify: true }],
    users: [{ name: 'u', token: 't' }],
    contexts: [{ name: 'x', cluster: 'c', user: 'u' }],
    currentContext: 'x',
  });
  return new KubeClient(kc);
}

async function outcome(p: Promise<unknown>): Promise<{ ms: number; error: unknown }> {
  const started = performance.now();
  const error = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  return { ms: performance.now() - started, error };
}

it('a call that gets no answer fails with a timeout after the configured time', async () => {
  const kube = client(300);
  const lease = await outcome(kube.readLease('ns', 'l'));
  expect(lease.error).toBeInstanceOf(KubeCallTimeoutError);
  expect(lease.ms).toBeGreaterThanOrEqual(250);
  expect(lease.ms).toBeLessThan(5_000);
  const list = await outcome(kube.listNodes());
  expect(list.error).toBeInstanceOf(KubeCallTimeoutError);
  const patch = await outcome(kube.patchPoolStatus('p', { phase: 'Ready' }));
  expect(patch.error).toBeInstanceOf(KubeCallTimeoutError);
});

it("a Lease call is aborted by the caller's signal well before the timeout", async () => {
  const kube = client(60_000);
  const abort = new AbortController();
  const pending = outcome(kube.replaceLease('ns', 'l', { metadata: { name: 'l' } }, abort.signal));
  setTimeout(() => abort.abort(new Error('renew deadline passed')), 100);
  const { ms, error } = await pending;
  expect(error).toBeDefined();
  expect(error).not.toBeInstanceOf(KubeCallTimeoutError);
  expect(ms).toBeLessThan(5_000);
});
