// What every reconciler gets: the database and ledger, the Kubernetes client, the informers' caches, the queues (to
// wake other kinds' keys) and a few in-memory indexes. Built once by setupControllers().
import type { DbClock } from '../db/clock.ts';
import { DEFAULT_LAYOUT_WINDOW_SECONDS } from '../db/inventory.ts';
import type { Fence, Ledger } from '../db/ledger.ts';
import type { Db } from '../db/pool.ts';
import type { Logger } from '../log.ts';
import type { Informer } from '../kube/informer.ts';
import type { EventInput, KubeClient } from '../kube/client.ts';
import type { ControllerMetrics } from './metrics.ts';
import type { WorkQueue } from './queue.ts';
import { keyOf, type KubeObject, type NamespaceCR, type NodeCR, type NodeDevicesCR, type PoolCR, type Reservation } from '../kube/types.ts';
import type { PendingEntry } from '../core/pending.ts';

export interface ControllerTuning {
  /** How often a Pool's status.capacity is refreshed from the rollup. */
  capacityRefreshMs: number;
  /** Longest backoff of a Pending Reservation between attempts. */
  pendingMaxBackoffMs: number;
  /** Workers of the Reservation queue (placements run concurrently; the ledger arbitrates). */
  reservationWorkers: number;
  /** How far ahead the windows of a recurring Reservation are booked (BETTER_COMPUTE_RECURRENCE_HORIZON). */
  recurrenceHorizonMs: number;
  /** A Pool's pending Reservations are woken at most once per this interval (default 1 s; core/pending.ts). */
  wakeIntervalMs?: number;
  /** ... at most this many per wake, the earliest created first (default 256). */
  wakeBatchSize?: number;
  /** Whether an unlabelled namespace is the tenant named like it (TENANCY_BY_NAMESPACE_NAME, ADR 0040). */
  tenancyByName: boolean;
  /** How long a layout booking holds a GPU whose layout changed (BETTER_COMPUTE_LAYOUT_WINDOW; default 5 min). */
  layoutWindowMs?: number;
}

/** The change window of a layout booking in whole seconds, at least 1 (DEFAULT_LAYOUT_WINDOW_SECONDS unless tuned). */
export function layoutWindowSeconds(tuning: ControllerTuning): number {
  return tuning.layoutWindowMs === undefined ? DEFAULT_LAYOUT_WINDOW_SECONDS : Math.max(1, Math.round(tuning.layoutWindowMs / 1000));
}

export interface ControllerContext {
  db: Db;
  ledger: Ledger;
  clock: DbClock;
  kube: KubeClient;
  log: Logger;
  fence: () => Fence;
  metrics: ControllerMetrics;
  tuning: ControllerTuning;
  informers: {
    reservations: Informer<Reservation>;
    pools: Informer<PoolCR>;
    nodes: Informer<NodeCR>;
    nodeDevices: Informer<NodeDevicesCR>;
    namespaces: Informer<NamespaceCR>;
  };
  queues: {
    reservations: WorkQueue;
    pools: WorkQueue;
    nodes: WorkQueue;
    nodeDevices: WorkQueue;
  };
  /** Pool name → poolId, as upserted by this leader. A Pool's status.poolId is a mirror, never read as input. */
  poolIds: Map<string, string>;
  /** What the Node reconciler last wrote per node (skips unchanged writes); its pool. */
  nodeWritten: Map<string, { json: string; poolId: string | null }>;
  /** NodeDevices name → `${generation}|${poolId}` last applied. */
  inventoryApplied: Map<string, string>;
  /** Best effort: an Event that cannot be written is logged, never fails a reconcile. */
  event(obj: KubeObject, kind: string, e: EventInput): Promise<void>;
  /** Wall-clock time as RFC 3339, for lastTransitionTime and people; nothing decides on it. */
  nowIso(): string;
  /**
   * Wakes a pool's Pending Reservations (by Pool name), e.g. after capacity was freed or added: batched, at most one
   * wake per Pool per tuning.wakeIntervalMs, the earliest created first, at most tuning.wakeBatchSize (core/pending.ts).
   */
  wakePending(poolName: string | undefined): void;
  /** The Pool's pending Reservations (phase not yet set, or Pending), by Pool name: the pending limit counts them. */
  pendingInPool(poolName: string): Iterable<Reservation>;
  /** The Pool name of a poolId, when known. */
  poolNameOf(poolId: string | null | undefined): string | undefined;
}

/**
 * The poolId of a Pool by name, as this leader's Pool reconciler upserted it; undefined until it has (callers requeue).
 * Never the Pool's status.poolId: status is a mirror that anyone with patch on pools/status could forge.
 */
export function poolIdOf(ctx: ControllerContext, poolName: string): string | undefined {
  return ctx.poolIds.get(poolName);
}

/** Pending as the limit and the wakes count it: not yet given a phase, or Pending. */
export const isPending = (r: Reservation) => r.status?.phase === undefined || r.status.phase === 'Pending';
export const pendingEntry = (r: Reservation): PendingEntry => {
  const c = r.metadata.creationTimestamp;
  return { key: keyOf(r), createdAt: c instanceof Date ? c.toISOString() : c };
};

