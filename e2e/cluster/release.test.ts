import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Ledger } from '../../src/db/ledger.ts';
import { type Pod, apply, clusterInfo, deletePodsNow, kubectl, kubectlJson, kubectlResult, uniqueName, waitFor, waitForPodPhase } from './harness.ts';
import { startHostDatabase, type HostDatabase } from './host-database.ts';
import { applyNodePool, installProduct, removeNodePool, reserveAndWait, uninstallProduct } from './install.ts';

// Release (issue 6, item 5; issue 11) on the installed product — two controller replicas from the image, installed with
// deploy/overlays/external on a PostgreSQL of this host — with the real kube-scheduler and kubelet: a pod that ends
// gives back its on-demand booking (truncated) or its reservation assignment; the pods of a reservation that ends
// (deleted, or its window passed) are evicted. The test reads the ledger only to check it.
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

    await waitFor('timed evicted after its window', () => gone('timed'), { timeoutMs: 120_000, intervalMs: 500 });
    await deletePodsNow(ns, ['timed']);
    await waitFor('timed assignment released', async () => !(await liveAssignment(timed)), { timeoutMs: 30_000 });
  }, 300_000);
});
