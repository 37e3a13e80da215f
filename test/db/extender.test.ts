// The scheduler extender against a real ledger, with the Kubernetes side faked: bind refuses pods that ask for none of
// our resources, and re-checks a reservation's tenant and window at bind; a reservation's pod needs only its
// reservation's resource (no marker); every call is logged with its pod; bodies over the cap are refused before they
// are read.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { advanceClock } from '../../src/db/clock.ts';
import { Ledger } from '../../src/db/ledger.ts';
import type { ExtenderKube } from '../../src/extender/kube.ts';
import { createExtenderListener, EXTENDER_MAX_BODY_BYTES } from '../../src/extender/listener.ts';
import { ExtenderService } from '../../src/extender/service.ts';
import { createLogger, silentLogger } from '../../src/log.ts';
import { makeNode, makePool, reservation } from '../support/builders.ts';
import { useTestDatabase } from '../support/db.ts';
import { TENANT_LABEL, reservationResourceName } from '../../src/core/names.ts';

const ctx = useTestDatabase();

interface FakePod {
  metadata: { name: string; namespace: string; uid: string; labels?: Record<string, string> };
  spec: { containers: { name: string; resources?: { limits?: Record<string, string> } }[] };
}

class FakeKube implements ExtenderKube {
  pods = new Map<string, FakePod>();
  bound: { namespace: string; name: string; node: string }[] = [];
  allocatable: Record<string, string> = {};
  namespaces: Record<string, Record<string, string>> = {
    'acme-train': { [TENANT_LABEL]: 'acme' },
    beta: {},
    // Named like tenant acme, labelled for beta: it is beta's.
    acme: { [TENANT_LABEL]: 'beta' },
  };
  async getPod(namespace: string, name: string) {
    return this.pods.get(`${namespace}/${name}`);
  }
  async nodeAllocatable() {
    return this.allocatable;
  }
  /** namespaceLabels calls: one per judging of an on-demand pod. */
  nsReads = 0;
  async namespaceLabels(name: string) {
    this.nsReads++;
    return this.namespaces[name] ?? {};
  }
  async annotatePod() {}
  async bindPod(namespace: string, name: string, _uid: string, node: string) {
    this.bound.push({ namespace, name, node });
  }
  async evictPod() {}
  async deletePod() {}
}

let seq = 0;
function pod(namespace: string, limits: Record<string, string>): FakePod {
  const n = ++seq;
  return { metadata: { name: `pod-${n}`, namespace, uid: `uid-${n}` }, spec: { containers: [{ name: 'main', resources: { limits } }] } };
}

let kube: FakeKube;
let service: ExtenderService;
let logs: Record<string, unknown>[];
let poolId: string;
const NODE = 'ext-node-1';

beforeAll(async () => {
  poolId = await makePool('ext-pool').owner('acme').offer('beta').create(ctx.db);
  await makeNode(NODE).gpus(8).create(ctx.db, poolId);
});

beforeEach(() => {
  kube = new FakeKube();
  logs = [];
  const log = createLogger({ level: 'debug', write: (l) => logs.push(JSON.parse(l) as Record<string, unknown>) });
  service = new ExtenderService({ tenancyByName: true, db: ctx.db, ledger: new Ledger(ctx.db), clock: ctx.clock, kube, log, admissionWaitMs: 500 });
});

async function reserve(o: { tenant?: string; startInMs?: number; seconds?: number } = {}) {
  const now = ctx.clock.now();
  const out = await new Ledger(ctx.db).reserve(
    reservation(poolId, {
      tenantId: o.tenant ?? 'acme',
      devices: [{ class: 'gpu', count: 2 }],
      duration: o.seconds ?? 3600,
      ...(o.startInMs ? { start: now + o.startInMs } : {}),
    }),
    now,
  );
  if (!out.ok) throw new Error(`${out.code}: ${out.message}`);
  // The ledger starts a reservation at the database's now, which the sampled clock may trail by its round trip.
  await ctx.clock.sync();
  const id = out.reservation.id;
  const resource = reservationResourceName(id);
  kube.allocatable = { [resource]: '2', 'bettercompute.io/gpu': '8' };
  return { id, resource };
}

async function bind(p: FakePod, node = NODE) {
  kube.pods.set(`${p.metadata.namespace}/${p.metadata.name}`, p);
  return service.bind({ PodName: p.metadata.name, PodNamespace: p.metadata.namespace, PodUID: p.metadata.uid, Node: node });
}

async function assignments(reservationId: string): Promise<number> {
  const { rows } = await ctx.db.query(`SELECT count(*)::int AS n FROM reservation_pod_assignments WHERE reservation_id = $1`, [reservationId]);
  return rows[0].n as number;
}

describe('bind', () => {
  it('refuses a pod that requests none of our resources, and binds nothing', async () => {
    for (const limits of [{ cpu: '1' }, { 'bettercompute.io/reservation': '1' }, { 'nvidia.com/gpu': '1' }] as Record<string, string>[]) {
      const p = pod('acme-train', limits);
      const r = await bind(p);
      expect(r.Error).toMatch(/requests no Better Compute resource/);
    }
    expect(kube.bound).toEqual([]);
    const line = logs.find((l) => l.msg === 'extender call' && l.verb === 'bind')!;
    expect(line).toMatchObject({ level: 'warn', outcome: 'refused', node: NODE, pod: expect.stringMatching(/^acme-train\/pod-/), uid: expect.any(String) });
  });

  it('filter gives such a pod no node either (unresolvable, with the reason)', async () => {
    const p = pod('acme-train', { cpu: '1' });
    const r = await service.filter({ Pod: p, NodeNames: [NODE] } as never);
    expect(r.NodeNames).toEqual([]);
    expect(r.FailedAndUnresolvableNodes[NODE]).toMatch(/requests no Better Compute resource/);
  });

  it('tenancy by name off: a pod of an unlabelled namespace gets no node, and its bind is refused, with the reason', async () => {
    const off = new ExtenderService({ tenancyByName: false, db: ctx.db, ledger: new Ledger(ctx.db), clock: ctx.clock, kube, log: silentLogger });
    const p = pod('beta', { 'bettercompute.io/gpu': '1' }); // named like tenant beta (offered the pool), no label
    kube.pods.set(`${p.metadata.namespace}/${p.metadata.name}`, p);
    const f = await off.filter({ Pod: p, NodeNames: [NODE] } as never);
    expect(f.NodeNames).toEqual([]);
    expect(f.FailedAndUnresolvableNodes[NODE]).toMatch(/namespace beta has no bettercompute.io\/tenant label, so it is no tenant/);
    const b = await off.bind({ PodName: p.metadata.name, PodNamespace: 'beta', PodUID: p.metadata.uid, Node: NODE });
    expect(b.Error).toMatch(/no tenant/);
    expect(kube.bound).toEqual([]);
    // The same pod with tenancy by name on is beta's.
    expect((await service.filter({ Pod: p, NodeNames: [NODE] } as never)).NodeNames).toEqual([NODE]);
  });

  it('binds a reservation’s pod that requests only its reservation’s resource (no marker)', async () => {
    const { id, resource } = await reserve();
    const p = pod('acme-train', { [resource]: '1' });
    const f = await service.filter({ Pod: p, NodeNames: [NODE] } as never);
    expect(f.NodeNames).toEqual([NODE]);
    expect(await bind(p)).toEqual({ Error: '' });
    expect(kube.bound).toEqual([{ namespace: 'acme-train', name: p.metadata.name, node: NODE }]);
    expect(await assignments(id)).toBe(1);
    // The marker, when present, is still accepted.
    const withMarker = pod('acme-train', { [resource]: '1', 'bettercompute.io/reservation': '1' });
    expect(await bind(withMarker)).toEqual({ Error: '' });
    expect(await assignments(id)).toBe(2);
    const line = logs.filter((l) => l.msg === 'extender call' && l.verb === 'bind').at(-1)!;
    expect(line).toMatchObject({
      level: 'info',
      outcome: 'bound',
      pod: `acme-train/${withMarker.metadata.name}`,
      uid: withMarker.metadata.uid,
      node: NODE,
      reservation: id,
      count: 1,
      ms: expect.any(Number),
    });
  });

  it('refuses a reservation’s pod from another tenant’s namespace (also one named like the tenant but labelled otherwise)', async () => {
    const { id, resource } = await reserve();
    for (const ns of ['beta', 'acme']) {
      const r = await bind(pod(ns, { [resource]: '1' }));
      expect(r.Error).toBe(`reservation ${id} belongs to another tenant than beta (namespace ${ns})`);
    }
    expect(kube.bound).toEqual([]);
    expect(await assignments(id)).toBe(0);
  });

  it('refuses a reservation’s pod before the reservation’s window', async () => {
    const { id, resource } = await reserve({ startInMs: 2 * 3600_000 });
    const r = await bind(pod('acme-train', { [resource]: '1' }));
    expect(r.Error).toMatch(new RegExp(`^reservation ${id} starts at \\d{4}-`));
    expect(kube.bound).toEqual([]);
    expect(await assignments(id)).toBe(0);
  });

  it('refuses a reservation’s pod after the reservation’s window, even when filter passed it before', async () => {
    const { id, resource } = await reserve({ seconds: 600 });
    const p = pod('acme-train', { [resource]: '1' });
    const f = await service.filter({ Pod: p, NodeNames: [NODE] } as never);
    expect(f.NodeNames).toEqual([NODE]);
    await advanceClock(ctx.db, 601_000);
    await ctx.clock.sync();
    const r = await bind(p);
    expect(r.Error).toMatch(new RegExp(`^reservation ${id} ended at \\d{4}-`));
    expect(kube.bound).toEqual([]);
    expect(await assignments(id)).toBe(0);
  });
});

describe('a pod of a later booking waits for a pod of an earlier one that still holds its atoms', () => {
  const WAIT_NODE = 'wait-node';
  let waitPool: string;
  beforeAll(async () => {
    waitPool = await makePool('wait-pool').owner('acme').create(ctx.db);
    await makeNode(WAIT_NODE).gpus(2).create(ctx.db, waitPool);
  });

  /** Both GPUs of the node for `seconds`, from `start` (now when omitted). */
  async function both(seconds: number, start?: number) {
    const out = await new Ledger(ctx.db).reserve(
      reservation(waitPool, { tenantId: 'acme', devices: [{ class: 'gpu', count: 2 }], duration: seconds, ...(start ? { start } : {}) }),
      ctx.clock.now(),
    );
    if (!out.ok) throw new Error(`${out.code}: ${out.message}`);
    await ctx.clock.sync();
    return out.reservation;
  }
  /** filter's answer on the node, then bind's. */
  async function place(p: FakePod) {
    const f = await service.filter({ Pod: p, NodeNames: [WAIT_NODE] } as never);
    return { passed: f.NodeNames, failed: f.FailedNodes[WAIT_NODE], error: f.Error, bind: (await bind(p, WAIT_NODE)).Error };
  }

  it('back to back: the next Reservation’s pod is neither passed nor bound while the first one’s pod is live past its end, then is', async () => {
    const first = await both(60);
    const next = await both(60, Math.ceil(first.end));
    const firstResource = reservationResourceName(first.id);
    kube.allocatable = { [firstResource]: '2' };
    const old = pod('acme-train', { [firstResource]: '2' });
    expect((await place(old)).bind).toBe('');
    await advanceClock(ctx.db, first.end - ctx.clock.now() + 1000);
    await ctx.clock.sync();

    const resource = reservationResourceName(next.id);
    kube.allocatable = { [resource]: '2' };
    const p = pod('acme-train', { [resource]: '2' });
    const waiting = await place(p);
    const why = `WaitingForPod: pod acme-train/${old.metadata.name} (uid ${old.metadata.uid}) of an earlier booking still holds GPU-wait-node-00, GPU-wait-node-01`;
    expect(waiting.passed).toEqual([]);
    expect(waiting.failed).toContain(why);
    // An error, not only a failed node: kube-scheduler retries the pod after its backoff, whatever else rejected it.
    expect(waiting.error).toContain(why);
    expect(waiting.bind).toContain(why);
    expect(await assignments(next.id)).toBe(0);
    // The first pod is gone (the releaser saw it): the next one is passed and bound at once.
    await new Ledger(ctx.db).releasePod(old.metadata.uid);
    expect(await place(p)).toEqual({ passed: [WAIT_NODE], failed: undefined, error: '', bind: '' });
    await new Ledger(ctx.db).releasePod(p.metadata.uid);
    await advanceClock(ctx.db, next.end - ctx.clock.now() + 1000);
    await ctx.clock.sync();
  });

  it('an on-demand pod is not bound on atoms whose earlier pod still runs past its booking, and is once that pod is gone', async () => {
    const first = await both(60);
    const firstResource = reservationResourceName(first.id);
    kube.allocatable = { [firstResource]: '2' };
    const old = pod('acme-train', { [firstResource]: '2' });
    expect((await place(old)).bind).toBe('');
    await advanceClock(ctx.db, first.end - ctx.clock.now() + 1000);
    await ctx.clock.sync();

    const p = pod('acme-train', { 'bettercompute.io/gpu': '1' });
    expect((await place(p)).bind).toMatch(new RegExp(`^WaitingForPod: pod acme-train/${old.metadata.name} `));
    expect(kube.bound.map((b) => b.name)).toEqual([old.metadata.name]);
    const { rows } = await ctx.db.query(`SELECT count(*)::int AS n FROM allocations WHERE pod_uid = $1 AND released_at IS NULL`, [p.metadata.uid]);
    expect(rows[0].n).toBe(0);
    await new Ledger(ctx.db).releasePod(old.metadata.uid);
    expect((await place(p)).bind).toBe('');
    await new Ledger(ctx.db).releasePod(p.metadata.uid);
  });
});

describe('prioritize of on-demand pods', () => {
  // One admission in flight per node (ADR 0003): a second on-demand pod sent to the node the first was just ranked
  // onto would wait for the first's admission in its bind. Prioritize ranks that node last for the second pod.
  it('ranks a node that is admitting another on-demand pod below every other passing node, but not for that pod itself', async () => {
    const pool = await makePool('spread-pool').owner('acme').create(ctx.db);
    const nodes = ['spread-a', 'spread-b'];
    for (const n of nodes) await makeNode(n).gpus(8).create(ctx.db, pool);
    const score = async (p: FakePod) =>
      Object.fromEntries((await service.prioritize({ Pod: p, NodeNames: nodes } as never)).map((h) => [h.Host, h.Score]));

    const first = pod('acme-train', { 'bettercompute.io/gpu': '1' });
    const one = await score(first);
    const top = one['spread-a']! >= one['spread-b']! ? 'spread-a' : 'spread-b';
    const other = top === 'spread-a' ? 'spread-b' : 'spread-a';
    expect(one[top]).toBeGreaterThan(0);

    const second = await score(pod('acme-train', { 'bettercompute.io/gpu': '1' }));
    expect(second[top]).toBe(0);
    expect(second[other]).toBeGreaterThan(0);
    // The first pod asked again (a retry) still sees its own node as before.
    expect((await score(first))[top]).toBe(one[top]);
    // A reservation's pod takes no admission: nothing of this applies to it.
    const { resource } = await reserve();
    const rsv = await service.prioritize({ Pod: pod('acme-train', { [resource]: '1' }), NodeNames: [NODE] } as never);
    expect(rsv[0]!.Score).toBeGreaterThan(0);
  });
});

describe('filter with more fits than it passes', () => {
  // ADR 0022: kube-scheduler scores and prioritizes every node filter passes; filter passes the best `filterNodes` (every
  // pod, as with bestNodeOnly false or a pod with scheduling preferences of its own: ADR 0030).
  it('passes the best-packing nodes, in the call’s order, a node admitting another on-demand pod after the rest', async () => {
    const pool = await makePool('best-pool').owner('acme').create(ctx.db);
    // A one-GPU pod packs best where the fewest GPUs are left over: best-c, then best-e, then best-b.
    const gpus: Record<string, number> = { 'best-a': 8, 'best-b': 4, 'best-c': 1, 'best-d': 8, 'best-e': 2 };
    for (const [n, g] of Object.entries(gpus)) await makeNode(n).gpus(g).create(ctx.db, pool);
    const names = Object.keys(gpus);
    const log = createLogger({ level: 'debug', write: (l) => logs.push(JSON.parse(l) as Record<string, unknown>) });
    const two = new ExtenderService({ tenancyByName: true, db: ctx.db, ledger: new Ledger(ctx.db), clock: ctx.clock, kube, log, filterNodes: 2, bestNodeOnly: false });
    const first = pod('acme-train', { 'bettercompute.io/gpu': '1' });
    const passed = await two.filter({ Pod: first, NodeNames: names } as never);
    expect(passed.NodeNames).toEqual(['best-c', 'best-e']);
    // The three left out fit: they are no failures.
    expect(passed.FailedNodes).toEqual({});
    expect(logs.find((l) => l.msg === 'extender call' && l.verb === 'filter')).toMatchObject({ nodes: 5, fit: 5, passed: 2 });
    // Prioritize ranks best-c first for the first pod: it is admitting that pod now.
    const ranked = await two.prioritize({ Pod: first, NodeNames: passed.NodeNames } as never);
    expect(ranked.find((h) => h.Host === 'best-c')!.Score).toBeGreaterThan(ranked.find((h) => h.Host === 'best-e')!.Score);
    // The next on-demand pod is passed the best nodes not admitting another pod.
    const second = pod('acme-train', { 'bettercompute.io/gpu': '1' });
    expect((await two.filter({ Pod: second, NodeNames: names } as never)).NodeNames).toEqual(['best-b', 'best-e']);
    // The first pod asked again still gets its own node; of equal nodes, the earlier name passes.
    expect((await two.filter({ Pod: first, NodeNames: names } as never)).NodeNames).toEqual(['best-c', 'best-e']);
    const four = await two.filter({ Pod: pod('acme-train', { 'bettercompute.io/gpu': '4' }), NodeNames: names } as never);
    expect(four.NodeNames).toEqual(['best-a', 'best-b']);
    expect(Object.keys(four.FailedNodes).sort()).toEqual(['best-c', 'best-e']);
    // A pod that fits no more nodes than the bound is passed them all.
    const eight = await two.filter({ Pod: pod('acme-train', { 'bettercompute.io/gpu': '8' }), NodeNames: names } as never);
    expect(eight.NodeNames).toEqual(['best-a', 'best-d']);
  });
});

describe('filter and a pod without scheduling preferences of its own (ADR 0030)', () => {
  const gpus: Record<string, number> = { 'one-a': 8, 'one-b': 4, 'one-c': 1, 'one-d': 8, 'one-e': 2 };
  const names = Object.keys(gpus);
  beforeAll(async () => {
    const pool = await makePool('one-pool').owner('acme').create(ctx.db);
    // One zone: a reservation's gang below takes two of these nodes.
    for (const [n, g] of Object.entries(gpus)) await makeNode(n).gpus(g).domain('one-zone').create(ctx.db, pool);
  });
  const withSpec = (extra: { metadata?: Record<string, unknown>; spec?: Record<string, unknown> }) => {
    const p = pod('acme-train', { 'bettercompute.io/gpu': '1' });
    return { metadata: { ...p.metadata, ...extra.metadata }, spec: { ...p.spec, ...extra.spec } };
  };

  it('passes its best node alone and marks it admitting; a pod with preferences is passed up to filterNodes', async () => {
    const three = new ExtenderService({ tenancyByName: true, db: ctx.db, ledger: new Ledger(ctx.db), clock: ctx.clock, kube, log: silentLogger, filterNodes: 3 });
    // A one-GPU pod packs best where the fewest GPUs are left over: one-c, then one-e, one-b, one-a and one-d.
    expect((await three.filter({ Pod: pod('acme-train', { 'bettercompute.io/gpu': '1' }), NodeNames: names } as never)).NodeNames).toEqual(['one-c']);
    // kube-scheduler binds what it is passed without prioritize: the next on-demand pod is passed the next node.
    expect((await three.filter({ Pod: pod('acme-train', { 'bettercompute.io/gpu': '1' }), NodeNames: names } as never)).NodeNames).toEqual(['one-e']);
    // Preferences kube-scheduler weighs: the best three of those not admitting another pod, in the call's order.
    const preferring = [
      { spec: { affinity: { nodeAffinity: { preferredDuringSchedulingIgnoredDuringExecution: [{ weight: 1, preference: { matchExpressions: [] } }] } } } },
      { spec: { affinity: { podAffinity: { preferredDuringSchedulingIgnoredDuringExecution: [{ weight: 1, podAffinityTerm: { topologyKey: 'zone' } }] } } } },
      { spec: { affinity: { podAntiAffinity: { preferredDuringSchedulingIgnoredDuringExecution: [{ weight: 1, podAffinityTerm: { topologyKey: 'zone' } }] } } } },
      { spec: { topologySpreadConstraints: [{ maxSkew: 1, topologyKey: 'zone', whenUnsatisfiable: 'ScheduleAnyway' }] } },
      { metadata: { ownerReferences: [{ apiVersion: 'apps/v1', kind: 'ReplicaSet', name: 'infer-1', uid: 'rs-1' }] } },
      { metadata: { ownerReferences: [{ apiVersion: 'apps/v1', kind: 'StatefulSet', name: 'infer', uid: 'ss-1' }] } },
    ];
    for (const extra of preferring) {
      expect((await three.filter({ Pod: withSpec(extra), NodeNames: names } as never)).NodeNames, JSON.stringify(extra)).toEqual(['one-a', 'one-b', 'one-d']);
    }
    // Required terms are kube-scheduler's filters, not preferences; a Job's pods are not spread by default.
    const notPreferring = [
      { spec: { affinity: { nodeAffinity: { requiredDuringSchedulingIgnoredDuringExecution: { nodeSelectorTerms: [] } }, podAntiAffinity: { preferredDuringSchedulingIgnoredDuringExecution: [] } } } },
      { spec: { topologySpreadConstraints: [{ maxSkew: 1, topologyKey: 'zone', whenUnsatisfiable: 'DoNotSchedule' }] } },
      { metadata: { ownerReferences: [{ apiVersion: 'batch/v1', kind: 'Job', name: 'train', uid: 'job-1' }] } },
    ];
    const passed = [];
    for (const extra of notPreferring) passed.push((await three.filter({ Pod: withSpec(extra), NodeNames: names } as never)).NodeNames);
    // Each is passed one node and marks it: one-b, then one-a, then one-d (of equal nodes, the earlier name).
    expect(passed).toEqual([['one-b'], ['one-a'], ['one-d']]);
  });

  it('with bestNodeOnly false, such a pod is passed up to filterNodes too', async () => {
    const three = new ExtenderService({ tenancyByName: true, db: ctx.db, ledger: new Ledger(ctx.db), clock: ctx.clock, kube, log: silentLogger, filterNodes: 3, bestNodeOnly: false });
    expect((await three.filter({ Pod: pod('acme-train', { 'bettercompute.io/gpu': '1' }), NodeNames: names } as never)).NodeNames).toEqual(['one-b', 'one-c', 'one-e']);
  });

  it('a reservation’s pod is passed every node of its reservation up to filterNodes: nothing keeps its next pods off the node it is sent to', async () => {
    const now = ctx.clock.now();
    const pool = (await ctx.db.query<{ id: string }>(`SELECT pool_id AS id FROM nodes WHERE id = 'one-a'`)).rows[0]!.id;
    const out = await new Ledger(ctx.db).reserve(reservation(pool, { tenantId: 'acme', devices: [{ class: 'gpu', count: 2 }], gang: { size: 2 }, duration: 3600 }), now);
    if (!out.ok) throw new Error(`${out.code}: ${out.message}`);
    await ctx.clock.sync();
    const resource = reservationResourceName(out.reservation.id);
    kube.allocatable = { [resource]: '2', 'bettercompute.io/gpu': '8' };
    const held = (await ctx.db.query<{ node_id: string }>(`SELECT DISTINCT node_id FROM allocations WHERE reservation_id = $1 ORDER BY node_id`, [out.reservation.id])).rows.map((r) => r.node_id);
    expect(held.length).toBeGreaterThan(1);
    const three = new ExtenderService({ tenancyByName: true, db: ctx.db, ledger: new Ledger(ctx.db), clock: ctx.clock, kube, log: silentLogger, filterNodes: 3 });
    const passed = (await three.filter({ Pod: pod('acme-train', { [resource]: '1' }), NodeNames: names } as never)).NodeNames!;
    expect([...passed].sort()).toEqual(held);
  });
});

describe('prioritize after filter', () => {
  it('takes filter’s scores for the pod filter just judged, once; another pod, or the same pod again, is judged', async () => {
    const p = pod('acme-train', { 'bettercompute.io/gpu': '1' });
    const args = { Pod: p, NodeNames: [NODE] } as never;
    expect((await service.filter(args)).NodeNames).toEqual([NODE]);
    expect(kube.nsReads).toBe(1);
    const reused = await service.prioritize(args);
    expect(kube.nsReads).toBe(1);
    const judged = await service.prioritize(args);
    expect(kube.nsReads).toBe(2);
    expect(reused).toEqual(judged);
    expect(reused[0]!.Score).toBeGreaterThan(0);
    await service.filter(args);
    await service.prioritize({ Pod: pod('acme-train', { 'bettercompute.io/gpu': '1' }), NodeNames: [NODE] } as never);
    expect(kube.nsReads).toBe(4);
  });

  it('takes them only for nodes filter passed: a node that fits but was left out is judged', async () => {
    const pool = await makePool('reuse-pool').owner('acme').create(ctx.db);
    for (const [n, g] of [['reuse-a', 1], ['reuse-b', 2], ['reuse-c', 8]] as const) await makeNode(n).gpus(g).create(ctx.db, pool);
    const two = new ExtenderService({ tenancyByName: true, db: ctx.db, ledger: new Ledger(ctx.db), clock: ctx.clock, kube, log: silentLogger, filterNodes: 2, bestNodeOnly: false });
    const p = pod('acme-train', { 'bettercompute.io/gpu': '1' });
    const names = ['reuse-a', 'reuse-b', 'reuse-c'];
    const passed = await two.filter({ Pod: p, NodeNames: names } as never);
    expect(passed.NodeNames).toEqual(['reuse-a', 'reuse-b']);
    const reads = kube.nsReads;
    const reused = await two.prioritize({ Pod: p, NodeNames: passed.NodeNames } as never);
    expect(kube.nsReads).toBe(reads);
    expect(reused.map((h) => h.Host)).toEqual(['reuse-a', 'reuse-b']);
    await two.filter({ Pod: p, NodeNames: names } as never);
    const judged = await two.prioritize({ Pod: p, NodeNames: ['reuse-a', 'reuse-c'] } as never);
    expect(kube.nsReads).toBe(reads + 2);
    expect(judged.find((h) => h.Host === 'reuse-a')!.Score).toBe(reused.find((h) => h.Host === 'reuse-a')!.Score);
    expect(judged.find((h) => h.Host === 'reuse-c')!.Score).toBeGreaterThan(0);
  });
});

describe('the extender listener (transport)', () => {
  let server: http.Server;
  let base: string;
  const calls: string[] = [];

  beforeAll(async () => {
    const spy = {
      filter: async () => {
        calls.push('filter');
        return { Nodes: null, NodeNames: [], FailedNodes: {}, FailedAndUnresolvableNodes: {}, Error: '' };
      },
      prioritize: async () => {
        calls.push('prioritize');
        return [];
      },
      bind: async (args: { PodName: string }) => {
        calls.push('bind');
        if (args.PodName === 'throws') throw new Error('the service failed');
        return { Error: '' };
      },
    } as unknown as ExtenderService;
    server = http.createServer(createExtenderListener({ service: spy }));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  });
  beforeEach(() => {
    calls.length = 0;
  });

  /** Sends headers declaring `length` bytes and only `send` bytes of body; resolves with the answer. */
  function declare(path: string, length: number, send: number): Promise<{ status: number; body: string; connection?: string }> {
    return new Promise((resolve, reject) => {
      const req = http.request(`${base}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', 'content-length': String(length) } }, (res) => {
        let body = '';
        res.on('data', (c: Buffer) => (body += c.toString()));
        res.on('end', () => {
          req.destroy();
          resolve({ status: res.statusCode ?? 0, body, ...(res.headers.connection ? { connection: res.headers.connection } : {}) });
        });
      });
      req.on('error', reject);
      req.write(Buffer.alloc(send, 0x20));
    });
  }

  it('a 60 MB body is refused with 413 from its Content-Length, before it is read, and no handler runs', async () => {
    for (const verb of ['filter', 'prioritize', 'bind']) {
      const r = await declare(`/scheduler/${verb}`, 60 * 1024 * 1024, 1024);
      expect(r.status, verb).toBe(413);
      expect(JSON.parse(r.body).Error).toMatch(/over the extender's limit of 4194304 bytes/);
      expect(r.connection).toBe('close');
    }
    expect(calls).toEqual([]);
  });

  it('a chunked body over the cap is cut off at the cap (413), no handler runs', async () => {
    const r = await new Promise<{ status: number }>((resolve, reject) => {
      const req = http.request(`${base}/scheduler/filter`, { method: 'POST', headers: { 'content-type': 'application/json', 'transfer-encoding': 'chunked' } }, (res) => {
        res.resume();
        res.on('end', () => resolve({ status: res.statusCode ?? 0 }));
      });
      req.on('error', () => undefined); // the server may close while we still write
      const chunk = Buffer.alloc(1024 * 1024, 0x20);
      let sent = 0;
      const pump = () => {
        while (sent < 6 && req.write(chunk)) sent++;
        if (sent < 6) req.once('drain', () => (sent++, pump()));
        else req.end();
      };
      pump();
      setTimeout(() => reject(new Error('no answer')), 20_000).unref();
    });
    expect(r.status).toBe(413);
    expect(calls).toEqual([]);
  });

  async function post(path: string, body: string, headers: Record<string, string> = {}) {
    const res = await fetch(`${base}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body });
    return { status: res.status, type: res.headers.get('content-type'), json: (await res.json()) as unknown };
  }

  it('answers each verb in the wire format, and refuses what does not decode with 400 in that verb’s shape', async () => {
    const pod = { metadata: { name: 'p', namespace: 'acme-train', uid: 'u' }, spec: { containers: [] } };
    const ok = await post('/scheduler/filter', JSON.stringify({ Pod: pod, NodeNames: ['a'] }));
    expect(ok).toEqual({ status: 200, type: 'application/json; charset=utf-8', json: { Nodes: null, NodeNames: [], FailedNodes: {}, FailedAndUnresolvableNodes: {}, Error: '' } });
    expect((await post('/scheduler/prioritize?x=1', JSON.stringify({ Pod: pod, NodeNames: ['a'] }))).json).toEqual([]);
    expect((await post('/scheduler/bind', JSON.stringify({ PodName: 'p', PodNamespace: 'n', PodUID: 'u', Node: 'a' }))).json).toEqual({ Error: '' });
    expect(calls).toEqual(['filter', 'prioritize', 'bind']);
    calls.length = 0;
    const notJson = await post('/scheduler/filter', '{"Pod": ');
    expect(notJson.status).toBe(400);
    expect((notJson.json as { Error: string }).Error).toMatch(/^invalid extender request: /);
    const noPod = await post('/scheduler/filter', JSON.stringify({ NodeNames: ['a'] }));
    expect(noPod).toMatchObject({ status: 400, json: { Nodes: null, NodeNames: null, Error: expect.stringMatching(/^invalid extender request: Pod: /) } });
    expect(await post('/scheduler/prioritize', JSON.stringify({ Pod: pod, NodeNames: [1] }))).toEqual({ status: 400, type: 'application/json; charset=utf-8', json: [] });
    const noUid = await post('/scheduler/bind', JSON.stringify({ PodName: 'p', PodNamespace: 'n', Node: 'a' }));
    expect(noUid).toMatchObject({ status: 400, json: { Error: expect.stringMatching(/PodUID/) } });
    expect((await post('/scheduler/bind', '')).status).toBe(400);
    const gzip = await post('/scheduler/bind', '{}', { 'content-encoding': 'gzip' });
    expect(gzip).toMatchObject({ status: 415, json: { Error: expect.stringMatching(/content encoding "gzip" is not supported/) } });
    expect(calls).toEqual([]);
  });

  it('serves nothing but POST on its three paths (404), and a service that throws answers 500', async () => {
    for (const [method, path] of [['GET', '/scheduler/filter'], ['POST', '/scheduler/preempt'], ['POST', '/filter'], ['GET', '/healthz']] as const) {
      const res = await fetch(`${base}${path}`, { method, ...(method === 'POST' ? { body: '{}' } : {}) });
      expect(res.status, `${method} ${path}`).toBe(404);
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe('NOT_FOUND');
    }
    const failed = await post('/scheduler/bind', JSON.stringify({ PodName: 'throws', PodNamespace: 'n', PodUID: 'u', Node: 'a' }));
    expect(failed).toEqual({ status: 500, type: 'application/json; charset=utf-8', json: { error: { code: 'INTERNAL', message: 'internal error' } } });
    expect(calls).toEqual(['bind']);
  });

  it('a client that goes away mid-body gets no answer, and the listener serves the next call', async () => {
    await new Promise<void>((resolve) => {
      const req = http.request(`${base}/scheduler/filter`, { method: 'POST', headers: { 'content-length': '1000' } });
      req.on('error', () => resolve());
      req.write('{"Pod":', () => setTimeout(() => (req.destroy(), resolve()), 50));
    });
    const pod = { metadata: { name: 'p', namespace: 'acme-train', uid: 'u' }, spec: { containers: [] } };
    expect((await post('/scheduler/filter', JSON.stringify({ Pod: pod, NodeNames: [] }))).status).toBe(200);
    expect(calls).toEqual(['filter']);
  });

  it('a 5,000-node filter body fits the cap: the longest node names, and a Pod at etcd’s 1.5 MiB object limit', async () => {
    const names = Array.from({ length: 5000 }, (_, i) => `${'n'.repeat(248)}${String(i).padStart(5, '0')}`);
    const big = { metadata: { name: 'p', namespace: 'acme-train', uid: 'u', annotations: { blob: 'x'.repeat(1.5 * 1024 * 1024 - 200) } }, spec: { containers: [] } };
    const body = JSON.stringify({ Pod: big, NodeNames: names });
    expect(body.length).toBeGreaterThan(2.8e6);
    expect(body.length).toBeLessThan(EXTENDER_MAX_BODY_BYTES);
    const res = await fetch(`${base}/scheduler/filter`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
    expect(res.status).toBe(200);
    expect(calls).toEqual(['filter']);
  });
});
