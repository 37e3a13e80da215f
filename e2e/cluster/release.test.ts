import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Ledger } from '../../src/db/ledger.ts';
import {
  type Pod,
  apply,
  clusterInfo,
  deletePodsNow,
  kubectl,
  kubectlJson,
  kubectlResult,
  pauseComponent,
  resumeComponent,
  uniqueName,
  waitFor,
  waitForPodPhase,
} from './harness.ts';
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

/** A pod of a Reservation asking `count` of its GPUs, running `command`, with this grace period. */
function gpuPod(name: string, reservation: string, count: number, command: string, grace: number) {
  const p = pod(name, { reservation, command });
  p.spec.terminationGracePeriodSeconds = grace;
  p.spec.containers[0]!.resources.limits['bettercompute.io/gpu'] = String(count);
  return p;
}

interface Booked {
  start: number;
  allocations: { atoms: string[] }[];
  /** When this test saw it Reserved. */
  bookedAt: number;
}

async function waitForReserved(name: string, timeoutMs: number): Promise<Booked> {
  return waitFor(`${name} Reserved`, async () => {
    const r = await kubectlJson<{ status?: { phase?: string; start?: string; allocations?: { atoms: string[] }[] } }>(['-n', ns, 'get', 'reservation', name]);
    return r.status?.phase === 'Reserved' ? { start: Date.parse(r.status.start!), allocations: r.status.allocations!, bookedAt: Date.now() } : undefined;
  }, { timeoutMs, intervalMs: 250 });
}

/** A Reservation of the pool's 8 GPUs for 10 minutes from `startMs`, once Reserved. */
async function bookAt(name: string, startMs: number): Promise<Booked> {
  await apply({
    apiVersion: 'bettercompute.io/v1alpha1',
    kind: 'Reservation',
    metadata: { name, namespace: ns },
    spec: { pool: POOL, devices: [{ class: 'gpu', count: 8 }], start: new Date(startMs).toISOString(), duration: '10m' },
  });
  const r = await waitForReserved(name, 60_000);
  expect(r.start).toBe(startMs);
  return r;
}

const sleepUntil = (ms: number) => new Promise((resolve) => setTimeout(resolve, Math.max(0, ms - Date.now())));

/** When the pod was first seen gone from the API server. */
function waitForGone(name: string, timeoutMs: number): Promise<number> {
  return waitFor(`${name} gone`, async () => {
    const r = await kubectlResult(['-n', ns, 'get', 'pod', name]);
    return r.code !== 0 && /NotFound/.test(r.stderr) ? Date.now() : undefined;
  }, { timeoutMs, intervalMs: 250 });
}

/** When the pod was first seen Running; throws as soon as it is seen Failed (a hand-over must never fail it). */
function waitForRunningNeverFailed(name: string, timeoutMs: number): Promise<number> {
  return waitFor(`${name} Running`, async () => {
    const p = await kubectlJson<Pod>(['-n', ns, 'get', 'pod', name]);
    if (p.status?.phase === 'Failed') throw new Error(`${name} failed: ${JSON.stringify(p.status)}`);
    return p.status?.phase === 'Running' ? Date.now() : undefined;
  }, { timeoutMs, intervalMs: 250 });
}

/** The atoms the pod's container was given (it prints BETTERCOMPUTE_ATOMS). */
async function atomsOf(name: string): Promise<string[]> {
  const logs = await waitFor(`${name} logged its atoms`, async () => {
    const out = await kubectl(['-n', ns, 'logs', name]);
    return /ATOMS=\S+/.test(out) ? out : undefined;
  });
  return /ATOMS=(\S+)/.exec(logs)![1]!.split(',').sort();
}

describe('release, on the installed product', () => {
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
  /** What the first booking's pod does against its stop, in each back-to-back test. */
  const variants = {
    'a pod that takes 25 s to stop on SIGTERM': { command: `trap 'sleep 25; exit 0' TERM`, grace: 30, pdb: false },
    'a PodDisruptionBudget of maxUnavailable 0': { command: 'true', grace: 30, pdb: true },
    'a 1-day grace, SIGTERM ignored': { command: `trap '' TERM`, grace: 86_400, pdb: false },
  };
  for (const [variant, v] of Object.entries(variants)) {
    it(`back to back on the same GPUs, ${variant}: the first pod has stopped by its booking’s end; the second runs on the same atoms within 15 s of its start, never failed`, async () => {
      const tag = `b2b-${Object.keys(variants).indexOf(variant)}`;
      await kubectl(['-n', ns, 'delete', 'reservation', '--all', '--wait=true', '--timeout=90s'], { timeoutMs: 100_000 });
      const first = await reserveAndWait(ns, `${tag}-first`, POOL, 8, '80s');
      const firstEnd = Date.parse(first.end);
      const second = await bookAt(`${tag}-second`, firstEnd);
      const atoms = first.allocations.flatMap((a) => a.atoms).sort();
      expect(second.allocations.flatMap((a) => a.atoms).sort()).toEqual(atoms);
      if (v.pdb) {
        await apply({ apiVersion: 'policy/v1', kind: 'PodDisruptionBudget', metadata: { name: tag, namespace: ns }, spec: { maxUnavailable: 0, selector: { matchLabels: { app: tag } } } });
      }
      const stubborn = gpuPod(`${tag}-first-0`, `${tag}-first`, 8, `${v.command}; echo "ATOMS=$BETTERCOMPUTE_ATOMS"; while true; do sleep 1; done`, v.grace);
      Object.assign(stubborn.metadata, { labels: { ...stubborn.metadata.labels, app: tag } });
      await apply(stubborn);
      await waitForPodPhase(ns, `${tag}-first-0`, ['Running'], 120_000);
      // The second booking's pod, made now: Pending until its start.
      await apply(gpuPod(`${tag}-second-0`, `${tag}-second`, 8, `echo "ATOMS=$BETTERCOMPUTE_ATOMS"; while true; do sleep 1; done`, 30));
      const goneAt = await waitForGone(`${tag}-first-0`, Math.max(0, firstEnd - Date.now()) + 60_000);
      const runningAt = await waitForRunningNeverFailed(`${tag}-second-0`, Math.max(0, second.start - Date.now()) + 60_000);
      process.stderr.write(`[release] back to back, ${variant}: the first pod gone ${((firstEnd - goneAt) / 1000).toFixed(1)}s before its end; the second Running ${((runningAt - second.start) / 1000).toFixed(1)}s after its start\n`);
      expect(goneAt).toBeLessThanOrEqual(firstEnd);
      expect(runningAt).toBeLessThanOrEqual(second.start + 15_000);
      expect(await atomsOf(`${tag}-second-0`)).toEqual(atoms);
      await deletePodsNow(ns, [`${tag}-second-0`]);
      await kubectlResult(['-n', ns, 'delete', 'pdb', tag, '--ignore-not-found']);
    }, 300_000);
  }

  // The kubelet is one of the process cluster's own processes, paused by the test; kind's runs in a node container.
  it.skipIf(external)('back to back with a kubelet frozen through the end: the first pod outlives its booking; the second waits for it, unbound, then runs on the same atoms, never failed', async () => {
    await kubectl(['-n', ns, 'delete', 'reservation', '--all', '--wait=true', '--timeout=90s'], { timeoutMs: 100_000 });
    const first = await reserveAndWait(ns, 'lag-first', POOL, 8, '80s');
    const firstEnd = Date.parse(first.end);
    const second = await bookAt('lag-second', firstEnd);
    const atoms = first.allocations.flatMap((a) => a.atoms).sort();
    await apply(gpuPod('lag-first-0', 'lag-first', 8, `trap '' TERM; while true; do sleep 1; done`, 30));
    await waitForPodPhase(ns, 'lag-first-0', ['Running'], 120_000);
    await apply(gpuPod('lag-second-0', 'lag-second', 8, `echo "ATOMS=$BETTERCOMPUTE_ATOMS"; while true; do sleep 1; done`, 30));
    // Told to stop 40 s before the end with 30 s of grace; the kubelet frozen from 15 s before the end to 15 s after
    // it (inside the node's 40 s grace: no NodeNotReady), so the container outlives its booking.
    await sleepUntil(firstEnd - 15_000);
    await pauseComponent('kubelet');
    try {
      await sleepUntil(firstEnd + 15_000);
    } finally {
      await resumeComponent('kubelet');
    }
    const resumedAt = Date.now();
    const goneAt = await waitForGone('lag-first-0', 60_000);
    const runningAt = await waitForRunningNeverFailed('lag-second-0', 60_000);
    const waited = await kubectlJson<{ items: { reason: string; message: string }[] }>(['-n', ns, 'get', 'events', '--field-selector', 'involvedObject.name=lag-second-0']);
    const said = waited.items.some((e) => e.reason === 'FailedScheduling' && e.message.includes('WaitingForPod: pod'));
    process.stderr.write(
      `[release] kubelet frozen through the end: the first pod gone ${((goneAt - resumedAt) / 1000).toFixed(1)}s after the kubelet resumed, the second Running ${((runningAt - resumedAt) / 1000).toFixed(1)}s after it (${(runningAt - second.start) / 1000}s after its start); a WaitingForPod event: ${said}\n`,
    );
    expect(runningAt).toBeGreaterThanOrEqual(goneAt - 1000);
    expect(await atomsOf('lag-second-0')).toEqual(atoms);
    await deletePodsNow(ns, ['lag-second-0']);
  }, 300_000);

  it('a Reservation deleted while its pod stops slowly, another booked at once: that one waits for the pod, then its pod runs on the same atoms, never failed', async () => {
    await kubectl(['-n', ns, 'delete', 'reservation', '--all', '--wait=true', '--timeout=90s'], { timeoutMs: 100_000 });
    const first = await reserveAndWait(ns, 'del-first', POOL, 8, '1h');
    const atoms = first.allocations.flatMap((a) => a.atoms).sort();
    await apply(gpuPod('del-first-0', 'del-first', 8, `trap 'sleep 25; exit 0' TERM; while true; do sleep 1; done`, 30));
    await waitForPodPhase(ns, 'del-first-0', ['Running'], 120_000);

    const deletedAt = Date.now();
    await kubectl(['-n', ns, 'delete', 'reservation', 'del-first', '--wait=false']);
    await apply({ apiVersion: 'bettercompute.io/v1alpha1', kind: 'Reservation', metadata: { name: 'del-next', namespace: ns }, spec: { pool: POOL, devices: [{ class: 'gpu', count: 8 }], duration: '10m' } });
    // Its atoms stay booked while the first pod's container runs: the next Reservation is booked once it is gone.
    const next = await waitForReserved('del-next', 120_000);
    const goneAt = await waitForGone('del-first-0', 60_000);
    expect(next.allocations.flatMap((a) => a.atoms).sort()).toEqual(atoms);
    await apply(gpuPod('del-next-0', 'del-next', 8, `echo "ATOMS=$BETTERCOMPUTE_ATOMS"; while true; do sleep 1; done`, 30));
    const runningAt = await waitForRunningNeverFailed('del-next-0', 60_000);
    process.stderr.write(
      `[release] deleted while stopping: the first pod gone ${((goneAt - deletedAt) / 1000).toFixed(1)}s after the delete, the next Reservation booked ${((next.bookedAt - deletedAt) / 1000).toFixed(1)}s after it, its pod Running ${((runningAt - deletedAt) / 1000).toFixed(1)}s after it\n`,
    );
    expect(next.bookedAt).toBeGreaterThanOrEqual(goneAt - 1000);
    expect(await atomsOf('del-next-0')).toEqual(atoms);
    await deletePodsNow(ns, ['del-next-0']);
    await kubectl(['-n', ns, 'delete', 'reservation', 'del-next', '--ignore-not-found', '--wait=true', '--timeout=60s']);
  }, 300_000);
  it('a pod made once its booking stops its pods (its last 40 s) is not bound: Pending with BookingStopping, never Failed, through the end', async () => {
    await kubectl(['-n', ns, 'delete', 'reservation', '--all', '--wait=true', '--timeout=90s'], { timeoutMs: 100_000 });
    const booked = await reserveAndWait(ns, 'stopping', POOL, 1, '50s');
    const end = Date.parse(booked.end);
    // The pool's 30 s stop grace and the 10 s slack: from 40 s before the end no new pod starts on the booking.
    await sleepUntil(end - 38_000);
    await apply(gpuPod('too-late', 'stopping', 1, 'echo "ATOMS=$BETTERCOMPUTE_ATOMS"; sleep 3600', 30));
    const said = await waitFor('a FailedScheduling event with BookingStopping', async () => {
      const ev = await kubectlJson<{ items: { reason: string; message: string }[] }>(['-n', ns, 'get', 'events', '--field-selector', 'involvedObject.name=too-late']);
      return ev.items.find((e) => e.reason === 'FailedScheduling' && e.message.includes('BookingStopping: reservation')) ?? undefined;
    }, { timeoutMs: 30_000, intervalMs: 500 });
    process.stderr.write(`[release] a pod made in its booking's stop lead: ${said.message}\n`);
    await sleepUntil(end + 5_000);
    const p = await kubectlJson<Pod>(['-n', ns, 'get', 'pod', 'too-late']);
    expect(p.status?.phase ?? 'Pending').toBe('Pending');
    expect(p.spec.nodeName).toBeUndefined();
    await deletePodsNow(ns, ['too-late']);
  }, 180_000);
});
