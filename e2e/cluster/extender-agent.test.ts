import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ExtenderEnv, type TestReservation, startExtenderEnv } from './extender-env.ts';
import {
  type KubeEvent,
  type List,
  type Pod,
  apply,
  clusterInfo,
  deletePodsNow,
  kubectl,
  kubectlJson,
  kubectlResult,
  restartKubelet,
  uniqueName,
  waitFor,
  waitForPodPhase,
} from './harness.ts';

// The loop from a booking to a container: real kube-scheduler calling our extender, the real kubelet calling our
// agent's device plugins, containers reading BETTERCOMPUTE_ATOMS.
const external = process.env.BC_EXTERNAL_CLUSTER === '1';
const nsA = uniqueName('team-a');
const nsB = uniqueName('team-b');
const nsQ = uniqueName('team-q');
let env: ExtenderEnv;
let r1: TestReservation;
let r2: TestReservation;

function pod(namespace: string, name: string, resources: Record<string, number>, command = 'env') {
  const limits = Object.fromEntries(Object.entries(resources).map(([k, v]) => [k, String(v)]));
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace },
    spec: {
      restartPolicy: 'Never',
      terminationGracePeriodSeconds: 0,
      containers: [{ name: 'main', image: clusterInfo().busyboxImage, command: ['sh', '-c', command], resources: { limits } }],
    },
  };
}

function reservationPod(r: TestReservation, name: string, count: number, command?: string) {
  return pod(r.namespace, name, { [r.resource]: count }, command);
}

function atomsIn(text: string): string[] {
  const line = text.split('\n').find((l) => l.startsWith('BETTERCOMPUTE_ATOMS='));
  return line ? line.slice('BETTERCOMPUTE_ATOMS='.length).split(',').sort() : [];
}

async function logs(namespace: string, name: string): Promise<string> {
  return kubectl(['-n', namespace, 'logs', name]);
}

async function runBoth(objs: ReturnType<typeof pod>[]): Promise<Map<string, string[]>> {
  // One request for both: the scheduler sees them at the same instant.
  await kubectl(['create', '-f', '-'], { input: JSON.stringify({ apiVersion: 'v1', kind: 'List', items: objs }) });
  const out = new Map<string, string[]>();
  await Promise.all(
    objs.map(async (o) => {
      const p = await waitForPodPhase(o.metadata.namespace, o.metadata.name, ['Succeeded', 'Failed'], 60_000);
      if (p.status?.phase !== 'Succeeded') throw new Error(`pod ${o.metadata.name} ${p.status?.phase}: ${JSON.stringify(p.status)}`);
      out.set(o.metadata.name, atomsIn(await logs(o.metadata.namespace, o.metadata.name)));
    }),
  );
  return out;
}

async function events(namespace: string, name: string): Promise<string> {
  const list = await kubectlJson<List<KubeEvent & { involvedObject?: { name?: string } }>>(['-n', namespace, 'get', 'events']);
  return list.items
    .filter((e) => e.involvedObject?.name === name)
    .map((e) => `${e.reason}: ${e.message}`)
    .join('\n');
}

describe.skipIf(external)('scheduler extender and node agent', () => {
  beforeAll(async () => {
    for (const [ns, tenant] of [[nsA, nsA], [nsB, nsB], [nsQ, 'quota-tenant']] as const) {
      await apply({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns, labels: { 'bettercompute.io/tenant': tenant } } });
    }
    env = await startExtenderEnv({ gpus: 8, quota: { [nsA]: {}, [nsB]: {}, 'quota-tenant': { gpu: 1 } } });
    r1 = await env.reserve(nsA, 'train-a', 2);
    r2 = await env.reserve(nsB, 'train-b', 2);
    await env.waitAdvertised(r1.resource, 2);
    await env.waitAdvertised(r2.resource, 2);
    await env.waitAdvertised('bettercompute.io/gpu', 8);
  }, 240_000);

  afterAll(async () => {
    await kubectl(['delete', 'namespace', '--wait=false', '--ignore-not-found', nsA, nsB, nsQ]).catch(() => undefined);
    await env?.stop();
  }, 120_000);

  it('runs a pod of a 2-GPU reservation with exactly its 2 atoms', async () => {
    const got = await runBoth([reservationPod(r1, 'solo', 2)]);
    expect(got.get('solo')).toEqual(r1.atoms);
    await deletePodsNow(nsA, ['solo']);
  });

  it('50 rounds: two pods of different reservations at once each see only their own atoms', async () => {
    const started = performance.now();
    for (let round = 0; round < 50; round++) {
      const a = reservationPod(r1, `ra-${round}`, 2);
      const b = reservationPod(r2, `rb-${round}`, 2);
      const got = await runBoth([a, b]);
      expect(got.get(a.metadata.name), `round ${round}`).toEqual(r1.atoms);
      expect(got.get(b.metadata.name), `round ${round}`).toEqual(r2.atoms);
      await Promise.all([deletePodsNow(nsA, [a.metadata.name]), deletePodsNow(nsB, [b.metadata.name])]);
    }
    process.stderr.write(`[extender-agent] 50 reservation rounds in ${((performance.now() - started) / 1000).toFixed(1)}s\n`);
  }, 900_000);

  it('50 rounds: two on-demand pods at once get disjoint booked atoms, as annotated', async () => {
    const started = performance.now();
    const reserved = new Set([...r1.atoms, ...r2.atoms]);
    for (let round = 0; round < 50; round++) {
      const a = pod(nsA, `oa-${round}`, { 'bettercompute.io/gpu': 1 });
      const b = pod(nsA, `ob-${round}`, { 'bettercompute.io/gpu': 1 });
      const got = await runBoth([a, b]);
      const atomsA = got.get(a.metadata.name)!;
      const atomsB = got.get(b.metadata.name)!;
      expect(atomsA, `round ${round}`).toHaveLength(1);
      expect(atomsB, `round ${round}`).toHaveLength(1);
      expect(atomsA[0]).not.toBe(atomsB[0]);
      for (const [o, atoms] of [[a, atomsA], [b, atomsB]] as const) {
        const p = await kubectlJson<Pod>(['-n', nsA, 'get', 'pod', o.metadata.name]);
        expect(p.metadata.annotations?.['bettercompute.io/atoms'], `round ${round}`).toBe(atoms.join(','));
        expect(reserved.has(atoms[0]!)).toBe(false);
      }
      await deletePodsNow(nsA, [a.metadata.name, b.metadata.name]);
    }
    process.stderr.write(`[extender-agent] 50 on-demand rounds in ${((performance.now() - started) / 1000).toFixed(1)}s\n`);
  }, 900_000);

  it('keeps a pod asking more than its reservation holds Pending, with the extender reason', async () => {
    await apply(reservationPod(r1, 'too-big', 3));
    const reason = await waitFor('FailedScheduling with the extender reason', async () => {
      const e = await events(nsA, 'too-big');
      return /holds 2 atoms here/.test(e) ? e : undefined;
    });
    expect(reason).toContain(r1.id);
    expect((await kubectlJson<Pod>(['-n', nsA, 'get', 'pod', 'too-big'])).status?.phase).toBe('Pending');
    await deletePodsNow(nsA, ['too-big']);
  });

  it('keeps an on-demand pod beyond quota Pending with QuotaExceeded', async () => {
    await apply(pod(nsQ, 'greedy', { 'bettercompute.io/gpu': 2 }));
    const reason = await waitFor('FailedScheduling with QuotaExceeded', async () => {
      const e = await events(nsQ, 'greedy');
      return /QuotaExceeded/.test(e) ? e : undefined;
    });
    expect(reason).toMatch(/quota-tenant would exceed its gpu quota/);
    expect((await kubectlJson<Pod>(['-n', nsQ, 'get', 'pod', 'greedy'])).status?.phase).toBe('Pending');
    await deletePodsNow(nsQ, ['greedy']);
  });

  it('re-registers after a kubelet restart; running pods keep their atoms', async () => {
    await apply(reservationPod(r1, 'long', 2, 'env; sleep 3600'));
    await waitForPodPhase(nsA, 'long', ['Running']);
    const before = atomsIn(await kubectl(['-n', nsA, 'exec', 'long', '--', 'env']));
    expect(before).toEqual(r1.atoms);
    await restartKubelet();
    await env.waitAdvertised(r1.resource, 2);
    await waitFor('agent re-registered', () => Object.values(env.agent.status()).every(Boolean));
    expect((await kubectlJson<Pod>(['-n', nsA, 'get', 'pod', 'long'])).status?.phase).toBe('Running');
    // A restarted kubelet answers exec only once it has synced its pods again ("pod does not exist" until then).
    const after = await waitFor('exec into the running pod after the restart', async () => {
      const r = await kubectlResult(['-n', nsA, 'exec', 'long', '--', 'env']);
      return r.code === 0 ? r.stdout : undefined;
    });
    expect(atomsIn(after)).toEqual(before);
    // The other reservation still admits pods after the restart.
    const got = await runBoth([reservationPod(r2, 'after-restart', 2)]);
    expect(got.get('after-restart')).toEqual(r2.atoms);
    await deletePodsNow(nsA, ['long']);
    await deletePodsNow(nsB, ['after-restart']);
  }, 300_000);
});
