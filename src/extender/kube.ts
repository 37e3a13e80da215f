// What the extender and the releaser need from the Kubernetes API, behind an interface (tests use fakes), and its
// implementation with @kubernetes/client-node.
import https from 'node:https';
import * as k8s from '@kubernetes/client-node';
import { systemClock, type MonotonicClock } from '../clock.ts';
import { DEFAULT_KUBE_CALL_TIMEOUT_MS, KubeCallTimeoutError, TimedKubeConfig } from '../kube/client.ts';

export interface ExtenderKube {
  /** The pod as JSON, or undefined when it does not exist. */
  getPod(namespace: string, name: string): Promise<unknown>;
  /** The node's allocatable resources (quantities as strings), or undefined when the node does not exist. */
  nodeAllocatable(name: string): Promise<Record<string, string> | undefined>;
  namespaceLabels(name: string): Promise<Record<string, string>>;
  annotatePod(namespace: string, name: string, annotations: Record<string, string>): Promise<void>;
  /** Creates the pods/binding subresource (the scheduler's Bind, done by us); `annotations` land on the pod in the same write. */
  bindPod(namespace: string, name: string, uid: string, node: string, annotations?: Record<string, string>): Promise<void>;
  /** Evicts a pod (policy/v1 Eviction) with a grace period; with `uid`, only that pod (not a successor of its name). */
  evictPod(namespace: string, name: string, graceSeconds: number, uid?: string): Promise<void>;
  /** Deletes a pod with a grace period (what stops a pod whose eviction was refused: a booking outranks a PDB). */
  deletePod(namespace: string, name: string, graceSeconds: number, uid: string): Promise<void>;
}

export function httpStatus(e: unknown): number | undefined {
  if (typeof e === 'object' && e !== null && 'code' in e && typeof (e as { code: unknown }).code === 'number') {
    return (e as { code: number }).code;
  }
  return undefined;
}

/** An API call answered with an error status: `code` is the status (httpStatus reads it), the message the server's. */
export class KubeStatusError extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
    this.name = 'KubeStatusError';
  }
}

type TlsMaterial = Pick<https.RequestOptions, 'ca' | 'cert' | 'key' | 'pfx' | 'passphrase' | 'rejectUnauthorized' | 'servername'>;
const TLS_FIELDS = ['ca', 'cert', 'key', 'pfx', 'passphrase', 'rejectUnauthorized', 'servername'] as const;

function sameTls(a: TlsMaterial, b: TlsMaterial): boolean {
  return TLS_FIELDS.every((f) => {
    const x = a[f];
    const y = b[f];
    return Buffer.isBuffer(x) && Buffer.isBuffer(y) ? x.equals(y) : x === y;
  });
}

/**
 * POSTs a pod's Binding over node:https on kept-alive connections (ADR 0024): the one API call of every bind, made as
 * often as pods are scheduled. client-node's generated client builds a new undici Agent per call and drops it (our
 * PooledKubeConfig hands it the shared one, ADR 0018), then goes through fetch and web streams; in bench:scheduler that
 * was a quarter of the extender's CPU time. Credentials and TLS material come from the KubeConfig (applyToHTTPSOptions:
 * a token or a certificate renewed on disk is picked up), read again once they are `credentialsMs` old (default 1 s):
 * reading them builds an Agent and decodes or reads the CA, certificate and key, which on every call was part of the
 * 0.7 ms of the event loop's CPU that each Binding took in bench:scheduler (perf). The connections are kept while the
 * TLS material stays the same.
 * Undefined for a cluster this does not speak to (plain HTTP, a proxy): the caller uses client-node then.
 */
export class KubeBindingWriter {
  private pool: { tls: TlsMaterial; agent: https.Agent } | undefined;
  /** The last read of the credentials, with the Agent for its TLS material. */
  private credentials: { at: number; read: Promise<{ opts: https.RequestOptions; agent: https.Agent }> } | undefined;

  private constructor(
    private readonly kc: k8s.KubeConfig,
    private readonly timeoutMs: number,
    private readonly credentialsMs: number,
    private readonly clock: MonotonicClock,
  ) {}

  static for(kc: k8s.KubeConfig, o: { credentialsMs?: number; clock?: MonotonicClock } = {}): KubeBindingWriter | undefined {
    const cluster = kc.getCurrentCluster();
    if (!cluster?.server.startsWith('https:') || cluster.proxyUrl) return undefined;
    return new KubeBindingWriter(kc, kc instanceof TimedKubeConfig ? kc.callTimeoutMs : DEFAULT_KUBE_CALL_TIMEOUT_MS, o.credentialsMs ?? 1000, o.clock ?? systemClock);
  }

  /**
   * The KubeConfig's credentials and TLS material with the Agent for that material, read again once `credentialsMs` old
   * or after a failed read.
   */
  private options(): Promise<{ opts: https.RequestOptions; agent: https.Agent }> {
    const now = this.clock.now();
    if (this.credentials && now - this.credentials.at < this.credentialsMs) return this.credentials.read;
    const opts: https.RequestOptions = {};
    const read = this.kc.applyToHTTPSOptions(opts).then(() => ({ opts, agent: this.agent(opts) }));
    const entry = { at: now, read };
    this.credentials = entry;
    read.catch(() => {
      if (this.credentials === entry) this.credentials = undefined;
    });
    return read;
  }

  async bind(namespace: string, name: string, body: k8s.V1Binding): Promise<void> {
    const cluster = this.kc.getCurrentCluster();
    if (!cluster) throw new Error('the kubeconfig has no current cluster');
    const url = new URL(`${cluster.server.replace(/\/+$/, '')}/api/v1/namespaces/${encodeURIComponent(namespace)}/pods/${encodeURIComponent(name)}/binding`);
    const { opts, agent } = await this.options();
    const data = Buffer.from(JSON.stringify(body));
    const headers = { ...(opts.headers as Record<string, string> | undefined), 'content-type': 'application/json', accept: 'application/json', 'content-length': String(data.length) };
    const { status, text } = await new Promise<{ status: number; text: string }>((resolve, reject) => {
      const req = https.request(
        url,
        { method: 'POST', headers, agent, ...(opts.auth ? { auth: opts.auth } : {}), signal: AbortSignal.timeout(this.timeoutMs) },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString('utf8') }));
          res.on('error', reject);
        },
      );
      req.on('error', (e) => reject(e.name === 'AbortError' ? new KubeCallTimeoutError(this.timeoutMs) : e));
      req.end(data);
    });
    if (status >= 200 && status < 300) return;
    let message = text.slice(0, 500);
    try {
      const parsed = JSON.parse(text) as { message?: unknown };
      if (typeof parsed.message === 'string') message = parsed.message;
    } catch {
      // Not a Status: the body as it came.
    }
    throw new KubeStatusError(status, `Binding ${namespace}/${name}: HTTP ${status}: ${message}`);
  }

  /** The kept-alive Agent for this TLS material; a new one when it changed (the old one's idle connections close). */
  private agent(opts: https.RequestOptions): https.Agent {
    const tls: TlsMaterial = {};
    for (const f of TLS_FIELDS) if (opts[f] !== undefined) Object.assign(tls, { [f]: opts[f] });
    if (this.pool && sameTls(this.pool.tls, tls)) return this.pool.agent;
    const old = this.pool?.agent;
    this.pool = { tls, agent: new https.Agent({ ...tls, keepAlive: true, keepAliveMsecs: 30_000 }) };
    // Requests in flight on the old one end within the call timeout.
    if (old) setTimeout(() => old.destroy(), this.timeoutMs).unref();
    return this.pool.agent;
  }
}

export class ClientNodeExtenderKube implements ExtenderKube {
  private readonly core: k8s.CoreV1Api;
  private readonly bindings: KubeBindingWriter | undefined;
  private readonly nsCache = new Map<string, { labels: Record<string, string>; at: number }>();

  constructor(
    kc: k8s.KubeConfig,
    private readonly nsCacheMs = 5000,
    private readonly clock: MonotonicClock = systemClock,
  ) {
    this.core = kc.makeApiClient(k8s.CoreV1Api);
    this.bindings = KubeBindingWriter.for(kc, { clock });
  }

  async getPod(namespace: string, name: string): Promise<unknown> {
    try {
      return await this.core.readNamespacedPod({ name, namespace });
    } catch (e) {
      if (httpStatus(e) === 404) return undefined;
      throw e;
    }
  }

  async nodeAllocatable(name: string): Promise<Record<string, string> | undefined> {
    try {
      const node = await this.core.readNode({ name });
      return node.status?.allocatable ?? {};
    } catch (e) {
      if (httpStatus(e) === 404) return undefined;
      throw e;
    }
  }

  async namespaceLabels(name: string): Promise<Record<string, string>> {
    const hit = this.nsCache.get(name);
    // Labels are not decisions about time; the cache only saves round trips (on the monotonic clock).
    if (hit && this.clock.now() - hit.at < this.nsCacheMs) return hit.labels;
    const ns = await this.core.readNamespace({ name });
    const labels = ns.metadata?.labels ?? {};
    this.nsCache.set(name, { labels, at: this.clock.now() });
    return labels;
  }

  async annotatePod(namespace: string, name: string, annotations: Record<string, string>): Promise<void> {
    await this.core.patchNamespacedPod(
      { name, namespace, body: { metadata: { annotations } } },
      k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
    );
  }

  async bindPod(namespace: string, name: string, uid: string, node: string, annotations?: Record<string, string>): Promise<void> {
    const body: k8s.V1Binding = {
      apiVersion: 'v1',
      kind: 'Binding',
      // The API server copies a Binding's annotations onto the pod in the same write as spec.nodeName.
      metadata: { name, namespace, uid, ...(annotations ? { annotations } : {}) },
      target: { apiVersion: 'v1', kind: 'Node', name: node },
    };
    if (this.bindings) await this.bindings.bind(namespace, name, body);
    else await this.core.createNamespacedPodBinding({ name, namespace, body });
  }

  async evictPod(namespace: string, name: string, graceSeconds: number, uid?: string): Promise<void> {
    const deleteOptions = { gracePeriodSeconds: graceSeconds, ...(uid ? { preconditions: { uid } } : {}) };
    await this.core.createNamespacedPodEviction({
      name,
      namespace,
      body: { apiVersion: 'policy/v1', kind: 'Eviction', metadata: { name, namespace }, deleteOptions },
    });
  }

  async deletePod(namespace: string, name: string, graceSeconds: number, uid: string): Promise<void> {
    await this.core.deleteNamespacedPod({ name, namespace, body: { gracePeriodSeconds: graceSeconds, preconditions: { uid } } });
  }
}
