// The leader's stop of pods whose booking ends (docs/booking-end.md): a Reservation's pods and a spot victim's pods are
// told to stop ahead of the window's end or the notice's deadline, with a grace period the pool caps (core/stop.ts), so
// they are gone when the next booking on their atoms begins. An eviction refused (a PodDisruptionBudget, a webhook) is
// followed by a delete with the same grace: a booking outranks a disruption budget. Each pod is stopped once per
// leader; a pod whose name now belongs to another uid is not touched (its successor is not the booking's pod).
// The holdings themselves are released by the releaser, on evidence that the pod is gone, never here.
import { DEFAULT_STOP_SLACK_SECONDS, stopGraceSeconds } from '../core/stop.ts';
import type { Db } from '../db/pool.ts';
import { httpStatus, type ExtenderKube } from '../extender/kube.ts';
import { podsToStop, type PodToStop } from '../db/reads.ts';
import { errorFields, type Logger } from '../log.ts';

export interface StopperDeps {
  db: Db;
  kube: Pick<ExtenderKube, 'getPod' | 'evictPod' | 'deletePod'>;
  log: Logger;
  /** What the deadline leaves beyond the grace (core/stop.ts). */
  slackSeconds?: number;
}

export interface StoppedPod {
  pod: string;
  reservationId: string;
  /** `evicted`; `deleted` when the eviction was refused; `gone` when the pod (that uid) no longer exists. */
  how: 'evicted' | 'deleted' | 'gone';
  graceSeconds: number;
}

interface PodLite {
  metadata?: { uid?: string; deletionTimestamp?: unknown };
  spec?: { terminationGracePeriodSeconds?: unknown };
}

/** One pass at a time is the caller's to ensure (the releaser's timer). Returns the pods acted on in this pass. */
export function createStopper(deps: StopperDeps): () => Promise<StoppedPod[]> {
  const slackSeconds = deps.slackSeconds ?? DEFAULT_STOP_SLACK_SECONDS;
  const stopped = new Set<string>();
  const log = deps.log;

  const stopOne = async (r: PodToStop): Promise<StoppedPod> => {
    const pod = `${r.namespace}/${r.podName}`;
    const gone: StoppedPod = { pod, reservationId: r.reservationId, how: 'gone', graceSeconds: 0 };
    // 404: gone; 409: the uid precondition failed, the name is a successor's.
    const isGone = (e: unknown) => [404, 409].includes(httpStatus(e) ?? 0);
    const found = (await deps.kube.getPod(r.namespace, r.podName)) as PodLite | undefined;
    if (!found || (found.metadata?.uid && found.metadata.uid !== r.podUid)) return gone;
    const own = found.spec?.terminationGracePeriodSeconds;
    const policy = { stopGraceSeconds: r.stopGraceSeconds, slackSeconds };
    const graceSeconds = stopGraceSeconds(r.deadlineMs, r.nowMs, typeof own === 'number' && own >= 0 ? own : undefined, policy);
    const fields = {
      pod,
      reservationId: r.reservationId,
      graceSeconds,
      ...(r.deadlineMs !== null ? { deadline: new Date(r.deadlineMs).toISOString() } : {}),
    };
    try {
      await deps.kube.evictPod(r.namespace, r.podName, graceSeconds, r.podUid);
      log.info('evicted pod whose booking ends', fields);
      return { pod, reservationId: r.reservationId, how: 'evicted', graceSeconds };
    } catch (e) {
      if (isGone(e)) return gone;
      // 429: a PodDisruptionBudget refused; anything else (a webhook, a timeout): the booking ends all the same.
      log.warn('eviction refused; deleting the pod, its booking ends', { ...fields, status: httpStatus(e), ...errorFields(e) });
    }
    try {
      await deps.kube.deletePod(r.namespace, r.podName, graceSeconds, r.podUid);
    } catch (e) {
      if (isGone(e)) return gone;
      throw e;
    }
    log.info('deleted pod whose booking ends', fields);
    return { pod, reservationId: r.reservationId, how: 'deleted', graceSeconds };
  };

  return async () => {
    const rows = await podsToStop(deps.db, slackSeconds);
    const current = new Set(rows.map((r) => r.podUid));
    for (const uid of stopped) if (!current.has(uid)) stopped.delete(uid);
    const out: StoppedPod[] = [];
    for (const r of rows) {
      if (stopped.has(r.podUid)) continue;
      try {
        out.push(await stopOne(r));
        stopped.add(r.podUid);
      } catch (e) {
        log.warn('stopping a pod failed; retried next pass', { pod: `${r.namespace}/${r.podName}`, ...errorFields(e) });
      }
    }
    return out;
  };
}
