// A ControllerContext for driving the reconcilers directly in db tests: the real database, ledger, clock and fence,
// informers that are plain maps, and a Kubernetes client that applies its writes to those maps (status merge patches,
// finalizers; an object whose deletion waits only for the finalizer goes when it is removed) and records them.
import type { ControllerContext } from '../../src/controller/context.ts';
import { FenceHolder } from '../../src/controller/fence.ts';
import type { Informer } from '../../src/kube/informer.ts';
import type { EventInput, KubeClient } from '../../src/kube/client.ts';
import type { ControllerMetrics } from '../../src/controller/metrics.ts';
import type { WorkQueue } from '../../src/controller/queue.ts';
import { keyOf, type KubeObject, type NamespaceCR, type NodeCR, type NodeDevicesCR, type PoolCR, type Reservation } from '../../src/kube/types.ts';
import type { DbClock } from '../../src/db/clock.ts';
import { Ledger } from '../../src/db/ledger.ts';
import type { Db } from '../../src/db/pool.ts';
import { silentLogger } from '../../src/log.ts';

/** An informer's cache without a watch: what the test puts in is what the reconciler sees. */
export class MapInformer<T extends KubeObject> {
  readonly cache = new Map<string, T>();
  readonly hasSynced = true;
  get(key: string): T | undefined {
    return this.cache.get(key);
  }
  list(): T[] {
    return [...this.cache.values()];
  }
  put(o: T): T {
    this.cache.set(keyOf(o), o);
    return o;
  }
}

export interface RecordedEvent extends EventInput {
  kind: string;
  key: string;
}

export interface FakeController {
  ctx: ControllerContext;
  informers: {
    reservations: MapInformer<Reservation>;
    pools: MapInformer<PoolCR>;
    nodes: MapInformer<NodeCR>;
    nodeDevices: MapInformer<NodeDevicesCR>;
    namespaces: MapInformer<NamespaceCR>;
  };
  events: RecordedEvent[];
  statusWrites: { kind: string; key: string; status: Record<string, unknown> }[];
  /** Keys queued by the reconcilers (queues.*.add). */
  queued: string[];
}

/** RFC 7386 JSON merge patch. */
function mergePatch(target: unknown, patch: unknown): unknown {
  if (patch === null || typeof patch !== 'object' || Array.isArray(patch)) return patch;
  const out: Record<string, unknown> = target && typeof target === 'object' && !Array.isArray(target) ? { ...(target as Record<string, unknown>) } : {};
  for (const [k, v] of Object.entries(patch as Record<string, unknown>)) {
    if (v === null) delete out[k];
    else if (v !== undefined) out[k] = mergePatch(out[k], v);
  }
  return out;
}

export async function fakeController(o: { db: Db; clock: DbClock }): Promise<FakeController> {
  const fence = new FenceHolder(`test-${Math.random().toString(36).slice(2)}`);
  await fence.take(o.db, 'test-leader');
  const informers = {
    reservations: new MapInformer<Reservation>(),
    pools: new MapInformer<PoolCR>(),
    nodes: new MapInformer<NodeCR>(),
    nodeDevices: new MapInformer<NodeDevicesCR>(),
    namespaces: new MapInformer<NamespaceCR>(),
  };
  const events: RecordedEvent[] = [];
  const statusWrites: FakeController['statusWrites'] = [];
  const queued: string[] = [];
  const notFound = (what: string) => Object.assign(new Error(`${what} not found`), { code: 404 });
  const patchStatus = <T extends KubeObject>(inf: MapInformer<T>, kind: string, key: string, status: Record<string, unknown>) => {
    const cur = inf.get(key);
    if (!cur) throw notFound(key);
    statusWrites.push({ kind, key, status: structuredClone(status) });
    const s = JSON.parse(JSON.stringify(status)) as unknown;
    inf.put({ ...cur, status: mergePatch((cur as { status?: unknown }).status, s) } as T);
  };
  const kube = {
    async patchReservationStatus(ns: string, name: string, status: Record<string, unknown>) {
      patchStatus(informers.reservations, 'Reservation', `${ns}/${name}`, status);
    },
    async setReservationFinalizers(ns: string, name: string, finalizers: string[]) {
      const key = `${ns}/${name}`;
      const cur = informers.reservations.get(key);
      if (!cur) throw notFound(key);
      const next: Reservation = { ...cur, metadata: { ...cur.metadata, finalizers } };
      if (cur.metadata.deletionTimestamp && finalizers.length === 0) informers.reservations.cache.delete(key);
      else informers.reservations.put(next);
      return next;
    },
    async patchNodeDevicesStatus(name: string, status: Record<string, unknown>) {
      patchStatus(informers.nodeDevices, 'NodeDevices', name, status);
    },
    async patchPoolStatus(name: string, status: Record<string, unknown>) {
      patchStatus(informers.pools, 'Pool', name, status);
    },
  } as unknown as KubeClient;
  const queue = { add: (k: string) => void queued.push(k), forget: () => undefined } as unknown as WorkQueue;
  const poolIds = new Map<string, string>();
  const ctx: ControllerContext = {
    db: o.db,
    ledger: new Ledger(o.db, { fence: fence.fence }),
    clock: o.clock,
    kube,
    log: silentLogger,
    fence: fence.fence,
    metrics: {} as ControllerMetrics,
    // Tenancy by name on: these tests' namespaces are their tenants by name (ADR 0005); off is tested on its own.
    tuning: { capacityRefreshMs: 60_000, pendingMaxBackoffMs: 60_000, reservationWorkers: 1, recurrenceHorizonMs: 7 * 86_400_000, tenancyByName: true },
    informers: informers as unknown as ControllerContext['informers'] & Record<string, Informer<KubeObject>>,
    queues: { reservations: queue, pools: queue, nodes: queue, nodeDevices: queue },
    poolIds,
    nodeWritten: new Map(),
    inventoryApplied: new Map(),
    async event(obj, kind, e) {
      events.push({ kind, key: keyOf(obj), ...e });
    },
    nowIso: () => new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
    wakePending: () => undefined,
    pendingInPool: (pool) =>
      informers.reservations.list().filter((r) => r.spec.pool === pool && (r.status?.phase === undefined || r.status.phase === 'Pending')),
    poolNameOf(poolId) {
      for (const [name, id] of poolIds) if (id === poolId) return name;
      return undefined;
    },
  };
  return { ctx, informers, events, statusWrites, queued };
}
