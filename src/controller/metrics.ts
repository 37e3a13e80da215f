// The controller's own metrics: reconciles by controller and outcome, watch restarts, leadership.
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import type { Db } from '../db/pool.ts';
import { monthToDateUsage } from '../db/usage.ts';

export interface ControllerMetrics {
  reconciled(controller: string, seconds: number, outcome: string): void;
  watchRestarted(informer: string, why: string): void;
  setLeader(leader: boolean, epoch: number): void;
}

export function controllerMetrics(registry: Registry): ControllerMetrics {
  const reconciles = new Histogram({
    name: 'bettercompute_controller_reconcile_duration_seconds',
    help: 'Time of one reconcile, by controller (reservations, pools, nodes, nodedevices) and outcome (ok, requeue, error).',
    labelNames: ['controller', 'outcome'] as const,
    buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5],
    registers: [registry],
  });
  const restarts = new Counter({
    name: 'bettercompute_controller_watch_restarts_total',
    help: 'Watches started again, by informer and reason (closed, error, relist after 410 Gone, liveness).',
    labelNames: ['informer', 'reason'] as const,
    registers: [registry],
  });
  const leader = new Gauge({
    name: 'bettercompute_controller_leader',
    help: '1 while this replica holds the controller Lease (and the ledger fence), else 0.',
    registers: [registry],
  });
  const epoch = new Gauge({
    name: 'bettercompute_controller_fence_epoch',
    help: 'The ledger fence epoch this replica took when it last won the Lease (-1: none).',
    registers: [registry],
  });
  leader.set(0);
  epoch.set(-1);
  return {
    reconciled: (controller, seconds, outcome) => reconciles.observe({ controller, outcome }, seconds),
    watchRestarted: (informer, reason) => restarts.inc({ informer, reason }),
    setLeader(isLeader, e) {
      leader.set(isLeader ? 1 : 0);
      epoch.set(e);
    },
  };
}

export const noopControllerMetrics: ControllerMetrics = {
  reconciled() {},
  watchRestarted() {},
  setLeader() {},
};

/** The scheduler extender's calls (its ExtenderMetrics option): latency by verb and outcome. */
export function extenderMetrics(registry: Registry): { onCall(verb: string, seconds: number, outcome: string): void } {
  const h = new Histogram({
    name: 'bettercompute_extender_request_duration_seconds',
    help: 'Scheduler extender calls by verb (filter, prioritize, bind) and outcome (fit, none, ok, bound, refused, error).',
    labelNames: ['verb', 'outcome'] as const,
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
    registers: [registry],
  });
  return { onCall: (verb, seconds, outcome) => h.observe({ verb, outcome }, seconds) };
}

/** The drift reconcile's counts (drift.ts): what it found and fixed, and when it last completed. */
export interface DriftMetrics {
  found(kind: string, action: string, n?: number): void;
  /** Quota counters of `resource` found off by `atoms` (beyond what the passage of time explains), and rebuilt. */
  quotaDrift(resource: string, atoms: number): void;
  /** A run that saw a complete view and applied every fix, at `seconds` since the epoch. */
  completed(seconds: number): void;
}

/** The resources a quota limits on GPUs; their drift series exist from the start. */
const QUOTA_DRIFT_RESOURCES = ['gpu', 'gpu.mig', 'gpu.slot'] as const;

export function driftMetrics(registry: Registry, series: readonly { kind: string; action: string }[]): DriftMetrics {
  const found = new Counter({
    name: 'bettercompute_drift_total',
    help: 'Drift the leader found between the ledger and the cluster and fixed, by kind (node, nodedevices, pool, reservation, pod, quota) and action.',
    labelNames: ['kind', 'action'] as const,
    registers: [registry],
  });
  // Every series from the start at 0: increase() over a series that first appears at 1 would see no increase.
  for (const s of series) found.inc(s, 0);
  const quotaAtoms = new Counter({
    name: 'bettercompute_drift_quota_atoms_total',
    help: 'The size of the quota drift the leader found and rebuilt: by resource, the atoms by which limited quota counters lay outside what their charges and the passage of time explain.',
    labelNames: ['resource'] as const,
    registers: [registry],
  });
  for (const resource of QUOTA_DRIFT_RESOURCES) quotaAtoms.inc({ resource }, 0);
  const last = new Gauge({
    name: 'bettercompute_drift_last_complete_timestamp_seconds',
    help: 'When this replica last completed a drift reconcile (a complete cluster view, every fix applied); 0: never. Only the leader runs it.',
    registers: [registry],
  });
  last.set(0);
  return {
    found: (kind, action, n = 1) => found.inc({ kind, action }, n),
    quotaDrift: (resource, atoms) => quotaAtoms.inc({ resource }, atoms),
    completed: (seconds) => last.set(seconds),
  };
}

/** The usage windows job (usage.ts): how far hours are final. */
export interface UsageMetrics {
  /** A run caught up; hours before `finalUntilSeconds` (since the epoch) are final. */
  completed(finalUntilSeconds: number): void;
}

/**
 * Usage windows: atom-seconds burned this UTC month per tenant, pool and resource (÷ 3600: GPU-hours for `gpu`,
 * MIG-instance hours for `gpu.mig`, slot hours, scalar hours; seconds because promtool wants base units), read from
 * usage_hours at scrape time on every replica; and the watermark of the leader's job.
 */
export function usageMetrics(registry: Registry, db: Pick<Db, 'query'>): UsageMetrics {
  new Gauge({
    name: 'bettercompute_usage_month_atom_seconds',
    help: 'Atom-seconds burned since the start of the current UTC month, by tenant, pool and resource (amount × seconds held; ÷ 3600 for GPU-hours of gpu), as of the last usage run.',
    labelNames: ['tenant', 'pool', 'pool_id', 'resource'] as const,
    registers: [registry],
    async collect() {
      const rows = await monthToDateUsage(db);
      this.reset();
      for (const r of rows) this.set({ tenant: r.tenantId, pool: r.pool, pool_id: r.poolId, resource: r.resource }, r.atomSeconds);
    },
  });
  const final = new Gauge({
    name: 'bettercompute_usage_final_until_timestamp_seconds',
    help: 'Usage hours before this instant are final (the usage job\'s watermark after its last run on this replica); 0: no run yet. Only the leader runs it.',
    registers: [registry],
  });
  final.set(0);
  return { completed: (seconds) => final.set(seconds) };
}

/** Requests refused by the per-source limits (ADR 0036), by listener (api, metrics, webhook). */
export function rateLimitMetrics(registry: Registry): { limited(listener: string): void } {
  const refused = new Counter({
    name: 'bettercompute_requests_rate_limited_total',
    help: 'Requests answered 429 RATE_LIMITED by the per-source limit, by listener (api, metrics, webhook).',
    labelNames: ['listener'] as const,
    registers: [registry],
  });
  return { limited: (listener) => refused.inc({ listener }) };
}
