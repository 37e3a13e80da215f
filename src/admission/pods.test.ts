// admitPod() on fake lookups (a table of pods and what admission makes of them), and the AdmissionReview transport.
import type { AddressInfo } from 'node:net';
import http from 'node:http';
import express from 'express';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { silentLogger } from '../log.ts';
import type { Booking } from './bookings.ts';
import { admitPod, createPodAdmissionRouter, podAdmissionDeps, MAX_REVIEW_BYTES, type AdmissionLookups, type JsonPatchOp, type PodLike, type ReservationRef } from './pods.ts';
import type { NamespaceCR, Reservation } from '../kube/types.ts';
import { decodeReviewJson } from './review.ts';

const id = (c: string) => `rsv_01k2${c.repeat(22)}`;
const res = (c: string) => `reservations.bettercompute.io/rsv-01k2${c.repeat(22)}`;

const RESERVATIONS: ReservationRef[] = [
  { namespace: 'team-a', name: 'train', uid: 'u-train', tenant: 'acme', deleting: false },
  { namespace: 'team-a', name: 'waiting', uid: 'u-waiting', tenant: 'acme', deleting: false },
  { namespace: 'team-a', name: 'over', uid: 'u-over', tenant: 'acme', deleting: false },
  { namespace: 'team-a', name: 'leaving', uid: 'u-leaving', tenant: 'acme', deleting: true },
  { namespace: 'team-b', name: 'other', uid: 'u-other', tenant: 'bcorp', deleting: false },
];
const BOOKINGS: Booking[] = [
  { id: id('a'), tenantId: 'acme', idempotencyKey: 'u-train', state: 'confirmed', ended: false, start: 0, end: 3_600_000 },
  { id: id('b'), tenantId: 'acme', idempotencyKey: 'u-over', state: 'released', ended: true, start: 0, end: 3_600_000 },
  { id: id('c'), tenantId: 'acme', idempotencyKey: 'u-leaving', state: 'confirmed', ended: false, start: 0, end: 3_600_000 },
  { id: id('d'), tenantId: 'bcorp', idempotencyKey: 'u-other', state: 'held', ended: false, start: 0, end: 3_600_000 },
  // Booked through the capacity API by another tenant with team-a's Reservation uid as its idempotency key.
  { id: id('e'), tenantId: 'evil', idempotencyKey: 'u-train', state: 'confirmed', ended: false, start: 0, end: 3_600_000 },
  // An on-demand pod's booking (idempotency key: the pod's uid).
  { id: id('f'), tenantId: 'acme', idempotencyKey: 'pod-uid-1', state: 'held', ended: false, start: 0, end: 3_600_000 },
];

const lookups: AdmissionLookups = {
  reservation: async (ns, name) => RESERVATIONS.find((r) => r.namespace === ns && r.name === name),
  reservationsIn: async (ns) => RESERVATIONS.filter((r) => r.namespace === ns),
  bookings: {
    byReservationUid: async (tenant, uid) => BOOKINGS.find((b) => b.tenantId === tenant && b.idempotencyKey === uid),
    byId: async (i) => BOOKINGS.find((b) => b.id === i),
  },
};

type Q = Record<string, string>;
interface C {
  requests?: Q;
  limits?: Q;
}
function pod(o: { ns?: string; label?: string; containers?: C[]; init?: C[]; scheduler?: string | null; nodeName?: string }): PodLike {
  const c = (x: C, i: number) => ({ name: `c${i}`, image: 'busybox', resources: { ...(x.requests ? { requests: x.requests } : {}), ...(x.limits ? { limits: x.limits } : {}) } });
  return {
    metadata: { generateName: 'job-', namespace: o.ns ?? 'team-a', ...(o.label !== undefined ? { labels: { 'bettercompute.io/reservation': o.label, app: 'x' } } : {}) },
    spec: {
      containers: (o.containers ?? []).map(c),
      ...(o.init ? { initContainers: o.init.map(c) } : {}),
      ...(o.scheduler !== null ? { schedulerName: o.scheduler ?? 'default-scheduler' } : {}),
      ...(o.nodeName ? { nodeName: o.nodeName } : {}),
      restartPolicy: 'Never',
    },
  };
}

/** Applies the JSON patch ops admitPod emits (replace/add of whole values) to a copy of the pod. */
function applyPatch(p: PodLike, ops: JsonPatchOp[]): PodLike {
  const out = structuredClone(p) as Record<string, unknown>;
  for (const op of ops) {
    const parts = op.path.split('/').slice(1).map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'));
    let at = out as Record<string, unknown>;
    for (const k of parts.slice(0, -1)) at = at[k] as Record<string, unknown>;
    const last = parts.at(-1)!;
    if (op.op === 'replace') expect(last in at, `replace of a missing ${op.path}`).toBe(true);
    at[last] = op.value;
  }
  return out as PodLike;
}

const SCHED = { op: 'add', path: '/spec/schedulerName', value: 'better-compute-scheduler' };
/** The scheduling gate of a DRA pod of ours that had no gates (ADR 0049). */
const GATE_ALL = { op: 'add', path: '/spec/schedulingGates', value: [{ name: 'bettercompute.io/allocation' }] };
const gpu = (n: string) => ({ 'bettercompute.io/gpu': n });

describe('admitPod', () => {
  const rewrites: { name: string; pod: PodLike; want: (p: PodLike) => void }[] = [
    {
      name: 'label + bettercompute.io/gpu in limits only → the Reservation’s resource, same count, our scheduler',
      pod: pod({ label: 'train', containers: [{ limits: { ...gpu('2'), cpu: '1' } }] }),
      want: (p) => {
        expect(p.spec.containers[0]!.resources).toEqual({ limits: { [res('a')]: '2', cpu: '1' } });
        expect(p.spec.schedulerName).toBe('better-compute-scheduler');
      },
    },
    {
      name: 'requests and limits both rewritten, counts kept per container',
      pod: pod({ label: 'train', containers: [{ requests: gpu('3'), limits: gpu('3') }, { requests: { 'bettercompute.io/gpu.mig': '1' }, limits: { 'bettercompute.io/gpu.mig': '1', memory: '1Gi' } }] }),
      want: (p) => {
        expect(p.spec.containers[0]!.resources).toEqual({ requests: { [res('a')]: '3' }, limits: { [res('a')]: '3' } });
        expect(p.spec.containers[1]!.resources).toEqual({ requests: { [res('a')]: '1' }, limits: { [res('a')]: '1', memory: '1Gi' } });
      },
    },
    {
      name: 'init containers too; a container without our resources is left alone',
      pod: pod({ label: 'train', init: [{ limits: { 'bettercompute.io/gpu.slot': '4' } }], containers: [{ limits: { cpu: '1' } }, { limits: gpu('1') }] }),
      want: (p) => {
        expect(p.spec.initContainers![0]!.resources).toEqual({ limits: { [res('a')]: '4' } });
        expect(p.spec.containers[0]!.resources).toEqual({ limits: { cpu: '1' } });
        expect(p.spec.containers[1]!.resources).toEqual({ limits: { [res('a')]: '1' } });
      },
    },
    {
      name: 'label + the right resource already: only the scheduler (and the old marker dropped)',
      pod: pod({ label: 'train', containers: [{ limits: { [res('a')]: '1', 'bettercompute.io/reservation': '1' } }], scheduler: '' }),
      want: (p) => {
        expect(p.spec.containers[0]!.resources).toEqual({ limits: { [res('a')]: '1' } });
        expect(p.spec.schedulerName).toBe('better-compute-scheduler');
      },
    },
    {
      name: 'no label, its own namespace’s reservation resource: admitted, scheduler set',
      pod: pod({ containers: [{ limits: { [res('a')]: '2' } }], scheduler: null }),
      want: (p) => {
        expect(p.spec.containers[0]!.resources).toEqual({ limits: { [res('a')]: '2' } });
        expect(p.spec.schedulerName).toBe('better-compute-scheduler');
      },
    },
    {
      name: 'on-demand pod: scheduler only, resources untouched',
      pod: pod({ containers: [{ limits: gpu('1') }] }),
      want: (p) => {
        expect(p.spec.containers[0]!.resources).toEqual({ limits: gpu('1') });
        expect(p.spec.schedulerName).toBe('better-compute-scheduler');
      },
    },
    {
      name: 'the Reservation of team-b for a team-b pod',
      pod: pod({ ns: 'team-b', label: 'other', containers: [{ limits: gpu('1') }] }),
      want: (p) => expect(p.spec.containers[0]!.resources).toEqual({ limits: { [res('d')]: '1' } }),
    },
  ];
  for (const t of rewrites) {
    it(`rewrites: ${t.name}`, async () => {
      const a = await admitPod(t.pod, lookups);
      expect(a.allowed, JSON.stringify(a)).toBe(true);
      if (!a.allowed) return;
      expect(a.patch).toBeDefined();
      t.want(applyPatch(t.pod, a.patch!));
    });
  }

  it('schedulerName is set only when it is the default or unset', async () => {
    for (const [scheduler, patched] of [
      ['default-scheduler', true],
      [null, true],
      ['', true],
      ['better-compute-scheduler', false],
      ['volcano', false],
    ] as const) {
      const a = await admitPod(pod({ containers: [{ limits: gpu('1') }], scheduler }), lookups);
      expect(a).toEqual(patched ? { allowed: true, patch: [SCHED] } : { allowed: true });
    }
  });

  it('pods without our resources are untouched, even with default scheduler, nodeName or the label', async () => {
    expect(await admitPod(pod({ containers: [{ limits: { cpu: '1', 'nvidia.com/gpu': '1' } }] }), lookups)).toEqual({ allowed: true });
    expect(await admitPod(pod({ containers: [{}], nodeName: 'n1' }), lookups)).toEqual({ allowed: true });
    expect(await admitPod(pod({ label: 'no-such', containers: [{ requests: { cpu: '1' } }] }), lookups)).toEqual({ allowed: true });
  });

  it('a pod that takes GPUs through DRA claims of our DeviceClasses is not rewritten; one that mixes both modes is refused', async () => {
    const classes: Record<string, string[]> = { 'team-a/ours': ['gpu.bettercompute.io'], 'team-a/nvidia': ['gpu.nvidia.com'] };
    const withClaims = { ...lookups, claimDeviceClasses: async (ns: string, ref: { resourceClaimTemplateName?: string | null }) => classes[`${ns}/${ref.resourceClaimTemplateName}`] ?? [] };
    const claimed = (template: string, containers: C[]) => {
      const p = pod({ containers });
      return { ...p, spec: { ...p.spec, resourceClaims: [{ name: 'gpu', resourceClaimTemplateName: template }] } } as PodLike;
    };
    // DRA only: nothing of ours is requested, so nothing is rewritten; it is gated (below).
    expect(await admitPod(claimed('ours', [{ requests: { cpu: '1' } }]), withClaims)).toEqual({ allowed: true, patch: [GATE_ALL] });
    const mixed = await admitPod(claimed('ours', [{ limits: gpu('1') }]), withClaims);
    expect(mixed).toMatchObject({ allowed: false, code: 403, message: expect.stringMatching(/claims gpu \(gpu\.bettercompute\.io\) through DRA: .* not both/) });
    // Another driver's claim beside our device-plugin resource is not ours to judge.
    expect(await admitPod(claimed('nvidia', [{ limits: gpu('1') }]), withClaims)).toEqual({ allowed: true, patch: [SCHED] });
  });

  describe('the scheduling gate of DRA pods (ADR 0049)', () => {
    const classes: Record<string, string[]> = {
      'team-a/ours': ['gpu.bettercompute.io'],
      'team-a/mig': ['mig.gpu.bettercompute.io'],
      'team-a/slot': ['slot.gpu.bettercompute.io'],
      'team-a/rsv': ['reservation.bettercompute.io'],
      'team-a/nvidia': ['gpu.nvidia.com'],
      'team-a/claim-ours': ['gpu.bettercompute.io'],
      'team-a/claim-nvidia': ['gpu.nvidia.com'],
    };
    const asked: string[] = [];
    const ctx: AdmissionLookups = {
      ...lookups,
      claimDeviceClasses: async (ns, ref) => {
        const name = ref.resourceClaimTemplateName ?? `claim-${ref.resourceClaimName}`;
        asked.push(name);
        if (name === 'broken') throw new Error('the API server did not answer');
        return classes[`${ns}/${name}`] ?? [];
      },
    };
    const claiming = (refs: { name: string; resourceClaimTemplateName?: string; resourceClaimName?: string }[], over: { gates?: string[]; nodeName?: string; label?: string } = {}) => {
      const p = pod({ containers: [{ requests: { cpu: '1' } }], ...(over.label ? { label: over.label } : {}), ...(over.nodeName ? { nodeName: over.nodeName } : {}) });
      return { ...p, spec: { ...p.spec, resourceClaims: refs, ...(over.gates ? { schedulingGates: over.gates.map((name) => ({ name })) } : {}) } } as PodLike;
    };
    const tmpl = (t: string, name = 'gpu') => ({ name, resourceClaimTemplateName: t });

    it('each of our DeviceClasses, on demand or of a Reservation, gets the gate; the pod is otherwise untouched', async () => {
      for (const t of ['ours', 'mig', 'slot', 'rsv']) {
        const a = await admitPod(claiming([tmpl(t)], t === 'rsv' ? { label: 'train' } : {}), ctx);
        expect(a, t).toEqual({ allowed: true, patch: [GATE_ALL] });
      }
    });

    it('another driver’s pods are not gated; a pod mixing theirs and ours is', async () => {
      expect(await admitPod(claiming([tmpl('nvidia')]), ctx)).toEqual({ allowed: true });
      expect(await admitPod(claiming([tmpl('nvidia', 'a'), tmpl('ours', 'b')]), ctx)).toEqual({ allowed: true, patch: [GATE_ALL] });
      expect(await admitPod(claiming([{ name: 'x', resourceClaimName: 'nvidia' }, tmpl('ours', 'b')]), ctx)).toEqual({ allowed: true, patch: [GATE_ALL] });
    });

    it('the gate is added after the pod’s own gates, and not twice', async () => {
      expect(await admitPod(claiming([tmpl('ours')], { gates: ['example.com/quota'] }), ctx)).toEqual({
        allowed: true,
        patch: [{ op: 'add', path: '/spec/schedulingGates/-', value: { name: 'bettercompute.io/allocation' } }],
      });
      // As the transport decodes it: the pod's gates survive the review's slimming (else the patch would replace them).
      const decoded = decodeReviewJson({
        apiVersion: 'admission.k8s.io/v1',
        kind: 'AdmissionReview',
        request: { uid: 'u', kind: { group: '', version: 'v1', kind: 'Pod' }, operation: 'CREATE', namespace: 'team-a', object: claiming([tmpl('ours')], { gates: ['example.com/quota'] }) },
      });
      if (decoded.kind !== 'pod') throw new Error(decoded.kind);
      expect(await admitPod(decoded.pod, ctx)).toMatchObject({ patch: [{ op: 'add', path: '/spec/schedulingGates/-' }] });
      expect(await admitPod(claiming([tmpl('ours')], { gates: ['bettercompute.io/allocation'] }), ctx)).toEqual({ allowed: true });
    });

    it('not gated: a claim of ours named directly (never allocated: kube-scheduler says why), nodeName, a template not found or not read', async () => {
      expect(await admitPod(claiming([{ name: 'gpu', resourceClaimName: 'ours' }]), ctx)).toEqual({ allowed: true });
      expect(await admitPod(claiming([{ name: 'a', resourceClaimName: 'ours' }, tmpl('ours', 'b')]), ctx)).toEqual({ allowed: true });
      expect(await admitPod(claiming([tmpl('ours')], { nodeName: 'n1' }), ctx)).toEqual({ allowed: true });
      expect(await admitPod(claiming([tmpl('missing')]), ctx)).toEqual({ allowed: true });
      // A lookup that fails admits the pod as it is (the webhook's failurePolicy is Ignore for these: no refusal).
      expect(await admitPod(claiming([tmpl('broken')]), ctx)).toEqual({ allowed: true });
      // Without the lookup (no DRA in the controller's wiring), nothing is read and nothing gated.
      asked.length = 0;
      expect(await admitPod(claiming([tmpl('ours')]), lookups)).toEqual({ allowed: true });
      expect(asked).toEqual([]);
    });
  });

  const denials: { name: string; pod: PodLike; message: RegExp }[] = [
    {
      name: 'the labelled Reservation does not exist in the pod’s namespace',
      pod: pod({ label: 'nope', containers: [{ limits: gpu('1') }] }),
      message: /labelled bettercompute\.io\/reservation=nope, but namespace team-a has no Reservation nope/,
    },
    {
      name: 'a Reservation of another namespace, by label',
      pod: pod({ label: 'other', containers: [{ limits: gpu('1') }] }),
      message: /namespace team-a has no Reservation other/,
    },
    { name: 'not booked yet', pod: pod({ label: 'waiting', containers: [{ limits: gpu('1') }] }), message: /namespace team-a has no Reservation waiting that it may use now/ },
    { name: 'ended', pod: pod({ label: 'over', containers: [{ limits: gpu('1') }] }), message: /namespace team-a has no Reservation over that it may use now/ },
    { name: 'being deleted', pod: pod({ label: 'leaving', containers: [{ limits: gpu('1') }] }), message: /namespace team-a has no Reservation leaving that it may use now/ },
    {
      name: 'labelled, but already requesting another reservation’s resource',
      pod: pod({ label: 'train', containers: [{ limits: { [res('d')]: '1' } }] }),
      message: new RegExp(`requests ${res('d')}, which is not that Reservation's resource`),
    },
    {
      name: 'a foreign namespace’s reservation resource, named directly',
      pod: pod({ containers: [{ limits: { [res('d')]: '1' } }] }),
      message: new RegExp(`requests ${res('d')}, which is not a Reservation of namespace team-a`),
    },
    {
      name: 'a booking with this namespace’s Reservation uid under another tenant (capacity API) is not that Reservation',
      pod: pod({ containers: [{ limits: { [res('e')]: '1' } }] }),
      message: /which is not a Reservation of namespace team-a/,
    },
    { name: 'an on-demand pod’s booking', pod: pod({ containers: [{ limits: { [res('f')]: '1' } }] }), message: /not a Reservation of namespace team-a/ },
    { name: 'a booking that does not exist', pod: pod({ containers: [{ limits: { [res('g')]: '1' } }] }), message: /not a Reservation of namespace team-a/ },
    {
      name: 'an ended reservation named directly',
      pod: pod({ containers: [{ limits: { [res('b')]: '1' } }] }),
      message: /not a Reservation of namespace team-a/,
    },
    { name: 'a malformed reservation resource', pod: pod({ containers: [{ limits: { 'reservations.bettercompute.io/train': '1' } }] }), message: /names no reservation/ },
    {
      name: 'two reservations in one pod',
      pod: pod({ containers: [{ limits: { [res('a')]: '1' } }], init: [{ limits: { [res('c')]: '1' } }] }),
      message: /a pod draws from one reservation/,
    },
    {
      name: 'a reservation resource and on-demand GPUs without the label',
      pod: pod({ containers: [{ limits: { [res('a')]: '1' } }, { limits: gpu('1') }] }),
      message: /from a reservation or on demand, not both/,
    },
    {
      name: 'labelled, two classes in one container',
      pod: pod({ label: 'train', containers: [{ limits: { ...gpu('1'), 'bettercompute.io/gpu.mig': '1' } }] }),
      message: /container c0 asks for bettercompute\.io\/gpu and bettercompute\.io\/gpu\.mig in limits/,
    },
    {
      name: 'labelled, the generic and the reservation resource in one container',
      pod: pod({ label: 'train', containers: [{ limits: { ...gpu('1'), [res('a')]: '1' } }] }),
      message: /asks for both bettercompute\.io\/gpu and reservations/,
    },
  ];
  for (const t of denials) {
    it(`denies: ${t.name}`, async () => {
      const a = await admitPod(t.pod, lookups);
      expect(a.allowed).toBe(false);
      if (a.allowed) return;
      expect(a.message).toMatch(t.message);
      expect(a.code).toBe(403);
    });
  }
});

describe('podAdmissionDeps (from informer caches)', () => {
  const rsv = (ns: string, name: string, uid: string, extra: Partial<Reservation> = {}): Reservation => ({
    metadata: { namespace: ns, name, uid },
    spec: { pool: 'p', devices: [{ class: 'gpu', count: 1 }], duration: '1h' },
    ...extra,
  });
  const items = [rsv('a', 'x', 'u1'), rsv('a', 'y', 'u2', { status: { tenant: 'pinned' } }), rsv('b', 'z', 'u3', { metadata: { namespace: 'b', name: 'z', uid: 'u3', deletionTimestamp: 'now' } })];
  const namespaces: Record<string, NamespaceCR> = { a: { metadata: { name: 'a', labels: { 'bettercompute.io/tenant': 'acme' } } }, b: { metadata: { name: 'b' } } };
  const deps = podAdmissionDeps({
    reservations: { get: (k) => items.find((r) => `${r.metadata.namespace}/${r.metadata.name}` === k), list: () => items },
    namespaces: { get: (k) => namespaces[k] },
    db: {} as never,
    log: silentLogger,
    tenancyByName: true,
  });
  it('synced follows the informers', () => {
    const informer = { get: () => undefined, list: () => [], hasSynced: false };
    const d = podAdmissionDeps({ reservations: informer, namespaces: { get: () => undefined, hasSynced: true }, db: {} as never, log: silentLogger });
    expect(d.synced!()).toBe(false);
    informer.hasSynced = true;
    expect(d.synced!()).toBe(true);
  });

  it('tenancy by name off (the default): a Reservation of an unlabelled namespace is none a pod may use', async () => {
    const off = podAdmissionDeps({
      reservations: { get: (k) => items.find((r) => `${r.metadata.namespace}/${r.metadata.name}` === k), list: () => items },
      namespaces: { get: (k) => namespaces[k] },
      db: {} as never,
      log: silentLogger,
    });
    expect(await off.reservation('b', 'z')).toBeUndefined();
    expect(await off.reservationsIn('b')).toEqual([]);
    expect((await off.reservation('a', 'x'))?.tenant).toBe('acme');
  });

  it('tenant (by name on): the namespace label, else the namespace name, never status.tenant; deleting', async () => {
    expect(await deps.reservation('a', 'x')).toEqual({ namespace: 'a', name: 'x', uid: 'u1', tenant: 'acme', deleting: false });
    expect((await deps.reservation('a', 'y'))?.tenant).toBe('acme');
    expect(await deps.reservation('b', 'z')).toMatchObject({ tenant: 'b', deleting: true });
    expect(await deps.reservation('b', 'x')).toBeUndefined();
    expect((await deps.reservationsIn('a')).map((r) => r.name)).toEqual(['x', 'y']);
  });
});

describe('createPodAdmissionRouter', () => {
  let server: http.Server;
  let base: string;
  beforeAll(async () => {
    const app = express();
    app.use('/admission', createPodAdmissionRouter({ ...lookups, log: silentLogger }));
    server = http.createServer(app);
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}/admission/pods`;
  });
  afterAll(async () => new Promise<void>((r) => server.close(() => r())));

  const post = async (body: unknown) => {
    const r = await fetch(base, { method: 'POST', headers: { 'content-type': 'application/json' }, body: typeof body === 'string' ? body : JSON.stringify(body) });
    return { status: r.status, body: (await r.json()) as Record<string, any> }; // eslint-disable-line @typescript-eslint/no-explicit-any
  };
  const review = (object: unknown, over: Record<string, unknown> = {}) => ({
    apiVersion: 'admission.k8s.io/v1',
    kind: 'AdmissionReview',
    request: { uid: 'req-1', kind: { group: '', version: 'v1', kind: 'Pod' }, operation: 'CREATE', namespace: 'team-a', object, ...over },
  });

  it('answers with a base64 JSONPatch, using the request’s namespace', async () => {
    const p = pod({ label: 'train', containers: [{ limits: gpu('1') }] });
    delete p.metadata!.namespace;
    const r = await post(review(p));
    expect(r.status).toBe(200);
    expect(r.body.apiVersion).toBe('admission.k8s.io/v1');
    expect(r.body.kind).toBe('AdmissionReview');
    expect(r.body.response).toMatchObject({ uid: 'req-1', allowed: true, patchType: 'JSONPatch' });
    const ops = JSON.parse(Buffer.from(r.body.response.patch, 'base64').toString('utf8')) as JsonPatchOp[];
    expect(ops).toEqual([{ op: 'replace', path: '/spec/containers/0/resources/limits', value: { [res('a')]: '1' } }, SCHED]);
  });

  it('a refusal carries 403 and the message; untouched pods get no patch', async () => {
    const r = await post(review(pod({ label: 'nope', containers: [{ limits: gpu('1') }] })));
    expect(r.body.response).toMatchObject({ uid: 'req-1', allowed: false, status: { code: 403, reason: 'Forbidden' } });
    expect(r.body.response.status.message).toMatch(/has no Reservation nope/);
    const ok = await post(review(pod({ containers: [{ limits: { cpu: '1' } }] })));
    expect(ok.body.response).toEqual({ uid: 'req-1', allowed: true });
  });

  it('operations other than CREATE are admitted as they are', async () => {
    const r = await post(review(pod({ label: 'nope', containers: [{ limits: gpu('1') }] }), { operation: 'UPDATE' }));
    expect(r.body.response).toEqual({ uid: 'req-1', allowed: true });
  });

  it('not an AdmissionReview: 400; an AdmissionReview of no pod: refused', async () => {
    expect((await post({ apiVersion: 'admission.k8s.io/v1beta1', kind: 'AdmissionReview', request: { uid: 'x', operation: 'CREATE' } })).status).toBe(400);
    expect((await post('{not json')).status).toBe(400);
    const r = await post(review({ spec: { containers: 'nope' } }));
    expect(r.body.response).toMatchObject({ allowed: false, status: { code: 400 } });
  });

  it('a body over the cap is refused before parsing (413)', async () => {
    const big = JSON.stringify(review(pod({ containers: [{ limits: gpu('1') }] }))).replace('"req-1"', `"${'x'.repeat(MAX_REVIEW_BYTES)}"`);
    expect((await post(big)).status).toBe(413);
  });

  it('before the caches have synced: pods requesting our resources are refused with 503, others admitted', async () => {
    const app = express();
    app.use('/admission', createPodAdmissionRouter({ ...lookups, synced: () => false, log: silentLogger }));
    const s = http.createServer(app);
    await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
    try {
      const send = async (p: PodLike) =>
        (
          (await (
            await fetch(`http://127.0.0.1:${(s.address() as AddressInfo).port}/admission/pods`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(review(p)) })
          ).json()) as { response: Record<string, unknown> }
        ).response;
      expect(await send(pod({ label: 'train', containers: [{ limits: gpu('1') }] }))).toMatchObject({ allowed: false, status: { code: 503, reason: 'ServiceUnavailable' } });
      expect(await send(pod({ containers: [{ limits: { cpu: '1' } }] }))).toEqual({ uid: 'req-1', allowed: true });
    } finally {
      await new Promise<void>((r) => s.close(() => r()));
    }
  });

  it('a lookup failure refuses the pod with a 500 status, not a crash', async () => {
    const app = express();
    app.use('/admission', createPodAdmissionRouter({ ...lookups, reservation: async () => Promise.reject(new Error('db down')), log: silentLogger }));
    const s = http.createServer(app);
    await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
    try {
      const r = await fetch(`http://127.0.0.1:${(s.address() as AddressInfo).port}/admission/pods`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(review(pod({ label: 'train', containers: [{ limits: gpu('1') }] }))),
      });
      const body = (await r.json()) as { response: { allowed: boolean; status: { code: number; message: string } } };
      expect(body.response.allowed).toBe(false);
      expect(body.response.status.code).toBe(500);
      expect(body.response.status.message).not.toContain('db down');
    } finally {
      await new Promise<void>((r) => s.close(() => r()));
    }
  });
});

describe('a forged AdmissionReview (issue 35: strangers learn nothing, ADR 0034)', () => {
  // A pod of team-a posts reviews naming namespace team-b; the refusals must not tell apart a Reservation that does
  // not exist from one that exists but is not booked, is being deleted or has ended, nor carry a ledger id.
  const more: ReservationRef[] = [
    { namespace: 'team-b', name: 'waiting', uid: 'u-b-waiting', tenant: 'bcorp', deleting: false },
    { namespace: 'team-b', name: 'over', uid: 'u-b-over', tenant: 'bcorp', deleting: false },
    { namespace: 'team-b', name: 'leaving', uid: 'u-b-leaving', tenant: 'bcorp', deleting: true },
  ];
  const moreBookings: Booking[] = [
    { id: id('m'), tenantId: 'bcorp', idempotencyKey: 'u-b-over', state: 'released', ended: true, start: 0, end: 3_600_000 },
    { id: id('n'), tenantId: 'bcorp', idempotencyKey: 'u-b-leaving', state: 'confirmed', ended: false, start: 0, end: 3_600_000 },
  ];
  const all = [...RESERVATIONS, ...more];
  const allBookings = [...BOOKINGS, ...moreBookings];
  const ctx: AdmissionLookups = {
    reservation: async (ns, name) => all.find((r) => r.namespace === ns && r.name === name),
    reservationsIn: async (ns) => all.filter((r) => r.namespace === ns),
    bookings: {
      byReservationUid: async (tenant, uid) => allBookings.find((b) => b.tenantId === tenant && b.idempotencyKey === uid),
      byId: async (i) => allBookings.find((b) => b.id === i),
    },
  };
  const answer = async (p: PodLike, name: string) => {
    const a = await admitPod(p, ctx);
    expect(a.allowed).toBe(false);
    const message = (a as { message: string }).message.replaceAll(name, '<name>');
    for (const b of allBookings) expect(message).not.toContain(b.id.slice(4));
    return message;
  };

  it('by label: none, not booked, being deleted and ended get one answer', async () => {
    const answers = await Promise.all(['nope', 'waiting', 'over', 'leaving'].map((n) => answer(pod({ ns: 'team-b', label: n, containers: [{ limits: gpu('1') }] }), n)));
    expect(new Set(answers).size).toBe(1);
  });

  it('by resource: none, another tenant’s, ended and being deleted get one answer', async () => {
    const answers = await Promise.all(['g', 'a', 'm', 'n'].map((c) => answer(pod({ ns: 'team-b', containers: [{ limits: { [res(c)]: '1' } }] }), res(c))));
    expect(new Set(answers).size).toBe(1);
  });

  it('labelled and naming a resource: the refusal does not name the Reservation’s own resource', async () => {
    const a = await admitPod(pod({ ns: 'team-b', label: 'other', containers: [{ limits: { [res('g')]: '1' } }] }), ctx);
    expect(a.allowed).toBe(false);
    expect((a as { message: string }).message).not.toContain(res('d'));
  });

  it('with callerVerified, an unverified caller is refused before its body is read, and no lookup runs', async () => {
    let looked = 0;
    const app = express();
    const counting: AdmissionLookups = { ...lookups, reservation: async (ns, n) => (looked++, lookups.reservation(ns, n)) };
    app.use('/admission', createPodAdmissionRouter({ ...counting, log: silentLogger, callerVerified: (req) => req.headers['x-test-verified'] === 'yes' }));
    const s = http.createServer(app);
    await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
    try {
      const url = `http://127.0.0.1:${(s.address() as AddressInfo).port}/admission/pods`;
      const body = JSON.stringify({
        apiVersion: 'admission.k8s.io/v1',
        kind: 'AdmissionReview',
        request: { uid: 'r', operation: 'CREATE', namespace: 'team-b', object: pod({ ns: 'team-b', label: 'other', containers: [{ limits: gpu('1') }] }) },
      });
      const forged = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
      expect(forged.status).toBe(403);
      expect(await forged.text()).not.toContain('rsv');
      expect(looked).toBe(0);
      const real = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', 'x-test-verified': 'yes' }, body });
      expect(((await real.json()) as { response: { allowed: boolean } }).response.allowed).toBe(true);
      expect(looked).toBe(1);
    } finally {
      await new Promise<void>((r) => s.close(() => r()));
    }
  });
});
