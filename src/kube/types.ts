// The custom resources of group bettercompute.io/v1alpha1 (crds/), as the controller reads and writes them. The
// OpenAPI schemas in crds/ are the authority on constraints; these types only name the fields.
import type { InventoryReport } from '../core/inventory.ts';
import type { OfferingBudgetSpec } from '../core/quota.ts';
import { TENANT_LABEL } from '../core/names.ts';
/**
 * The tenant of a namespace: its `bettercompute.io/tenant` label; without one (or an empty one), its own name only when
 * tenancy by namespace name is on (TENANCY_BY_NAMESPACE_NAME, ADR 0040), else none. Off by default: where users may
 * create namespaces, one named like a tenant would otherwise inherit that tenant's pools and quota.
 */
export function namespaceTenant(name: string, labels: Record<string, string> | undefined, byName: boolean): string | undefined {
  const label = labels?.[TENANT_LABEL];
  if (label) return label;
  return byName ? name : undefined;
}

/** Why a namespace is no tenant (the refusals' text). */
export const noTenantMessage = (namespace: string) =>
  `namespace ${namespace} has no ${TENANT_LABEL} label, so it is no tenant (tenancy by namespace name, TENANCY_BY_NAMESPACE_NAME, is off)`;

export interface ObjectMeta {
  name: string;
  namespace?: string;
  uid?: string;
  generation?: number;
  resourceVersion?: string;
  creationTimestamp?: string | Date;
  deletionTimestamp?: string | Date;
  finalizers?: string[];
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}

export interface Condition {
  type: string;
  status: 'True' | 'False' | 'Unknown';
  reason?: string;
  message?: string;
  lastTransitionTime?: string;
  observedGeneration?: number;
}

export interface KubeObject {
  apiVersion?: string;
  kind?: string;
  metadata: ObjectMeta;
}

export interface DeviceSpec {
  class: 'gpu' | 'gpu.mig' | 'gpu.slot' | 'nic.vf' | 'disk' | 'node';
  count: number;
  selector?: Record<string, unknown>;
  topology?: 'any' | 'nvlink-all';
  sharing?: 'exclusive' | 'mig' | 'timeslice' | 'mps';
}

export interface ReservationSpec {
  pool: string;
  devices: DeviceSpec[];
  topology?: 'any' | 'nvlink-all';
  start?: string;
  /** One window's length; absent with a recurrence. */
  duration?: string | number;
  binding?: string;
  resources?: { vcpu?: number; memoryGiB?: number; hugepages1Gi?: number };
  leaseSeconds?: number;
  spot?: boolean;
  gang?: { size: number; topologyKey?: string };
  /** Book a window on these days every week instead of one window (then `duration` is absent; `start` anchors it). */
  recurrence?: RecurrenceSpecCR;
  /** A confirmed reservation no pod has used this long after its start is released (the controller's, not the ledger's). */
  releaseIfUnusedSeconds?: number;
}

/** spec.recurrence as written (docs/crds.md); src/controller/reservation/recurring.ts validates it. */
export interface RecurrenceSpecCR {
  days: string[];
  startTime: string;
  endTime?: string;
  duration?: string | number;
  timeZone: string;
  until?: string;
  count?: number;
}

/** One window of a recurring Reservation in its status: booked (its own reservation) or why not. */
export interface OccurrenceStatus {
  start: string;
  end: string;
  phase: ReservationPhase;
  reservationId?: string;
  resourceName?: string;
  atoms?: number;
  nodes?: string;
  leaseExpiresAt?: string;
  reason?: string;
  message?: string;
}

export type ReservationPhase = 'Pending' | 'Reserved' | 'Released' | 'Expired' | 'Failed';

export interface ReservationStatus {
  phase?: ReservationPhase;
  reservationId?: string;
  resourceName?: string;
  tenant?: string;
  poolId?: string;
  allocations?: { node: string; atoms: string[] }[];
  atoms?: number;
  nodes?: string;
  start?: string;
  end?: string;
  leaseExpiresAt?: string;
  /** A Reservation waiting for capacity that starts as soon as it fits: when it starts if nothing else changes (ADR 0058). */
  earliestStart?: string;
  /** A recurring Reservation: its windows that have not ended, booked a horizon ahead, earliest first. */
  occurrences?: OccurrenceStatus[];
  /** The ledger's state (held, confirmed, released, expired): a held booking is Reserved until it is confirmed or expires. */
  state?: string;
  /** When a hold was confirmed, and by which pod when its first pod's bind confirmed it. */
  confirmedAt?: string;
  confirmedBy?: string;
  /** A preempted spot reservation: the deadline at which its bookings end and its pods are evicted (ADR 0017). */
  preemptAt?: string;
  observedGeneration?: number;
  conditions?: Condition[];
}

export interface Reservation extends KubeObject {
  spec: ReservationSpec;
  status?: ReservationStatus;
}

export interface PoolSpecCR {
  nodeSelector: Record<string, string>;
  gpuModel?: string;
  sharing?: 'exclusive' | 'mig' | 'timeslice' | 'mps';
  slotsPerGpu?: number;
  topologyKey?: string;
  ownerTenant: string;
  offerings?: ({ tenant: string; quota?: Partial<Record<'gpu' | 'gpu.mig' | 'gpu.slot', number>> } & OfferingBudgetSpec)[];
  overcommit?: Partial<Record<'vcpu' | 'memoryGiB' | 'hugepages1Gi', number>>;
  archived?: boolean;
  stopGraceSeconds?: number;
  /** How the Pool's atoms reach pods: the device plugin and extender (default), or DRA ResourceClaims (ADR 0043). */
  handoff?: 'devicePlugin' | 'dra';
  /** At most this many of a tenant's Reservations pending in the Pool try to book (default 100; core/pending.ts). */
  maxPendingPerTenant?: number;
  /** How long a Reservation the Kueue check books lasts when the Workload and its Job say nothing (core/kueue-check.ts). */
  kueueDefaultDurationSeconds?: number;
}

export interface PoolCR extends KubeObject {
  spec: PoolSpecCR;
  status?: {
    poolId?: string;
    observedGeneration?: number;
    conditions?: Condition[];
    capacity?: Record<string, unknown>[];
    quota?: Record<string, unknown>[];
    updatedAt?: string;
  };
}

export interface NodeDevicesCR extends KubeObject {
  spec: InventoryReport;
  status?: { observedGeneration?: number; gpus?: number; conditions?: Condition[] };
}

export interface NodeCR extends KubeObject {
  spec?: { unschedulable?: boolean; taints?: { key: string; value?: string; effect: string }[] };
  status?: { conditions?: { type: string; status: string }[] };
}

export type NamespaceCR = KubeObject;

export function keyOf(o: KubeObject): string {
  return o.metadata.namespace ? `${o.metadata.namespace}/${o.metadata.name}` : o.metadata.name;
}

export function splitKey(key: string): { namespace?: string; name: string } {
  const i = key.indexOf('/');
  return i < 0 ? { name: key } : { namespace: key.slice(0, i), name: key.slice(i + 1) };
}

/**
 * Sets a condition in a list (by type), keeping lastTransitionTime when the status did not change. `nowIso` is for
 * people reading the object; nothing decides on it.
 */
export function setCondition(list: Condition[] | undefined, c: Condition, nowIso: string): Condition[] {
  const out = [...(list ?? [])];
  const i = out.findIndex((x) => x.type === c.type);
  const prev = i >= 0 ? out[i] : undefined;
  const next: Condition = {
    ...c,
    lastTransitionTime: prev && prev.status === c.status && prev.lastTransitionTime ? prev.lastTransitionTime : nowIso,
  };
  if (i >= 0) out[i] = next;
  else out.push(next);
  return out;
}

export function findCondition(list: Condition[] | undefined, type: string): Condition | undefined {
  return list?.find((c) => c.type === type);
}

/** Deep equality of JSON values, object keys in any order (the API server sorts them). */
export function sameJson(a: unknown, b: unknown): boolean {
  return canonical(a) === canonical(b);
}

function canonical(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  if (v && typeof v === 'object') {
    const entries = Object.entries(v as Record<string, unknown>)
      .filter(([, x]) => x !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : 1));
    return `{${entries.map(([k, x]) => `${JSON.stringify(k)}:${canonical(x)}`).join(',')}}`;
  }
  return JSON.stringify(v);
}
