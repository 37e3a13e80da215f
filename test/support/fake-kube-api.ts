// A fake Kubernetes API server on loopback that answers TokenReview and SubjectAccessReview from tables, lists and
// gets Namespaces (equality label selectors only), and records what it was asked; with a KubeConfig that points at it.
// Optionally (`objects`) it also keeps Secrets, ConfigMaps and MutatingWebhookConfigurations in memory: get, create
// (409 when present), replace (409 on a stale resourceVersion) and JSON patch (test/add/replace/remove; 422 when a
// test fails).
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
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
  /** The token's audiences (TokenRequest's `audiences`); default the API server's, API_SERVER_AUDIENCE. */
  audiences?: string[];
  uid?: string;
  groups?: string[];
  extra?: Record<string, string[]>;
}

/** The audience of a token minted without `--audience`. */
export const API_SERVER_AUDIENCE = 'https://kubernetes.default.svc.cluster.local';

type KubeObj = { metadata: { name: string; namespace?: string; resourceVersion?: string } } & Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

export interface FakeKubeApi {
  url: string;
  seen: SeenRequest[];
  /** The stored objects by API path (`/api/v1/namespaces/<ns>/secrets/<name>`, ...), with `objects: true`. */
  objects: Map<string, KubeObj>;
  /** The next `n` requests are answered 500. */
  failNext(n: number): void;
  kubeConfig(token?: string): KubeConfig;
  /** The same as a kubeconfig file `dir/kubeconfig` (for KUBECONFIG); returns its path. */
  kubeconfigFile(dir: string, token?: string): string;
  close(): Promise<void>;
}

export async function startFakeKubeApi(opts: {
  users: Record<string, FakeUser>;
  /** Whether `user` may `get` `capacity` (group bettercompute.io) in `namespace`, named `name` when given. */
  allowed: (user: string, namespace: string, name: string | undefined) => boolean;
  /** Whether `user` may `verb` the non-resource URL `path` (e.g. get /metrics). Default: nobody. */
  allowedNonResource?: (user: string, path: string, verb: string) => boolean;
  /** Keep Secrets, ConfigMaps and MutatingWebhookConfigurations. */
  objects?: boolean;
  /**
   * Answer TokenReviews as an authenticator that ignores `spec.audiences` would: authenticated, no `status.audiences`
   * (some webhook authenticators). Default false: as the API server, which intersects the token's audiences with the
   * requested ones and refuses a token that has none of them.
   */
  ignoresAudiences?: boolean;
  /** Namespaces served at /api/v1/namespaces (default none). */
  namespaces?: { name: string; labels?: Record<string, string> }[];
}): Promise<FakeKubeApi> {
  const seen: SeenRequest[] = [];
  const objects = new Map<string, KubeObj>();
  let rv = 1;
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
        res.statusCode = 201;
        res.end(JSON.stringify({ ...body, status: reviewToken(body.spec ?? {}) }));
        return;
      }
      if (req.method === 'POST' && req.url === '/apis/authorization.k8s.io/v1/subjectaccessreviews') {
        const a = body.spec?.resourceAttributes ?? {};
        const nr = body.spec?.nonResourceAttributes;
        const ok = nr
          ? (opts.allowedNonResource?.(body.spec.user, nr.path, nr.verb) ?? false)
          : a.verb === 'get' && a.group === 'bettercompute.io' && a.resource === 'capacity' && opts.allowed(body.spec.user, a.namespace, a.name);
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
      if (opts.objects && storeRequest(req.method ?? '', req.url ?? '', body, req.headers['content-type'], res)) return;
      res.statusCode = 404;
      res.end(JSON.stringify({ kind: 'Status', apiVersion: 'v1', status: 'Failure', code: 404 }));
    });
  });

  function reviewToken(spec: { token?: string; audiences?: string[] }): Record<string, unknown> {
    const found = spec.token === undefined ? undefined : opts.users[spec.token];
    if (!found) return { authenticated: false, error: 'invalid bearer token' };
    const { audiences: tokenAudiences = [API_SERVER_AUDIENCE], ...user } = found;
    if (opts.ignoresAudiences) return { authenticated: true, user };
    const asked = spec.audiences?.length ? spec.audiences : [API_SERVER_AUDIENCE];
    const audiences = asked.filter((a) => tokenAudiences.includes(a));
    if (!audiences.length) return { authenticated: false, error: '[invalid bearer token, token audiences is invalid for the target audiences]' };
    return { authenticated: true, user, audiences };
  }

  const status = (res: http.ServerResponse, code: number, message: string) => {
    res.statusCode = code;
    res.end(JSON.stringify({ kind: 'Status', apiVersion: 'v1', status: 'Failure', message, code }));
  };
  const STORE = /^(\/api\/v1\/namespaces\/[^/]+\/(?:secrets|configmaps)|\/apis\/admissionregistration\.k8s\.io\/v1\/mutatingwebhookconfigurations)(?:\/([^/?]+))?(?:\?.*)?$/;
  /** Answers a request for a stored kind; false when the path is not one. */
  function storeRequest(method: string, url: string, body: Record<string, any>, contentType: string | undefined, res: http.ServerResponse): boolean { // eslint-disable-line @typescript-eslint/no-explicit-any
    const m = STORE.exec(url);
    if (!m) return false;
    const collection = m[1]!;
    const name = m[2];
    const key = `${collection}/${name ?? body.metadata?.name}`;
    const current = objects.get(key);
    const save = (obj: KubeObj, code: number) => {
      obj.metadata.resourceVersion = String(++rv);
      objects.set(key, obj);
      res.statusCode = code;
      res.end(JSON.stringify(obj));
    };
    if (method === 'GET' && name) {
      if (!current) status(res, 404, `${name} not found`);
      else res.end(JSON.stringify(current));
      return true;
    }
    if (method === 'POST' && !name) {
      if (current) status(res, 409, `${body.metadata?.name} already exists`);
      else save(structuredClone(body) as KubeObj, 201);
      return true;
    }
    if (method === 'PUT' && name) {
      if (!current) status(res, 404, `${name} not found`);
      else if (body.metadata?.resourceVersion && body.metadata.resourceVersion !== current.metadata.resourceVersion) {
        status(res, 409, 'the object has been modified; please apply your changes to the latest version and try again');
      } else save(structuredClone(body) as KubeObj, 200);
      return true;
    }
    if (method === 'PATCH' && name) {
      if (!current) return (status(res, 404, `${name} not found`), true);
      if (!contentType?.startsWith('application/json-patch+json')) return (status(res, 415, `unsupported patch type ${contentType}`), true);
      try {
        save(applyJsonPatch(structuredClone(current), body as unknown as JsonPatchOp[]), 200);
      } catch (e) {
        status(res, 422, (e as Error).message);
      }
      return true;
    }
    status(res, 405, `${method} ${url}`);
    return true;
  }
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  function kubeConfig(token = 'controller-sa-token'): KubeConfig {
    const kc = new KubeConfig();
    kc.loadFromOptions({
      clusters: [{ name: 'fake', server: url, skipTLSVerify: true }],
      users: [{ name: 'controller', token }],
      contexts: [{ name: 'fake', cluster: 'fake', user: 'controller' }],
      currentContext: 'fake',
    });
    return kc;
  }
  return {
    url,
    seen,
    objects,
    failNext(n) {
      failures = n;
    },
    kubeConfig,
    kubeconfigFile(dir, token) {
      const file = path.join(dir, 'kubeconfig');
      fs.writeFileSync(file, kubeConfig(token).exportConfig());
      return file;
    },
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

interface JsonPatchOp {
  op: 'test' | 'add' | 'replace' | 'remove';
  path: string;
  value?: unknown;
}

/** RFC 6902, the operations the controller uses, on objects and arrays. */
function applyJsonPatch<T>(doc: T, ops: JsonPatchOp[]): T {
  for (const op of ops) {
    const tokens = op.path.split('/').slice(1).map((t) => t.replace(/~1/g, '/').replace(/~0/g, '~'));
    const last = tokens.pop()!;
    let parent: any = doc; // eslint-disable-line @typescript-eslint/no-explicit-any
    for (const t of tokens) {
      if (parent === null || typeof parent !== 'object' || !(t in parent)) throw new Error(`path ${op.path} does not exist`);
      parent = parent[t];
    }
    if (parent === null || typeof parent !== 'object') throw new Error(`path ${op.path} does not exist`);
    if (op.op === 'test') {
      if (JSON.stringify(parent[last]) !== JSON.stringify(op.value)) throw new Error(`test of ${op.path} failed`);
    } else if (op.op === 'remove') {
      if (!(last in parent)) throw new Error(`path ${op.path} does not exist`);
      if (Array.isArray(parent)) parent.splice(Number(last), 1);
      else delete parent[last];
    } else {
      if (op.op === 'replace' && !(last in parent)) throw new Error(`path ${op.path} does not exist`);
      if (Array.isArray(parent) && op.op === 'add') parent.splice(last === '-' ? parent.length : Number(last), 0, op.value);
      else parent[last] = op.value;
    }
  }
  return doc;
}
