// The controller's own metrics: reconciles by controller and outcome, watch restarts, leadership.
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';

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
