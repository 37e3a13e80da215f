// A fake Kubernetes API server on loopback that answers TokenReview and SubjectAccessReview from tables, lists and
// gets Namespaces (equality label selectors only), and records what it was asked; with a KubeConfig that points at it.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { KubeConfig } from '@kubernetes/client-node';

export interface SeenRequest {
  method: string;
  path: string;
  authorization: string | undefined;
  body: Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
}

export interface FakeUser {
  username: string;
  uid?: string;
  groups?: string[];
  extra?: Record<string, string[]>;
}

export interface FakeKubeApi {
  url: string;
  seen: SeenRequest[];
  /** The next `n` requests are answered 500. */
  failNext(n: number): void;
  kubeConfig(token?: string): KubeConfig;
  close(): Promise<void>;
}

export async function startFakeKubeApi(opts: {
  users: Record<string, FakeUser>;
  /** Whether `user` may `get` `capacity` (group bettercompute.io) in `namespace`, named `name` when given. */
  allowed: (user: string, namespace: string, name: string | undefined) => boolean;
  /** Namespaces served at /api/v1/namespaces (default none). */
  namespaces?: { name: string; labels?: Record<string, string> }[];
}): Promise<FakeKubeApi> {
  const seen: SeenRequest[] = [];
  let failures = 0;
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8') || '{}');
      seen.push({ method: req.method ?? '', path: req.url ?? '', authorization: req.headers.authorization, body });
      res.setHeader('content-type', 'application/json');
      if (failures > 0) {
        failures--;
        res.statusCode = 500;
        res.end(JSON.stringify({ kind: 'Status', apiVersion: 'v1', status: 'Failure', message: 'etcd is unhappy', code: 500 }));
        return;
      }
      if (req.method === 'POST' && req.url === '/apis/authentication.k8s.io/v1/tokenreviews') {
        const user = opts.users[body.spec?.token];
        res.statusCode = 201;
        res.end(JSON.stringify({ ...body, status: user ? { authenticated: true, user } : { authenticated: false, error: 'invalid bearer token' } }));
        return;
      }
      if (req.method === 'POST' && req.url === '/apis/authorization.k8s.io/v1/subjectaccessreviews') {
        const a = body.spec?.resourceAttributes ?? {};
        const ok = a.verb === 'get' && a.group === 'bettercompute.io' && a.resource === 'capacity' && opts.allowed(body.spec.user, a.namespace, a.name);
        res.statusCode = 201;
        res.end(JSON.stringify({ ...body, status: ok ? { allowed: true, reason: 'RBAC: allowed' } : { allowed: false } }));
        return;
      }
      const url = new URL(req.url ?? '/', 'http://fake');
      const asObject = (n: { name: string; labels?: Record<string, string> }) => ({
        apiVersion: 'v1',
        kind: 'Namespace',
        metadata: { name: n.name, ...(n.labels ? { labels: n.labels } : {}) },
      });
      if (req.method === 'GET' && url.pathname === '/api/v1/namespaces') {
        const selector = (url.searchParams.get('labelSelector') ?? '').split(',').filter(Boolean).map((s) => s.split('=') as [string, string]);
        const items = (opts.namespaces ?? []).filter((n) => selector.every(([k, v]) => n.labels?.[k] === v)).map(asObject);
        res.statusCode = 200;
        res.end(JSON.stringify({ apiVersion: 'v1', kind: 'NamespaceList', metadata: { resourceVersion: '1' }, items }));
        return;
      }
      const one = req.method === 'GET' && /^\/api\/v1\/namespaces\/([^/]+)$/.exec(url.pathname);
      const ns = one && (opts.namespaces ?? []).find((n) => n.name === decodeURIComponent(one[1]!));
      if (ns) {
        res.statusCode = 200;
        res.end(JSON.stringify(asObject(ns)));
        return;
      }
      res.statusCode = 404;
      res.end(JSON.stringify({ kind: 'Status', apiVersion: 'v1', status: 'Failure', code: 404 }));
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url,
    seen,
    failNext(n) {
      failures = n;
    },
    kubeConfig(token = 'controller-sa-token') {
      const kc = new KubeConfig();
      kc.loadFromOptions({
        clusters: [{ name: 'fake', server: url, skipTLSVerify: true }],
        users: [{ name: 'controller', token }],
        contexts: [{ name: 'fake', cluster: 'fake', user: 'controller' }],
        currentContext: 'fake',
      });
      return kc;
    },
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}
