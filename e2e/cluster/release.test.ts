import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Ledger } from '../../src/db/ledger.ts';
import { type Pod, apply, clusterInfo, deletePodsNow, kubectl, kubectlJson, kubectlResult, uniqueName, waitFor, waitForPodPhase } from './harness.ts';
import { startHostDatabase, type HostDatabase } from './host-database.ts';
import { applyNodePool, installProduct, removeNodePool, reserveAndWait, uninstallProduct } from './install.ts';

// Release (issue 6, item 5; issue 11) on the installed product — two controller replicas from the image, installed with
// deploy/overlays/external on a PostgreSQL of this host — with the real kube-scheduler and kubelet: a pod that ends
// gives back its on-demand booking (truncated) or its reservation assignment; the pods of a reservation that ends
// (deleted, or its window passed) are evicted; back to back on the same GPUs, the first booking's pod (ignoring SIGTERM,
// a 1-day grace period, a PodDisruptionBudget of maxUnavailable 0) has stopped by its end and the second's pod runs on
// the same atoms within 15 s of its start (docs/booking-end.md). The test reads the ledger only to check it.
const external = process.env.BC_EXTERNAL_CLUSTER === '1';
const ns = uniqueName('release');
const POOL = uniqueName('rel-pool');
let hostDb: HostDatabase;
let ledger: Ledger;

function pod(name: string, opts: { reservation?: string; command: string }) {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: ns, ...(opts.reservation ? { labels: { 'bettercompute.io/reservation': opts.reservation } } : {}) },
    spec: {
      restartPolicy: 'Never',
      terminationGracePeriodSeconds: 30,
      containers: [
        { name: 'main', image: clusterInfo().busyboxImage, command: ['sh', '-c', opts.command], resources: { limits: { 'bettercompute.io/gpu': '1' } } },
      ],
    },
  };
}

async function reserve(name: string, duration: string): Promise<string> {
  return (await reserveAndWait(ns, name, POOL, 1, duration)).reservationId;
}

async function uidOf(name: string): Promise<string> {
  return (await kubectlJson<Pod & { metadata: { uid: string } }>(['-n', ns, 'get', 'pod', name])).metadata.uid;
}

async function liveAssignment(uid: string): Promise<boolean> {
  const { rows } = await hostDb.db.query(`SELECT 1 FROM reservation_pod_assignments WHERE pod_uid = $1 AND released_at IS NULL`, [uid]);
  return rows.length > 0;
}

/** Bookings of these atoms that reach past now. */
async function liveBookingsOf(atoms: string[]): Promise<number> {
  const { rows } = await hostDb.db.query<{ n: number }>(
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

describe.skipIf(external)('release, on the installed product', () => {
  beforeAll(async () => {
    hostDb = await startHostDatabase();
    ledger = new Ledger(hostDb.db);
    const installed = await installProduct({ gpus: 8, databaseUrl: hostDb.podUrl });
    process.stderr.write(`[release] deploy/overlays/external (2 replicas, host PostgreSQL) to Ready in ${installed.readySeconds.toFixed(1)}s\n`);
    await apply({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns, labels: { 'bettercompute.io/tenant': ns } } });
    await applyNodePool(POOL, [{ tenant: ns, quota: { gpu: 8 } }]);
  }, 1_800_000);

  afterAll(async () => {
    await kubectlResult(['delete', 'namespace', ns, '--wait=true', '--timeout=120s'], { timeoutMs: 130_000 });
    await removeNodePool(POOL);
    if (process.env.BC_KEEP_INSTALLED !== '1') await uninstallProduct();
    await hostDb?.stop();
  }, 300_000);

  it('a pod that ends: its on-demand booking is truncated and a reservation pod assignment freed', async () => {
    await reserve('ends', '1h');
    await apply([pod('od', { command: 'sleep 20' }), pod('rp', { reservation: 'ends', command: 'sleep 20' })]);
    await Promise.all([waitForPodPhase(ns, 'od', ['Running'], 120_000), waitForPodPhase(ns, 'rp', ['Running'], 120_000)]);
    const [od, rp] = [await uidOf('od'), await uidOf('rp')];
    const booking = await ledger.podBooking(od);
    expect(booking?.atoms).toHaveLength(1);
    expect(await liveBookingsOf(booking!.atoms)).toBe(1);
    expect(await liveAssignment(rp)).toBe(true);

    await Promise.all([waitForPodPhase(ns, 'od', ['Succeeded'], 120_000), waitForPodPhase(ns, 'rp', ['Succeeded'], 120_000)]);
    await waitFor('on-demand booking released', async () => (await ledger.podBooking(od)) === undefined, { timeoutMs: 20_000 });
    expect(await liveBookingsOf(booking!.atoms)).toBe(0);
    await waitFor('reservation assignment released', async () => !(await liveAssignment(rp)), { timeoutMs: 20_000 });
    await deletePodsNow(ns, ['od', 'rp']);
  }, 240_000);

  it('a reservation that ends (deleted, or its window passed): its pods are evicted', async () => {
    await reserve('deleted', '1h');
    await reserve('short', '60s');
    await apply([pod('victim', { reservation: 'deleted', command: 'sleep 3600' }), pod('timed', { reservation: 'short', command: 'sleep 3600' })]);
    await Promise.all([waitForPodPhase(ns, 'victim', ['Running'], 120_000), waitForPodPhase(ns, 'timed', ['Running'], 120_000)]);
    const [victim, timed] = [await uidOf('victim'), await uidOf('timed')];

    const t0 = performance.now();
    await kubectl(['-n', ns, 'delete', 'reservation', 'deleted', '--wait=false']);
    await waitFor('victim evicted', () => gone('victim'), { timeoutMs: 30_000, intervalMs: 250 });
    process.stderr.write(`[release] deleted reservation: pod evicted in ${((performance.now() - t0) / 1000).toFixed(1)}s\n`);
    await deletePodsNow(ns, ['victim']);
    await waitFor('victim assignment released', async () => !(await liveAssignment(victim)), { timeoutMs: 30_000 });

    await waitFor('timed evicted before its window ends', () => gone('timed'), { timeoutMs: 120_000, intervalMs: 500 });
    await deletePodsNow(ns, ['timed']);
    await waitFor('timed assignment released', async () => !(await liveAssignment(timed)), { timeoutMs: 30_000 });
  }, 300_000);
  it('back to back on the same GPUs: the first pod (SIGTERM ignored, a 1-day grace, a PDB of maxUnavailable 0) has stopped by its booking’s end; the second runs on the same atoms within 15 s of its start', async () => {
    // The pool's 8 GPUs free: what the tests before booked goes.
    await kubectl(['-n', ns, 'delete', 'reservation', '--all', '--wait=true', '--timeout=90s'], { timeoutMs: 100_000 });
    const first = await reserveAndWait(ns, 'b2b-first', POOL, 8, '100s');
    const firstEnd = Date.parse((await kubectlJson<{ status: { end: string } }>(['-n', ns, 'get', 'reservation', 'b2b-first'])).status.end);
    await apply({
      apiVersion: 'bettercompute.io/v1alpha1',
      kind: 'Reservation',
      metadata: { name: 'b2b-second', namespace: ns },
      spec: { pool: POOL, devices: [{ class: 'gpu', count: 8 }], start: new Date(firstEnd).toISOString(), duration: '10m' },
    });
    const second = await waitFor('b2b-second Reserved', async () => {
      const r = await kubectlJson<{ status?: { phase?: string; start?: string; allocations?: { atoms: string[] }[] } }>(['-n', ns, 'get', 'reservation', 'b2b-second']);
      return r.status?.phase === 'Reserved' ? r.status : undefined;
    }, { timeoutMs: 60_000, intervalMs: 500 });
    const secondStart = Date.parse(second.start!);
    expect(secondStart).toBe(firstEnd);
    const atoms = first.allocations.flatMap((a) => a.atoms).sort();
    expect(second.allocations!.flatMap((a) => a.atoms).sort()).toEqual(atoms);

    // The first booking's pod: ignores SIGTERM, names a day of grace, and a PodDisruptionBudget forbids its eviction.
    await apply({
      apiVersion: 'policy/v1',
      kind: 'PodDisruptionBudget',
      metadata: { name: 'b2b-first', namespace: ns },
      spec: { maxUnavailable: 0, selector: { matchLabels: { app: 'b2b-first' } } },
    });
    const stubborn = pod('b2b-first-0', { reservation: 'b2b-first', command: `trap '' TERM; echo "ATOMS=$BETTERCOMPUTE_ATOMS"; while true; do sleep 1; done` });
    Object.assign(stubborn.metadata, { labels: { ...stubborn.metadata.labels, app: 'b2b-first' } });
    Object.assign(stubborn.spec, { terminationGracePeriodSeconds: 86_400 });
    stubborn.spec.containers[0]!.resources.limits['bettercompute.io/gpu'] = '8';
    await apply(stubborn);
    await waitForPodPhase(ns, 'b2b-first-0', ['Running'], 120_000);
    // The second booking's pod, made now: Pending until its start; it ignores SIGTERM for 15 s.
    const next = pod('b2b-second-0', { reservation: 'b2b-second', command: `trap 'sleep 15; exit 0' TERM; echo "ATOMS=$BETTERCOMPUTE_ATOMS"; while true; do sleep 1; done` });
    next.spec.containers[0]!.resources.limits['bettercompute.io/gpu'] = '8';
    await apply(next);

    const goneAt = await waitFor('b2b-first-0 gone', async () => {
      const r = await kubectlResult(['-n', ns, 'get', 'pod', 'b2b-first-0']);
      return r.code !== 0 && /NotFound/.test(r.stderr) ? Date.now() : undefined;
    }, { timeoutMs: Math.max(0, firstEnd - Date.now()) + 60_000, intervalMs: 250 });
    const runningAt = await waitFor('b2b-second-0 Running', async () => {
      const p = await kubectlJson<Pod>(['-n', ns, 'get', 'pod', 'b2b-second-0']);
      if (p.status?.phase === 'Failed') throw new Error(`b2b-second-0 failed: ${JSON.stringify(p.status)}`);
      return p.status?.phase === 'Running' ? Date.now() : undefined;
    }, { timeoutMs: Math.max(0, secondStart - Date.now()) + 60_000, intervalMs: 250 });
    process.stderr.write(
      `[release] back to back: the first pod gone ${((firstEnd - goneAt) / 1000).toFixed(1)}s before its end; the second Running ${((runningAt - secondStart) / 1000).toFixed(1)}s after its start\n`,
    );
    expect(goneAt).toBeLessThanOrEqual(firstEnd);
    expect(runningAt).toBeLessThanOrEqual(secondStart + 15_000);
    const logs = await waitFor('b2b-second-0 logged its atoms', async () => {
      const out = await kubectl(['-n', ns, 'logs', 'b2b-second-0']);
      return /ATOMS=\S+/.test(out) ? out : undefined;
    });
    expect(/ATOMS=(\S+)/.exec(logs)![1]!.split(',').sort()).toEqual(atoms);
    await deletePodsNow(ns, ['b2b-second-0']);
    await kubectlResult(['-n', ns, 'delete', 'pdb', 'b2b-first', '--ignore-not-found']);
    await kubectl(['-n', ns, 'delete', 'reservation', 'b2b-first', 'b2b-second', '--ignore-not-found', '--wait=true', '--timeout=60s']);
  }, 420_000);
});
