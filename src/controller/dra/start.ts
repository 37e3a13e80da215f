// Starts the claim allocator on the leader (ADR 0043): an informer on ResourceClaims (resource.k8s.io/v1) and one work
// queue of claim keys (allocator.ts). A cluster that does not serve resource.k8s.io/v1 (before 1.34, or the RBAC of
// deploy/dra not installed) is asked again every `pollMs`, as the Kueue check waits for Kueue. A Reservation that
// changes wakes the claims of its namespace; a window's start wakes its claims by the queue's delay. The claims are
// also indexed by the pod that owns them, for the scheduling gate's lifting (ADR 0049: every claim of ours of the pod
// allocated). Stopped with the leadership.
import type { KubeConfig } from '@kubernetes/client-node';
import { ledgerBookings } from '../../admission/bookings.ts';
import type { Fence, Ledger } from '../../db/ledger.ts';
import type { Db } from '../../db/pool.ts';
import type { KubeClient } from '../../kube/client.ts';
import { Informer } from '../../kube/informer.ts';
import { RESOURCE_CLAIMS_PATH, ResourceClaimClient, type ResourceClaimObject } from '../../kube/resource-claims.ts';
import { schedulingGateRemover } from '../../kube/scheduling-gates.ts';
import { keyOf, type NamespaceCR, type Reservation } from '../../kube/types.ts';
import { claimPodRef, ResourceClaimSchema } from '../../core/dra-allocate.ts';
import { ClientNodeExtenderKube } from '../../extender/kube.ts';
import type { Logger } from '../../log.ts';
import { fenced } from '../fence.ts';
import { WorkQueue, type WorkQueueOptions } from '../queue.ts';
import { startWhenServed } from '../when-served.ts';
import { ClaimAllocator } from './allocator.ts';

export interface ClaimAllocatorOptions {
  kc: KubeConfig;
  kube: KubeClient;
  db: Db;
  /** The leader's (fenced) ledger. */
  ledger: Ledger;
  fence: () => Fence;
  log: Logger;
  reservations: Informer<Reservation>;
  namespaces: Informer<NamespaceCR>;
  nowMs: () => number;
  tenancyByName: boolean;
  watchTimeoutSeconds: number;
  watchLivenessMs: number;
  /** How often to ask whether resource.k8s.io/v1 is served, until it is (default 30 s). */
  pollMs?: number;
  /** How many claims are reconciled at once (default 4). */
  workers?: number;
  /** Called once per reconciled claim key with its duration and outcome (the WorkQueue's; bench:scheduler's profile). */
  onProcessed?: WorkQueueOptions['onProcessed'];
}

/** Starts waiting for the DRA API, then allocating; `stop()` ends either. */
export function startClaimAllocator(o: ClaimAllocatorOptions): { stop(): Promise<void> } {
  const client = new ResourceClaimClient(o.kc);
  const work = startWhenServed({
    what: 'dra',
    served: async () => {
      const state = await client.served();
      if (state !== 'served') o.log.info('dra: resource.k8s.io/v1 ResourceClaims are not served or not ours to read; asking again', { state });
      return state === 'served';
    },
    start: () => start(o, client),
    stopRunning: async (r) => {
      await r.queue.stop();
      await r.claims.stop();
    },
    log: o.log,
    pollMs: o.pollMs,
  });
  const wake = (r: Reservation) => {
    const running = work.running();
    if (!running) return;
    for (const c of running.claims.list()) if (c.metadata.namespace === r.metadata.namespace) running.queue.add(keyOf(c));
  };
  o.reservations.on({ add: wake, update: (_a, b) => wake(b), delete: wake });
  return { stop: () => work.stop() };
}

function start(o: ClaimAllocatorOptions, client: ResourceClaimClient): { claims: Informer<ResourceClaimObject>; queue: WorkQueue } {
  const claims = new Informer<ResourceClaimObject>({
    name: 'resourceclaims',
    kc: o.kc,
    path: RESOURCE_CLAIMS_PATH,
    list: client.list,
    log: o.log,
    watchTimeoutSeconds: o.watchTimeoutSeconds,
    livenessMs: o.watchLivenessMs,
  });
  const queue = new WorkQueue({ name: 'resourceclaims', workers: o.workers ?? 4, log: o.log, maxDelayMs: 30_000, ...(o.onProcessed ? { onProcessed: o.onProcessed } : {}) });
  const pods = new ClientNodeExtenderKube(o.kc);
  const owned = new ClaimsByPod();
  const allocator = new ClaimAllocator({
    claims,
    claimsOwnedBy: (ns, podUid) => owned.keysOf(podUid).flatMap((k) => {
      const c = claims.get(k);
      return c && c.metadata.namespace === ns ? [c] : [];
    }),
    reservations: o.reservations,
    namespaces: o.namespaces,
    kube: {
      getPod: (ns, name) => pods.getPod(ns, name),
      replaceStatus: (c) => client.replaceStatus(c),
      removeSchedulingGate: schedulingGateRemover(o.kc),
      setFinalizers: (ns, name, f, rv) => client.setFinalizers(ns, name, f, rv),
      event: (obj, kind, e) => o.kube.event(obj, kind, e),
    },
    ledger: o.ledger,
    bookings: ledgerBookings(o.db),
    fenced: (fn) => fenced(o.db, o.fence(), () => fn()),
    nowMs: o.nowMs,
    tenancyByName: o.tenancyByName,
    log: o.log,
  });
  claims.on({
    add: (c) => {
      owned.set(c);
      queue.add(keyOf(c));
    },
    update: (_a, b) => {
      owned.set(b);
      queue.add(keyOf(b));
    },
    delete: (c) => owned.drop(c),
  });
  claims.start();
  void claims.synced.then(() => queue.start((k) => allocator.reconcile(k)));
  o.log.info('dra: claim allocator started');
  return { claims, queue };
}

/** The claims' keys by the uid of the pod that owns them (their controlling owner reference): a gated pod's claims. */
class ClaimsByPod {
  private readonly byPod = new Map<string, Set<string>>();
  private readonly podOf = new Map<string, string>();

  set(c: ResourceClaimObject): void {
    const key = keyOf(c);
    const parsed = ResourceClaimSchema.safeParse(c);
    const pod = parsed.success ? claimPodRef(parsed.data)?.uid : undefined;
    if (this.podOf.get(key) === pod) return;
    this.drop(c);
    if (!pod) return;
    this.podOf.set(key, pod);
    const keys = this.byPod.get(pod) ?? new Set<string>();
    keys.add(key);
    this.byPod.set(pod, keys);
  }

  drop(c: ResourceClaimObject): void {
    const key = keyOf(c);
    const pod = this.podOf.get(key);
    if (pod === undefined) return;
    this.podOf.delete(key);
    const keys = this.byPod.get(pod);
    keys?.delete(key);
    if (keys?.size === 0) this.byPod.delete(pod);
  }

  keysOf(podUid: string): string[] {
    return [...(this.byPod.get(podUid) ?? [])];
  }
}
