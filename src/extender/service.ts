// The extender's decisions: filter and prioritize answer from the in-memory state while it vouches for itself
// (state.ts, state-sync.ts, ADR 0010), else read the ledger (no writes); bind writes first (assignment or
// booking, and the node's on-demand admission lease, through the ledger gateway), then creates the Binding, and undoes
// its writes if that fails. A bind that stopped between its booking and its Binding (the Binding failed and so did the
// undo, or the process died) leaves the pod holding atoms: filter and bind recognise them by the pod's uid and honour
// them, so the pod is never wedged and never holds two.
// Only pods that request one of our resources are filtered in and bound; a reservation's pod is bound only for a
// namespace of the reservation's tenant and inside the reservation's window (checked again at bind, in the database).
// Every call is logged with its pod, node(s), outcome and time. This class is the facade of three parts: the judge
// (judge.ts: filter's and prioritize's verdicts, with their caches), the binder (binder.ts) and the admitting tracker
// (admitting.ts: the nodes admitting an on-demand pod, ADR 0003).
import { systemClock, type MonotonicClock } from '../clock.ts';
import { isWaitingForPod } from '../db/reads.ts';
import { errorFields } from '../log.ts';
import { AdmittingTracker } from './admitting.ts';
import { BindError, ExtenderBinder } from './binder.ts';
import { ExtenderJudge, notOurPod } from './judge.ts';
import type { ExtenderDeps } from './deps.ts';
import { hasSchedulingPreferences, podDemand } from './resources.ts';
import { nodeNamesOf, type ExtenderArgs, type ExtenderBindingArgs, type ExtenderBindingResult, type ExtenderFilterResult, type HostPriority } from './wire.ts';
import { RESOURCE_OF_CLASS } from '../core/names.ts';

export { notOurPod } from './judge.ts';

export type { ExtenderDeps, ExtenderMemory, ExtenderMetrics } from './deps.ts';

/** The most nodes filter passes unless told otherwise (ADR 0022). */
export const DEFAULT_FILTER_NODES = 32;

type Verb = 'filter' | 'prioritize' | 'bind';

export class ExtenderService {
  private readonly maxPriority: number;
  private readonly filterNodes: number;
  private readonly bestNodeOnly: boolean;
  private readonly admitting: AdmittingTracker;
  private readonly judge: ExtenderJudge;
  private readonly binder: ExtenderBinder;
  private readonly clock: MonotonicClock;

  constructor(private readonly d: ExtenderDeps) {
    this.maxPriority = d.maxPriority ?? 10;
    this.filterNodes = d.filterNodes ?? DEFAULT_FILTER_NODES;
    this.bestNodeOnly = d.bestNodeOnly ?? true;
    const clock = (this.clock = d.monotonic ?? systemClock);
    const now = () => clock.now();
    this.admitting = new AdmittingTracker(d.admittingMs ?? 2000, now);
    this.judge = new ExtenderJudge(d, { maxPriority: this.maxPriority, snapshotTtlMs: d.snapshotTtlMs ?? 1000, admitting: this.admitting, now });
    this.binder = new ExtenderBinder(d, {
      ttlSeconds: d.admissionTtlSeconds ?? 60,
      waitMs: d.admissionWaitMs ?? 20_000,
      undoRetryMs: d.undoRetryMs ?? 5000,
      admitting: this.admitting,
      nodePools: () => this.judge.nodePools(),
      invalidate: (poolId) => this.judge.invalidate(poolId),
      now,
      sleep: (ms) => clock.sleep(ms),
    });
  }

  /** One structured log line per call. */
  private logCall(verb: Verb, pod: { namespace?: string; name?: string; uid?: string }, started: number, outcome: string, fields: Record<string, unknown>) {
    const ms = Math.round((this.clock.now() - started) * 100) / 100;
    const level = outcome === 'error' || outcome === 'refused' ? 'warn' : 'info';
    this.d.log[level]('extender call', { verb, pod: `${pod.namespace}/${pod.name}`, uid: pod.uid, ...fields, outcome, ms });
    this.d.metrics?.onCall?.(verb, ms / 1000, outcome);
  }

  async filter(args: ExtenderArgs): Promise<ExtenderFilterResult> {
    const started = this.clock.now();
    const names = nodeNamesOf(args);
    this.binder.rememberPod(args.Pod, started);
    try {
      const v = await this.judge.judge(args.Pod, names);
      // An on-demand pod only: its mark keeps the next pods off the node (one admission per node); nothing would keep a
      // reservation's next pods off a node whose atoms this one is about to take.
      const alone = this.bestNodeOnly && v.onDemand && !hasSchedulingPreferences(args.Pod);
      const { best, fit } = this.judge.bestFits(args.Pod.metadata.uid, names, v, alone ? 1 : this.filterNodes);
      const passing = best.map((i) => names[i]!);
      // kube-scheduler binds the one node it is passed, without prioritize: the mark prioritize would have set, set here.
      if (alone && passing.length === 1) this.admitting.mark(passing[0]!, args.Pod.metadata.uid);
      // Only what passed: prioritize is asked about no other node, and the call's names stay young and die with it.
      this.judge.rememberScores(args.Pod.metadata.uid, passing, Float64Array.from(best, (i) => v.scores[i]!));
      const passed = passing.length;
      const reasons = [...new Set([...Object.values(v.unresolvable), ...Object.values(v.failed)])].slice(0, 3);
      // No node passes and one only waits for an earlier booking's pod to go: answered as an error, so that
      // kube-scheduler retries the pod after its backoff (at most 10 s; ADR 0056). As failed nodes, the pod waits in
      // kube-scheduler's unschedulable pods for an event its rejecting plugins care about; the old pod's deletion is
      // one, but can come before the releaser frees its holding, and then none comes.
      const waiting = passed ? undefined : Object.values(v.failed).find(isWaitingForPod);
      if (waiting) {
        this.logCall('filter', args.Pod.metadata, started, 'waiting', { nodes: names.length, fit, passed, reasons });
        return { Nodes: null, NodeNames: [], FailedNodes: v.failed, FailedAndUnresolvableNodes: v.unresolvable, Error: waiting };
      }
      this.logCall('filter', args.Pod.metadata, started, passed ? 'fit' : 'none', {
        nodes: names.length,
        fit,
        passed,
        ...(passed <= 5 ? { fits: passing } : {}),
        ...(passed ? {} : { reasons }),
      });
      return { Nodes: null, NodeNames: passing, FailedNodes: v.failed, FailedAndUnresolvableNodes: v.unresolvable, Error: '' };
    } catch (e) {
      this.logCall('filter', args.Pod.metadata, started, 'error', { nodes: names.length, ...errorFields(e) });
      throw e;
    }
  }

  async prioritize(args: ExtenderArgs): Promise<HostPriority[]> {
    const started = this.clock.now();
    const names = nodeNamesOf(args);
    try {
      const judged = this.judge.filterScores(args.Pod.metadata.uid, names, started) ?? (await this.judge.judge(args.Pod, names)).scores;
      const scores = names.map((n, i) => {
        const s = judged[i]!;
        return { Host: n, Score: Number.isNaN(s) ? 0 : Math.max(0, Math.min(this.maxPriority, Math.round(s))) };
      });
      const demand = podDemand(args.Pod.spec);
      if (!demand.invalid && !demand.reservation && demand.devices.length > 0) this.admitting.spread(args.Pod.metadata.uid, scores);
      const best = scores.reduce<HostPriority | undefined>((b, s) => (!b || s.Score > b.Score ? s : b), undefined);
      this.logCall('prioritize', args.Pod.metadata, started, 'ok', { nodes: names.length, ...(best ? { best: best.Host, score: best.Score } : {}) });
      return scores;
    } catch (e) {
      this.logCall('prioritize', args.Pod.metadata, started, 'error', { nodes: names.length, ...errorFields(e) });
      throw e;
    }
  }

  async bind(args: ExtenderBindingArgs): Promise<ExtenderBindingResult> {
    const started = this.clock.now();
    const who = { namespace: args.PodNamespace, name: args.PodName, uid: args.PodUID };
    let applied = false;
    try {
      const done = await this.bindAndLog(args, who, started);
      applied = done.applied;
      return done.result;
    } finally {
      // The scheduler's next filter must see what this bind wrote (or undid): the bind applied its booking to the state
      // itself, or the state applies what its notifications name first.
      if (!applied) await this.d.memory?.caughtUp().catch((e: unknown) => this.d.log.warn('extender state did not catch up after a bind', errorFields(e)));
    }
  }

  /** Drops cached reads after a write of ours (bind), so the next filter sees it. */
  invalidate(poolId?: string): void {
    this.judge.invalidate(poolId);
  }

  /** `applied`: the pod was bound, and the in-memory state holds what the bind wrote already. */
  private async bindAndLog(
    args: ExtenderBindingArgs,
    who: { namespace: string; name: string; uid: string },
    started: number,
  ): Promise<{ result: ExtenderBindingResult; applied: boolean }> {
    try {
      const { pod, holdsNothing } = await this.binder.podToBind(args);
      const demand = podDemand(pod.spec);
      if (demand.invalid) throw new BindError(demand.invalid);
      let applied = false;
      if (demand.reservation) await this.binder.bindReservation(pod, demand.reservation, args.Node);
      else if (demand.devices.length) applied = await this.binder.bindOnDemand(pod, demand.devices, args.Node, holdsNothing);
      else throw new BindError(notOurPod(pod.metadata.namespace, pod.metadata.name));
      this.logCall('bind', who, started, 'bound', {
        node: args.Node,
        ...(demand.reservation ? { reservation: demand.reservation.id, count: demand.reservation.count } : {}),
        ...(demand.devices.length ? { resources: demand.devices.map((d) => `${RESOURCE_OF_CLASS[d.class] ?? d.class}=${d.count}`) } : {}),
      });
      return { result: { Error: '' }, applied };
    } catch (e) {
      const outcome = e instanceof BindError ? 'refused' : 'error';
      const message = e instanceof Error ? e.message : String(e);
      this.logCall('bind', who, started, outcome, { node: args.Node, error: message });
      return { result: { Error: message }, applied: false };
    }
  }
}
