// Release: a pod that ends gives its atoms back — its reservation assignment freed, its on-demand booking truncated,
// its admission lease dropped, in one transaction (Ledger.releasePod) — and pods whose booking ends are stopped ahead
// of its end (controller/stopper.ts). Started by the leader (each step is idempotent, so a second replica doing it is harmless).
//
// Only on evidence that the pod is gone (docs: DESIGN.md "Faults"):
// - a watch event: the pod terminated (Succeeded, Failed) or was deleted; a pod the cache held and that a complete,
//   successful relist lacks, or whose name now belongs to another uid, was deleted too (uids are never reused);
// - the orphan sweep, for pods that went while nobody watched: a pod that holds atoms and is missing from a complete,
//   successful pod LIST is released only when a second such LIST, started at least `orphanGraceMs` after the first
//   completed, still lacks it. A failed, partial or not yet made list proves nothing, and an empty cache is never read
//   as "no pods".
// A release that fails (database down) is retried with backoff until it commits; only the pending retries are kept.
import * as k8s from '@kubernetes/client-node';
import { Informer } from '../kube/informer.ts';
import { listAllPages, type ListPage, type PageFetcher } from '../kube/paging.ts';
import { createStopper, type StoppedPod } from './stopper.ts';
import { FencedError, type Ledger } from '../db/ledger.ts';
import type { Db } from '../db/pool.ts';
import { systemClock, type MonotonicClock } from '../clock.ts';
import { errorFields, type Logger } from '../log.ts';
import type { ExtenderKube } from '../extender/kube.ts';
import { podsHolding } from '../db/reads.ts';

export interface ReleaserDeps {
  db: Db;
  ledger: Ledger;
  kube: ExtenderKube;
  kubeConfig: k8s.KubeConfig;
  log: Logger;
  /** How often bookings that end are looked for (ms); the stop's slack covers one such period (core/stop.ts). */
  sweepEveryMs?: number;
  /**
   * How long a pod that holds atoms must stay missing from successful pod lists before it is released (default 30 s):
   * two lists this far apart both lack it. Covers a pod that is bound while a list is in flight.
   */
  orphanGraceMs?: number;
  /** The orphan grace is measured on it. */
  clock?: MonotonicClock;
  /** How often the orphan sweep lists pods (default 60 s; it also runs at start). */
  orphanSweepEveryMs?: number;
  /** Backoff of a failed release: from this, doubling (default 500 ms) ... */
  retryMinMs?: number;
  /** ... up to this (default 30 s). */
  retryMaxMs?: number;
  /** Told the pools where a release gave bookings back (an ended Reservation's last pod gone, or an on-demand pod's). */
  onFreed?: (poolIds: readonly string[]) => void;
  /** The pod watch's server-side timeout and liveness (the Informer's defaults when unset). */
  watchTimeoutSeconds?: number;
  watchLivenessMs?: number;
}

export interface Releaser {
  /**
   * Releases what one pod holds (for callers that know the pod is gone). Resolves true once committed; false when it
   * failed and a retry is scheduled (or the write was fenced: another replica leads and releases it).
   */
  release(podUid: string): Promise<boolean>;
  /** One pass over bookings that end: stops their pods (controller/stopper.ts). Returns the pods acted on. */
  sweep(): Promise<StoppedPod[]>;
  /**
   * One orphan pass: lists every pod (all pages) and releases the holdings of pods missing from this list and from one
   * at least `orphanGraceMs` before it. Rejects, releasing nothing, when the list fails. For the drift reconcile too.
   */
  sweepOrphans(): Promise<{ released: string[] }>;
  /** Pods whose release failed and waits for a retry. */
  pendingRetries(): string[];
  stop(): Promise<void>;
}

const TERMINAL = new Set(['Succeeded', 'Failed']);

interface PodLite {
  metadata: { name: string; namespace?: string; uid?: string; resourceVersion?: string };
  status?: { phase?: string };
}

/** Only what release needs is kept in the cache. */
const lite = (p: k8s.V1Pod): PodLite & { metadata: { name: string } } => ({
  metadata: { name: p.metadata?.name ?? '', namespace: p.metadata?.namespace, uid: p.metadata?.uid, resourceVersion: p.metadata?.resourceVersion },
  status: { phase: p.status?.phase },
});

type Release = (uid: string, why: string) => Promise<boolean>;
type PodCached = PodLite & { metadata: { name: string } };

export async function startPodReleaser(deps: ReleaserDeps): Promise<Releaser> {
  const core = deps.kubeConfig.makeApiClient(k8s.CoreV1Api);
  const log = deps.log;
  let stopped = false;
  const { release, retries } = retryingRelease({
    ledger: deps.ledger,
    log,
    retryMinMs: deps.retryMinMs ?? 500,
    retryMaxMs: deps.retryMaxMs ?? 30_000,
    stopped: () => stopped,
    onFreed: deps.onFreed,
  });
  const podPages: PageFetcher<k8s.V1Pod> = (p) =>
    core.listPodForAllNamespaces({ limit: p.limit, ...(p.continue ? { _continue: p.continue } : {}) }) as Promise<ListPage<k8s.V1Pod>>;
  const informer = watchPods(deps, podPages, release);
  informer.start();

  // One orphan pass at a time: callers (the timer, the drift reconcile) queue behind a running one.
  const sweepOrphans = oneAtATime(
    orphanPass({ db: deps.db, clock: deps.clock ?? systemClock, orphanGraceMs: deps.orphanGraceMs ?? 30_000, podPages, release }),
  );
  const orphansQuietly = () => {
    if (stopped) return;
    sweepOrphans().catch((e: unknown) => log.warn('orphan sweep failed; nothing released', errorFields(e)));
  };

  // ---- pods whose booking ends ---------------------------------------------------------------------------------
  const sweep = oneAtATime(createStopper({ db: deps.db, kube: deps.kube, log }));

  orphansQuietly();
  const timers = [
    setInterval(orphansQuietly, deps.orphanSweepEveryMs ?? 60_000),
    setInterval(() => {
      void sweep().catch((e: unknown) => log.warn('stop sweep failed', errorFields(e)));
    }, deps.sweepEveryMs ?? 5000),
  ];
  for (const t of timers) t.unref();

  return {
    release: (uid) => release(uid, 'asked'),
    sweep,
    sweepOrphans,
    pendingRetries: () => [...retries.keys()],
    async stop() {
      stopped = true;
      for (const t of timers) clearInterval(t);
      for (const r of retries.values()) clearTimeout(r.timer);
      retries.clear();
      await informer.stop();
    },
  };
}

/** Releases, retried until they commit: one attempt per pod at a time; a failed one again after a doubling backoff. */
function retryingRelease(o: {
  ledger: Ledger;
  log: Logger;
  retryMinMs: number;
  retryMaxMs: number;
  stopped: () => boolean;
  onFreed: ReleaserDeps['onFreed'];
}): {
  release: Release;
  retries: Map<string, { attempt: number; timer: NodeJS.Timeout }>;
} {
  const { log, retryMinMs, retryMaxMs } = o;
  const retries = new Map<string, { attempt: number; timer: NodeJS.Timeout }>();
  const inflight = new Map<string, Promise<boolean>>();

  const attempt = async (uid: string, why: string): Promise<boolean> => {
    try {
      const { held, pools } = await o.ledger.releasePodFreeing(uid);
      if (pools.length) o.onFreed?.(pools);
      const r = retries.get(uid);
      if (r) clearTimeout(r.timer);
      retries.delete(uid);
      if (held || r) log.info('released pod holdings', { podUid: uid, why, ...(r ? { attempts: r.attempt + 1 } : {}) });
      return true;
    } catch (e) {
      if (o.stopped()) return false;
      if (e instanceof FencedError) {
        // Another replica leads now; its releaser finds the pod gone as well.
        retries.delete(uid);
        log.warn('release fenced: another replica leads', { podUid: uid });
        return false;
      }
      const prev = retries.get(uid);
      if (prev) clearTimeout(prev.timer);
      const n = (prev?.attempt ?? 0) + 1;
      const delayMs = Math.min(retryMaxMs, retryMinMs * 2 ** (n - 1));
      log.error('release failed; retrying', { podUid: uid, why, attempt: n, delayMs, ...errorFields(e) });
      const timer = setTimeout(() => void release(uid, why), delayMs);
      timer.unref?.();
      retries.set(uid, { attempt: n, timer });
      return false;
    }
  };

  const release = (uid: string, why: string): Promise<boolean> => {
    if (o.stopped()) return Promise.resolve(false);
    const running = inflight.get(uid);
    if (running) return running;
    const p = attempt(uid, why).finally(() => inflight.delete(uid));
    inflight.set(uid, p);
    return p;
  };
  return { release, retries };
}

/** The pod watch (not started): a pod that ended, was deleted, or whose name another uid took is released. */
function watchPods(deps: ReleaserDeps, podPages: PageFetcher<k8s.V1Pod>, release: Release): Informer<PodCached> {
  const uidOf = (p: PodLite) => p.metadata.uid;
  const informer = new Informer<PodCached>({
    name: 'pods-releaser',
    kc: deps.kubeConfig,
    path: '/api/v1/pods',
    // In pages, each mapped to what release needs before the next is asked for (kube/paging.ts).
    list: () => listAllPages(podPages, lite),
    // Watch events bring whole pods: the cache keeps their lite form too (50,000 whole pods are gigabytes).
    transform: (p) => lite(p as k8s.V1Pod),
    log: deps.log,
    ...(deps.watchTimeoutSeconds ? { watchTimeoutSeconds: deps.watchTimeoutSeconds } : {}),
    ...(deps.watchLivenessMs ? { livenessMs: deps.watchLivenessMs } : {}),
  });
  const ended = (p: PodLite) => TERMINAL.has(p.status?.phase ?? '');
  informer.on({
    add: (p) => {
      const uid = uidOf(p);
      if (uid && ended(p)) void release(uid, `pod ${p.status?.phase}`);
    },
    update: (old, p) => {
      const uid = uidOf(p);
      const oldUid = uidOf(old);
      if (oldUid && oldUid !== uid) void release(oldUid, 'pod replaced by another of its name');
      if (uid && ended(p)) void release(uid, `pod ${p.status?.phase}`);
    },
    delete: (p) => {
      const uid = uidOf(p);
      if (uid) void release(uid, 'pod deleted');
    },
  });
  return informer;
}

/**
 * One orphan pass: a pod that holds atoms and that two complete pod lists, at least `orphanGraceMs` apart, both lack is
 * released. Returns the pods released.
 */
function orphanPass(o: {
  db: Db;
  clock: MonotonicClock;
  orphanGraceMs: number;
  podPages: PageFetcher<k8s.V1Pod>;
  release: Release;
}): () => Promise<{ released: string[] }> {
  // uid → when (the monotonic clock) the first successful list lacking it completed. Only holders are kept.
  const missingSince = new Map<string, number>();

  // Complete only when its last page arrived; an expired continue token restarts it from the first (kube/paging.ts).
  const listPodUids = async (): Promise<Set<string>> => {
    const { items } = await listAllPages(o.podPages, (p) => p.metadata?.uid);
    return new Set(items.filter((u): u is string => !!u));
  };

  return async () => {
    // The holders are read before the list: a pod exists before anything is booked for it, so a holder that a
    // complete list made afterwards lacks is gone (or was not there when listed: hence the second list).
    const holders = await podsHolding(o.db);
    const startedAt = o.clock.now();
    const live = await listPodUids();
    const doneAt = o.clock.now();
    const holding = new Set(holders);
    for (const uid of [...missingSince.keys()]) if (!holding.has(uid) || live.has(uid)) missingSince.delete(uid);
    const released: string[] = [];
    for (const uid of holders) {
      if (live.has(uid)) continue;
      const since = missingSince.get(uid);
      if (since === undefined) {
        missingSince.set(uid, doneAt);
        continue;
      }
      if (startedAt - since < o.orphanGraceMs) continue;
      missingSince.delete(uid);
      if (await o.release(uid, 'missing from two pod lists')) released.push(uid);
    }
    return { released };
  };
}

/** `pass` run one call at a time: a call made while one runs waits for it, whether it succeeded or failed. */
function oneAtATime<T>(pass: () => Promise<T>): () => Promise<T> {
  let chain: Promise<unknown> = Promise.resolve();
  return () => {
    const p = chain.then(pass, pass);
    chain = p.catch(() => undefined);
    return p;
  };
}
