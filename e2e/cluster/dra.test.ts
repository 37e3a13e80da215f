import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { draDeviceName } from '../../src/core/dra-names.ts';
import { request } from '../../test/support/http.ts';
import { apply, clusterInfo, deletePodsNow, kubectl, kubectlJson, kubectlResult, portForward, uniqueName, waitFor, type KubeEvent, type List } from './harness.ts';
import { applyNodePool, claimTemplate, installProduct, removeNodePool, SYSTEM_NS, uninstallProduct, type Installed, type ReservedStatus } from './install.ts';

// DRA mode (issue 32, ADR 0043, docs/dra.md) on the installed product (deploy/overlays/trial from the image) against
// the real API server (resource.k8s.io/v1), kube-controller-manager's resourceclaim controller and the DEFAULT
// kube-scheduler, with no extender in the pod's path. The process cluster's containerd (2.1, ADR 0051) does CDI, but this
// suite does not install the agent's DRA kubelet plugin (docs/dra-node.md, off by default), so no container of these
// pods starts: the suite reads what the hand-off is made of —
// the claim's status.allocation, the pod's spec.nodeName, and the ledger as the product shows it (the capacity API's
// byDomain, computed from the ledger at the call; the Reservation's status for its atoms).
// It runs on kind too (e2e/kind/test.sh, Kubernetes at the same release: ADR 0053), on the first worker.
const c = () => clusterInfo();
const NS = uniqueName('dra');
const TENANT = NS;
const POOL = uniqueName('dra-pool');
const GPUS = 2;
const DRIVER = 'gpu.bettercompute.io';

let installed: Installed;
let caFile: string;
let forward: { port: number; close: () => void } | undefined;

/**
 * Where the suite reaches the controller's API: its pod's address on the process cluster, whose pod network this host
 * is on; through `kubectl port-forward` on kind, whose pod network it is not on (one forward, kept for the suite).
 */
async function controllerUrl(): Promise<string> {
  if (c().local) return `https://${(await installed.controllerPod()).ip}:8443`;
  forward ??= await portForward(SYSTEM_NS, 'deploy/better-compute-controller', 8443);
  return `https://127.0.0.1:${forward.port}`;
}

interface Claim {
  metadata: { name: string; uid: string; resourceVersion: string; finalizers?: string[] };
  spec: { devices?: { requests?: { name: string }[] } };
  status?: {
    allocation?: {
      devices?: { results?: { request: string; driver: string; pool: string; device: string }[] };
      nodeSelector?: { nodeSelectorTerms: { matchFields?: { key: string; operator: string; values: string[] }[] }[] };
    } | null;
    reservedFor?: { resource: string; name: string; uid: string }[] | null;
  };
}

interface DraPod {
  metadata: { name: string; uid: string };
  spec: { nodeName?: string; schedulerName?: string; schedulingGates?: { name: string }[] };
  status?: {
    phase?: string;
    resourceClaimStatuses?: { name: string; resourceClaimName?: string }[];
    conditions?: { type: string; status: string; reason?: string }[];
  };
}

const GATE = 'bettercompute.io/allocation';
const gatesOf = (p: DraPod) => (p.spec.schedulingGates ?? []).map((g) => g.name);

/** Creates the object and returns it as the API server stored it: after admission (the webhook's gate). */
const create = async <T>(obj: object): Promise<T> => JSON.parse(await kubectl(['create', '-f', '-', '-o', 'json'], { input: JSON.stringify(obj) })) as T;


/** A pod of one claim: made from `template`, or the standalone claim `claim`. No schedulerName: the default one. */
function claimPod(name: string, from: { template: string } | { claim: string }, labels: Record<string, string> = {}) {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: NS, labels },
    spec: {
      terminationGracePeriodSeconds: 1,
      resourceClaims: [{ name: 'gpu', ...('template' in from ? { resourceClaimTemplateName: from.template } : { resourceClaimName: from.claim }) }],
      containers: [{ name: 'main', image: c().busyboxImage, command: ['sh', '-c', 'echo "ATOMS=$BETTERCOMPUTE_ATOMS"; sleep 3600'], resources: { claims: [{ name: 'gpu' }] } }],
    },
  };
}

const getPod = (name: string) => kubectlJson<DraPod>(['-n', NS, 'get', 'pod', name]);

/** The claim the resourceclaim controller made for the pod from its template (once it did). */
async function claimOf(pod: string): Promise<Claim> {
  const name = await waitFor(`${pod}'s claim made`, async () => (await getPod(pod)).status?.resourceClaimStatuses?.[0]?.resourceClaimName, { timeoutMs: 30_000 });
  return kubectlJson<Claim>(['-n', NS, 'get', 'resourceclaim', name]);
}

async function claimGone(name: string): Promise<boolean> {
  const r = await kubectlResult(['-n', NS, 'get', 'resourceclaim', name]);
  return r.code !== 0 && /NotFound/.test(r.stderr);
}

/** Waits until the pod's claim is allocated and the pod bound; returns both. */
async function allocatedAndBound(pod: string, timeoutMs = 60_000): Promise<{ claim: Claim; pod: DraPod }> {
  return waitFor(`${pod}'s claim allocated and ${pod} bound`, async () => {
    const claim = await claimOf(pod);
    const p = await getPod(pod);
    return claim.status?.allocation && p.spec.nodeName ? { claim, pod: p } : undefined;
  }, { timeoutMs, intervalMs: 250 });
}

const devicesOf = (claim: Claim) => (claim.status?.allocation?.devices?.results ?? []).map((r) => r.device).sort();

/** The checks every allocation of ours passes: our driver, the node as pool, the node pinned, the pod bound there. */
function expectOurAllocation(claim: Claim, pod: DraPod): void {
  const node = c().nodeName;
  const a = claim.status!.allocation!;
  expect(a.devices?.results).toHaveLength(1);
  for (const r of a.devices!.results!) expect(r).toMatchObject({ request: 'gpu', driver: DRIVER, pool: node });
  expect(a.nodeSelector?.nodeSelectorTerms).toEqual([{ matchFields: [{ key: 'metadata.name', operator: 'In', values: [node] }] }]);
  expect(claim.metadata.finalizers).toContain('bettercompute.io/claim');
  expect(pod.spec.nodeName).toBe(node);
  expect(pod.spec.schedulerName).toBe('default-scheduler');
}

async function events(name: string, kind = 'Pod'): Promise<KubeEvent[]> {
  return (await kubectlJson<List<KubeEvent>>(['-n', NS, 'get', 'events', '--field-selector', `involvedObject.kind=${kind},involvedObject.name=${name}`])).items;
}

async function waitEvent(name: string, reason: string, o: { kind?: string; timeoutMs?: number } = {}): Promise<KubeEvent> {
  const kind = o.kind ?? 'Pod';
  return waitFor(`Event ${reason} on ${kind} ${name}`, async () => (await events(name, kind)).find((e) => e.reason === reason), { timeoutMs: o.timeoutMs ?? 30_000, intervalMs: 500 });
}

/** The pool's whole GPUs booked now, as the capacity API's byDomain computes them from the ledger at the call. */
async function gpusBookedNow(): Promise<{ allocated: number; allocatable: number }> {
  const poolId = (await kubectlJson<{ status?: { poolId?: string } }>(['get', 'pool', POOL])).status?.poolId;
  if (!poolId) throw new Error(`Pool ${POOL} has no ledger id yet`);
  const token = (await kubectl(['-n', NS, 'create', 'token', 'default', '--duration=10m', '--audience', 'bettercompute.io'])).trim();
  const r = await request(`${await controllerUrl()}/api/compute/capacity/byDomain`, {
    method: 'POST',
    ca: fs.readFileSync(caFile),
    servername: `better-compute-controller.${SYSTEM_NS}.svc`,
    token,
    body: JSON.stringify({ tenantId: TENANT, poolId }),
  });
  if (r.status !== 200) throw new Error(`byDomain: ${r.status} ${r.text}`);
  const rows = (r.json as { domains: { capacity: { resource: string; allocated: number; allocatable: number }[] }[] }).domains.flatMap((d) => d.capacity).filter((x) => x.resource === 'gpu');
  return { allocated: rows.reduce((n, x) => n + x.allocated, 0), allocatable: rows.reduce((n, x) => n + x.allocatable, 0) };
}

const waitBooked = (n: number) => waitFor(`${n} GPUs booked in the ledger`, async () => (await gpusBookedNow()).allocated === n, { timeoutMs: 30_000, intervalMs: 500 });

/** Deletes the pods and waits until their claims are gone (released, our finalizer removed) and the pods too. */
async function deletePodsAndClaims(pods: string[], claims: string[]): Promise<void> {
  await deletePodsNow(NS, pods);
  for (const name of claims) await waitFor(`claim ${name} gone`, () => claimGone(name), { timeoutMs: 60_000, intervalMs: 250 });
}

describe('DRA hand-off, on the installed product with the default kube-scheduler', () => {
  beforeAll(async () => {
    installed = await installProduct({ gpus: GPUS });
    process.stderr.write(`[dra] deploy/overlays/trial to Ready in ${installed.readySeconds.toFixed(1)}s\n`);
    const ca = await kubectlJson<{ data: Record<string, string> }>(['-n', SYSTEM_NS, 'get', 'configmap', 'better-compute-ca']);
    caFile = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'bc-ca-')), 'ca.crt');
    fs.writeFileSync(caFile, ca.data['ca.crt']!);
    await apply({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: NS, labels: { 'bettercompute.io/tenant': TENANT } } });
    // The namespace's default ServiceAccount may read its tenant's capacity (what the suite reads the ledger through).
    await apply([
      { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'Role', metadata: { name: 'capacity-reader', namespace: NS }, rules: [{ apiGroups: ['bettercompute.io'], resources: ['capacity'], verbs: ['get'] }] },
      {
        apiVersion: 'rbac.authorization.k8s.io/v1',
        kind: 'RoleBinding',
        metadata: { name: 'capacity-reader', namespace: NS },
        roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'capacity-reader' },
        subjects: [{ kind: 'ServiceAccount', name: 'default', namespace: NS }],
      },
    ]);
    await applyNodePool(POOL, [{ tenant: TENANT, quota: { gpu: GPUS } }], c().nodeName, { handoff: 'dra' });
    await apply([claimTemplate(NS, 'gpu', 'gpu.bettercompute.io'), claimTemplate(NS, 'rsv', 'reservation.bettercompute.io')]);
    // The node's GPUs in the Pool, and the namespace's default ServiceAccount made (its token asks the capacity API).
    await waitFor('the Pool\'s GPUs in the ledger', async () => (await gpusBookedNow()).allocatable === GPUS, { timeoutMs: 90_000, intervalMs: 1000 });
  }, 1_800_000);

  afterAll(async () => {
    forward?.close();
    await kubectlResult(['delete', 'namespace', NS, '--wait=true', '--timeout=120s'], { timeoutMs: 130_000 });
    await removeNodePool(POOL);
    if (process.env.BC_KEEP_INSTALLED !== '1') await uninstallProduct();
  }, 300_000);

  it('on demand: the controller allocates the claim (our driver, its node pinned) after booking; kube-scheduler binds the pod there; deleting the pod releases the atom', async () => {
    const t0 = performance.now();
    // Admission gated it (ADR 0049): kube-scheduler leaves it alone until the allocator has allocated its claim.
    expect(gatesOf(await create<DraPod>(claimPod('od', { template: 'gpu' })))).toEqual([GATE]);
    const { claim, pod } = await allocatedAndBound('od');
    process.stderr.write(`[dra] on demand: allocated and bound in ${((performance.now() - t0) / 1000).toFixed(1)}s\n`);
    expectOurAllocation(claim, pod);
    // kube-scheduler reserved the claim for the pod (its status update passed the policy: the allocation unchanged).
    await waitFor('claim reserved for od', async () => (await claimOf('od')).status?.reservedFor?.some((r) => r.uid === pod.metadata.uid));
    expect((await gpusBookedNow()).allocated).toBe(1);
    // The default scheduler placed it, and nothing of ours was asked to: no extender event, no second scheduler.
    const scheduled = (await events('od')).find((e) => e.reason === 'Scheduled');
    expect(scheduled?.reportingComponent ?? scheduled?.source?.component).toBe('default-scheduler');
    // Let through only once allocated: the gate is gone, and kube-scheduler never tried it before (no failed attempt).
    expect(gatesOf(pod)).toEqual([]);
    expect((await events('od')).filter((e) => e.reason === 'FailedScheduling')).toEqual([]);

    await deletePodsAndClaims(['od'], [claim.metadata.name]);
    await waitBooked(0);
  }, 120_000);

  it('two pods of two claims never get the same atom; a third waits for capacity and gets the atom the first gave back', async () => {
    await apply([claimPod('pa', { template: 'gpu' }), claimPod('pb', { template: 'gpu' }), claimPod('pc', { template: 'gpu' })]);
    const got = await waitFor('two claims allocated', async () => {
      const all = await Promise.all(['pa', 'pb', 'pc'].map(async (p) => ({ name: p, claim: await claimOf(p) })));
      const allocated = all.filter((x) => x.claim.status?.allocation);
      return allocated.length >= 2 ? all : undefined;
    }, { timeoutMs: 60_000, intervalMs: 250 });
    const allocated = got.filter((x) => x.claim.status?.allocation);
    const [first, second] = allocated;
    const waiting = got.find((x) => !x.claim.status?.allocation)!;
    expect(allocated).toHaveLength(2);
    expect(devicesOf(first!.claim)).not.toEqual(devicesOf(second!.claim));
    expect(new Set([...devicesOf(first!.claim), ...devicesOf(second!.claim)]).size).toBe(2);
    for (const x of allocated) expectOurAllocation(x.claim, (await allocatedAndBound(x.name)).pod);
    await waitBooked(2);
    // The third: no capacity left, so no allocation, and kube-scheduler cannot place it on its own.
    await waitEvent(waiting.name, 'NoCapacity');
    const third = await getPod(waiting.name);
    expect(third.spec.nodeName).toBeUndefined();
    // Still gated while it waits (kube-scheduler says SchedulingGated; the Event above says why).
    expect(gatesOf(third)).toEqual([GATE]);
    expect(third.status?.conditions?.find((x) => x.type === 'PodScheduled')?.reason).toBe('SchedulingGated');
    expect((await claimOf(waiting.name)).status?.allocation ?? undefined).toBeUndefined();

    // The first gives its atom back; the third gets exactly that one, never the second's.
    const freed = devicesOf(first!.claim);
    await deletePodsAndClaims([first!.name], [first!.claim.metadata.name]);
    const { claim } = await allocatedAndBound(waiting.name, 45_000);
    expect(devicesOf(claim)).toEqual(freed);
    expect(devicesOf(claim)).not.toEqual(devicesOf((await claimOf(second!.name))));
    await waitBooked(2);
    await deletePodsAndClaims([second!.name, waiting.name], [second!.claim.metadata.name, claim.metadata.name]);
    await waitBooked(0);
  }, 180_000);

  it('kube-scheduler alone never allocates: a claim the controller does not serve stays unallocated and its pod unschedulable; a forged allocation is refused by the policy', async () => {
    await apply({
      apiVersion: 'resource.k8s.io/v1',
      kind: 'ResourceClaim',
      metadata: { name: 'standalone', namespace: NS },
      spec: { devices: { requests: [{ name: 'gpu', exactly: { deviceClassName: 'gpu.bettercompute.io', count: 1 } }] } },
    });
    await apply(claimPod('alone', { claim: 'standalone' }));
    // The controller waits (a claim no pod's template made is not served) and says so on the claim, which no pod owns;
    // kube-scheduler tries and cannot allocate: our DeviceClass selects nothing.
    expect((await waitEvent('standalone', 'UnsupportedClaim', { kind: 'ResourceClaim' })).message).toMatch(/only claims made from a pod's ResourceClaimTemplate/);
    const failed = await waitEvent('alone', 'FailedScheduling');
    expect(failed.message).toMatch(/claim|allocat/i);
    await new Promise((r) => setTimeout(r, 3000));
    const claim = await kubectlJson<Claim>(['-n', NS, 'get', 'resourceclaim', 'standalone']);
    expect(claim.status?.allocation ?? undefined).toBeUndefined();
    expect((await getPod('alone')).spec.nodeName).toBeUndefined();

    // Anyone but the controller (here the cluster's admin) writing an allocation of our driver is refused.
    const forged = {
      ...claim,
      status: {
        ...claim.status,
        allocation: {
          devices: { results: [{ request: 'gpu', driver: DRIVER, pool: c().nodeName, device: 'gpu-0' }] },
          nodeSelector: { nodeSelectorTerms: [{ matchFields: [{ key: 'metadata.name', operator: 'In', values: [c().nodeName] }] }] },
        },
      },
    };
    const r = await kubectlResult(['replace', '--subresource=status', '-f', '-'], { input: JSON.stringify(forged) });
    expect(r.code, r.stdout).not.toBe(0);
    expect(r.stderr).toMatch(/bettercompute-dra-allocation-controller-only/);
    expect(r.stderr).toMatch(/only the better-compute controller allocates devices of driver gpu\.bettercompute\.io/);
    expect((await kubectlJson<Claim>(['-n', NS, 'get', 'resourceclaim', 'standalone'])).status?.allocation ?? undefined).toBeUndefined();
    // The same write of another driver's devices is not ours to police.
    const other = structuredClone(forged);
    other.status.allocation.devices.results[0]!.driver = 'gpu.example.com';
    const o = await kubectlResult(['replace', '--subresource=status', '--dry-run=server', '-f', '-'], { input: JSON.stringify(other) });
    expect(o.stderr).not.toMatch(/bettercompute-dra-allocation-controller-only/);
    await deletePodsNow(NS, ['alone']);
    await kubectl(['-n', NS, 'delete', 'resourceclaim', 'standalone', '--wait=true', '--timeout=60s']);
    expect((await gpusBookedNow()).allocated).toBe(0);
  }, 120_000);

  it('a pod of a Reservation starting in ~40 s: Pending with WaitingForReservationWindow before the start; allocated and bound within 15 s of it, on exactly the Reservation\'s atoms', async () => {
    await apply({
      apiVersion: 'bettercompute.io/v1alpha1',
      kind: 'Reservation',
      metadata: { name: 'soon', namespace: NS },
      spec: { pool: POOL, devices: [{ class: 'gpu', count: 1 }], start: new Date(Date.now() + 40_000).toISOString(), duration: '10m' },
    });
    const reserved = await waitFor('Reservation soon Reserved', async () => {
      const r = await kubectlJson<{ status?: ReservedStatus & { start: string } }>(['-n', NS, 'get', 'reservation', 'soon']);
      return r.status?.phase === 'Reserved' ? r.status : undefined;
    }, { timeoutMs: 30_000, intervalMs: 500 });
    const start = Date.parse(reserved.start);
    expect(start).toBeGreaterThan(Date.now() + 5_000);
    const atoms = reserved.allocations.flatMap((a) => a.atoms);
    expect(atoms).toHaveLength(1);
    expect(reserved.allocations[0]!.node).toBe(c().nodeName);

    await apply(claimPod('rp', { template: 'rsv' }, { 'bettercompute.io/reservation': 'soon' }));
    const waiting = await waitEvent('rp', 'WaitingForReservationWindow');
    expect(waiting.message).toContain('soon');
    // Until shortly before its start: Pending, unbound, the claim unallocated.
    await new Promise((r) => setTimeout(r, Math.max(0, start - Date.now() - 3_000)));
    const before = await getPod('rp');
    expect(before.status?.phase).toBe('Pending');
    expect(before.spec.nodeName).toBeUndefined();
    expect(gatesOf(before)).toEqual([GATE]);
    expect((await claimOf('rp')).status?.allocation ?? undefined).toBeUndefined();

    const { claim, pod } = await allocatedAndBound('rp', Math.max(0, start - Date.now()) + 30_000);
    const boundAt = Date.now();
    process.stderr.write(`[dra] reservation: allocated and bound ${((boundAt - start) / 1000).toFixed(1)}s after its start\n`);
    expect(boundAt).toBeLessThanOrEqual(start + 15_000);
    expectOurAllocation(claim, pod);
    expect(devicesOf(claim)).toEqual(atoms.map(draDeviceName).sort());

    expect(gatesOf(pod)).toEqual([]);

    await deletePodsAndClaims(['rp'], [claim.metadata.name]);
    await kubectl(['-n', NS, 'delete', 'reservation', 'soon', '--wait=true', '--timeout=60s'], { timeoutMs: 70_000 });
  }, 180_000);

  it("the gate (ADR 0049): not put on another driver's pods nor on a claim of ours named directly; the controller may remove it, and no other gate", async () => {
    await apply(claimTemplate(NS, 'theirs', 'gpu.example.com'));
    expect(gatesOf(await create<DraPod>(claimPod('theirs', { template: 'theirs' })))).toEqual([]);
    await apply({
      apiVersion: 'resource.k8s.io/v1',
      kind: 'ResourceClaim',
      metadata: { name: 'named', namespace: NS },
      spec: { devices: { requests: [{ name: 'gpu', exactly: { deviceClassName: 'gpu.bettercompute.io', count: 1 } }] } },
    });
    expect(gatesOf(await create<DraPod>(claimPod('named', { claim: 'named' })))).toEqual([]);
    await deletePodsNow(NS, ['theirs', 'named']);
    await kubectl(['-n', NS, 'delete', 'resourceclaim', 'named', '--wait=true', '--timeout=60s']);

    // The controller's identity on a pod gated by us and by someone else (the policy bettercompute-controller-pod-annotation-only).
    await apply({
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'two-gates', namespace: NS },
      spec: { schedulingGates: [{ name: 'example.com/hold' }, { name: GATE }], containers: [{ name: 'main', image: c().busyboxImage }] },
    });
    const asController = ['--as', `system:serviceaccount:${SYSTEM_NS}:better-compute-controller`, '-n', NS, 'patch', 'pod', 'two-gates', '--type=json'];
    const theirs = await kubectlResult([...asController, '-p', JSON.stringify([{ op: 'remove', path: '/spec/schedulingGates/0' }])]);
    expect(theirs.code).not.toBe(0);
    expect(theirs.stderr).toMatch(/bettercompute-controller-pod-annotation-only.*only by removing its scheduling gate/s);
    const ours = await kubectlResult([...asController, '-p', JSON.stringify([{ op: 'remove', path: '/spec/schedulingGates/1' }])]);
    expect(ours.code, ours.stderr).toBe(0);
    expect(gatesOf(await getPod('two-gates'))).toEqual(['example.com/hold']);
    await deletePodsNow(NS, ['two-gates']);
  }, 120_000);
});
