import path from 'node:path';
import { fileURLToPath } from 'node:url';
import YAML from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { apply, clusterInfo, kubectl, kubectlJson, kubectlResult, uniqueName, waitCondition, waitFor, type List, type Pod } from './harness.ts';
import { applyNodePool, installProduct, removeNodePool, uninstallProduct, type ReservedStatus } from './install.ts';
import { buildKueue, removeKueue, startKueue, type RunningKueue } from './kueue.ts';

// Kueue's users, against the installed product (issue 33): Kueue v0.17 built offline and run beside the cluster
// (e2e/cluster/kueue.ts), deploy/kueue applied as docs/kueue.md says, the example queue of deploy/kueue/example in the
// tenant's namespace, and batch/v1 Jobs queued with `kueue.x-k8s.io/queue-name` that name a Reservation, or name none
// and get one booked at the earliest window (ADR 0046).
const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const c = () => clusterInfo();
const TENANT = uniqueName('kq');
const NS = TENANT;
/** Another tenant of the pool, whose regular Reservation preempts TENANT's spot one. */
const OTHER = uniqueName('kqo');
/** A namespace of TENANT's that is given to OTHER after a Reservation was booked in it. */
const MOVED = uniqueName('kqm');
const POOL = uniqueName('kqpool');
const RSV = 'train';
const CHECK = 'bettercompute-reservation';
/** How far ahead of its creation the Reservation starts: long enough to see the Job held, short enough to wait for. */
const LEAD_MS = 100_000;

let kueueDir: string;
let kueue: RunningKueue | undefined;
let reserved: ReservedStatus & { start: string; end: string };

interface WorkloadCR {
  metadata: { name: string; uid: string; ownerReferences?: { kind: string; name: string }[] };
  status?: { admissionChecks?: { name: string; state: string; message: string }[]; conditions?: { type: string; status: string; reason?: string }[] };
}

interface ReservationCR {
  metadata: { name: string; labels?: Record<string, string>; ownerReferences?: { kind: string; name: string; uid: string }[] };
  spec: { start?: string; duration?: number | string; devices: { class: string; count: number }[] };
  status?: ReservedStatus & { start?: string; end?: string; phase?: string };
}

/** A 2-pod batch/v1 Job queued on the example LocalQueue, each pod asking `gpus` bettercompute.io/gpu, printing its atoms. */
function job(name: string, o: { reservation?: string; gpus?: number; pods?: number; maxSeconds?: number; sleep?: number; namespace?: string } = {}) {
  const pods = o.pods ?? 2;
  return {
    apiVersion: 'batch/v1',
    kind: 'Job',
    metadata: {
      name,
      namespace: o.namespace ?? NS,
      labels: {
        'kueue.x-k8s.io/queue-name': 'reservations',
        ...(o.reservation ? { 'bettercompute.io/reservation': o.reservation } : {}),
        ...(o.maxSeconds ? { 'kueue.x-k8s.io/max-exec-time-seconds': String(o.maxSeconds) } : {}),
      },
    },
    spec: {
      // Kueue's defaulting webhook would set it; its webhooks are off here (e2e/cluster/kueue.ts).
      suspend: true,
      parallelism: pods,
      completions: pods,
      backoffLimit: 0,
      template: {
        spec: {
          restartPolicy: 'Never',
          terminationGracePeriodSeconds: 1,
          containers: [
            {
              name: 'main',
              image: c().busyboxImage,
              command: ['sh', '-c', `echo "ATOMS=$BETTERCOMPUTE_ATOMS"; sleep ${o.sleep ?? 3}`],
              resources: { limits: { 'bettercompute.io/gpu': String(o.gpus ?? 1) } },
            },
          ],
        },
      },
    },
  };
}

async function workloadOf(jobName: string, ns = NS): Promise<WorkloadCR | undefined> {
  const list = await kubectlJson<List<WorkloadCR>>(['-n', ns, 'get', 'workloads.kueue.x-k8s.io']);
  return list.items.find((w) => w.metadata.ownerReferences?.some((r) => r.kind === 'Job' && r.name === jobName));
}

async function checkOf(jobName: string): Promise<{ state: string; message: string } | undefined> {
  return (await workloadOf(jobName))?.status?.admissionChecks?.find((x) => x.name === CHECK);
}

/** The Reservation the check booked for a Job's Workload (labelled with the Workload's uid). */
async function bookedOf(jobName: string): Promise<ReservationCR | undefined> {
  const w = await workloadOf(jobName);
  if (!w) return undefined;
  return (await kubectlJson<List<ReservationCR>>(['-n', NS, 'get', 'reservations', '-l', `bettercompute.io/kueue-workload-uid=${w.metadata.uid}`])).items[0];
}

async function reservationGone(name: string): Promise<boolean> {
  return (await kubectlResult(['-n', NS, 'get', 'reservation', name])).code !== 0;
}

async function podsOf(jobName: string): Promise<Pod[]> {
  return (await kubectlJson<List<Pod>>(['-n', NS, 'get', 'pods', '-l', `job-name=${jobName}`])).items;
}

beforeAll(async () => {
  kueueDir = await buildKueue();
  const installed = await installProduct({ gpus: 8 });
  process.stderr.write(`[kueue] product installed to Ready in ${installed.readySeconds.toFixed(1)}s\n`);
  kueue = await startKueue(kueueDir);
  // As docs/kueue.md says: deploy/kueue after the product, the example queue in the tenant's namespace.
  await kubectl(['apply', '-k', path.join(ROOT, 'deploy', 'kueue')]);
  await apply({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: NS, labels: { 'bettercompute.io/tenant': TENANT } } });
  const example = YAML.parseAllDocuments(await kubectl(['kustomize', path.join(ROOT, 'deploy', 'kueue', 'example')])).map((d) => d.toJSON() as { kind: string; metadata: { namespace?: string } });
  for (const o of example) if (o.kind === 'LocalQueue') o.metadata.namespace = NS;
  await apply(example);
  await apply({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: OTHER, labels: { 'bettercompute.io/tenant': OTHER } } });
  await applyNodePool(POOL, [{ tenant: TENANT, quota: { gpu: 8 } }, { tenant: OTHER, quota: { gpu: 8 } }]);
  // The controller marks its AdmissionCheck Active; Kueue then makes the ClusterQueue Active.
  await waitCondition([`admissioncheck/${CHECK}`], 'Active', { timeoutMs: 90_000 });
  await waitCondition(['clusterqueue/bettercompute-reservations'], 'Active', { timeoutMs: 60_000 });
  const start = new Date(Date.now() + LEAD_MS).toISOString();
  await apply({ apiVersion: 'bettercompute.io/v1alpha1', kind: 'Reservation', metadata: { name: RSV, namespace: NS }, spec: { pool: POOL, devices: [{ class: 'gpu', count: 2 }], start, duration: '10m' } });
  reserved = await waitFor(`Reservation ${RSV} Reserved`, async () => {
    const r = await kubectlJson<{ status?: ReservedStatus & { start: string; end: string } }>(['-n', NS, 'get', 'reservation', RSV]);
    return r.status?.phase === 'Reserved' ? r.status : undefined;
  }, { timeoutMs: 60_000, intervalMs: 500 });
}, 3_600_000);

afterAll(async () => {
  await kubectlResult(['delete', 'namespace', NS, OTHER, MOVED, '--wait=true', '--timeout=120s'], { timeoutMs: 130_000 });
  await removeNodePool(POOL);
  await kubectlResult(['delete', '--ignore-not-found', '-k', path.join(ROOT, 'deploy', 'kueue', 'example')]);
  await kubectlResult(['delete', '--ignore-not-found', '-k', path.join(ROOT, 'deploy', 'kueue')]);
  await kueue?.stop();
  if (kueueDir) await removeKueue(kueueDir);
  if (process.env.BC_KEEP_INSTALLED !== '1') await uninstallProduct();
}, 600_000);

describe('Kueue workloads on Reservations (the AdmissionCheck bettercompute.io/reservation)', () => {
  it('rejects a Job whose pods the Reservation cannot hold, saying why', async () => {
    await apply(job('too-big', { reservation: RSV, pods: 3 }));
    // Kueue deactivates a Workload whose check is Rejected and resets the check to Pending ("Previously: Rejected") at
    // once, so the Rejected state lasts a moment only: the check's Event says what it decided.
    const rejectedEvent = await waitFor('the check of too-big Rejected (Event ReservationRejected)', async () => {
      const w = await workloadOf('too-big');
      if (!w) return undefined;
      const items = (await kubectlJson<List<{ reason: string; message: string }>>(['-n', NS, 'get', 'events', '--field-selector', `involvedObject.name=${w.metadata.name},reason=ReservationRejected`])).items;
      return items[0];
    }, { timeoutMs: 60_000, intervalMs: 500 });
    expect(rejectedEvent.message).toContain(`ask for 3 bettercompute.io/gpu in all, Reservation ${NS}/${RSV} holds 2`);
    const check = await checkOf('too-big');
    expect(check?.state === 'Rejected' || check?.message.includes('Previously: Rejected'), JSON.stringify(check)).toBe(true);
    expect(await podsOf('too-big')).toEqual([]);
  });

  it('holds a Job naming a Reservation until its window, then runs it on exactly the Reservation’s atoms within 15 s of the start', async () => {
    const startMs = new Date(reserved.start).getTime();
    expect(startMs - Date.now()).toBeGreaterThan(20_000);
    await apply(job('train-job', { reservation: RSV }));
    const pending = await waitFor('the check of train-job Pending with the start', async () => {
      const x = await checkOf('train-job');
      return x?.state === 'Pending' && x.message.includes('starts at') ? x : undefined;
    }, { timeoutMs: 60_000, intervalMs: 500 });
    expect(pending.message).toContain(`Reservation ${NS}/${RSV} starts at ${reserved.start.replace(/\.\d+Z$/, 'Z')}`);
    // Until a few seconds before the start: suspended, no pods.
    while (Date.now() < startMs - 3_000) {
      const j = await kubectlJson<{ spec: { suspend?: boolean } }>(['-n', NS, 'get', 'job', 'train-job']);
      expect(j.spec.suspend).toBe(true);
      expect(await podsOf('train-job')).toEqual([]);
      await new Promise((r) => setTimeout(r, 3_000));
    }
    const pods = await waitFor('both pods of train-job Succeeded', async () => {
      const ps = await podsOf('train-job');
      return ps.length === 2 && ps.every((p) => p.status?.phase === 'Succeeded') ? ps : undefined;
    }, { timeoutMs: 120_000, intervalMs: 1000 });
    const atoms: string[] = [];
    for (const p of pods) {
      expect(p.metadata.labels?.['bettercompute.io/reservation']).toBe(RSV);
      const started = (p.status as { containerStatuses?: { state?: { terminated?: { startedAt?: string } } }[] }).containerStatuses?.[0]?.state?.terminated?.startedAt;
      const lateMs = new Date(started!).getTime() - startMs;
      process.stderr.write(`[kueue] ${p.metadata.name} started ${(lateMs / 1000).toFixed(1)}s after the Reservation's start\n`);
      expect(lateMs).toBeGreaterThanOrEqual(-1000); // startedAt has whole seconds
      expect(lateMs).toBeLessThanOrEqual(15_000);
      const a = /ATOMS=(\S*)/.exec(await kubectl(['-n', NS, 'logs', p.metadata.name]))?.[1] ?? '';
      expect(a.split(',')).toHaveLength(1);
      atoms.push(a);
    }
    expect(atoms.sort()).toEqual(reserved.allocations.flatMap((al) => al.atoms).sort());
    expect((await checkOf('train-job'))?.state).toBe('Ready');
  }, 300_000);

  it('books a Reservation for a Job naming none at the first free window, owned by its Workload, shown before it runs; deactivating or deleting releases it', async () => {
    // The pool's 6 GPUs that RSV leaves are booked for the next 45 s: the first free window for 2 more starts then.
    await apply({ apiVersion: 'bettercompute.io/v1alpha1', kind: 'Reservation', metadata: { name: 'busy', namespace: NS }, spec: { pool: POOL, devices: [{ class: 'gpu', count: 6 }], duration: '45s' } });
    const busy = await waitFor('Reservation busy Reserved', async () => {
      const r = await kubectlJson<ReservationCR>(['-n', NS, 'get', 'reservation', 'busy']);
      return r.status?.phase === 'Reserved' ? r.status : undefined;
    }, { timeoutMs: 60_000, intervalMs: 500 });
    const freeAt = new Date(busy.end!).getTime();
    for (const name of ['booked-job', 'deactivated-job', 'deleted-job']) await apply(job(name, { maxSeconds: 60 }));
    const booked = new Map<string, ReservationCR>();
    for (const name of ['booked-job', 'deactivated-job', 'deleted-job']) {
      booked.set(name, await waitFor(`a Reservation booked for ${name}`, () => bookedOf(name), { timeoutMs: 60_000, intervalMs: 500 }));
    }
    const r = booked.get('booked-job')!;
    const w = (await workloadOf('booked-job'))!;
    expect(r.metadata.ownerReferences).toEqual([expect.objectContaining({ kind: 'Workload', name: w.metadata.name, uid: w.metadata.uid })]);
    expect(r.spec).toMatchObject({ devices: [{ class: 'gpu', count: 2 }], duration: 60 });
    expect(Math.abs(new Date(r.spec.start!).getTime() - freeAt)).toBeLessThanOrEqual(1000);
    // Its start on the Workload, before it runs: the check's message and an Event.
    const pending = await waitFor('the check of booked-job Pending with its start', async () => {
      const x = await checkOf('booked-job');
      return x?.state === 'Pending' && x.message.includes(r.metadata.name) && /at \d{4}-/.test(x.message) ? x : undefined;
    }, { timeoutMs: 60_000, intervalMs: 500 });
    expect(Date.now()).toBeLessThan(freeAt);
    process.stderr.write(`[kueue] booked-job: ${pending.message}\n`);
    const events = await kubectlJson<List<{ reason: string; message: string }>>(['-n', NS, 'get', 'events', '--field-selector', `involvedObject.name=${w.metadata.name},reason=ReservationBooked`]);
    expect(events.items.map((e) => e.message)).toEqual([expect.stringContaining(`booked Reservation ${NS}/${r.metadata.name}`)]);
    expect(await podsOf('booked-job')).toEqual([]);
    const reservedBooked = await waitFor('the booked Reservation Reserved', async () => {
      const x = await kubectlJson<ReservationCR>(['-n', NS, 'get', 'reservation', r.metadata.name]);
      return x.status?.phase === 'Reserved' ? x.status : undefined;
    }, { timeoutMs: 60_000, intervalMs: 500 });
    expect(Math.abs(new Date(reservedBooked.start!).getTime() - freeAt)).toBeLessThanOrEqual(1000);

    // Deactivating one Workload and deleting another's Job release what was booked for them.
    const deactivated = (await workloadOf('deactivated-job'))!;
    await kubectl(['-n', NS, 'patch', 'workloads.kueue.x-k8s.io', deactivated.metadata.name, '--type=merge', '-p', '{"spec":{"active":false}}']);
    await kubectl(['-n', NS, 'delete', 'job', 'deleted-job', '--wait=false']);
    for (const name of ['deactivated-job', 'deleted-job']) {
      await waitFor(`the Reservation booked for ${name} released`, () => reservationGone(booked.get(name)!.metadata.name), { timeoutMs: 60_000, intervalMs: 500 });
    }

    // At the window: both pods run on the booked Reservation's atoms, on one node (one placement domain).
    const pods = await waitFor('both pods of booked-job Succeeded', async () => {
      const ps = await podsOf('booked-job');
      return ps.length === 2 && ps.every((p) => p.status?.phase === 'Succeeded') ? ps : undefined;
    }, { timeoutMs: 120_000, intervalMs: 1000 });
    const atoms: string[] = [];
    for (const p of pods) {
      expect(p.metadata.labels?.['bettercompute.io/reservation']).toBe(r.metadata.name);
      const started = (p.status as { containerStatuses?: { state?: { terminated?: { startedAt?: string } } }[] }).containerStatuses?.[0]?.state?.terminated?.startedAt;
      const lateMs = new Date(started!).getTime() - freeAt;
      process.stderr.write(`[kueue] ${p.metadata.name} started ${(lateMs / 1000).toFixed(1)}s after its booked window's start\n`);
      expect(lateMs).toBeGreaterThanOrEqual(-1000);
      expect(lateMs).toBeLessThanOrEqual(15_000);
      atoms.push(/ATOMS=(\S*)/.exec(await kubectl(['-n', NS, 'logs', p.metadata.name]))?.[1] ?? '');
    }
    expect(new Set(pods.map((p) => p.spec?.nodeName)).size).toBe(1);
    expect(atoms.sort()).toEqual(reservedBooked.allocations.flatMap((a) => a.atoms).sort());
    // Finished: its Reservation is released, the rest of the window free again.
    await waitFor('the Reservation booked for booked-job released once it finished', () => reservationGone(r.metadata.name), { timeoutMs: 60_000, intervalMs: 1000 });
  }, 300_000);

  it('moves a Ready check out of Ready when its Reservation is preempted', async () => {
    await apply({ apiVersion: 'bettercompute.io/v1alpha1', kind: 'Reservation', metadata: { name: 'spot', namespace: NS }, spec: { pool: POOL, devices: [{ class: 'gpu', count: 2 }], duration: '10m', spot: true } });
    await waitFor('Reservation spot Reserved', async () => (await kubectlJson<ReservationCR>(['-n', NS, 'get', 'reservation', 'spot'])).status?.phase === 'Reserved', { timeoutMs: 60_000, intervalMs: 500 });
    await apply(job('spot-job', { reservation: 'spot', sleep: 300 }));
    await waitFor('the check of spot-job Ready', async () => (await checkOf('spot-job'))?.state === 'Ready', { timeoutMs: 60_000, intervalMs: 500 });
    // Another tenant's regular Reservation fits only by displacing the spot one: a preemption notice.
    await apply({ apiVersion: 'bettercompute.io/v1alpha1', kind: 'Reservation', metadata: { name: 'regular', namespace: OTHER }, spec: { pool: POOL, devices: [{ class: 'gpu', count: 6 }], duration: '5m' } });
    // The check goes to Retry; Kueue then evicts the Workload and resets the check to Pending, where the check refuses
    // the preempted Reservation (Rejected). Each state lasts a moment only, so the Event of the move out of Ready is
    // what is waited for, and the check is read once: anything but Ready.
    const lostEvents = async () => {
      const w = await workloadOf('spot-job');
      if (!w) return [];
      return (await kubectlJson<List<{ reason: string; message: string }>>(['-n', NS, 'get', 'events', '--field-selector', `involvedObject.name=${w.metadata.name},reason=ReservationLost`])).items;
    };
    const lost = await waitFor('the check of spot-job moved out of Ready (Event ReservationLost)', async () => {
      const items = await lostEvents();
      return items.length > 0 ? items : undefined;
    }, { timeoutMs: 60_000, intervalMs: 500 }).catch(async (e: Error) => {
      const phase = async (ns: string, name: string) => JSON.stringify((await kubectlJson<ReservationCR>(['-n', ns, 'get', 'reservation', name])).status);
      throw new Error(`${e.message}; the check: ${JSON.stringify(await checkOf('spot-job'))}; spot: ${await phase(NS, 'spot')}; regular: ${await phase(OTHER, 'regular')}`);
    });
    expect(lost.map((e) => e.message)).toEqual([expect.stringContaining(`Reservation ${NS}/spot is preempted`)]);
    const x = await checkOf('spot-job');
    process.stderr.write(`[kueue] spot-job: ${x?.state}: ${x?.message}\n`);
    expect(x?.state).not.toBe('Ready');
    await kubectl(['-n', NS, 'delete', 'job', 'spot-job', '--wait=false']);
    await kubectl(['-n', OTHER, 'delete', 'reservation', 'regular', '--wait=false']);
  }, 180_000);

  it('rejects a Job whose Reservation is of another tenant (booked before its namespace was given to another)', async () => {
    await apply([
      { apiVersion: 'v1', kind: 'Namespace', metadata: { name: MOVED, labels: { 'bettercompute.io/tenant': TENANT } } },
      { apiVersion: 'kueue.x-k8s.io/v1beta2', kind: 'LocalQueue', metadata: { name: 'reservations', namespace: MOVED }, spec: { clusterQueue: 'bettercompute-reservations' } },
    ]);
    await apply({ apiVersion: 'bettercompute.io/v1alpha1', kind: 'Reservation', metadata: { name: 'mine', namespace: MOVED }, spec: { pool: POOL, devices: [{ class: 'gpu', count: 1 }], duration: '5m' } });
    await waitFor('Reservation mine Reserved for tenant ' + TENANT, async () => {
      const st = (await kubectlJson<ReservationCR>(['-n', MOVED, 'get', 'reservation', 'mine'])).status as { phase?: string; tenant?: string } | undefined;
      return st?.phase === 'Reserved' && st.tenant === TENANT;
    }, { timeoutMs: 60_000, intervalMs: 500 });
    await kubectl(['label', 'namespace', MOVED, `bettercompute.io/tenant=${OTHER}`, '--overwrite']);
    await apply(job('foreign', { reservation: 'mine', pods: 1, namespace: MOVED }));
    const rejected = await waitFor('the check of foreign Rejected (Event ReservationRejected)', async () => {
      const w = await workloadOf('foreign', MOVED);
      if (!w) return undefined;
      return (await kubectlJson<List<{ reason: string; message: string }>>(['-n', MOVED, 'get', 'events', '--field-selector', `involvedObject.name=${w.metadata.name},reason=ReservationRejected`])).items[0];
    }, { timeoutMs: 60_000, intervalMs: 500 });
    expect(rejected.message).toBe(`Reservation ${MOVED}/mine is of tenant ${TENANT}; namespace ${MOVED} is of tenant ${OTHER}`);
    expect((await kubectlJson<List<Pod>>(['-n', MOVED, 'get', 'pods', '-l', 'job-name=foreign'])).items).toEqual([]);
    await kubectl(['-n', MOVED, 'delete', 'reservation', 'mine', '--wait=false']);
  }, 120_000);
});

