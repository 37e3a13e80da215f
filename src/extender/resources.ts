// Resource names we hand out, and what a pod asks for. Pure.
import type { DeviceClass } from '../core/types.ts';
import { GENERIC_RESOURCES, RESERVATION_GROUP, reservationIdOfResource } from '../core/names.ts';

export interface PodDemand {
  /** The reservation the pod draws from, with the number of its atoms it asks for. */
  reservation?: { id: string; resource: string; count: number };
  /** On-demand atoms per class. */
  devices: { class: DeviceClass; count: number }[];
  /** A reservation resource that is not well formed, or more than one reservation. */
  invalid?: string;
}

interface ContainerLike {
  resources?: { requests?: Record<string, string | number> | undefined; limits?: Record<string, string | number> | undefined } | undefined;
}

function countOf(v: string | number | undefined): number {
  if (v === undefined) return 0;
  const n = typeof v === 'number' ? v : Number(v);
  return Number.isInteger(n) && n > 0 ? n : 0;
}

function sumRequests(containers: readonly ContainerLike[]): Map<string, number> {
  const out = new Map<string, number>();
  for (const c of containers) {
    // Extended resources: request equals limit, and either alone is allowed.
    const names = new Set([...Object.keys(c.resources?.requests ?? {}), ...Object.keys(c.resources?.limits ?? {})]);
    for (const name of names) {
      const n = countOf(c.resources?.requests?.[name] ?? c.resources?.limits?.[name]);
      if (n) out.set(name, (out.get(name) ?? 0) + n);
    }
  }
  return out;
}

/** What a pod asks of us: the max of its init containers and the sum of its containers, as the scheduler counts. */
export function podDemand(spec: { containers: readonly ContainerLike[]; initContainers?: readonly ContainerLike[] | null | undefined }): PodDemand {
  const total = sumRequests(spec.containers);
  for (const ic of spec.initContainers ?? []) {
    for (const [name, n] of sumRequests([ic])) total.set(name, Math.max(total.get(name) ?? 0, n));
  }
  const demand: PodDemand = { devices: [] };
  const reservations: string[] = [];
  for (const [name, count] of [...total].sort(([a], [b]) => (a < b ? -1 : 1))) {
    const cls = GENERIC_RESOURCES[name];
    if (cls) demand.devices.push({ class: cls, count });
    else if (name.startsWith(`${RESERVATION_GROUP}/`)) {
      const id = reservationIdOfResource(name);
      if (!id) demand.invalid = `${name} names no reservation (expected ${RESERVATION_GROUP}/rsv-<id>)`;
      else {
        reservations.push(name);
        demand.reservation = { id, resource: name, count };
      }
    }
  }
  if (reservations.length > 1) demand.invalid = `a pod draws from one reservation, not ${reservations.length}`;
  if (demand.reservation && demand.devices.length) demand.invalid = 'a pod draws from a reservation or on demand, not both';
  return demand;
}

/** The owners whose pods kube-scheduler spreads by default (PodTopologySpread's system defaults, ScheduleAnyway). */
const SPREAD_BY_DEFAULT = new Set(['ReplicaSet', 'StatefulSet', 'ReplicationController']);

interface PodPreferencesLike {
  metadata: { ownerReferences?: readonly { kind: string }[] | null | undefined };
  spec: {
    affinity?: Partial<Record<'nodeAffinity' | 'podAffinity' | 'podAntiAffinity', { preferredDuringSchedulingIgnoredDuringExecution?: readonly unknown[] | null | undefined } | null | undefined>> | null | undefined;
    topologySpreadConstraints?: readonly { whenUnsatisfiable?: string | undefined }[] | null | undefined;
  };
}

/**
 * Whether kube-scheduler's scoring has a preference of the pod's to weigh (ADR 0030): a preferred node affinity, pod
 * affinity or anti-affinity term, a topology spread constraint it may break (ScheduleAnyway), or an owner whose pods it
 * spreads by default (a ReplicaSet's, a StatefulSet's, a ReplicationController's). A pod that declares none of these
 * has none of its own for the scheduler to weigh. Required terms are not preferences: kube-scheduler applies them
 * before it calls the extender.
 */
export function hasSchedulingPreferences(pod: PodPreferencesLike): boolean {
  const a = pod.spec.affinity;
  if (a && [a.nodeAffinity, a.podAffinity, a.podAntiAffinity].some((t) => (t?.preferredDuringSchedulingIgnoredDuringExecution?.length ?? 0) > 0)) return true;
  if (pod.spec.topologySpreadConstraints?.some((c) => c.whenUnsatisfiable === 'ScheduleAnyway')) return true;
  return pod.metadata.ownerReferences?.some((o) => SPREAD_BY_DEFAULT.has(o.kind)) ?? false;
}
