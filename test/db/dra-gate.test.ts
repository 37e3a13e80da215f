// The scheduling gate of DRA pods (ADR 0049) on the claim allocator's side: ClaimAllocator on a real ledger, the
// Kubernetes API faked. Admission gates a pod that claims our DeviceClasses through templates; the allocator lifts the
// gate only after it wrote the allocation of every claim of ours the pod uses, keeps it while a Reservation's window
// has not started (the pod told why), and tries again when lifting failed.
import { beforeAll, describe, expect, it } from 'vitest';
import { ledgerBookings } from '../../src/admission/bookings.ts';
import { ClaimAllocator } from '../../src/controller/dra/allocator.ts';
import { POD_CLAIM_NAME_ANNOTATION } from '../../src/core/dra-allocate.ts';
import { advanceClock } from '../../src/db/clock.ts';
import { Ledger } from '../../src/db/ledger.ts';
import type { ResourceClaimObject } from '../../src/kube/resource-claims.ts';
import type { NamespaceCR, Reservation } from '../../src/kube/types.ts';
import { silentLogger } from '../../src/log.ts';
import { makeNode, makePool, reservation } from '../support/builders.ts';
import { useTestDatabase } from '../support/db.ts';
import { ALLOCATION_GATE, CLAIM_FINALIZER } from '../../src/core/names.ts';

const ctx = useTestDatabase();
const NS = 'acme-ns';
let draPool: string;
let seq = 0;

interface FakePod {
  metadata: { name: string; namespace: string; uid: string; labels: Record<string, string> };
  spec: { schedulingGates?: { name: string }[]; resourceClaims: { name: string; resourceClaimTemplateName?: string; resourceClaimName?: string }[] };
  status: { phase: string };
}

/** The API server as the allocator sees it: its claims (the informer's view), pods, Reservations; every write noted. */
class FakeCluster {
  readonly claims = new Map<string, ResourceClaimObject>();
  readonly pods = new Map<string, FakePod>();
  readonly reservations = new Map<string, Reservation>();
  /** `status <claim>`, `gate <pod>`, `event <reason>` in the order they were made. */
  readonly writes: string[] = [];
  failGateLifts = 0;
  podReads = 0;
  /** fenced() transactions opened, and the ledger's claimHolding reads. */
  fences = 0;
  holdingReads = 0;
  /** Each claim version a finalizer write replaced or made, in order (what a late watch event can still bring). */
  readonly versions: ResourceClaimObject[] = [];
  rv = 1;

  pod(o: { gated?: boolean; templates?: string[]; label?: string; otherGates?: string[] } = {}): FakePod {
    seq++;
    const gates = [...(o.otherGates ?? []), ...(o.gated === false ? [] : [ALLOCATION_GATE])];
    const p: FakePod = {
      metadata: { name: `pod-${seq}`, namespace: NS, uid: `pod-uid-${seq}`, labels: o.label ? { 'bettercompute.io/reservation': o.label } : {} },
      spec: { ...(gates.length ? { schedulingGates: gates.map((name) => ({ name })) } : {}), resourceClaims: (o.templates ?? ['gpu']).map((t) => ({ name: t, resourceClaimTemplateName: `tmpl-${t}` })) },
      status: { phase: 'Pending' },
    };
    this.pods.set(p.metadata.name, p);
    return p;
  }

  /** The claim kube-controller-manager makes for the pod's claim `podClaim` from its template, of `deviceClassName`. */
  claimFor(pod: FakePod, podClaim: string, deviceClassName: string): string {
    const name = `${pod.metadata.name}-${podClaim}`;
    this.claims.set(`${NS}/${name}`, {
      apiVersion: 'resource.k8s.io/v1',
      kind: 'ResourceClaim',
      metadata: {
        name,
        namespace: NS,
        uid: `claim-uid-${name}`,
        resourceVersion: String(this.rv++),
        annotations: { [POD_CLAIM_NAME_ANNOTATION]: podClaim },
        ownerReferences: [{ apiVersion: 'v1', kind: 'Pod', name: pod.metadata.name, uid: pod.metadata.uid, controller: true, blockOwnerDeletion: true }],
      },
      spec: { devices: { requests: [{ name: 'gpu', exactly: { deviceClassName, count: 1 } }] } },
    } as ResourceClaimObject);
    return `${NS}/${name}`;
  }

  gates = (pod: FakePod) => (pod.spec.schedulingGates ?? []).map((g) => g.name);

  allocator(ledger: Ledger) {
    const ns: NamespaceCR = { metadata: { name: NS, labels: { 'bettercompute.io/tenant': 'acme' } } } as NamespaceCR;
    return new ClaimAllocator({
      claims: { get: (k) => this.claims.get(k) },
      claimsOwnedBy: (namespace, podUid) =>
        [...this.claims.values()].filter((c) => c.metadata.namespace === namespace && (c.metadata as { ownerReferences?: { uid: string }[] }).ownerReferences?.some((r) => r.uid === podUid)),
      reservations: { get: (k) => this.reservations.get(k) },
      namespaces: { get: (n) => (n === NS ? ns : undefined) },
      kube: {
        getPod: async (_ns, name) => {
          this.podReads++;
          return structuredClone(this.pods.get(name));
        },
        replaceStatus: async (c) => {
          this.writes.push(`status ${c.metadata.name}`);
          const stored = { ...c, metadata: { ...c.metadata, resourceVersion: String(this.rv++) } };
          this.claims.set(`${c.metadata.namespace}/${c.metadata.name}`, stored);
          return stored;
        },
        setFinalizers: async (namespace, name, finalizers) => {
          const c = this.claims.get(`${namespace}/${name}`)!;
          this.versions.push(structuredClone(c));
          c.metadata.finalizers = finalizers;
          c.metadata.resourceVersion = String(this.rv++);
          this.versions.push(structuredClone(c));
          return structuredClone(c);
        },
        removeSchedulingGate: async (_ns, name, uid, index, gate) => {
          if (this.failGateLifts > 0) {
            this.failGateLifts--;
            throw Object.assign(new Error('the API server did not answer'), { code: 500 });
          }
          const p = this.pods.get(name)!;
          expect(p.metadata.uid).toBe(uid);
          expect(p.spec.schedulingGates?.[index]?.name).toBe(gate);
          p.spec.schedulingGates!.splice(index, 1);
          this.writes.push(`gate ${name}`);
        },
        event: async (_obj, _kind, e) => void this.writes.push(`event ${e.reason}`),
      },
      ledger: {
        bookClaim: (...a) => ledger.bookClaim(...a),
        assignClaim: (...a) => ledger.assignClaim(...a),
        releaseClaim: (...a) => ledger.releaseClaim(...a),
        claimHolding: (...a) => {
          this.holdingReads++;
          return ledger.claimHolding(...a);
        },
      },
      bookings: ledgerBookings(ctx.db),
      fenced: (fn) => {
        this.fences++;
        return fn();
      },
      nowMs: () => ctx.clock.now(),
      tenancyByName: false,
      log: silentLogger,
    });
  }
}

describe('the scheduling gate: lifted by the allocator only after allocation (ADR 0049)', () => {
  let ledger: Ledger;
  beforeAll(async () => {
    ledger = new Ledger(ctx.db);
    draPool = await makePool('dra-gate').handoff('dra').create(ctx.db);
    await makeNode('gate-a').gpus(8).domain('a').create(ctx.db, draPool);
  });

  it('an on-demand pod: the allocation is written first, then the gate lifted; its other gates stay', async () => {
    const k = new FakeCluster();
    const pod = k.pod({ otherGates: ['example.com/quota'] });
    const key = k.claimFor(pod, 'gpu', 'gpu.bettercompute.io');
    await k.allocator(ledger).reconcile(key);
    expect(k.writes).toEqual([`status ${pod.metadata.name}-gpu`, `gate ${pod.metadata.name}`]);
    expect(k.gates(pod)).toEqual(['example.com/quota']);
    expect(k.claims.get(key)!.metadata.finalizers).toEqual([CLAIM_FINALIZER]);
  });

  it('a pod with two claims of ours: the gate stays while one is not made, or not allocated', async () => {
    // (Today a pod holds one claim of ours per mode, docs/dra.md; the gate waits for every claim of ours all the same.)
    const k = new FakeCluster();
    const pod = k.pod({ templates: ['a', 'b'] });
    const alloc = k.allocator(ledger);
    const a = k.claimFor(pod, 'a', 'gpu.bettercompute.io');
    await alloc.reconcile(a);
    // b's claim is not made yet: its DeviceClass is not known, so the gate stays.
    expect(k.writes).toEqual([`status ${pod.metadata.name}-a`]);
    expect(k.gates(pod)).toEqual([ALLOCATION_GATE]);
    // b's claim, made, is one the allocator cannot serve (a CEL selector): it waits, the pod told why, still gated.
    const b = k.claimFor(pod, 'b', 'gpu.bettercompute.io');
    const bc = k.claims.get(b)!;
    (bc.spec as { devices: { requests: { exactly: { selectors?: unknown[] } }[] } }).devices.requests[0]!.exactly.selectors = [{ cel: { expression: 'true' } }];
    await alloc.reconcile(b);
    await alloc.reconcile(a); // a's allocated event
    expect(k.writes).toEqual([`status ${pod.metadata.name}-a`, 'event UnsupportedClaim']);
    expect(k.gates(pod)).toEqual([ALLOCATION_GATE]);
    // Once b is allocated by us too, a's next event lets the pod through.
    bc.status = { allocation: { devices: { results: [{ request: 'gpu', driver: 'gpu.bettercompute.io', pool: 'gate-a', device: 'x' }] } } };
    await alloc.reconcile(a);
    expect(k.writes).toEqual([`status ${pod.metadata.name}-a`, 'event UnsupportedClaim', `gate ${pod.metadata.name}`]);
    expect(k.gates(pod)).toEqual([]);
  });

  it('a claim of another driver beside ours does not hold the gate (kube-scheduler allocates it once the pod is through)', async () => {
    const k = new FakeCluster();
    const pod = k.pod({ templates: ['ours', 'theirs'] });
    k.claimFor(pod, 'theirs', 'gpu.nvidia.com');
    const ours = k.claimFor(pod, 'ours', 'gpu.bettercompute.io');
    const alloc = k.allocator(ledger);
    await alloc.reconcile(`${NS}/${pod.metadata.name}-theirs`);
    expect(k.writes).toEqual([]);
    await alloc.reconcile(ours);
    expect(k.writes).toEqual([`status ${pod.metadata.name}-ours`, `gate ${pod.metadata.name}`]);
  });

  it('a pod that is not gated (no webhook, or another driver’s pod) is never patched', async () => {
    const k = new FakeCluster();
    const pod = k.pod({ gated: false });
    const key = k.claimFor(pod, 'gpu', 'gpu.bettercompute.io');
    const alloc = k.allocator(ledger);
    await alloc.reconcile(key);
    await alloc.reconcile(key); // its allocated event
    expect(k.writes).toEqual([`status ${pod.metadata.name}-gpu`]);
    // Another driver's claim: neither allocated nor let through by us.
    const theirs = k.pod();
    await alloc.reconcile(k.claimFor(theirs, 'gpu', 'gpu.nvidia.com'));
    expect(k.writes).toEqual([`status ${pod.metadata.name}-gpu`]);
    expect(k.gates(theirs)).toEqual([ALLOCATION_GATE]);
  });

  it('a lift that fails is retried on the claim’s next reconcile, the allocation not written twice', async () => {
    const k = new FakeCluster();
    const pod = k.pod();
    const key = k.claimFor(pod, 'gpu', 'gpu.bettercompute.io');
    const alloc = k.allocator(ledger);
    k.failGateLifts = 1;
    expect(await alloc.reconcile(key)).toEqual({ backoff: true });
    expect(k.gates(pod)).toEqual([ALLOCATION_GATE]);
    await alloc.reconcile(key);
    expect(k.writes).toEqual([`status ${pod.metadata.name}-gpu`, `gate ${pod.metadata.name}`]);
    expect(k.gates(pod)).toEqual([]);
  });

  it('a claim allocated by an earlier leader whose pod is still gated (a crash between the writes): the next leader lifts it', async () => {
    const k = new FakeCluster();
    const pod = k.pod();
    const key = k.claimFor(pod, 'gpu', 'gpu.bettercompute.io');
    k.failGateLifts = 1;
    await k.allocator(ledger).reconcile(key); // the first leader: allocated, the lift lost
    expect(k.gates(pod)).toEqual([ALLOCATION_GATE]);
    const next = k.allocator(ledger);
    await next.reconcile(key);
    const reads = k.podReads;
    await next.reconcile(key); // a later event (reservedFor): the pod is not read again, nothing written
    expect(k.podReads).toBe(reads);
    expect(k.writes).toEqual([`status ${pod.metadata.name}-gpu`, `gate ${pod.metadata.name}`]);
  });

  it('a Reservation’s pod before its window: gated, told why, no allocation; at the start allocated, then let through', async () => {
    const k = new FakeCluster();
    const uid = `rsv-cr-uid-${seq}`;
    const start = ctx.clock.now() + 3600_000;
    const booked = await ledger.reserve(reservation(draPool, { start, duration: 600, idempotencyKey: uid }), ctx.clock.now());
    if (!booked.ok) throw new Error(booked.message);
    k.reservations.set(`${NS}/train`, { apiVersion: 'bettercompute.io/v1alpha1', kind: 'Reservation', metadata: { name: 'train', namespace: NS, uid }, spec: {} } as unknown as Reservation);
    const pod = k.pod({ label: 'train' });
    const key = k.claimFor(pod, 'gpu', 'reservation.bettercompute.io');
    const alloc = k.allocator(ledger);
    const waited = await alloc.reconcile(key);
    expect(waited).toMatchObject({ requeueAfterMs: expect.any(Number) });
    expect(k.writes).toEqual(['event WaitingForReservationWindow']);
    expect(k.gates(pod)).toEqual([ALLOCATION_GATE]);
    await advanceClock(ctx.db, 3600_000 + 1000);
    await ctx.clock.sync();
    await alloc.reconcile(key);
    expect(k.writes).toEqual(['event WaitingForReservationWindow', `status ${pod.metadata.name}-gpu`, `gate ${pod.metadata.name}`]);
    expect(k.gates(pod)).toEqual([]);
  });
});

describe('the allocator’s own writes: their events cost no work', () => {
  let ledger: Ledger;
  beforeAll(async () => {
    ledger = new Ledger(ctx.db);
    draPool = await makePool('dra-own-writes').handoff('dra').create(ctx.db);
    await makeNode('own-a').gpus(8).domain('a').create(ctx.db, draPool);
  });

  it('the allocation and the gate’s lifting are one fenced transaction, after the finalizer’s', async () => {
    const k = new FakeCluster();
    const pod = k.pod();
    await k.allocator(ledger).reconcile(k.claimFor(pod, 'gpu', 'gpu.bettercompute.io'));
    expect(k.writes).toEqual([`status ${pod.metadata.name}-gpu`, `gate ${pod.metadata.name}`]);
    expect(k.fences).toBe(2);
  });

  it('a late event of a version its writes replaced is skipped: no pod read, no second allocation', async () => {
    const k = new FakeCluster();
    const pod = k.pod();
    const key = k.claimFor(pod, 'gpu', 'gpu.bettercompute.io');
    const alloc = k.allocator(ledger);
    await alloc.reconcile(key);
    const allocated = k.claims.get(key)!;
    const reads = k.podReads;
    // The informer shows the claim as made, then with the finalizer only, each after the allocation was written.
    for (const stale of k.versions) {
      k.claims.set(key, structuredClone(stale));
      expect(await alloc.reconcile(key)).toBeUndefined();
    }
    expect(k.versions.map((v) => v.metadata.finalizers ?? [])).toEqual([[], [CLAIM_FINALIZER]]);
    expect(k.podReads).toBe(reads);
    expect(k.writes).toEqual([`status ${pod.metadata.name}-gpu`, `gate ${pod.metadata.name}`]);
    k.claims.set(key, allocated);
  });

  it('the allocation’s own event and kube-scheduler’s reservedFor read nothing; a claim nobody reserves any more reads the ledger', async () => {
    const k = new FakeCluster();
    const uid = `rsv-cr-uid-own-${seq}`;
    const booked = await ledger.reserve(reservation(draPool, { start: ctx.clock.now(), duration: 600, idempotencyKey: uid }), ctx.clock.now());
    if (!booked.ok) throw new Error(booked.message);
    k.reservations.set(`${NS}/train`, { apiVersion: 'bettercompute.io/v1alpha1', kind: 'Reservation', metadata: { name: 'train', namespace: NS, uid }, spec: {} } as unknown as Reservation);
    const pod = k.pod({ label: 'train' });
    const key = k.claimFor(pod, 'gpu', 'reservation.bettercompute.io');
    const alloc = k.allocator(ledger);
    const end = booked.reservation.end;
    // The allocation asks to be looked at again after the window's end, as its later events do.
    const untilEnd = { requeueAfterMs: expect.closeTo(end - ctx.clock.now() + 1000, -3) };
    expect(await alloc.reconcile(key)).toEqual(untilEnd);
    const reads = k.holdingReads;
    expect(await alloc.reconcile(key)).toEqual(untilEnd); // the allocation's own event
    const claim = k.claims.get(key)!;
    claim.status = { ...claim.status, reservedFor: [{ resource: 'pods', name: pod.metadata.name, uid: pod.metadata.uid }] };
    claim.metadata.resourceVersion = String(k.rv++);
    expect(await alloc.reconcile(key)).toEqual(untilEnd); // kube-scheduler's reservedFor
    expect(k.holdingReads).toBe(reads);
    // The pod gone from reservedFor: whether the booking still holds is the ledger's to say.
    claim.status = { ...claim.status, reservedFor: [] };
    claim.metadata.resourceVersion = String(k.rv++);
    expect(await alloc.reconcile(key)).toEqual(untilEnd);
    expect(k.holdingReads).toBe(reads + 1);
    expect(k.writes).toEqual([`status ${pod.metadata.name}-gpu`, `gate ${pod.metadata.name}`]);
  });
});
