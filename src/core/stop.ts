// When the pods of a booking are stopped, and with what grace period (docs/booking-end.md). Pure: the ledger gives the
// deadline and its clock's now, the API server the pod's own grace; this says when to begin and how long to grant.
//
// A booking's end is the end of its containers: the next booking on the same atoms is live from that instant. So a
// pod is told to stop `grace + slackSeconds` before the deadline, with a grace period capped by the pool's
// `stopGraceSeconds`, and never longer than the time left before the deadline less the kubelet's kill margin.

export interface StopPolicy {
  /** The longest grace period a pod of the pool gets (Pool `spec.stopGraceSeconds`, default 30). */
  stopGraceSeconds: number;
  /**
   * What the deadline must leave beyond the grace: one pass of the loop that stops pods (it may come this late) plus
   * the kubelet's time to kill the container and report it.
   */
  slackSeconds: number;
}

export const DEFAULT_STOP_GRACE_SECONDS = 30;
/** The releaser's sweep runs every 5 s; the kubelet needs a few seconds after the grace to kill and report. */
export const DEFAULT_STOP_SLACK_SECONDS = 10;
/** Kubernetes' grace when a pod names none. */
export const KUBERNETES_DEFAULT_GRACE_SECONDS = 30;
/** The kubelet's share of the slack: the grace never runs closer to the deadline than this. */
const KILL_MARGIN_SECONDS = 5;

/** When the pods of a booking ending at `deadlineMs` begin to be stopped. */
export function stopBeginsAt(deadlineMs: number, policy: StopPolicy): number {
  return deadlineMs - (policy.stopGraceSeconds + policy.slackSeconds) * 1000;
}

/**
 * The grace period for a pod stopped at `nowMs`: its own (Kubernetes' default when it names none), capped by the pool,
 * and ending at least the kill margin before the deadline; at least 1 s, never 0 (a grace of 0 deletes the pod object
 * before its container has stopped, and the pod's atoms would be released while it still runs). A deadline already
 * past (a pod found after its booking's end) leaves 1 s; no deadline (`deadlineMs` null: a node in maintenance, whose
 * bookings are kept until the pod is gone) gets the capped grace.
 */
export function stopGraceSeconds(deadlineMs: number | null, nowMs: number, podGraceSeconds: number | undefined, policy: StopPolicy): number {
  const own = podGraceSeconds ?? KUBERNETES_DEFAULT_GRACE_SECONDS;
  const capped = Math.min(own, policy.stopGraceSeconds);
  if (deadlineMs === null) return Math.max(1, capped);
  const left = Math.floor((deadlineMs - nowMs) / 1000) - KILL_MARGIN_SECONDS;
  return Math.max(1, Math.min(capped, left));
}
