// The benchmarks' extender Kubernetes side: it reads no pod or node from an API server and writes nothing (the
// namespace's labels are none; the bench seeds what filter and bind need into the ledger).
import type { ExtenderKube } from '../src/extender/kube.ts';

export const inertExtenderKube: ExtenderKube = {
  getPod: async () => undefined,
  nodeAllocatable: async () => ({}),
  namespaceLabels: async () => ({}),
  annotatePod: async () => undefined,
  bindPod: async () => undefined,
  evictPod: async () => undefined,
  deletePod: async () => undefined,
};
