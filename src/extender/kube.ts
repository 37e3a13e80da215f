// What the extender and the releaser need from the Kubernetes API, behind an interface (tests use fakes), and its
// implementation with @kubernetes/client-node.
import * as k8s from '@kubernetes/client-node';

export interface ExtenderKube {
  /** The pod as JSON, or undefined when it does not exist. */
  getPod(namespace: string, name: string): Promise<unknown>;
  /** The node's allocatable resources (quantities as strings), or undefined when the node does not exist. */
  nodeAllocatable(name: string): Promise<Record<string, string> | undefined>;
  namespaceLabels(name: string): Promise<Record<string, string>>;
  annotatePod(namespace: string, name: string, annotations: Record<string, string>): Promise<void>;
  /** Creates the pods/binding subresource (the scheduler's Bind, done by us); `annotations` land on the pod in the same write. */
  bindPod(namespace: string, name: string, uid: string, node: string, annotations?: Record<string, string>): Promise<void>;
  /** Evicts a pod (policy/v1 Eviction) with a grace period. */
  evictPod(namespace: string, name: string, graceSeconds: number): Promise<void>;
}

export function httpStatus(e: unknown): number | undefined {
  if (typeof e === 'object' && e !== null && 'code' in e && typeof (e as { code: unknown }).code === 'number') {
    return (e as { code: number }).code;
  }
  return undefined;
}

export class ClientNodeExtenderKube implements ExtenderKube {
  private readonly core: k8s.CoreV1Api;
  private readonly nsCache = new Map<string, { labels: Record<string, string>; at: number }>();

  constructor(kc: k8s.KubeConfig, private readonly nsCacheMs = 5000) {
    this.core = kc.makeApiClient(k8s.CoreV1Api);
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
    // Labels are not decisions about time; the cache only saves round trips (performance.now is monotonic).
    if (hit && performance.now() - hit.at < this.nsCacheMs) return hit.labels;
    const ns = await this.core.readNamespace({ name });
    const labels = ns.metadata?.labels ?? {};
    this.nsCache.set(name, { labels, at: performance.now() });
    return labels;
  }

  async annotatePod(namespace: string, name: string, annotations: Record<string, string>): Promise<void> {
    await this.core.patchNamespacedPod(
      { name, namespace, body: { metadata: { annotations } } },
      k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
    );
  }

  async bindPod(namespace: string, name: string, uid: string, node: string, annotations?: Record<string, string>): Promise<void> {
    await this.core.createNamespacedPodBinding({
      name,
      namespace,
      body: {
        apiVersion: 'v1',
        kind: 'Binding',
        // The API server copies a Binding's annotations onto the pod in the same write as spec.nodeName.
        metadata: { name, namespace, uid, ...(annotations ? { annotations } : {}) },
        target: { apiVersion: 'v1', kind: 'Node', name: node },
      },
    });
  }

  async evictPod(namespace: string, name: string, graceSeconds: number): Promise<void> {
    await this.core.createNamespacedPodEviction({
      name,
      namespace,
      body: { apiVersion: 'policy/v1', kind: 'Eviction', metadata: { name, namespace }, deleteOptions: { gracePeriodSeconds: graceSeconds } },
    });
  }
}
