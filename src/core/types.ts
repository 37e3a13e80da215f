// Snapshot types the planner works on. Pure data: built by src/db/ from the ledger, or by test builders.
import type { Selector } from './selector.ts';

export const DEVICE_CLASSES = ['gpu', 'gpu.mig', 'gpu.slot', 'nic.vf', 'disk', 'node'] as const;
export type DeviceClass = (typeof DEVICE_CLASSES)[number];
export const SHARING_MODES = ['exclusive', 'mig', 'timeslice', 'mps'] as const;
export type Sharing = (typeof SHARING_MODES)[number];
export const SCALARS = ['vcpu', 'memoryGiB', 'hugepages1Gi'] as const;
export type ScalarResource = (typeof SCALARS)[number];
export type Topology = 'any' | 'nvlink-all';

export type Attributes = Readonly<Record<string, string | number | boolean | null>>;

/** Half-open [start, end) in epoch milliseconds; end may be Infinity. */
export interface Interval {
  readonly start: number;
  readonly end: number;
}

/** A booking as the planner sees it: its range, and whether it belongs to a spot (preemptible) reservation. */
export interface BookingSnap extends Interval {
  readonly spot?: boolean;
  /** The reservation (or pod allocation) that holds it: counted, never shown. */
  readonly ref?: string;
}

export interface AtomSnap {
  readonly id: string;
  readonly class: DeviceClass;
  readonly parentId: string | null;
  readonly attributes: Attributes;
  readonly healthy: boolean;
  readonly bookable: boolean;
  /** Live bookings of this atom (released ones truncated), in any order. */
  readonly bookings: BookingSnap[];
}

export interface ScalarSnap {
  readonly allocatable: number;
  readonly ratio: number;
  allocated: number;
}

/** One class's part of a node's summary. */
export interface ClassSummary {
  readonly bookable: number;
  readonly healthy: number;
  readonly largestNuma: number;
  /**
   * A time span in which every healthy bookable atom of the class is booked (each by the booking of it that ends
   * last): a window that overlaps [fullFrom, fullUntil) finds none of them free. Empty (fullFrom ≥ fullUntil) when
   * one of them has no booking.
   */
  readonly fullFrom: number;
  readonly fullUntil: number;
}

/** Per-node counts that let the planner screen a node without visiting its atoms (see summarizeNode). */
export interface NodeSummary {
  /**
   * Bookable atoms per class, how many of them are healthy, and how many healthy ones the class's largest NUMA group
   * holds (atoms without a numaNode form one group): whether a placement free of bookings gets the locality bonus.
   */
  readonly classes: ReadonlyMap<DeviceClass, ClassSummary>;
  /** The earliest start and the latest end of any booking of the node's atoms (Infinity / -Infinity if none). */
  readonly busyFrom: number;
  readonly busyUntil: number;
}

export interface NodeSnap {
  readonly id: string;
  /** Kept current by whoever mutates the atoms' bookings; absent means "visit the atoms". */
  summary?: NodeSummary;
  /** The schedulability predicate, the tenant-owned rule included. */
  readonly schedulable: boolean;
  readonly labels: Readonly<Record<string, string>>;
  readonly atoms: readonly AtomSnap[];
  readonly scalars: Readonly<Partial<Record<ScalarResource, ScalarSnap>>>;
}

export interface PoolSnap {
  readonly id: string;
  readonly sharing: Sharing;
  readonly topologyKey: string;
  readonly nodes: readonly NodeSnap[];
}

export interface DeviceRequest {
  readonly class: DeviceClass;
  readonly count: number;
  readonly selector: Selector;
  readonly topology?: Topology;
  readonly sharing?: Sharing;
}

export interface PlacementRequest {
  readonly devices: readonly DeviceRequest[];
  readonly topology?: Topology;
  readonly window: Interval;
  /** 'node' leases whole nodes: every atom of each chosen node. */
  readonly binding: string;
  readonly resources?: Readonly<Partial<Record<ScalarResource, number>>>;
  readonly gang?: { readonly size: number; readonly topologyKey?: string };
}

export interface Candidate {
  readonly nodeId: string;
  /** Sorted, so that concurrent commits lock and insert in one order. */
  readonly atoms: readonly string[];
  readonly scalars: Readonly<Partial<Record<ScalarResource, number>>>;
  /** 0–110: bin-packing (0–100) plus a topology-locality bonus. */
  readonly score: number;
}

export type PlanResult =
  | { readonly ok: true; readonly candidates: readonly Candidate[]; readonly gangDomain?: string }
  | { readonly ok: false; readonly reason: string };

export function overlaps(a: Interval, b: Interval): boolean {
  return a.start < b.end && b.start < a.end;
}
