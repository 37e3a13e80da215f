import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { claimCdiFileName } from '../../src/core/dra-cdi.ts';
import { draDeviceName } from '../../src/core/dra-names.ts';
import { apply, clusterInfo, deletePodsNow, kubectl, kubectlJson, kubectlResult, restartKubelet, uniqueName, waitFor, type KubeEvent, type List } from './harness.ts';
import { applyNodePool, claimTemplate, installProduct, removeDraSuite, reservationJob, reserveAndWait, SYSTEM_NS } from './install.ts';

// DRA mode's node path (issue 32, docs/dra-node.md) on the installed product with the Component deploy/dra/agent: the
// real kubelet (v1.37, the process cluster's) calls the agent's DRA plugin, which checks each claim with the controller
// and writes its CDI spec; containerd 2.1 injects what the spec says into the container, which prints it. What each
// pod got is read from its own output (BETTERCOMPUTE_ATOMS, NVIDIA_VISIBLE_DEVICES), as extender-agent.test.ts reads the
// device-plugin mode's. The node: 5 simulated whole GPUs and one in MIG mode with two instances; one Pool of it in DRA
// mode; a Reservation of 2 GPUs. The kubelet test needs the process cluster's kubelet (not on kind).
const external = process.env.BC_EXTERNAL_CLUSTER === '1';
const c = () => clusterInfo();
const NS = uniqueName('dra-node');
const POOL = uniqueName('dra-node-pool');
const WHOLE = 5;
const MIG = [[{ gi: 1, ci: 0, profile: '3g.40gb', memoryGiB: 40 }, { gi: 2, ci: 0, profile: '3g.40gb', memoryGiB: 40 }]];
// The swap test's rounds: 50, as extender-agent.test.ts runs in device-plugin mode; each round starts four pods and
// waits until they and their claims are gone (the next round's Reservation pods need the atoms back).
const ROUNDS = Number(process.env.BC_HANDOFF_ROUNDS ?? 50);
const CDI_DIR = '/var/run/cdi';
const RESERVATION = 'train';
let reserved: string[];

interface Claim {
  metadata: { name: string; uid: string };
  status?: { allocation?: { devices?: { results?: { driver: string; pool: string; device: string }[] } } | null };
}

interface DraPod {
  metadata: { name: string; uid: string; labels?: Record<string, string> };
  spec: { nodeName?: string };
  status?: { phase?: string; resourceClaimStatuses?: { name: string; resourceClaimName?: string }[] };
}

/** What the container prints: the environment the CDI spec injected. */
const PRINT = 'env | grep -E "^(BETTERCOMPUTE_ATOMS|NVIDIA_VISIBLE_DEVICES)="; echo printed';


/** The pod spec of one claim (from a template, or a claim by name) that prints what it got and sleeps. */
function podSpec(from: { template: string } | { claim: string }) {
  return {
    restartPolicy: 'Never',
    terminationGracePeriodSeconds: 0,
    resourceClaims: [{ name: 'gpu', ...('template' in from ? { resourceClaimTemplateName: from.template } : { resourceClaimName: from.claim }) }],
    containers: [{ name: 'main', image: c().busyboxImage, command: ['sh', '-c', `${PRINT}; sleep 3600`], resources: { claims: [{ name: 'gpu' }] } }],
  };
}

function pod(name: string, from: { template: string } | { claim: string }, labels: Record<string, string> = {}) {
  return { apiVersion: 'v1', kind: 'Pod', metadata: { name, namespace: NS, labels }, spec: podSpec(from) };
}

const reservationPod = (name: string) => pod(name, { template: 'rsv' }, { 'bettercompute.io/reservation': RESERVATION });

interface Got {
  atoms: string[];
  visible: string[];
  node: string;
  claim: Claim;
}

function envList(text: string, key: string): string[] {
  const line = text.split('\n').find((l) => l.startsWith(`${key}=`));
  return line ? line.slice(key.length + 1).split(',').filter(Boolean).sort() : [];
}

/**
 * Waits until the pods run and have printed; what each got, and its claim as the API server has it. One LIST of the
 * namespace's pods per poll, whatever the number of pods (a kubectl each per pod and poll was most of a round's time).
 */
async function gotAll(names: string[], timeoutMs = 90_000): Promise<Got[]> {
  const running = await waitFor(`pods ${names.join(', ')} Running`, async () => {
    const byName = new Map((await kubectlJson<List<DraPod>>(['-n', NS, 'get', 'pods'])).items.map((x) => [x.metadata.name, x]));
    for (const name of names) {
      const x = byName.get(name);
      if (x?.status?.phase === 'Failed' || x?.status?.phase === 'Succeeded') throw new Error(`pod ${name} ended: ${JSON.stringify(x.status)}`);
    }
    const pods = names.map((n) => byName.get(n));
    return pods.every((x) => x?.status?.phase === 'Running') ? (pods as DraPod[]) : undefined;
  }, { timeoutMs, intervalMs: 200 });
  const texts = await Promise.all(names.map((name) => waitFor(`pod ${name} printed`, async () => {
    const r = await kubectlResult(['-n', NS, 'logs', name]);
    return r.code === 0 && r.stdout.includes('printed') ? r.stdout : undefined;
  }, { timeoutMs: 30_000, intervalMs: 200 })));
  const claims = new Map((await kubectlJson<List<Claim>>(['-n', NS, 'get', 'resourceclaims'])).items.map((x) => [x.metadata.name, x]));
  return running.map((p, i) => {
    const claimName = p.status?.resourceClaimStatuses?.[0]?.resourceClaimName;
    const claim = claimName ? claims.get(claimName) : undefined;
    if (!claim) throw new Error(`pod ${p.metadata.name} names no claim (or its claim ${claimName ?? ''} is not listed)`);
    const text = texts[i]!;
    return { atoms: envList(text, 'BETTERCOMPUTE_ATOMS'), visible: envList(text, 'NVIDIA_VISIBLE_DEVICES'), node: p.spec.nodeName ?? '', claim };
  });
}

/** Waits until the pod runs and has printed; what it got, and its claim as the API server has it. */
async function got(name: string, timeoutMs = 90_000): Promise<Got> {
  return (await gotAll([name], timeoutMs))[0]!;
}

const devicesOf = (claim: Claim) => (claim.status?.allocation?.devices?.results ?? []).map((r) => r.device).sort();

/** The GPU (or MIG) UUID of an atom: the atom id is the GPU's UUID, a MIG instance's `<gpu uuid>/gi<g>/ci<c>`. */
const atomGpu = (atom: string) => atom.split('/')[0]!;

/** The checks every hand-off passes: one atom, on this node, the allocation's device, the CDI spec on the host. */
function expectHandedOver(g: Got): void {
  expect(g.node).toBe(c().nodeName);
  expect(g.atoms).toHaveLength(1);
  expect(devicesOf(g.claim)).toEqual(g.atoms.map(draDeviceName));
  expect(g.visible.length).toBe(1);
  expect(g.visible[0]!.startsWith(atomGpu(g.atoms[0]!)) || g.visible[0]!.startsWith('MIG-')).toBe(true);
  if (!external) {
    const spec = JSON.parse(fs.readFileSync(path.join(CDI_DIR, claimCdiFileName(g.claim.metadata.uid)), 'utf8')) as { kind: string; devices: { name: string; containerEdits: { env?: string[] } }[] };
    expect(spec.kind).toBe('bettercompute.io/claim');
    expect(spec.devices.map((d) => d.name)).toEqual([g.claim.metadata.uid]);
    expect(spec.devices[0]!.containerEdits.env).toContain(`BETTERCOMPUTE_ATOMS=${g.atoms.join(',')}`);
  }
}

async function eventsOf(name: string): Promise<KubeEvent[]> {
  return (await kubectlJson<List<KubeEvent>>(['-n', NS, 'get', 'events', '--field-selector', `involvedObject.kind=Pod,involvedObject.name=${name}`])).items;
}

/**
 * Deletes the pods (those named, or all of the namespace) and waits until they and their claims are gone (released):
 * one LIST of the namespace's pods and claims per poll.
 */
async function deleteAndWait(names?: string[]): Promise<void> {
  const pods = (await kubectlJson<List<DraPod>>(['-n', NS, 'get', 'pods'])).items.filter((p) => !names || names.includes(p.metadata.name));
  const claims = new Set(pods.flatMap((p) => (p.status?.resourceClaimStatuses ?? []).map((x) => x.resourceClaimName)).filter((x): x is string => !!x));
  const uids = new Set(pods.map((p) => p.metadata.uid));
  await deletePodsNow(NS, pods.map((p) => p.metadata.name));
  await waitFor('pods and their claims gone', async () => {
    const left = await kubectlJson<List<{ kind: string; metadata: { name: string; uid: string } }>>(['-n', NS, 'get', 'pods,resourceclaims']);
    return !left.items.some((x) => (x.kind === 'Pod' ? uids.has(x.metadata.uid) : claims.has(x.metadata.name)));
  }, { timeoutMs: 60_000, intervalMs: 200 });
}

/** The Pool's status.capacity: each resource's total. */
async function poolTotals(): Promise<Record<string, number>> {
  const p = await kubectlJson<{ status?: { capacity?: { resource: string; total: number }[] } }>(['get', 'pool', POOL]);
  return Object.fromEntries((p.status?.capacity ?? []).filter((r) => r.total > 0).map((r) => [r.resource, r.total]));
}

async function agentLog(): Promise<string> {
  return kubectl(['-n', SYSTEM_NS, 'logs', '-l', 'app.kubernetes.io/name=better-compute-agent', '--tail=-1']);
}

const registrations = (log: string) => log.split('\n').filter((l) => l.includes('DRA: the kubelet registered the plugin')).length;

describe.skipIf(external)('DRA mode on the node: the real kubelet, the agent\'s DRA plugin and CDI', () => {
  beforeAll(async () => {
    // A change window of 10 s instead of 5 min: the slot test's layout change is bookable soon after.
    const installed = await installProduct({ gpus: WHOLE + MIG.length, mig: MIG, draAgent: true, controllerEnv: { BETTER_COMPUTE_LAYOUT_WINDOW: '10s' } });
    process.stderr.write(`[dra-node] deploy/overlays/trial + deploy/dra/agent to Ready in ${installed.readySeconds.toFixed(1)}s\n`);
    await apply({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: NS, labels: { 'bettercompute.io/tenant': NS } } });
    await applyNodePool(POOL, [{ tenant: NS, quota: { gpu: WHOLE, 'gpu.mig': 2, 'gpu.slot': 4 } }], c().nodeName, { handoff: 'dra' });
    await apply([claimTemplate(NS, 'gpu', 'gpu.bettercompute.io'), claimTemplate(NS, 'rsv', 'reservation.bettercompute.io'), claimTemplate(NS, 'mig', 'mig.gpu.bettercompute.io'), claimTemplate(NS, 'slot', 'slot.gpu.bettercompute.io')]);
    const st = await reserveAndWait(NS, RESERVATION, POOL, 2, '2h');
    reserved = st.allocations.flatMap((a) => a.atoms).sort();
    expect(reserved).toHaveLength(2);
    // The kubelet registered the plugin (it calls nothing before).
    await waitFor('the kubelet registered the DRA plugin', async () => registrations(await agentLog()) > 0, { timeoutMs: 60_000, intervalMs: 1000 });
  }, 1_800_000);

  afterAll(() => removeDraSuite(NS, POOL), 400_000);

  it('a Job of 2 pods naming the Reservation runs on exactly its atoms, one each, read from what CDI gave each container', async () => {
    await apply(reservationJob(NS, 'job', RESERVATION, podSpec({ template: 'rsv' })));
    const pods = await waitFor('the Job\'s 2 pods', async () => {
      const l = await kubectlJson<List<DraPod>>(['-n', NS, 'get', 'pods', '-l', 'job-name=job']);
      return l.items.length === 2 ? l.items.map((p) => p.metadata.name) : undefined;
    });
    const both = await gotAll(pods);
    for (const g of both) expectHandedOver(g);
    expect(both.flatMap((g) => g.atoms).sort()).toEqual(reserved);
    expect(both.map((g) => g.visible[0]).sort()).toEqual(reserved);
  }, 180_000);

  it('an on-demand pod gets one atom the ledger booked for it, none of the Reservation\'s', async () => {
    await apply(pod('od', { template: 'gpu' }));
    const g = await got('od');
    expectHandedOver(g);
    expect(reserved).not.toContain(g.atoms[0]);
  }, 120_000);

  it('a claim whose allocation names a device the ledger booked to another claim is refused at NodePrepareResources: the pod never starts, the kubelet says why', async () => {
    const od = await got('od');
    const node = c().nodeName;
    await apply({
      apiVersion: 'resource.k8s.io/v1',
      kind: 'ResourceClaim',
      metadata: { name: 'forged', namespace: NS },
      spec: { devices: { requests: [{ name: 'gpu', exactly: { deviceClassName: 'gpu.bettercompute.io', count: 1 } }] } },
    });
    // The pod first: the allocation is written reserved for it, so that the controller, which clears an allocation of
    // ours that nobody reserves and the ledger does not hold, leaves it to the kubelet.
    await apply(pod('forged', { claim: 'forged' }));
    const forgedPod = await kubectlJson<DraPod>(['-n', NS, 'get', 'pod', 'forged']);
    const claim = await kubectlJson<Claim & { metadata: Record<string, unknown> }>(['-n', NS, 'get', 'resourceclaim', 'forged']);
    // Written as the controller would (the policy admits only its ServiceAccount): od's device, which the ledger booked to od's claim.
    const forged = {
      ...claim,
      status: {
        allocation: {
          devices: { results: [{ request: 'gpu', driver: 'gpu.bettercompute.io', pool: node, device: devicesOf(od.claim)[0] }] },
          nodeSelector: { nodeSelectorTerms: [{ matchFields: [{ key: 'metadata.name', operator: 'In', values: [node] }] }] },
          allocationTimestamp: new Date().toISOString(),
        },
        reservedFor: [{ resource: 'pods', name: 'forged', uid: forgedPod.metadata.uid }],
      },
    };
    const w = await kubectlResult(['replace', '--subresource=status', '--as', `system:serviceaccount:${SYSTEM_NS}:better-compute-controller`, '--as-group', 'system:serviceaccounts', '-f', '-'], { input: JSON.stringify(forged) });
    expect(w.code, w.stderr).toBe(0);
    const refused = await waitFor('the kubelet\'s FailedPrepareDynamicResources on forged', async () => (await eventsOf('forged')).find((e) => e.reason === 'FailedPrepareDynamicResources'), { timeoutMs: 90_000, intervalMs: 500 });
    process.stderr.write(`[dra-node] forged: ${refused.message}\n`);
    expect(refused.message).toMatch(/not prepared on/);
    expect(refused.message).toMatch(/CLAIM_NOT_BOOKED|not booked/i);
    const p = await kubectlJson<DraPod & { status?: { containerStatuses?: { state?: { running?: unknown } }[] } }>(['-n', NS, 'get', 'pod', 'forged']);
    expect(p.spec.nodeName).toBe(node);
    expect(p.status?.phase).toBe('Pending');
    expect(p.status?.containerStatuses?.some((s) => s.state?.running) ?? false).toBe(false);
    expect(fs.existsSync(path.join(CDI_DIR, claimCdiFileName(claim.metadata.uid)))).toBe(false);
    // od keeps its atom.
    expect((await got('od')).atoms).toEqual(od.atoms);
    await deletePodsNow(NS, ['forged']);
    await kubectlResult(['-n', NS, 'delete', 'resourceclaim', 'forged', '--wait=false']);
  }, 150_000);

  it('the kubelet restarting: the plugin is registered again and a new pod is prepared; the running pods keep their devices', async () => {
    const before = registrations(await agentLog());
    const running = await kubectlJson<List<DraPod>>(['-n', NS, 'get', 'pods', '--field-selector', 'status.phase=Running']);
    const names = running.items.map((p) => p.metadata.name).sort();
    expect(names).toHaveLength(3);
    const had = new Map((await gotAll(names)).map((g, i) => [names[i]!, g.atoms] as const));
    await restartKubelet();
    await waitFor('the kubelet registered the plugin again', async () => registrations(await agentLog()) > before, { timeoutMs: 60_000, intervalMs: 1000 });
    // A kubelet that starts deletes its node's ResourceSlices; the agent publishes them again once registered.
    await waitFor('the node\'s ResourceSlice published again', async () => {
      const l = await kubectlJson<List<{ spec: { devices?: unknown[] } }>>(['get', 'resourceslices', '--field-selector', `spec.nodeName=${c().nodeName},spec.driver=gpu.bettercompute.io`]);
      return l.items.some((x) => (x.spec.devices ?? []).length > 0);
    }, { timeoutMs: 60_000, intervalMs: 1000 });
    await apply(pod('after', { template: 'gpu' }));
    const after = await got('after');
    expectHandedOver(after);
    expect([...had.values()].flat()).not.toContain(after.atoms[0]);
    for (const n of names) {
      const x = await kubectlJson<DraPod>(['-n', NS, 'get', 'pod', n]);
      expect(x.status?.phase, n).toBe('Running');
      const env = await waitFor(`exec into ${n}`, async () => {
        const r = await kubectlResult(['-n', NS, 'exec', n, '--', 'sh', '-c', PRINT]);
        return r.code === 0 ? r.stdout : undefined;
      });
      expect(envList(env, 'BETTERCOMPUTE_ATOMS'), n).toEqual(had.get(n));
    }
    await deleteAndWait(['after']);
  }, 240_000);

  it('a MIG instance is handed out through mig.gpu.bettercompute.io', async () => {
    await apply(pod('mig', { template: 'mig' }));
    const g = await got('mig');
    expectHandedOver(g);
    expect(g.atoms[0]).toMatch(/\/gi[12]\/ci0$/);
    await deleteAndWait(['mig']);
  }, 120_000);

  it(`${ROUNDS} rounds: two pods of the Reservation and two on-demand pods at once each see only their own atoms`, async () => {
    await kubectl(['-n', NS, 'delete', 'job', 'job', '--cascade=orphan']);
    await deleteAndWait();
    const started = performance.now();
    let toRun = 0;
    for (let round = 0; round < ROUNDS; round++) {
      const names = [`ra-${round}`, `rb-${round}`, `oa-${round}`, `ob-${round}`];
      const objs = [reservationPod(names[0]!), reservationPod(names[1]!), pod(names[2]!, { template: 'gpu' }), pod(names[3]!, { template: 'gpu' })];
      const made = performance.now();
      await kubectl(['create', '-f', '-'], { input: JSON.stringify({ apiVersion: 'v1', kind: 'List', items: objs }) });
      const all = await gotAll(names);
      toRun += performance.now() - made;
      for (const g of all) expectHandedOver(g);
      const atoms = all.map((g) => g.atoms[0]!);
      expect(new Set(atoms).size, `round ${round}: an atom handed to two pods`).toBe(4);
      expect([atoms[0], atoms[1]].sort(), `round ${round}`).toEqual(reserved);
      for (const a of [atoms[2], atoms[3]]) expect(reserved, `round ${round}: an on-demand pod on a reserved atom`).not.toContain(a);
      await deleteAndWait(names);
    }
    const total = (performance.now() - started) / 1000;
    process.stderr.write(`[dra-node] ${ROUNDS} rounds of four pods in ${total.toFixed(1)}s (${(total / ROUNDS).toFixed(2)}s a round: ${(toRun / 1000 / ROUNDS).toFixed(2)}s from the create to all four printed, the rest deleting them and their claims)\n`);
  }, Math.max(600_000, ROUNDS * 20_000));

  it('back to back in DRA mode: the first Reservation\'s pod (SIGTERM ignored, a 1-day grace) has stopped by its end and its claim is deallocated; the next Reservation\'s pod, gated before its start, runs on the same atoms within 15 s of it', async () => {
    await deleteAndWait();
    // The whole GPUs the Reservation `train` leaves: the first booking takes them all, so the second, from its end, gets
    // the same ones.
    const free = WHOLE - reserved.length;
    const first = await reserveAndWait(NS, 'b2b-first', POOL, free, '100s');
    const firstAtoms = first.allocations.flatMap((a) => a.atoms).sort();
    const firstEnd = Date.parse((await kubectlJson<{ status: { end: string } }>(['-n', NS, 'get', 'reservation', 'b2b-first'])).status.end);
    await apply({
      apiVersion: 'bettercompute.io/v1alpha1',
      kind: 'Reservation',
      metadata: { name: 'b2b-second', namespace: NS },
      spec: { pool: POOL, devices: [{ class: 'gpu', count: free }], start: new Date(firstEnd).toISOString(), duration: '10m' },
    });
    const second = await waitFor('b2b-second Reserved', async () => {
      const r = await kubectlJson<{ status?: { phase?: string; start?: string; allocations?: { atoms: string[] }[] } }>(['-n', NS, 'get', 'reservation', 'b2b-second']);
      return r.status?.phase === 'Reserved' ? r.status : undefined;
    }, { timeoutMs: 60_000, intervalMs: 500 });
    const secondStart = Date.parse(second.start!);
    expect(secondStart).toBe(firstEnd);
    expect(second.allocations!.flatMap((a) => a.atoms).sort()).toEqual(firstAtoms);

    const stubborn = pod('b2b-first-0', { template: 'rsv' }, { 'bettercompute.io/reservation': 'b2b-first' });
    Object.assign(stubborn.spec, { terminationGracePeriodSeconds: 86_400 });
    stubborn.spec.containers[0]!.command = ['sh', '-c', `trap '' TERM; ${PRINT}; while true; do sleep 1; done`];
    await apply(stubborn);
    const held = await got('b2b-first-0', 120_000);
    expectHandedOver(held);
    expect(firstAtoms).toContain(held.atoms[0]);
    // The next booking's pod, made now: gated until its start.
    await apply(pod('b2b-second-0', { template: 'rsv' }, { 'bettercompute.io/reservation': 'b2b-second' }));
    const early = await kubectlJson<DraPod & { spec: { schedulingGates?: { name: string }[] } }>(['-n', NS, 'get', 'pod', 'b2b-second-0']);
    expect(early.status?.phase ?? 'Pending').toBe('Pending');
    expect(early.spec.nodeName).toBeUndefined();

    const goneAt = await waitFor('b2b-first-0 gone', async () => {
      const r = await kubectlResult(['-n', NS, 'get', 'pod', 'b2b-first-0']);
      return r.code !== 0 && /NotFound/.test(r.stderr) ? Date.now() : undefined;
    }, { timeoutMs: Math.max(0, firstEnd - Date.now()) + 60_000, intervalMs: 250 });
    await waitFor(`claim ${held.claim.metadata.name} deallocated or gone`, async () => {
      const r = await kubectlResult(['-n', NS, 'get', 'resourceclaim', held.claim.metadata.name, '-o', 'json']);
      if (r.code !== 0) return /NotFound/.test(r.stderr) || undefined;
      return !(JSON.parse(r.stdout) as Claim).status?.allocation || undefined;
    }, { timeoutMs: 60_000, intervalMs: 250 });
    const next = await got('b2b-second-0', Math.max(0, secondStart - Date.now()) + 60_000);
    const runningAt = Date.now();
    process.stderr.write(
      `[dra-node] back to back: the first pod gone ${((firstEnd - goneAt) / 1000).toFixed(1)}s before its end; the second printed ${((runningAt - secondStart) / 1000).toFixed(1)}s after its start\n`,
    );
    expect(goneAt).toBeLessThanOrEqual(firstEnd);
    expect(runningAt).toBeLessThanOrEqual(secondStart + 15_000);
    expectHandedOver(next);
    expect(firstAtoms).toContain(next.atoms[0]);
    await deleteAndWait(['b2b-second-0']);
    await kubectl(['-n', NS, 'delete', 'reservation', 'b2b-first', 'b2b-second', '--ignore-not-found', '--wait=true', '--timeout=60s'], { timeoutMs: 70_000 });
  }, 420_000);

  // Last: it changes the Pool's sharing (and puts it back). The Reservation keeps its two GPUs booked throughout.
  it('a slot is handed out through slot.gpu.bettercompute.io once the Pool shares its GPUs by time slices; the Reservation\'s GPUs keep their layout while it holds them', async () => {
    await kubectlResult(['-n', NS, 'delete', 'job', 'job', '--cascade=orphan', '--ignore-not-found']);
    await deleteAndWait();
    const free = WHOLE - reserved.length;
    await kubectl(['patch', 'pool', POOL, '--type=merge', '-p', JSON.stringify({ spec: { sharing: 'timeslice', slotsPerGpu: 2 } })]);
    try {
      // No new report: the ledger derives the node's atoms again from its last one, in the Pool's own transaction. Each
      // free whole GPU becomes two slots; the Reservation's GPUs are booked, so they stay whole, and the node's
      // NodeDevices says they wait.
      await waitFor('the Pool\'s capacity in slots', async () => {
        const totals = await poolTotals();
        return totals['gpu.slot'] === 2 * free && totals.gpu === reserved.length ? totals : undefined;
      }, { timeoutMs: 60_000, intervalMs: 500 });
      const busy = await waitFor('LayoutBusy on the node\'s NodeDevices', async () => {
        const nd = await kubectlJson<{ status?: { conditions?: { type: string; status: string; message?: string }[] } }>(['get', 'nodedevices', c().nodeName]);
        const cond = nd.status?.conditions?.find((x) => x.type === 'LayoutBusy');
        return cond?.status === 'True' ? cond : undefined;
      }, { timeoutMs: 60_000, intervalMs: 500 });
      for (const gpu of reserved) expect(busy.message).toContain(gpu);
      await apply(pod('slot', { template: 'slot' }));
      const g = await got('slot', 120_000).catch(async (e: unknown) => {
        const events = (await eventsOf('slot')).map((x) => `${x.reason}: ${x.message}`).join('\n');
        const pool = await kubectl(['get', 'pool', POOL, '-o', 'jsonpath={.spec.sharing} {.status}']);
        throw new Error(`${(e as Error).message}\nevents of slot:\n${events}\npool: ${pool}`);
      });
      expectHandedOver(g);
      expect(g.atoms[0]).toMatch(/\/s[01]$/);
      expect(reserved).not.toContain(atomGpu(g.atoms[0]!));
      await deleteAndWait(['slot']);
    } finally {
      await kubectl(['patch', 'pool', POOL, '--type=merge', '-p', JSON.stringify({ spec: { sharing: 'exclusive', slotsPerGpu: 1 } })]);
    }
    await waitFor('the Pool\'s whole GPUs back', async () => {
      const totals = await poolTotals();
      return totals.gpu === WHOLE && !totals['gpu.slot'] ? totals : undefined;
    }, { timeoutMs: 60_000, intervalMs: 500 });
  }, 180_000);
});
