// What every reconciler gets: the database and ledger, the Kubernetes client, the informers' caches, the queues (to
// wake other kinds' keys) and a few in-memory indexes. Built once by setupControllers().
import type { DbClock } from '../db/clock.ts';
import type { Fence, Ledger } from '../db/ledger.ts';
import type { Db } from '../db/pool.ts';
import type { Logger } from '../log.ts';
import type { Informer } from '../kube/informer.ts';
import type { EventInput, KubeClient } from '../kube/client.ts';
import type { ControllerMetrics } from './metrics.ts';
import type { WorkQueue } from './queue.ts';
import type { KubeObject, NamespaceCR, NodeCR, NodeDevicesCR, PoolCR, Reservation } from '../kube/types.ts';

export interface ControllerTuning {
  /** How often a Pool's status.capacity is refreshed from the rollup. */
  capacityRefreshMs: number;
  /** Longest backoff of a Pending Reservation between attempts. */
  pendingMaxBackoffMs: number;
  /** Workers of the Reservation queue (placements run concurrently; the ledger arbitrates). */
  reservationWorkers: number;
  /** How far ahead the windows of a recurring Reservation are booked (BETTER_COMPUTE_RECURRENCE_HORIZON). */
  recurrenceHorizonMs: number;
  /** Whether an unlabelled namespace is the tenant named like it (TENANCY_BY_NAMESPACE_NAME, ADR 0040). */
  tenancyByName: boolean;
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
  /** Wakes every Pending Reservation of a pool (by Pool name), e.g. after capacity was freed or added. */
  wakePending(poolName: string | undefined): void;
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
