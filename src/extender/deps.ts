// What the extender's parts (service.ts: the facade; judge.ts, binder.ts, admitting.ts) are handed.
import type { MonotonicClock } from '../clock.ts';
import type { Clock } from '../db/clock.ts';
import type { Ledger } from '../db/ledger.ts';
import type { Db } from '../db/pool.ts';
import type { Logger } from '../log.ts';
import type { ExtenderKube } from './kube.ts';
import type { ExtenderState, PodBookingApplied } from './state.ts';

export interface ExtenderMetrics {
  onCall?(verb: 'filter' | 'prioritize' | 'bind', seconds: number, outcome: string): void;
}

export interface ExtenderDeps {
  db: Db;
  ledger: Ledger;
  /** Ledger time (compute_now()): booking windows. */
  clock: Clock;
  /** Elapsed time (src/clock.ts): the caches' TTLs, the admitting marks, the bind's waits and undo retries, call durations. */
  monotonic?: MonotonicClock;
  kube: ExtenderKube;
  log: Logger;
  metrics?: ExtenderMetrics;
  /** The scheduler's MaxExtenderPriority (10 in kube-scheduler v1). */
  maxPriority?: number;
  /** How long an on-demand admission lease lives when the agent never releases it. */
  admissionTtlSeconds?: number;
  /** How long a bind waits for another pod's admission on the same node before it answers Error. */
  admissionWaitMs?: number;
  /** How long filter/prioritize reuse a pool's snapshot (bind is the arbiter; a stale read only costs a retry). */
  snapshotTtlMs?: number;
  /** How long a bind retries the undo of its writes after a failed Binding before it answers (default 5 s). */
  undoRetryMs?: number;
  /**
   * How long a node counts as admitting an on-demand pod after prioritize ranked it first for that pod, and again after
   * the pod's bind there (default 2 s, about a kubelet's admission): prioritize ranks such nodes last for other
   * on-demand pods, whose binds would wait for that admission (one per node, ADR 0003).
   */
  admittingMs?: number;
  /**
   * The ledger in memory (ExtenderStateSync): filter and prioritize answer from it while it is fresh, and read the
   * database otherwise; bind applies its new pod booking to it, or else waits for it to catch up with its writes.
   */
  memory?: ExtenderMemory;
  /**
   * The most nodes filter passes (ADR 0022): when more fit, the best of them (for an on-demand pod, nodes not admitting
   * another on-demand pod first; then by packing score). kube-scheduler scores and prioritizes only what passes, so
   * this bounds its work per pod as its own percentageOfNodesToScore does. Default DEFAULT_FILTER_NODES.
   */
  filterNodes?: number;
  /**
   * Filter passes an on-demand pod without scheduling preferences of its own (hasSchedulingPreferences) its best node
   * alone, and marks it as admitting that pod (ADR 0030): kube-scheduler then neither scores nodes nor calls prioritize.
   * False, and for every other pod: up to `filterNodes` (ADR 0022). Default true.
   */
  bestNodeOnly?: boolean;
  /**
   * Whether a namespace without the tenant label is the tenant named like it (TENANCY_BY_NAMESPACE_NAME, ADR 0040);
   * without it such a namespace's pods are refused (it is no tenant). Required: no default to forget.
   */
  tenancyByName: boolean;
}

/** A bind refused for a reason of the pod's or the ledger's (logged as refused, not as an error). */
export class BindError extends Error {}
/** The pod's namespace is no tenant: every node refused (filter), or the bind answered with the reason. */
export class NoTenantError extends BindError {}

export interface ExtenderMemory {
  readonly state: ExtenderState;
  fresh(): boolean;
  caughtUp(): Promise<void>;
  /** Applies a new pod booking as the ledger wrote it (ADR 0023); false when it did not (then caughtUp). */
  applyPodBooking(b: PodBookingApplied & { tx: string }): boolean;
}

