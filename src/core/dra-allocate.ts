// The claim allocator's decisions (ADR 0043: the ledger allocates, the scheduler follows). Pure: the controller reads
// the ResourceClaim, its Pod, the pod's Reservation and the ledger, and these say what to do: leave the claim alone,
// wait (and why, until when), book or assign in the ledger, or write this status.allocation.
import { z } from 'zod';
import { draDeviceName } from './dra-names.ts';
import { ALLOCATION_GATE, DRA_DRIVER, RESERVATION_LABEL } from './names.ts';

/** The product's DeviceClasses and the ledger's class each stands for ('any': the atoms of the pod's Reservation). */
export const DEVICE_CLASSES = {
  'gpu.bettercompute.io': 'gpu',
  'mig.gpu.bettercompute.io': 'gpu.mig',
  'slot.gpu.bettercompute.io': 'gpu.slot',
  'reservation.bettercompute.io': 'any',
} as const;
export type OurDeviceClass = keyof typeof DEVICE_CLASSES;
export const RESERVATION_DEVICE_CLASS: OurDeviceClass = 'reservation.bettercompute.io';
export const isOurDeviceClass = (name: string | undefined): name is OurDeviceClass => name !== undefined && Object.hasOwn(DEVICE_CLASSES, name);

/** The annotation the resourceclaim controller puts on a claim it made from a pod's ResourceClaimTemplate. */
export const POD_CLAIM_NAME_ANNOTATION = 'resource.kubernetes.io/pod-claim-name';

// ---- what is read of a ResourceClaim (resource.k8s.io/v1) and of its Pod

const OwnerRef = z.looseObject({ apiVersion: z.string(), kind: z.string(), name: z.string(), uid: z.string(), controller: z.boolean().optional() });
const Request = z.looseObject({
  name: z.string().min(1),
  exactly: z
    .looseObject({ deviceClassName: z.string(), allocationMode: z.string().optional(), count: z.number().int().optional(), selectors: z.array(z.unknown()).optional() })
    .optional(),
  firstAvailable: z.array(z.looseObject({ name: z.string(), deviceClassName: z.string() })).optional(),
});
export const ResourceClaimSchema = z.looseObject({
  metadata: z.looseObject({
    name: z.string(),
    namespace: z.string(),
    uid: z.string(),
    resourceVersion: z.string().optional(),
    deletionTimestamp: z.unknown().optional(),
    finalizers: z.array(z.string()).optional(),
    ownerReferences: z.array(OwnerRef).optional(),
    annotations: z.record(z.string(), z.string()).optional(),
  }),
  spec: z.looseObject({ devices: z.looseObject({ requests: z.array(Request).optional(), constraints: z.array(z.unknown()).optional() }).optional() }),
  status: z
    .looseObject({
      allocation: z.looseObject({ devices: z.looseObject({ results: z.array(z.looseObject({ request: z.string(), driver: z.string(), pool: z.string(), device: z.string() })).optional() }).optional(), nodeSelector: z.unknown().optional() }).nullish(),
      reservedFor: z.array(z.looseObject({ resource: z.string(), name: z.string(), uid: z.string() })).nullish(),
    })
    .optional(),
});
export type ResourceClaim = z.infer<typeof ResourceClaimSchema>;

/** The claim's pod as the allocator needs it. */
export interface PodView {
  name: string;
  uid: string;
  labels: Readonly<Record<string, string>>;
  nodeSelector: Readonly<Record<string, string>>;
  activeDeadlineSeconds: number | null;
  /** Terminating, or Succeeded/Failed: it gets nothing more. */
  done: boolean;
}

/** The Reservation the pod's label names, as the ledger has it (undefined: none by that name in the pod's namespace). */
export interface ReservationWindow {
  name: string;
  /** The ledger's booking (rsv_…); absent while it is not booked. */
  bookingId?: string;
  /** Epoch milliseconds. */
  start?: number;
  end?: number;
  /** Released, expired, its hold ran out, or its window is over. */
  ended: boolean;
  deleting: boolean;
}

/** What the ledger holds for the claim (src/db/claims.ts ClaimHolding, the fields read here). */
export interface HoldingView {
  nodeId: string;
  devices: readonly { request: string; atomId: string }[];
}

export interface ClaimRequestPlan {
  name: string;
  count: number;
  class: (typeof DEVICE_CLASSES)[OurDeviceClass];
}

/** How the claim's requests read: not ours, ours but not servable (why), on demand, or of a Reservation. */
export type ClaimKind =
  | { kind: 'foreign' }
  | { kind: 'unsupported'; message: string }
  | { kind: 'onDemand'; requests: ClaimRequestPlan[] }
  | { kind: 'reservation'; requests: ClaimRequestPlan[] };

export function classifyClaim(claim: ResourceClaim): ClaimKind {
  const requests = claim.spec.devices?.requests ?? [];
  const classOf = (r: (typeof requests)[number]) => r.exactly?.deviceClassName ?? r.firstAvailable?.[0]?.deviceClassName;
  const ours = requests.filter((r) => isOurDeviceClass(classOf(r)) || (r.firstAvailable ?? []).some((s) => isOurDeviceClass(s.deviceClassName)));
  if (ours.length === 0) return { kind: 'foreign' };
  if (ours.length !== requests.length) return { kind: 'unsupported', message: 'the claim mixes requests of our DeviceClasses with others; put them in separate claims' };
  const plans: ClaimRequestPlan[] = [];
  for (const r of requests) {
    if (!r.exactly) return { kind: 'unsupported', message: `request ${r.name}: firstAvailable is not supported for ${DRA_DRIVER}; name one DeviceClass` };
    if ((r.exactly.allocationMode ?? 'ExactCount') !== 'ExactCount') return { kind: 'unsupported', message: `request ${r.name}: allocationMode ${r.exactly.allocationMode} is not supported; ask for a count` };
    if (r.exactly.selectors?.length) return { kind: 'unsupported', message: `request ${r.name}: CEL selectors are not supported; the Reservation or the Pool chooses the devices` };
    plans.push({ name: r.name, count: r.exactly.count ?? 1, class: DEVICE_CLASSES[r.exactly.deviceClassName as OurDeviceClass] });
  }
  if ((claim.spec.devices?.constraints ?? []).length) return { kind: 'unsupported', message: 'device constraints (matchAttribute) are not supported' };
  const rsv = plans.filter((p) => p.class === 'any').length;
  if (rsv && rsv !== plans.length) return { kind: 'unsupported', message: `the claim mixes ${RESERVATION_DEVICE_CLASS} with on-demand classes: a claim draws from a Reservation or on demand, not both` };
  return rsv ? { kind: 'reservation', requests: plans } : { kind: 'onDemand', requests: plans };
}

/** The pod a claim was made for: its controlling owner reference of kind Pod (a ResourceClaimTemplate's claim). */
export function claimPodRef(claim: ResourceClaim): { name: string; uid: string } | undefined {
  const o = claim.metadata.ownerReferences?.find((r) => r.kind === 'Pod' && r.apiVersion === 'v1' && r.controller === true);
  return o && { name: o.name, uid: o.uid };
}

export type ClaimDecision =
  | { do: 'ignore'; why: string }
  /** Not now: `reason` (an Event's reason on the pod), `message`; `retryAt`: try again then (epoch ms), else on change. */
  | { do: 'wait'; reason: string; message: string; retryAt?: number }
  | { do: 'book'; requests: ClaimRequestPlan[]; nodeSelector: Readonly<Record<string, string>>; durationSeconds: number | null }
  | { do: 'assign'; reservationId: string; requests: ClaimRequestPlan[] };

/**
 * What to ask the ledger for an unallocated claim of ours: book on demand, assign the Reservation's atoms (only inside
 * its window), or wait. `pod` undefined: the claim's pod is not (yet) seen.
 */
export function decideClaim(i: { claim: ResourceClaim; pod: PodView | undefined; reservation: ReservationWindow | undefined; now: number }): ClaimDecision {
  const { claim, pod, reservation, now } = i;
  const kind = classifyClaim(claim);
  if (kind.kind === 'foreign') return { do: 'ignore', why: 'no request names a DeviceClass of ours' };
  if (claim.status?.allocation) return { do: 'ignore', why: 'allocated' };
  if (claim.metadata.deletionTimestamp) return { do: 'ignore', why: 'being deleted' };
  if (kind.kind === 'unsupported') return { do: 'wait', reason: 'UnsupportedClaim', message: kind.message };
  const ref = claimPodRef(claim);
  if (!ref) return { do: 'wait', reason: 'UnsupportedClaim', message: 'only claims made from a pod\'s ResourceClaimTemplate are allocated (no Pod owns this claim)' };
  if (!pod || pod.uid !== ref.uid) return { do: 'wait', reason: 'PodNotFound', message: `pod ${ref.name} (uid ${ref.uid}) is not seen yet` };
  if (pod.done) return { do: 'ignore', why: 'its pod has ended' };
  const label = pod.labels[RESERVATION_LABEL];
  if (kind.kind === 'onDemand') {
    if (label) return { do: 'wait', reason: 'UnsupportedClaim', message: `pod ${pod.name} is labelled ${RESERVATION_LABEL}=${label}: its claims use ${RESERVATION_DEVICE_CLASS}` };
    return { do: 'book', requests: kind.requests, nodeSelector: pod.nodeSelector, durationSeconds: pod.activeDeadlineSeconds };
  }
  return decideReservationClaim(kind.requests, pod, label, reservation, now);
}

function decideReservationClaim(requests: ClaimRequestPlan[], pod: PodView, label: string | undefined, r: ReservationWindow | undefined, now: number): ClaimDecision {
  if (!label) return { do: 'wait', reason: 'NoReservation', message: `pod ${pod.name} asks for ${RESERVATION_DEVICE_CLASS} but has no ${RESERVATION_LABEL} label naming its Reservation` };
  if (!r || r.deleting) return { do: 'wait', reason: 'ReservationNotFound', message: `Reservation ${label} is not in the pod's namespace, or is being deleted` };
  if (!r.bookingId || r.start === undefined || r.end === undefined) return { do: 'wait', reason: 'ReservationNotBooked', message: `Reservation ${label} is not booked yet` };
  if (r.ended || now >= r.end) return { do: 'wait', reason: 'ReservationEnded', message: `Reservation ${label} ended at ${new Date(r.end).toISOString()}` };
  if (now < r.start) {
    return { do: 'wait', reason: 'WaitingForReservationWindow', message: `Reservation ${label} starts at ${new Date(r.start).toISOString()}; the claim is allocated then`, retryAt: r.start };
  }
  return { do: 'assign', reservationId: r.bookingId, requests };
}

/**
 * The status.allocation of a claim the ledger holds atoms for: one result per atom, the node pinned, and the time of
 * the allocation (whole seconds, as the API stores it). kube-scheduler from 1.36 on (binding conditions, beta) sets
 * `allocationTimestamp` on an allocation that lacks one when it adds the pod to reservedFor; the allocation is
 * immutable once written, so without it that write is refused and the pod is never bound. A 1.34 API server, where
 * the field's feature is off, drops it.
 */
export function allocationFor(claim: ResourceClaim, holding: HoldingView, nowMs: number): { ok: true; allocation: Record<string, unknown> } | { ok: false; message: string } {
  const names = new Set((claim.spec.devices?.requests ?? []).map((r) => r.name));
  const stray = holding.devices.find((d) => !names.has(d.request));
  if (stray) return { ok: false, message: `the ledger holds atom ${stray.atomId} for request ${stray.request}, which the claim does not make` };
  return {
    ok: true,
    allocation: {
      devices: { results: holding.devices.map((d) => ({ request: d.request, driver: DRA_DRIVER, pool: holding.nodeId, device: draDeviceName(d.atomId) })) },
      nodeSelector: { nodeSelectorTerms: [{ matchFields: [{ key: 'metadata.name', operator: 'In', values: [holding.nodeId] }] }] },
      allocationTimestamp: new Date(Math.floor(nowMs / 1000) * 1000).toISOString().replace('.000Z', 'Z'),
    },
  };
}

/** Whether a claim's allocation is ours (every result names our driver). */
export function isOurAllocation(claim: ResourceClaim): boolean {
  const results = claim.status?.allocation?.devices?.results ?? [];
  return results.length > 0 && results.every((r) => r.driver === DRA_DRIVER);
}

/** A pod as the gate's lifting reads it: its gates and its claim references (spec.resourceClaims). */
export interface GatedPodView {
  uid: string;
  schedulingGates: readonly string[];
  resourceClaims: readonly { name: string; resourceClaimName?: string | null; resourceClaimTemplateName?: string | null }[];
}

/**
 * Whether the allocator lifts ALLOCATION_GATE from a pod (ADR 0049): only when every claim of ours the pod uses is
 * allocated by us. `claims` are the claims seen of the pod's namespace that it may use: those it owns (made from its
 * templates, named by the annotation resource.kubernetes.io/pod-claim-name) and those its references name. A template's
 * claim not seen yet keeps the gate (its DeviceClass is not known yet; its arrival wakes the allocator again); claims of
 * other drivers never do (kube-scheduler allocates them once the pod is let through). `allocatedNow`: claim uids whose
 * allocation this leader has just written (the informer may not show it yet).
 */
export function gateVerdict(pod: GatedPodView, claims: readonly ResourceClaim[], allocatedNow: ReadonlySet<string> = new Set()): { lift: boolean; why: string } {
  if (!pod.schedulingGates.includes(ALLOCATION_GATE)) return { lift: false, why: 'not gated' };
  for (const ref of pod.resourceClaims) {
    const c = ref.resourceClaimName
      ? claims.find((x) => x.metadata.name === ref.resourceClaimName)
      : claims.find((x) => claimPodRef(x)?.uid === pod.uid && x.metadata.annotations?.[POD_CLAIM_NAME_ANNOTATION] === ref.name);
    if (!c) {
      if (ref.resourceClaimName) continue; // a claim made by someone else, not there: kube-scheduler says so once let through
      return { lift: false, why: `the claim of ${ref.name} is not made yet` };
    }
    if (classifyClaim(c).kind === 'foreign') continue;
    if (!allocatedNow.has(c.metadata.uid) && !isOurAllocation(c)) return { lift: false, why: `claim ${c.metadata.name} is not allocated yet` };
  }
  return { lift: true, why: 'every claim of ours is allocated' };
}

/** What to do with an allocated claim of ours: keep it, release and clear its allocation (no pod uses it and the window
 * is over, or its atoms are no longer held), or release it and let it go (deleted). */
export function decideAllocated(i: { claim: ResourceClaim; holds: boolean | undefined }): 'keep' | 'clear' | 'release-and-let-go' {
  const { claim } = i;
  if (claim.metadata.deletionTimestamp) return 'release-and-let-go';
  if ((claim.status?.reservedFor ?? []).length > 0) return 'keep';
  // Nobody reserves it: an allocation whose booking no longer holds (the window ended, the pod released) is cleared.
  return i.holds === false ? 'clear' : 'keep';
}
