// Every name the product writes into Kubernetes, defined once: its API group, the labels, annotations, finalizers,
// taints and scheduling gates it sets or reads, the extended resources and the DRA driver it serves. Pure constants
// (core/: the planning core and every layer above it read them).
import type { DeviceClass } from './types.ts';

// ---- the API group of the product's custom resources (crds/)
export const GROUP = 'bettercompute.io';
export const VERSION = 'v1alpha1';
export const API_VERSION = `${GROUP}/${VERSION}`;

// ---- labels
/** Namespace label naming the tenant (ADR 0005); without it a namespace is no tenant, unless tenancy by name is on. */
export const TENANT_LABEL = 'bettercompute.io/tenant';
/**
 * The label naming a Reservation of the namespace: on a pod (its Reservation's pod, in both hand-off modes), on a Job
 * (Kueue copies it to the Workload) or its pod template.
 */
export const RESERVATION_LABEL = 'bettercompute.io/reservation';
/** The label naming the Pool a Kueue Workload is booked in, on the Job (copied to the Workload) or its pod template. */
export const POOL_LABEL = 'bettercompute.io/pool';
export const MAINTENANCE_LABEL = 'bettercompute.io/maintenance';
export const ROLE_LABEL = 'bettercompute.io/role';
export const TRUST_LABEL = 'bettercompute.io/trust';
export const OWNER_TENANT_LABEL = 'bettercompute.io/owner-tenant';
/** On a Reservation booked by the Kueue check: the Workload's uid (found by it, so that a user's namesake is never taken). */
export const BOOKED_FOR_UID_LABEL = 'bettercompute.io/kueue-workload-uid';

// ---- annotations
/**
 * Annotation on a Reservation that confirms its hold (`kubectl annotate reservation NAME bettercompute.io/confirm=true`):
 * an input like the spec (the spec itself is immutable), read by the reconciler; docs/adr/0015-hold-and-confirm.md.
 */
export const CONFIRM_ANNOTATION = 'bettercompute.io/confirm';
/** Annotation put on a preempted spot reservation's pods: the deadline (RFC 3339) at which they are evicted (ADR 0017). */
export const PREEMPT_AT_ANNOTATION = 'bettercompute.io/preempt-at';
/** On an on-demand pod, written with its Binding: the atoms it was booked. */
export const ATOMS_ANNOTATION = 'bettercompute.io/atoms';
/** On an on-demand pod, written with its Binding: its booking's allocation id. */
export const ALLOCATION_ANNOTATION = 'bettercompute.io/allocation';
/** On a Reservation booked by the Kueue check: the Workload's name (a name can be longer than a label value). */
export const BOOKED_FOR_ANNOTATION = 'bettercompute.io/kueue-workload';
/** Annotation on NodeDevices while its spec is the last good report of a discovery that fails now: since when, why. */
export const DISCOVERY_STALE_ANNOTATION = 'bettercompute.io/discovery-stale';

// ---- finalizers, taints, gates, controller names
export const RESERVATION_FINALIZER = 'bettercompute.io/release';
/** Our finalizer on a claim we allocated: the claim goes only after its atoms are released. */
export const CLAIM_FINALIZER = 'bettercompute.io/claim';
/** Taint of the test harness's simulated nodes; tolerated (it keeps stray pods away, not our bookings). */
export const SIMULATED_TAINT = 'bettercompute.io/simulated';
/**
 * The scheduling gate admission puts on a pod that claims our DeviceClasses through a ResourceClaimTemplate (ADR 0049):
 * kube-scheduler does not try the pod until the allocator lifts it, once every claim of ours of the pod is allocated.
 */
export const ALLOCATION_GATE = 'bettercompute.io/allocation';
/** The Kueue AdmissionCheck's spec.controllerName that this controller answers for. */
export const CHECK_CONTROLLER_NAME = 'bettercompute.io/reservation';

// ---- extended resources (device-plugin mode)
export const GENERIC_RESOURCES: Readonly<Record<string, DeviceClass>> = {
  'bettercompute.io/gpu': 'gpu',
  'bettercompute.io/gpu.mig': 'gpu.mig',
  'bettercompute.io/gpu.slot': 'gpu.slot',
};
export const RESOURCE_OF_CLASS: Readonly<Partial<Record<DeviceClass, string>>> = {
  gpu: 'bettercompute.io/gpu',
  'gpu.mig': 'bettercompute.io/gpu.mig',
  'gpu.slot': 'bettercompute.io/gpu.slot',
};
/** The group of the per-reservation extended resources the agent registers (docs/crds.md). */
export const RESERVATION_GROUP = 'reservations.bettercompute.io';
export const RESERVATION_RESOURCE_PREFIX = `${RESERVATION_GROUP}/`;
/**
 * ADR 0003's marker, requested beside a reservation's own resource so that a scheduler with `managedResources` calls
 * the extender (it matches names exactly and cannot know the per-reservation names). With the dedicated
 * better-compute-scheduler (ADR 0007) every pod it gets goes to the extender, and a reservation's pod needs only
 * `reservations.bettercompute.io/<rsv>`; the marker is still accepted (and ignored) when present, and alone it asks for
 * nothing.
 */
export const RESERVATION_MARKER = 'bettercompute.io/reservation';

/** `reservations.bettercompute.io/<id with '_' as '-'>`: a valid extended resource name for reservation `rsv_<ulid>`. */
export function reservationResourceName(reservationId: string): string {
  return `${RESERVATION_RESOURCE_PREFIX}${reservationId.replace(/_/g, '-')}`;
}

/** The reservation id of a per-reservation resource name, or undefined when it is not one. */
export function reservationIdOfResource(resource: string): string | undefined {
  if (!resource.startsWith(RESERVATION_RESOURCE_PREFIX)) return undefined;
  const id = resource.slice(RESERVATION_RESOURCE_PREFIX.length).replace(/-/g, '_');
  return /^rsv_[0-9a-hjkmnp-tv-z]{26}$/.test(id) ? id : undefined;
}

// ---- Dynamic Resource Allocation
/** The product's DRA driver (ResourceSlices, the kubelet plugin, the claims' allocations). */
export const DRA_DRIVER = 'gpu.bettercompute.io';
/** The CDI kind of a prepared claim: `bettercompute.io/claim=<claim uid>`. */
export const CLAIM_CDI_KIND = 'bettercompute.io/claim';
