// A pod's scheduling gate removed (ADR 0049: the claim allocator lets a pod through to kube-scheduler once its claims
// of ours are allocated). A JSON patch whose tests pin the pod's uid and the gate's place, so that a pod replaced under
// the same name, or gates changed since the pod was read, fail it (422) rather than lose someone else's gate. The
// KubeConfig's timeouts apply (TimedKubeConfig).
import { CoreV1Api, PatchStrategy, setHeaderOptions, type KubeConfig } from '@kubernetes/client-node';

const jsonPatch = setHeaderOptions('Content-Type', PatchStrategy.JsonPatch);

/** The JSON patch that removes `gate` at `index` of spec.schedulingGates of the pod `uid`, and nothing else. */
export function removeGatePatch(uid: string, index: number, gate: string): object[] {
  return [
    { op: 'test', path: '/metadata/uid', value: uid },
    { op: 'test', path: `/spec/schedulingGates/${index}/name`, value: gate },
    { op: 'remove', path: `/spec/schedulingGates/${index}` },
  ];
}

export function schedulingGateRemover(kc: KubeConfig) {
  const core = kc.makeApiClient(CoreV1Api);
  return async (namespace: string, name: string, uid: string, index: number, gate: string): Promise<void> => {
    await core.patchNamespacedPod({ namespace, name, body: removeGatePatch(uid, index, gate) }, jsonPatch);
  };
}
