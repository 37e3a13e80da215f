import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ExtenderEnv, type TestReservation, startExtenderEnv } from './extender-env.ts';
import { type Pod, apply, clusterInfo, deletePodsNow, kubectl, kubectlJson, kubectlResult, uniqueName, waitFor, waitForPodPhase } from './harness.ts';

// Release (issue 6, item 5) on the real kube-scheduler + extender + kubelet + agent: a pod that ends gives back its
// on-demand booking (truncated) or its reservation assignment; the pods of a reservation that ends (released, or its
// window passed) are evicted after the grace period (the releaser runs with 1 s here).
const external = process.env.BC_EXTERNAL_CLUSTER === '1';
const ns = uniqueName('release');
let env: ExtenderEnv;

function pod(name: string, resources: Record<string, number>, command: string) {
  const limits = Object.fromEntries(Object.entries(resources).map(([k, v]) => [k, String(v)]));
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: ns },
    spec: {
      restartPolicy: 'Never',
      terminationGracePeriodSeconds: 30,
      containers: [{ name: 'main', image: clusterInfo().busyboxImage, command: ['sh', '-c', command], resources: { limits } }],
    },
  };
}
const rsvPod = (r: TestReservation, name: string, command: string) => pod(name, { [r.resource]: 1 }, command);

async function uidOf(name: string): Promise<string> {
  return (await kubectlJson<Pod & { metadata: { uid: string } }>(['-n', ns, 'get', 'pod', name])).metadata.uid;
}

async function liveAssignment(uid: string): Promise<boolean> {
  const { rows } = await env.db.query(`SELECT 1 FROM reservation_pod_assignments WHERE pod_uid = $1 AND released_at IS NULL`, [uid]);
  return rows.length > 0;
}

/** Bookings of these atoms that reach past now. */
async function liveBookingsOf(atoms: string[]): Promise<number> {
  const { rows } = await env.db.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM device_bookings WHERE device_id = ANY($1) AND NOT isempty(during) AND upper(during) > compute_now()`,
    [atoms],
  );
  return rows[0]!.n;
}

async function gone(name: string): Promise<boolean> {
  const r = await kubectlResult(['-n', ns, 'get', 'pod', name, '-o', 'json']);
  if (r.code !== 0) return /NotFound/.test(r.stderr);
  return Boolean((JSON.parse(r.stdout) as { metadata: { deletionTimestamp?: string } }).metadata.deletionTimestamp);
}

describe.skipIf(external)('release', () => {
  beforeAll(async () => {
    await apply({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns } });
    env = await startExtenderEnv({ gpus: 8, quota: { [ns]: {} } });
    await env.waitAdvertised('bettercompute.io/gpu', 8);
  }, 120_000);

  afterAll(async () => {
    await kubectl(['delete', 'namespace', '--wait=false', '--ignore-not-found', ns]).catch(() => undefined);
    await env?.stop();
  }, 60_000);

  it('a pod that ends: its on-demand booking is truncated and a reservation pod assignment freed', async () => {
    const r = await env.reserve(ns, 'ends', 1);
    await env.waitAdvertised(r.resource, 1);
    await apply([pod('od', { 'bettercompute.io/gpu': 1 }, 'sleep 3'), rsvPod(r, 'rp', 'sleep 3')]);
    await Promise.all([waitForPodPhase(ns, 'od', ['Running']), waitForPodPhase(ns, 'rp', ['Running'])]);
    const [od, rp] = [await uidOf('od'), await uidOf('rp')];
    const booking = await env.ledger.podBooking(od);
    expect(booking?.atoms).toHaveLength(1);
    expect(await liveBookingsOf(booking!.atoms)).toBe(1);
    expect(await liveAssignment(rp)).toBe(true);

    await Promise.all([waitForPodPhase(ns, 'od', ['Succeeded']), waitForPodPhase(ns, 'rp', ['Succeeded'])]);
    await waitFor('on-demand booking released', async () => (await env.ledger.podBooking(od)) === undefined, { timeoutMs: 15_000 });
    expect(await liveBookingsOf(booking!.atoms)).toBe(0);
    await waitFor('reservation assignment released', async () => !(await liveAssignment(rp)), { timeoutMs: 15_000 });
    await deletePodsNow(ns, ['od', 'rp']);
  }, 60_000);

  it('a reservation that ends (released, or its window passed): its pods are evicted after the grace period', async () => {
    const released = await env.reserve(ns, 'released', 1);
    const short = await env.reserve(ns, 'short', 1, { seconds: 20 });
    await env.waitAdvertised(released.resource, 1);
    await env.waitAdvertised(short.resource, 1);
    await apply([rsvPod(released, 'victim', 'sleep 3600'), rsvPod(short, 'timed', 'sleep 3600')]);
    await Promise.all([waitForPodPhase(ns, 'victim', ['Running']), waitForPodPhase(ns, 'timed', ['Running'])]);
    const [victim, timed] = [await uidOf('victim'), await uidOf('timed')];

    const t0 = performance.now();
    expect(await env.ledger.release(released.id)).toBe(true);
    await waitFor('victim evicted', () => gone('victim'), { timeoutMs: 20_000, intervalMs: 200 });
    await waitFor('victim assignment released', async () => !(await liveAssignment(victim)), { timeoutMs: 20_000 });
    process.stderr.write(`[release] released reservation: pod evicted and freed in ${((performance.now() - t0) / 1000).toFixed(1)}s\n`);

    expect(await gone('timed')).toBe(false);
    await waitFor('timed evicted after its window', () => gone('timed'), { timeoutMs: 30_000, intervalMs: 250 });
    await waitFor('timed assignment released', async () => !(await liveAssignment(timed)), { timeoutMs: 20_000 });
    await deletePodsNow(ns, ['victim', 'timed']);
  }, 60_000);
});
