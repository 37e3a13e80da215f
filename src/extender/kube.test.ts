// The Binding over node:https (ADR 0024), against an HTTPS server with its own CA: the path, body and token the API
// server gets, one kept-alive connection for many binds, credentials read again once they are old, a new connection
// when the TLS material changes, the server's error status and message, and the call timeout.
import https from 'node:https';
import type net from 'node:net';
import * as k8s from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { issueBundle } from '../controller/certs.ts';
import { TimedKubeConfig } from '../kube/client.ts';
import { ClientNodeExtenderKube, httpStatus, KubeBindingWriter } from './kube.ts';
import { FakeClock } from '../clock.ts';

describe('the Binding over node:https', () => {
  const bundle = issueBundle(Date.now(), ['127.0.0.1']);
  const seen: { url?: string; authorization?: string; body: unknown }[] = [];
  let connections = 0;
  let answer: 'created' | 'conflict' | 'hang' = 'created';
  let server: https.Server;
  let url: string;

  function kubeConfig(token: string, timeoutMs = 2000): k8s.KubeConfig {
    const kc = new TimedKubeConfig(timeoutMs);
    kc.loadFromOptions({
      clusters: [{ name: 'c', server: url, caData: Buffer.from(bundle.caCert).toString('base64') }],
      users: [{ name: 'u', token }],
      contexts: [{ name: 'x', cluster: 'c', user: 'u' }],
      currentContext: 'x',
    });
    return kc;
  }

  beforeAll(async () => {
    server = https.createServer({ key: bundle.key, cert: bundle.cert }, (req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        seen.push({ url: req.url, authorization: req.headers.authorization, body: JSON.parse(Buffer.concat(chunks).toString()) });
        if (answer === 'hang') return;
        res.setHeader('content-type', 'application/json');
        if (answer === 'conflict') {
          res.statusCode = 409;
          res.end(JSON.stringify({ kind: 'Status', status: 'Failure', message: 'pod p1 is already assigned to node "n0"', code: 409 }));
        } else {
          res.statusCode = 201;
          res.end(JSON.stringify({ kind: 'Status', status: 'Success', code: 201 }));
        }
      });
    });
    server.on('secureConnection', () => connections++);
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    url = `https://127.0.0.1:${(server.address() as net.AddressInfo).port}`;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  });

  it('posts the Binding with its annotations and the token, many binds on one kept-alive connection', async () => {
    const kube = new ClientNodeExtenderKube(kubeConfig('t-1'));
    for (let i = 0; i < 5; i++) await kube.bindPod('team-a', `p${i}`, `uid-${i}`, 'gpu-node-1', { 'bettercompute.io/atoms': 'GPU-1' });
    expect(connections).toBe(1);
    expect(seen).toHaveLength(5);
    expect(seen[4]).toEqual({
      url: '/api/v1/namespaces/team-a/pods/p4/binding',
      authorization: 'Bearer t-1',
      body: {
        apiVersion: 'v1',
        kind: 'Binding',
        metadata: { name: 'p4', namespace: 'team-a', uid: 'uid-4', annotations: { 'bettercompute.io/atoms': 'GPU-1' } },
        target: { apiVersion: 'v1', kind: 'Node', name: 'gpu-node-1' },
      },
    });
  });

  it('reads credentials from the KubeConfig again once they are credentialsMs old, not on every call', async () => {
    const body = { metadata: { name: 'p', namespace: 'ns' }, target: { kind: 'Node', name: 'n' } };
    const kc = kubeConfig('t-1');
    const kept = KubeBindingWriter.for(kc, { credentialsMs: 60_000 })!;
    const clock = new FakeClock();
    const renewed = KubeBindingWriter.for(kc, { credentialsMs: 100, clock })!;
    await kept.bind('ns', 'p', body);
    await renewed.bind('ns', 'p', body);
    Object.assign(kc.getCurrentUser()!, { token: 't-2' });
    await kept.bind('ns', 'p', body);
    expect(seen.at(-1)!.authorization).toBe('Bearer t-1');
    // Not before credentialsMs on the writer's clock, then at once.
    await clock.advance(99);
    await renewed.bind('ns', 'p', body);
    expect(seen.at(-1)!.authorization).toBe('Bearer t-1');
    await clock.advance(1);
    await renewed.bind('ns', 'p', body);
    expect(seen.at(-1)!.authorization).toBe('Bearer t-2');
  });

  it('with credentialsMs 0, takes credentials on every call, and a new connection pool when the TLS material changes', async () => {
    const kc = kubeConfig('t-1');
    const writer = KubeBindingWriter.for(kc, { credentialsMs: 0 })!;
    const body = { metadata: { name: 'p', namespace: 'ns' }, target: { kind: 'Node', name: 'n' } };
    const before = connections;
    await writer.bind('ns', 'p', body);
    Object.assign(kc.getCurrentUser()!, { token: 't-2' });
    await writer.bind('ns', 'p', body);
    expect(seen.at(-1)!.authorization).toBe('Bearer t-2');
    expect(connections).toBe(before + 1);
    // Another CA (the same one, encoded again with a trailing newline): other bytes, another pool.
    Object.assign(kc.getCurrentCluster()!, { caData: Buffer.from(`${bundle.caCert}\n`).toString('base64') });
    await writer.bind('ns', 'p', body);
    expect(connections).toBe(before + 2);
  });

  it('an error status is thrown with its code and the server’s message; a server that does not answer, after the call timeout', async () => {
    const kube = new ClientNodeExtenderKube(kubeConfig('t-1', 300));
    answer = 'conflict';
    const e = await kube.bindPod('ns', 'p1', 'u', 'n1').catch((x: unknown) => x);
    expect(httpStatus(e)).toBe(409);
    expect(String(e)).toContain('pod p1 is already assigned to node "n0"');
    answer = 'hang';
    await expect(kube.bindPod('ns', 'p1', 'u', 'n1')).rejects.toThrow(/did not answer within 300 ms/);
    answer = 'created';
  });

  it('leaves plain HTTP and proxied clusters to client-node', () => {
    const kc = new k8s.KubeConfig();
    kc.loadFromOptions({ clusters: [{ name: 'c', server: 'http://127.0.0.1:1', skipTLSVerify: true }], users: [{ name: 'u' }], contexts: [{ name: 'x', cluster: 'c', user: 'u' }], currentContext: 'x' });
    expect(KubeBindingWriter.for(kc)).toBeUndefined();
    Object.assign(kc.getCurrentCluster()!, { server: 'https://127.0.0.1:1', proxyUrl: 'http://proxy:3128' });
    expect(KubeBindingWriter.for(kc)).toBeUndefined();
  });
});
