// Release: a pod that ends (Succeeded, Failed, deleted) gives its atoms back — its reservation assignment is freed, or
// its on-demand booking truncated — and its admission lease, if any, dropped. Pods of a reservation that has ended are
// evicted with a grace period. Started by the controller (every replica may run it: each step is idempotent).
import * as k8s from '@kubernetes/client-node';
import type { Ledger } from '../db/ledger.ts';
import type { Db } from '../db/pool.ts';
import { errorFields, type Logger } from '../log.ts';
import { httpStatus, type ExtenderKube } from './kube.ts';
import { dropAdmission, releaseAssignment } from './queries.ts';

export interface ReleaserDeps {
  db: Db;
  ledger: Ledger;
  kube: ExtenderKube;
  kubeConfig: k8s.KubeConfig;
  log: Logger;
  /** Grace period of the eviction of a pod whose reservation ended. */
  evictionGraceSeconds?: number;
  /** How often ended reservations are looked for (ms). */
  sweepEveryMs?: number;
}

export interface Releaser {
  /** Releases what one pod holds (exposed for tests and for callers that know a pod ended). */
  release(podUid: string): Promise<void>;
  /** One pass over ended reservations: evicts their pods. Returns the pods evicted. */
  sweep(): Promise<string[]>;
  stop(): Promise<void>;
}

const TERMINAL = new Set(['Succeeded', 'Failed']);

export async function releasePodHoldings(db: Db, ledger: Ledger, podUid: string): Promise<boolean> {
  // A pod holds either an assignment (reservation) or a booking (on demand); each release is one transaction.
  const a = await releaseAssignment(db, podUid);
  const b = await ledger.releasePod(podUid);
  await dropAdmission(db, null, podUid);
  return a || b;
}

export async function startPodReleaser(deps: ReleaserDeps): Promise<Releaser> {
  const grace = deps.evictionGraceSeconds ?? 30;
  const core = deps.kubeConfig.makeApiClient(k8s.CoreV1Api);
  const released = new Set<string>();
  const evicted = new Set<string>();
  let stopped = false;

  const release = async (uid: string) => {
    if (released.has(uid)) return;
    try {
      if (await releasePodHoldings(deps.db, deps.ledger, uid)) deps.log.info('released pod holdings', { podUid: uid });
      released.add(uid);
    } catch (e) {
      deps.log.error('release failed', { podUid: uid, ...errorFields(e) });
    }
  };

  const onPod = (pod: k8s.V1Pod, deleted: boolean) => {
    const uid = pod.metadata?.uid;
    if (!uid) return;
    if (deleted || TERMINAL.has(pod.status?.phase ?? '')) void release(uid);
  };

  const informer = k8s.makeInformer(deps.kubeConfig, '/api/v1/pods', () => core.listPodForAllNamespaces());
  informer.on('add', (p) => onPod(p, false));
  informer.on('update', (p) => onPod(p, false));
  informer.on('delete', (p) => onPod(p, true));
  informer.on('error', () => {
    if (stopped) return;
    setTimeout(() => {
      if (!stopped) void informer.start().catch((e: unknown) => deps.log.warn('pod informer restart failed', errorFields(e)));
    }, 1000);
  });
  await informer.start();

  // Holdings of pods that went while nobody watched.
  const orphans = async () => {
    const live = new Set(informer.list().map((p) => p.metadata?.uid));
    const { rows } = await deps.db.query<{ uid: string }>(
      `SELECT pod_uid AS uid FROM reservation_pod_assignments WHERE released_at IS NULL
       UNION SELECT pod_uid FROM allocations WHERE kind = 'pod' AND released_at IS NULL
       UNION SELECT pod_uid FROM ondemand_admissions`,
    );
    for (const r of rows) if (!live.has(r.uid)) await release(r.uid);
  };

  const sweep = async (): Promise<string[]> => {
    const { rows } = await deps.db.query<{ pod_uid: string; namespace: string; pod_name: string }>(
      `SELECT a.pod_uid, a.namespace, a.pod_name FROM reservation_pod_assignments a JOIN reservations r ON r.id = a.reservation_id
       WHERE a.released_at IS NULL AND (r.state IN ('released', 'expired') OR r.ends_at <= compute_now())`,
    );
    const out: string[] = [];
    for (const r of rows) {
      if (evicted.has(r.pod_uid)) continue;
      try {
        await deps.kube.evictPod(r.namespace, r.pod_name, grace);
        deps.log.info('evicted pod of an ended reservation', { pod: `${r.namespace}/${r.pod_name}`, graceSeconds: grace });
      } catch (e) {
        if (httpStatus(e) !== 404) {
          deps.log.warn('eviction failed', { pod: `${r.namespace}/${r.pod_name}`, ...errorFields(e) });
          continue;
        }
      }
      evicted.add(r.pod_uid);
      out.push(`${r.namespace}/${r.pod_name}`);
    }
    return out;
  };

  await orphans().catch((e: unknown) => deps.log.warn('orphan release failed', errorFields(e)));
  const timer = setInterval(() => {
    void sweep().catch((e: unknown) => deps.log.warn('reservation sweep failed', errorFields(e)));
  }, deps.sweepEveryMs ?? 5000);
  timer.unref();

  return {
    release,
    sweep,
    async stop() {
      stopped = true;
      clearInterval(timer);
      await informer.stop();
    },
  };
}
