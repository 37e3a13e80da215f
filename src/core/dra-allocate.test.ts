import { describe, expect, it } from 'vitest';
import { allocationFor, classifyClaim, decideAllocated, decideClaim, gateVerdict, ResourceClaimSchema, type PodView, type ReservationWindow, type ResourceClaim } from './dra-allocate.ts';
import { draDeviceName } from './dra-names.ts';
import { ALLOCATION_GATE, DRA_DRIVER } from './names.ts';

const NOW = Date.UTC(2026, 5, 1, 12);

function claimOf(requests: unknown[], over: Record<string, unknown> = {}): ResourceClaim {
  return ResourceClaimSchema.parse({
    metadata: {
      name: 'p-gpu-abcde',
      namespace: 'team',
      uid: 'claim-1',
      ownerReferences: [{ apiVersion: 'v1', kind: 'Pod', name: 'p', uid: 'pod-1', controller: true }],
      annotations: { 'resource.kubernetes.io/pod-claim-name': 'gpu' },
    },
    spec: { devices: { requests } },
    ...over,
  });
}
const exactly = (name: string, deviceClassName: string, count?: number) => ({ name, exactly: { deviceClassName, ...(count ? { count } : {}) } });

const pod = (over: Partial<PodView> = {}): PodView => ({ name: 'p', uid: 'pod-1', labels: {}, nodeSelector: {}, activeDeadlineSeconds: null, done: false, ...over });
const window = (over: Partial<ReservationWindow> = {}): ReservationWindow => ({
  name: 'train',
  bookingId: 'rsv_1',
  start: NOW - 60_000,
  end: NOW + 3600_000,
  ended: false,
  deleting: false,
  ...over,
});

describe('classifyClaim', () => {
  it('tells ours from others, on demand from a Reservation, and what it cannot serve', () => {
    expect(classifyClaim(claimOf([exactly('gpu', 'gpu.nvidia.com')]))).toEqual({ kind: 'foreign' });
    expect(classifyClaim(claimOf([exactly('a', 'gpu.bettercompute.io', 2), exactly('b', 'mig.gpu.bettercompute.io')]))).toEqual({
      kind: 'onDemand',
      requests: [
        { name: 'a', count: 2, class: 'gpu' },
        { name: 'b', count: 1, class: 'gpu.mig' },
      ],
    });
    expect(classifyClaim(claimOf([exactly('r', 'reservation.bettercompute.io', 4)]))).toEqual({ kind: 'reservation', requests: [{ name: 'r', count: 4, class: 'any' }] });
    for (const bad of [
      [exactly('a', 'gpu.bettercompute.io'), exactly('b', 'gpu.nvidia.com')],
      [exactly('a', 'gpu.bettercompute.io'), exactly('b', 'reservation.bettercompute.io')],
      [{ name: 'a', exactly: { deviceClassName: 'gpu.bettercompute.io', allocationMode: 'All' } }],
      [{ name: 'a', firstAvailable: [{ name: 'x', deviceClassName: 'gpu.bettercompute.io' }] }],
      [{ name: 'a', exactly: { deviceClassName: 'gpu.bettercompute.io', selectors: [{ cel: { expression: 'true' } }] } }],
    ]) {
      expect(classifyClaim(claimOf(bad)).kind).toBe('unsupported');
    }
  });
});

describe('decideClaim', () => {
  it('an on-demand claim is booked with its pod’s node selector and deadline', () => {
    const claim = claimOf([exactly('gpu', 'gpu.bettercompute.io', 2)]);
    expect(decideClaim({ claim, pod: pod({ nodeSelector: { zone: 'a' }, activeDeadlineSeconds: 600 }), reservation: undefined, now: NOW })).toEqual({
      do: 'book',
      requests: [{ name: 'gpu', count: 2, class: 'gpu' }],
      nodeSelector: { zone: 'a' },
      durationSeconds: 600,
    });
  });

  it('leaves alone what is not ours, already allocated, being deleted, or of a pod that ended', () => {
    const ours = claimOf([exactly('gpu', 'gpu.bettercompute.io')]);
    expect(decideClaim({ claim: claimOf([exactly('gpu', 'gpu.nvidia.com')]), pod: pod(), reservation: undefined, now: NOW }).do).toBe('ignore');
    const allocated = ResourceClaimSchema.parse({ ...ours, status: { allocation: { devices: { results: [] } } } });
    expect(decideClaim({ claim: allocated, pod: pod(), reservation: undefined, now: NOW })).toEqual({ do: 'ignore', why: 'allocated' });
    const deleting = ResourceClaimSchema.parse({ ...ours, metadata: { ...ours.metadata, deletionTimestamp: '2026-06-01T00:00:00Z' } });
    expect(decideClaim({ claim: deleting, pod: pod(), reservation: undefined, now: NOW }).do).toBe('ignore');
    expect(decideClaim({ claim: ours, pod: pod({ done: true }), reservation: undefined, now: NOW }).do).toBe('ignore');
  });

  it('waits for its pod, and refuses a claim no pod owns or a pod of another uid', () => {
    const ours = claimOf([exactly('gpu', 'gpu.bettercompute.io')]);
    expect(decideClaim({ claim: ours, pod: undefined, reservation: undefined, now: NOW })).toMatchObject({ do: 'wait', reason: 'PodNotFound' });
    expect(decideClaim({ claim: ours, pod: pod({ uid: 'someone-else' }), reservation: undefined, now: NOW })).toMatchObject({ do: 'wait', reason: 'PodNotFound' });
    const orphan = ResourceClaimSchema.parse({ ...ours, metadata: { ...ours.metadata, ownerReferences: [] } });
    expect(decideClaim({ claim: orphan, pod: pod(), reservation: undefined, now: NOW })).toMatchObject({ do: 'wait', reason: 'UnsupportedClaim' });
  });

  it("a Reservation's claim waits for the window's start (requeued then), is assigned inside it, and not after", () => {
    const claim = claimOf([exactly('gpus', 'reservation.bettercompute.io', 2)]);
    const labelled = pod({ labels: { 'bettercompute.io/reservation': 'train' } });
    const start = NOW + 90_000;
    expect(decideClaim({ claim, pod: labelled, reservation: window({ start }), now: NOW })).toEqual({
      do: 'wait',
      reason: 'WaitingForReservationWindow',
      message: expect.stringContaining(new Date(start).toISOString()),
      retryAt: start,
    });
    expect(decideClaim({ claim, pod: labelled, reservation: window({ start }), now: start })).toEqual({ do: 'assign', reservationId: 'rsv_1', requests: [{ name: 'gpus', count: 2, class: 'any' }] });
    expect(decideClaim({ claim, pod: labelled, reservation: window({ end: NOW }), now: NOW })).toMatchObject({ do: 'wait', reason: 'ReservationEnded' });
    expect(decideClaim({ claim, pod: labelled, reservation: window({ ended: true }), now: NOW })).toMatchObject({ do: 'wait', reason: 'ReservationEnded' });
    expect(decideClaim({ claim, pod: labelled, reservation: undefined, now: NOW })).toMatchObject({ do: 'wait', reason: 'ReservationNotFound' });
    expect(decideClaim({ claim, pod: labelled, reservation: window({ bookingId: undefined }), now: NOW })).toMatchObject({ do: 'wait', reason: 'ReservationNotBooked' });
    expect(decideClaim({ claim, pod: pod(), reservation: window(), now: NOW })).toMatchObject({ do: 'wait', reason: 'NoReservation' });
    // A pod of a Reservation does not draw on demand.
    const onDemand = claimOf([exactly('gpu', 'gpu.bettercompute.io')]);
    expect(decideClaim({ claim: onDemand, pod: labelled, reservation: window(), now: NOW })).toMatchObject({ do: 'wait', reason: 'UnsupportedClaim' });
  });
});

describe('allocationFor', () => {
  it("names our driver, the node as pool, the atoms' device names, and pins the node", () => {
    const claim = claimOf([exactly('gpu', 'gpu.bettercompute.io', 2)]);
    const atoms = ['GPU-aaaa', 'GPU-bbbb/gi1/ci0'];
    const r = allocationFor(claim, { nodeId: 'node-1', devices: atoms.map((atomId) => ({ request: 'gpu', atomId })) }, Date.parse('2026-12-05T02:12:18.734Z'));
    expect(r).toEqual({
      ok: true,
      allocation: {
        devices: { results: atoms.map((a) => ({ request: 'gpu', driver: DRA_DRIVER, pool: 'node-1', device: draDeviceName(a) })) },
        nodeSelector: { nodeSelectorTerms: [{ matchFields: [{ key: 'metadata.name', operator: 'In', values: ['node-1'] }] }] },
        // Set by us: kube-scheduler 1.36+ would otherwise set it while reserving, a change of an immutable allocation.
        allocationTimestamp: '2026-12-05T02:12:18Z',
      },
    });
    expect(allocationFor(claim, { nodeId: 'n', devices: [{ request: 'other', atomId: 'x' }] }, 0).ok).toBe(false);
  });
});

describe('decideAllocated', () => {
  const allocated = (over: Record<string, unknown> = {}) =>
    ResourceClaimSchema.parse({ ...claimOf([exactly('gpu', 'reservation.bettercompute.io')]), status: { allocation: { devices: { results: [] } }, ...over } });
  it('keeps a reserved claim, clears one no pod reserves whose booking is over, releases a deleted one', () => {
    expect(decideAllocated({ claim: allocated({ reservedFor: [{ resource: 'pods', name: 'p', uid: 'pod-1' }] }), holds: false })).toBe('keep');
    expect(decideAllocated({ claim: allocated(), holds: false })).toBe('clear');
    expect(decideAllocated({ claim: allocated(), holds: true })).toBe('keep');
    const c = allocated();
    expect(decideAllocated({ claim: ResourceClaimSchema.parse({ ...c, metadata: { ...c.metadata, deletionTimestamp: 'x' } }), holds: true })).toBe('release-and-let-go');
  });
});

describe('gateVerdict (ADR 0049: the gate lifted only when every claim of ours is allocated)', () => {
  const ours = (podClaim: string, uid: string, allocated: boolean, cls = 'gpu.bettercompute.io') =>
    ResourceClaimSchema.parse({
      metadata: {
        name: `p-${podClaim}`,
        namespace: 'team',
        uid,
        ownerReferences: [{ apiVersion: 'v1', kind: 'Pod', name: 'p', uid: 'pod-1', controller: true }],
        annotations: { 'resource.kubernetes.io/pod-claim-name': podClaim },
      },
      spec: { devices: { requests: [exactly('gpu', cls)] } },
      ...(allocated ? { status: { allocation: { devices: { results: [{ request: 'gpu', driver: cls.endsWith('bettercompute.io') ? DRA_DRIVER : 'gpu.nvidia.com', pool: 'n', device: 'd' }] } } } } : {}),
    });
  const gated = (refs: { name: string; resourceClaimTemplateName?: string; resourceClaimName?: string }[], gates = [ALLOCATION_GATE]) => ({ uid: 'pod-1', schedulingGates: gates, resourceClaims: refs });
  const t = (name: string) => ({ name, resourceClaimTemplateName: `t-${name}` });

  it('lifts once every claim of ours is allocated; not before; not when the pod is not gated', () => {
    expect(gateVerdict(gated([t('a')]), [ours('a', 'c1', true)]).lift).toBe(true);
    expect(gateVerdict(gated([t('a')]), [ours('a', 'c1', false)])).toEqual({ lift: false, why: 'claim p-a is not allocated yet' });
    expect(gateVerdict(gated([t('a')]), [ours('a', 'c1', false)], new Set(['c1'])).lift).toBe(true);
    expect(gateVerdict(gated([t('a'), t('b')]), [ours('a', 'c1', true)])).toEqual({ lift: false, why: 'the claim of b is not made yet' });
    expect(gateVerdict(gated([t('a'), t('b')]), [ours('a', 'c1', true), ours('b', 'c2', false, 'reservation.bettercompute.io')]).lift).toBe(false);
    expect(gateVerdict(gated([t('a'), t('b')]), [ours('a', 'c1', true), ours('b', 'c2', true, 'mig.gpu.bettercompute.io')]).lift).toBe(true);
    expect(gateVerdict(gated([t('a')], ['other.example.com/x']), [ours('a', 'c1', true)])).toEqual({ lift: false, why: 'not gated' });
  });

  it('claims of other drivers do not hold it; a claim owned by another pod is not the pod’s', () => {
    expect(gateVerdict(gated([t('a'), t('n')]), [ours('a', 'c1', true), ours('n', 'c2', false, 'gpu.nvidia.com')]).lift).toBe(true);
    const stranger = ResourceClaimSchema.parse({ ...ours('a', 'c9', true), metadata: { ...ours('a', 'c9', true).metadata, ownerReferences: [{ apiVersion: 'v1', kind: 'Pod', name: 'q', uid: 'pod-2', controller: true }] } });
    expect(gateVerdict(gated([t('a')]), [stranger]).lift).toBe(false);
  });
});
