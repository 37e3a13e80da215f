// setupControllers(): the informers (Reservations, Pools, Nodes, NodeDevices, Namespaces), one keyed work queue and
// reconciler per kind, and the wiring between them. Informers run on every replica (a warm cache for a fast
// takeover); the queues' workers run only while this replica leads (startLeading / stopLeading).
import type { KubeConfig } from '@kubernetes/client-node';
import type { DbClock } from '../db/clock.ts';
import { FencedError, type Fence, type Ledger } from '../db/ledger.ts';
import type { Db } from '../db/pool.ts';
import { errorFields, type Logger } from '../log.ts';
import type { ControllerContext, ControllerTuning } from './context.ts';
import { createPendingWakes, type PendingWakes } from './pending-wakes.ts';
import type { ClusterView, DriftFix } from './drift-plan.ts';
import { boundReservation } from '../kube/bounds.ts';
import { Informer } from '../kube/informer.ts';
import { KubeClient, PLURALS } from '../kube/client.ts';
import type { ControllerMetrics } from './metrics.ts';
import { NodeReconciler } from './node/reconciler.ts';
import { NodeDevicesReconciler } from './nodedevices/reconciler.ts';
import { PoolReconciler } from './pool/reconciler.ts';
import { WorkQueue, type ReconcileResult } from './queue.ts';
import { ReservationReconciler } from './reservation/reconciler.ts';
import { confirmRequested } from './reservation/status.ts';
import { keyOf, type KubeObject, type Reservation } from '../kube/types.ts';
import { systemClock } from '../clock.ts';
import { GROUP, VERSION } from '../core/names.ts';

export interface SetupOptions {
  kc: KubeConfig;
  kube: KubeClient;
  db: Db;
  ledger: Ledger;
  clock: DbClock;
  log: Logger;
  fence: () => Fence;
  metrics: ControllerMetrics;
  tuning: ControllerTuning;
  watchTimeoutSeconds: number;
  watchLivenessMs: number;
}

export interface Controllers {
  ctx: ControllerContext;
  /** Starts the informers (every replica). */
  startInformers(): void;
  /** Waits for every informer's first list. */
  synced(): Promise<void>;
  /** Starts the workers and queues every known object once (the leader). */
  startLeading(): Promise<void>;
  /** Stops the workers at once; keys in progress finish (their writes fail at the fence). */
  stopLeading(): Promise<void>;
  /** Queues every known object again (the leader's periodic resync: nothing missed stays missed). */
  resync(): void;
  /** The drift reconcile's cluster view: the caches of Nodes, NodeDevices, Pools and Reservations, once each has synced. */
  clusterView(): ClusterView | undefined;
  /** After a drift fix: forget what the reconcilers remembered of the object, and look at it again if it is back. */
  afterDriftFix(fix: DriftFix): void;
  /** Queues the Reservations whose booking (or a recurring one's window) has one of these ledger ids (e.g. leases that expired). */
  wakeReservations(ids: readonly string[]): void;
  /** Queues the Reservations whose status mirrors a hold the ledger no longer has (confirmed by a pod's bind); their ids. */
  wakeHeldNoMore(): Promise<string[]>;
  /** Stops everything. */
  stop(): Promise<void>;
}

const generationChanged = (a: KubeObject, b: KubeObject) =>
  a.metadata.generation !== b.metadata.generation ||
  String(a.metadata.deletionTimestamp ?? '') !== String(b.metadata.deletionTimestamp ?? '') ||
  (a.metadata.finalizers ?? []).join() !== (b.metadata.finalizers ?? []).join();

/**
 * Whether a Reservation update needs a reconcile: its generation, deletion or finalizers changed (not a status-only
 * write, ours), or the confirm annotation appeared (an input like the spec, which does not change the generation).
 */
export function reservationUpdateWakes(a: Reservation, b: Reservation): boolean {
  return generationChanged(a, b) || (confirmRequested(b) && !confirmRequested(a));
}

export function setupControllers(o: SetupOptions): Controllers {
  const informers = makeInformers(o);
  const queues = makeQueues(o);
  // The pending Reservations per Pool, the batched wakes and the pending limit's wakes (pending-wakes.ts).
  const pendingWakes = createPendingWakes({
    queue: queues.reservations,
    namespace: (name) => informers.namespaces.get(name),
    intervalMs: o.tuning.wakeIntervalMs ?? 1000,
    batchSize: o.tuning.wakeBatchSize ?? 256,
  });
  const ctx = makeContext(o, informers, queues, pendingWakes);
  const reservations = new ReservationReconciler(ctx);
  const pools = new PoolReconciler(ctx);
  const nodes = new NodeReconciler(ctx);
  const nodeDevices = new NodeDevicesReconciler(ctx, (name) => nodes.reconcile(name));
  const reconcilers: Reconcilers = { reservations, pools, nodes, nodeDevices };
  wireEvents(ctx, pendingWakes);
  return controllersOf(ctx, reconcilers, pendingWakes);
}

/** One reconciler per kind. */
interface Reconcilers {
  reservations: ReservationReconciler;
  pools: PoolReconciler;
  nodes: NodeReconciler;
  nodeDevices: NodeDevicesReconciler;
}

/** The informer of each kind (not started). */
function makeInformers(o: SetupOptions): ControllerContext['informers'] {
  const log = o.log;
  const informer = <T extends KubeObject>(name: string, path: string, list: () => Promise<{ items: T[] }>, transform?: (obj: T) => T) =>
    new Informer<T>({
      name,
      kc: o.kc,
      path,
      list,
      ...(transform ? { transform } : {}),
      log,
      watchTimeoutSeconds: o.watchTimeoutSeconds,
      livenessMs: o.watchLivenessMs,
      onRestart: (n, why) => o.metrics.watchRestarted(n, why),
    });
  const crPath = (plural: string) => `/apis/${GROUP}/${VERSION}/${plural}`;
  const informers: ControllerContext['informers'] = {
    reservations: informer('reservations', crPath(PLURALS.reservations), o.kube.listReservations, boundReservation),
    pools: informer('pools', crPath(PLURALS.pools), o.kube.listPools),
    nodes: informer('nodes', '/api/v1/nodes', o.kube.listNodes),
    nodeDevices: informer('nodedevices', crPath(PLURALS.nodedevices), o.kube.listNodeDevices),
    namespaces: informer('namespaces', '/api/v1/namespaces', o.kube.listNamespaces),
  };
  return informers;
}

/** The work queue of each kind (not started). */
function makeQueues(o: SetupOptions): ControllerContext['queues'] {
  const log = o.log;
  const queue = (name: string, workers: number, maxDelayMs = 60_000) =>
    new WorkQueue({ name, workers, log, maxDelayMs, onProcessed: (n, s, outcome) => o.metrics.reconciled(n, s, outcome) });
  const queues: ControllerContext['queues'] = {
    reservations: queue('reservations', o.tuning.reservationWorkers, o.tuning.pendingMaxBackoffMs),
    pools: queue('pools', 1),
    nodes: queue('nodes', 2),
    nodeDevices: queue('nodedevices', 2),
  };
  return queues;
}

/** What every reconciler shares: the ledger, the cluster, the caches and queues, Events, the wakes of pending ones. */
function makeContext(
  o: SetupOptions,
  informers: ControllerContext['informers'],
  queues: ControllerContext['queues'],
  pendingWakes: PendingWakes,
): ControllerContext {
  const log = o.log;
  const ctx: ControllerContext = {
    db: o.db,
    ledger: o.ledger,
    clock: o.clock,
    kube: o.kube,
    log,
    fence: o.fence,
    metrics: o.metrics,
    tuning: o.tuning,
    informers,
    queues,
    poolIds: new Map(),
    nodeWritten: new Map(),
    inventoryApplied: new Map(),
    async event(obj, kind, e) {
      try {
        await o.kube.event(obj, kind, e);
      } catch (err) {
        log.warn('writing an event failed', { object: keyOf(obj), reason: e.reason, ...errorFields(err) });
      }
    },
    nowIso: () => systemClock.wallNow().toISOString().replace(/\.\d+Z$/, 'Z'),
    wakePending(poolName) {
      if (!poolName) return;
      pendingWakes.wakePending(poolName);
    },
    pendingInPool: (poolName) => pendingWakes.pendingInPool(poolName),
    poolNameOf(poolId) {
      if (!poolId) return undefined;
      for (const [name, id] of ctx.poolIds) if (id === poolId) return name;
      return undefined;
    },
  };
  return ctx;
}

/** Event handlers: a key per change. Status-only updates (our own writes) do not wake a key. */
function wireEvents(ctx: ControllerContext, pendingWakes: PendingWakes): void {
  const { informers, queues } = ctx;
  informers.reservations.on({
    add: (r) => {
      pendingWakes.added(r);
      queues.reservations.add(keyOf(r));
    },
    update: (a, b) => {
      pendingWakes.updated(a, b);
      if (reservationUpdateWakes(a, b)) queues.reservations.add(keyOf(b));
    },
    delete: (r: Reservation) => {
      pendingWakes.deleted(r);
      // Deleted without our finalizer (e.g. before we saw it): its booking, if any, is freed by the finalizer path
      // only; capacity may have changed anyway.
      ctx.wakePending(r.spec?.pool);
    },
  });
  informers.pools.on({
    add: (p) => queues.pools.add(keyOf(p)),
    update: (a, b) => {
      if (generationChanged(a, b)) queues.pools.add(keyOf(b));
    },
    delete: (p) => queues.pools.add(keyOf(p)),
  });
  informers.nodes.on({
    add: (n) => queues.nodes.add(keyOf(n)),
    update: (_a, b) => queues.nodes.add(keyOf(b)),
    delete: (n) => queues.nodes.add(keyOf(n)),
  });
  informers.nodeDevices.on({
    add: (d) => queues.nodeDevices.add(keyOf(d)),
    update: (a, b) => {
      if (generationChanged(a, b)) queues.nodeDevices.add(keyOf(b));
    },
    delete: (d) => queues.nodeDevices.add(keyOf(d)),
  });
  informers.namespaces.on({
    // A namespace that appears can unblock reservations waiting for it.
    add: (ns) => {
      for (const r of informers.reservations.list()) if (r.metadata.namespace === ns.metadata.name && !r.status?.phase) queues.reservations.add(keyOf(r));
    },
  });
}

/** A fenced write means another replica leads now: nothing to retry here. */
function fenced(log: Logger, name: string, fn: (key: string) => Promise<ReconcileResult>): (key: string) => Promise<ReconcileResult> {
  return async (key: string): Promise<ReconcileResult> => {
    try {
      return await fn(key);
    } catch (e) {
      if (e instanceof FencedError) {
        log.warn('write fenced: another replica leads', { controller: name, key });
        return;
      }
      throw e;
    }
  };
}

/** Queues every known object of every kind once, Pools first. */
function queueAll(ctx: ControllerContext): void {
  const { informers, queues } = ctx;
  for (const p of informers.pools.list()) queues.pools.add(keyOf(p));
  for (const n of informers.nodes.list()) queues.nodes.add(keyOf(n));
  for (const d of informers.nodeDevices.list()) queues.nodeDevices.add(keyOf(d));
  for (const r of informers.reservations.list()) queues.reservations.add(keyOf(r));
}

/** After a drift fix: forget what the reconcilers remembered of the object, and look at it again if it is back. */
function afterDriftFix(ctx: ControllerContext, fix: DriftFix): void {
  const { informers, queues } = ctx;
  switch (fix.kind) {
    case 'node':
    case 'nodedevices':
      if (fix.kind === 'node') ctx.nodeWritten.delete(fix.node);
      ctx.inventoryApplied.delete(fix.node);
      if (informers.nodes.get(fix.node)) queues.nodes.add(fix.node);
      if (informers.nodeDevices.get(fix.node)) queues.nodeDevices.add(fix.node);
      break;
    case 'pool':
      ctx.poolIds.delete(fix.pool);
      if (informers.pools.get(fix.pool)) queues.pools.add(fix.pool);
      // Its nodes map again (to another Pool, or to none), as after a Pool delete event.
      for (const n of informers.nodes.list()) queues.nodes.add(keyOf(n));
      break;
    case 'reservation':
      if (fix.action === 'released') ctx.wakePending(ctx.poolNameOf(fix.poolId));
      break;
  }
}

/** The controllers as the process drives them: informers on every replica, workers while this one leads. */
function controllersOf(ctx: ControllerContext, rec: Reconcilers, pendingWakes: PendingWakes): Controllers {
  const { informers, queues } = ctx;
  const log = ctx.log;
  let leading = false;
  return {
    ctx,
    startInformers() {
      for (const i of Object.values(informers)) i.start();
    },
    async synced() {
      await Promise.all(Object.values(informers).map((i) => i.synced));
    },
    async startLeading() {
      leading = true;
      ctx.poolIds.clear();
      ctx.nodeWritten.clear();
      ctx.inventoryApplied.clear();
      await this.synced();
      if (!leading) return;
      // Pools first, so that nodes find their poolIds; the other kinds wait for them by requeueing.
      queues.pools.start(fenced(log, 'pools', (k) => rec.pools.reconcile(k)));
      queues.nodes.start(fenced(log, 'nodes', (k) => rec.nodes.reconcile(k)));
      queues.nodeDevices.start(fenced(log, 'nodedevices', (k) => rec.nodeDevices.reconcile(k)));
      queues.reservations.start(fenced(log, 'reservations', (k) => rec.reservations.reconcile(k)));
      queueAll(ctx);
    },
    resync() {
      if (!leading) return;
      queueAll(ctx);
    },
    clusterView() {
      const { nodes, nodeDevices, pools, reservations } = informers;
      if (![nodes, nodeDevices, pools, reservations].every((i) => i.hasSynced)) return undefined;
      return { nodes: nodes.list(), nodeDevices: nodeDevices.list(), pools: pools.list(), reservations: reservations.list() };
    },
    afterDriftFix: (fix) => afterDriftFix(ctx, fix),
    async wakeHeldNoMore() {
      // Mirrored as held, held no more in the ledger: confirmed by a pod's bind (on any replica) or by the CLI.
      const held = informers.reservations.list().flatMap((r) => (r.status?.state === 'held' && r.status.reservationId ? [r.status.reservationId] : []));
      const changed = await ctx.ledger.heldNoMore(held);
      this.wakeReservations(changed);
      return changed;
    },
    wakeReservations(ids) {
      const set = new Set(ids);
      for (const r of informers.reservations.list()) {
        const ids = [r.status?.reservationId, ...(r.status?.occurrences ?? []).map((o) => o.reservationId)];
        if (ids.some((id) => id !== undefined && set.has(id))) queues.reservations.add(keyOf(r));
      }
    },
    async stopLeading() {
      leading = false;
      await Promise.all(Object.values(queues).map((q) => q.stop()));
    },
    async stop() {
      leading = false;
      pendingWakes.stop();
      await Promise.all(Object.values(queues).map((q) => q.stop()));
      await Promise.all(Object.values(informers).map((i) => i.stop()));
    },
  };
}
