import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type KubeEvent,
  type List,
  type Node,
  type Pod,
  SIMULATED_TOLERATION,
  addSimulatedNodes,
  apply,
  clusterInfo,
  defaultSchedulerConfig,
  deletePodsNow,
  kubectl,
  kubectlJson,
  removeSimulatedNodes,
  restartKubelet,
  restartScheduler,
  uniqueName,
  waitCondition,
  waitFor,
  waitForPodPhase,
} from './harness.ts';

// Smoke tests of the test cluster itself: the API server takes a CRD and its resources, the real scheduler binds pods,
// the real kubelet runs them in containerd and serves their logs, simulated nodes take pods, and the harness can
// restart kube-scheduler with a new configuration and the kubelet.
const ns = uniqueName('smoke');
// On another cluster (e2e/kind/run.sh) the components cannot be restarted from here.
const external = process.env.BC_EXTERNAL_CLUSTER === '1';
const simulated: string[] = [];

function busyboxPod(name: string, command: string, extra: Record<string, unknown> = {}) {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: ns },
    spec: {
      restartPolicy: 'Never',
      terminationGracePeriodSeconds: 1,
      containers: [{ name: 'main', image: clusterInfo().busyboxImage, command: ['sh', '-c', command] }],
      ...extra,
    },
  };
}

beforeAll(async () => {
  await kubectl(['create', 'namespace', ns]);
  await waitFor('default service account', () => kubectl(['-n', ns, 'get', 'serviceaccount', 'default']));
});

afterAll(async () => {
  if (simulated.length) await removeSimulatedNodes(simulated);
  const pods = (await kubectlJson<List<Pod>>(['-n', ns, 'get', 'pods'])).items.map((p) => p.metadata.name);
  await deletePodsNow(ns, pods);
  await kubectl(['delete', 'namespace', ns, '--wait=false']);
});

describe('test cluster', () => {
  it('takes a CRD and a custom resource with kubectl', async () => {
    const group = `${ns}.bettercompute.io`;
    await apply({
      apiVersion: 'apiextensions.k8s.io/v1',
      kind: 'CustomResourceDefinition',
      metadata: { name: `widgets.${group}` },
      spec: {
        group,
        scope: 'Namespaced',
        names: { plural: 'widgets', singular: 'widget', kind: 'Widget' },
        versions: [
          {
            name: 'v1',
            served: true,
            storage: true,
            schema: {
              openAPIV3Schema: {
                type: 'object',
                properties: {
                  spec: { type: 'object', properties: { gpus: { type: 'integer', minimum: 0 } }, required: ['gpus'] },
                },
              },
            },
          },
        ],
      },
    });
    await waitCondition([`crd/widgets.${group}`], 'Established');
    const cr = `apiVersion: ${group}/v1\nkind: Widget\nmetadata:\n  name: w1\n  namespace: ${ns}\nspec:\n  gpus: 3\n`;
    await waitFor('widget applied', () => apply(cr), { timeoutMs: 30_000 });
    const got = await kubectlJson<{ spec: { gpus: number } }>(['-n', ns, 'get', `widgets.${group}`, 'w1']);
    expect(got.spec.gpus).toBe(3);
    // The schema is enforced.
    const bad = cr.replace('gpus: 3', 'gpus: -1').replace('name: w1', 'name: w2');
    await expect(apply(bad)).rejects.toThrow(/gpus/);
    await kubectl(['delete', 'crd', `widgets.${group}`]);
  });

  it('runs a pod, scheduled by the real scheduler, on the real kubelet and reads its log', async () => {
    const name = 'hello';
    const token = uniqueName('token');
    await apply(busyboxPod(name, `echo "hello ${token}"; ls /bin/busybox`));
    const pod = await waitForPodPhase(ns, name, ['Succeeded', 'Failed']);
    expect(pod.status?.phase).toBe('Succeeded');
    expect(pod.spec.nodeName).toBe(clusterInfo().nodeName);
    expect(pod.status?.podIP).toMatch(/^\d+\.\d+\.\d+\.\d+$/);
    const events = await kubectlJson<List<KubeEvent>>(['-n', ns, 'get', 'events', '--field-selector', `involvedObject.name=${name}`]);
    const scheduled = events.items.filter((e) => e.reason === 'Scheduled');
    expect(scheduled.some((e) => [e.source?.component, e.reportingComponent].includes('default-scheduler'))).toBe(true);
    const log = await kubectl(['-n', ns, 'logs', name]);
    expect(log).toContain(`hello ${token}`);
    expect(log).toContain('/bin/busybox');
  });

  it('binds a pod with a nodeSelector for a simulated node there', async () => {
    const nodes = await addSimulatedNodes(3, { 'bettercompute.io/pool': 'smoke' }, { 'bettercompute.io/gpu': '8' });
    simulated.push(...nodes);
    const target = nodes[1]!;
    const node = await kubectlJson<Node>(['get', 'node', target]);
    expect(node.status?.allocatable?.['bettercompute.io/gpu']).toBe('8');
    await apply(
      busyboxPod('on-simulated', 'true', {
        nodeSelector: { 'kubernetes.io/hostname': target },
        tolerations: [SIMULATED_TOLERATION],
      }),
    );
    const bound = await waitFor('pod bound', async () => {
      const p = await kubectlJson<Pod>(['-n', ns, 'get', 'pod', 'on-simulated']);
      return p.spec.nodeName ? p : undefined;
    });
    expect(bound.spec.nodeName).toBe(target);
    expect(bound.status?.conditions?.find((c) => c.type === 'PodScheduled')?.status).toBe('True');
    // Simulated nodes stay Ready (no heartbeat needed) and take extended resources into account.
    const gpuPod = busyboxPod('gpu-simulated', 'true', {
      nodeSelector: { 'bettercompute.io/pool': 'smoke' },
      tolerations: [SIMULATED_TOLERATION],
    });
    Object.assign(gpuPod.spec.containers[0]!, { resources: { limits: { 'bettercompute.io/gpu': '9' } } });
    await apply(gpuPod);
    await waitFor('unschedulable for lack of GPUs', async () => {
      const p = await kubectlJson<Pod>(['-n', ns, 'get', 'pod', 'gpu-simulated']);
      const c = p.status?.conditions?.find((x) => x.type === 'PodScheduled');
      return c?.status === 'False' && /bettercompute\.io\/gpu/.test(c.message ?? '') ? true : undefined;
    });
    await deletePodsNow(ns, ['on-simulated', 'gpu-simulated']);
  });

  it.skipIf(external)('restarts kube-scheduler with a changed configuration', async () => {
    const second = uniqueName('second-scheduler');
    const config = `${defaultSchedulerConfig().trimEnd()}\n- schedulerName: ${second}\n`;
    try {
      await restartScheduler(config);
      await apply(busyboxPod('by-second', 'echo second', { schedulerName: second }));
      const pod = await waitForPodPhase(ns, 'by-second', ['Succeeded']);
      expect(pod.spec.nodeName).toBe(clusterInfo().nodeName);
    } finally {
      await restartScheduler(defaultSchedulerConfig());
    }
  });

  it.skipIf(external)('restarts the kubelet and runs pods again', async () => {
    await restartKubelet();
    // The device manager is up: device plugins (ours, in later suites) register at this socket.
    expect(fs.existsSync(path.join(clusterInfo().devicePluginDir, 'kubelet.sock'))).toBe(true);
    await apply(busyboxPod('after-restart', 'echo after-restart'));
    await waitForPodPhase(ns, 'after-restart', ['Succeeded']);
    expect(await kubectl(['-n', ns, 'logs', 'after-restart'])).toContain('after-restart');
  });
});
