import path from 'node:path';
import { fileURLToPath } from 'node:url';
import YAML from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { apply, clusterInfo, kubectl, kubectlJson, kubectlResult, uniqueName, waitCondition, waitFor, type List, type Pod } from './harness.ts';
import { applyNodePool, installProduct, removeNodePool, uninstallProduct, type ReservedStatus } from './install.ts';
import { buildKueue, removeKueue, startKueue, type RunningKueue } from './kueue.ts';

// Kueue's users, against the installed product (issue 33): Kueue v0.17 built offline and run beside the cluster
// (e2e/cluster/kueue.ts), deploy/kueue applied as docs/kueue.md says, the example queue of deploy/kueue/example in the
// tenant's namespace, and batch/v1 Jobs queued with `kueue.x-k8s.io/queue-name` that name a Reservation.
const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const c = () => clusterInfo();
const TENANT = uniqueName('kq');
const NS = TENANT;
const POOL = uniqueName('kqpool');
const RSV = 'train';
const CHECK = 'bettercompute-reservation';
/** How far ahead of its creation the Reservation starts: long enough to see the Job held, short enough to wait for. */
const LEAD_MS = 100_000;

let kueueDir: string;
let kueue: RunningKueue | undefined;
let reserved: ReservedStatus & { start: string; end: string };

interface WorkloadCR {
  metadata: { name: string; ownerReferences?: { kind: string; name: string }[] };
  status?: { admissionChecks?: { name: string; state: string; message: string }[]; conditions?: { type: string; status: string }[] };
}

/** A 2-pod batch/v1 Job queued on the example LocalQueue, each pod asking `gpus` bettercompute.io/gpu, printing its atoms. */
function job(name: string, o: { reservation?: string; gpus?: number; pods?: number } = {}) {
  const pods = o.pods ?? 2;
  return {
    apiVersion: 'batch/v1',
    kind: 'Job',
    metadata: {
      name,
      namespace: NS,
      labels: { 'kueue.x-k8s.io/queue-name': 'reservations', ...(o.reservation ? { 'bettercompute.io/reservation': o.reservation } : {}) },
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
              command: ['sh', '-c', 'echo "ATOMS=$BETTERCOMPUTE_ATOMS"; sleep 3'],
              resources: { limits: { 'bettercompute.io/gpu': String(o.gpus ?? 1) } },
            },
          ],
        },
      },
    },
  };
}

async function workloadOf(jobName: string): Promise<WorkloadCR | undefined> {
  const list = await kubectlJson<List<WorkloadCR>>(['-n', NS, 'get', 'workloads.kueue.x-k8s.io']);
  return list.items.find((w) => w.metadata.ownerReferences?.some((r) => r.kind === 'Job' && r.name === jobName));
}

async function checkOf(jobName: string): Promise<{ state: string; message: string } | undefined> {
  return (await workloadOf(jobName))?.status?.admissionChecks?.find((x) => x.name === CHECK);
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
  await applyNodePool(POOL, [{ tenant: TENANT, quota: { gpu: 8 } }]);
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
  await kubectlResult(['delete', 'namespace', NS, '--wait=true', '--timeout=120s'], { timeoutMs: 130_000 });
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
    const check = await waitFor('the check of too-big Rejected', async () => {
      const x = await checkOf('too-big');
      return x?.state === 'Rejected' ? x : undefined;
    }, { timeoutMs: 60_000, intervalMs: 500 });
    expect(check.message).toContain(`ask for 3 bettercompute.io/gpu in all, Reservation ${NS}/${RSV} holds 2`);
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
});
