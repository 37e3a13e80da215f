// The extender's decisions: filter and prioritize answer from the in-memory state while it vouches for itself
// (state.ts, state-sync.ts, ADR 0010), else read the ledger (no writes); bind writes first (assignment or
// booking, and the node's on-demand admission lease, through the ledger gateway), then creates the Binding, and undoes
// its writes if that fails. A bind that stopped between its booking and its Binding (the Binding failed and so did the
// undo, or the process died) leaves the pod holding atoms: filter and bind recognise them by the pod's uid and honour
// them, so the pod is never wedged and never holds two.
// Only pods that request one of our resources are filtered in and bound; a reservation's pod is bound only for a
// namespace of the reservation's tenant and inside the reservation's window (checked again at bind, in the database).
// Every call is logged with its pod, node(s), outcome and time.
import { judgeFromSummary, overlapsChangeAt, requestScalars, scoreNode, summarizeNode } from '../core/planner.ts';
import type { DeviceClass, NodeSnap, NodeSummary, PlacementRequest } from '../core/types.ts';
import type { Clock } from '../db/clock.ts';
import { toPlacementRequest, type Ledger, type PodBookingOutcome } from '../db/ledger.ts';
import type { Db } from '../db/pool.ts';
import { getPool, isPoolVisible, loadNodes, type PoolInfo } from '../db/snapshot.ts';
import { errorFields, type Logger } from '../log.ts';
import type { ExtenderKube } from './kube.ts';
import { nodePools, podHolding, quotaHeadroom, reservationAtoms } from '../db/reads.ts';
import type { ExtenderState, PodBookingApplied } from './state.ts';
import { ALLOCATION_ANNOTATION, ATOMS_ANNOTATION, hasSchedulingPreferences, podDemand, RESOURCE_OF_CLASS, type PodDemand } from './resources.ts';
import { namespaceTenant, noTenantMessage } from '../kube/types.ts';
import {
  nodeNamesOf,
  PodSchema,
  type ExtenderArgs,
  type ExtenderBindingArgs,
  type ExtenderBindingResult,
  type ExtenderFilterResult,
  type HostPriority,
  type Pod,
} from './wire.ts';

export interface ExtenderMetrics {
  onCall?(verb: 'filter' | 'prioritize' | 'bind', seconds: number, outcome: string): void;
}

export interface ExtenderDeps {
  db: Db;
  ledger: Ledger;
  clock: Clock;
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

export interface ExtenderMemory {
  readonly state: ExtenderState;
  fresh(): boolean;
  caughtUp(): Promise<void>;
  /** Applies a new pod booking as the ledger wrote it (ADR 0023); false when it did not (then caughtUp). */
  applyPodBooking(b: PodBookingApplied & { tx: string }): boolean;
}

/**
 * Per name (by its index in the call's names): its score when it passes (NaN: it does not), and why not; `onDemand`:
 * the pod asks for devices, not a reservation's atoms (prioritize spreads such pods over nodes not admitting another).
 */
interface Verdict {
  scores: Float64Array;
  failed: Record<string, string>;
  unresolvable: Record<string, string>;
  onDemand: boolean;
}

interface CachedSnap {
  at: number;
  info: PoolInfo;
  byId: Map<string, NodeSnap>;
}

class BindError extends Error {}
/** The pod's namespace is no tenant: every node refused (filter), or the bind answered with the reason. */
class NoTenantError extends BindError {}

/** How many pods filter remembers for their bind, and for how long (see ExtenderService.filtered). */
const RECENT_PODS = 1024;
const RECENT_POD_MS = 60_000;
/** How long prioritize takes filter's scores for the same pod (see ExtenderService.lastScores). */
const SCORES_REUSE_MS = 1000;
/** The most nodes filter passes unless told otherwise (ADR 0022). */
export const DEFAULT_FILTER_NODES = 32;

type Verb = 'filter' | 'prioritize' | 'bind';

/** The refusal of a pod that asks for none of our resources (it should never have been sent to this scheduler). */
export function notOurPod(namespace: string, name: string): string {
  return `pod ${namespace}/${name} requests no Better Compute resource (bettercompute.io/gpu, gpu.mig, gpu.slot or reservations.bettercompute.io/<reservation>); this scheduler places only those`;
}

export class ExtenderService {
  private readonly maxPriority: number;
  private readonly ttlSeconds: number;
  private readonly waitMs: number;
  private readonly snapshotTtlMs: number;
  private readonly undoRetryMs: number;
  private readonly admittingMs: number;
  private readonly filterNodes: number;
  private readonly bestNodeOnly: boolean;
  /** node → on-demand pod uid → until (performance.now()): the nodes admitting, or about to admit, a pod. */
  private readonly admitting = new Map<string, Map<string, number>>();
  private readonly snaps = new Map<string, Promise<CachedSnap>>();
  /**
   * The pods filter was last asked about, by uid (oldest first), each until it expires: kube-scheduler binds a pod right
   * after filtering it, and bind takes the pod from here instead of reading it from the API server.
   */
  private readonly filtered = new Map<string, { pod: Pod; until: number }>();
  /**
   * The names filter last passed, with their scores: kube-scheduler prioritizes those nodes, for the same pod, right after
   * (one pod at a time), and prioritize takes them from here instead of judging the same nodes again. Used once, and
   * within SCORES_REUSE_MS; the scores are preferences (bind is the arbiter), so they may be that much older.
   */
  private lastScores?: { uid: string; until: number; names: string[]; scores: Float64Array };
  private pools?: { at: number; map: Promise<Map<string, string | null>> };
  /**
   * scoreNode's last answer per node snapshot, for one request shape (devices, binding, topology, window length): a
   * node whose bookings did not change is not judged again, call after call, until time reaches an instant from which
   * the window overlaps other bookings (overlapsChangeAt). Snapshots are replaced on every change, never changed in
   * place (ExtenderState, and this service's own loads), so a changed node is a new key. Booked nodes are what filter
   * spends its time on: each is judged atom by atom.
   */
  private readonly nodeVerdicts = new WeakMap<NodeSnap, { shape: string; from: number; until: number; r: number | string }>();

  constructor(private readonly d: ExtenderDeps) {
    this.maxPriority = d.maxPriority ?? 10;
    this.ttlSeconds = d.admissionTtlSeconds ?? 60;
    this.waitMs = d.admissionWaitMs ?? 20_000;
    this.snapshotTtlMs = d.snapshotTtlMs ?? 1000;
    this.undoRetryMs = d.undoRetryMs ?? 5000;
    this.admittingMs = d.admittingMs ?? 2000;
    this.filterNodes = d.filterNodes ?? DEFAULT_FILTER_NODES;
    this.bestNodeOnly = d.bestNodeOnly ?? true;
  }

  private markAdmitting(node: string, podUid: string, until: number): void {
    const pods = this.admitting.get(node) ?? new Map<string, number>();
    pods.set(podUid, until);
    this.admitting.set(node, pods);
  }

  private unmarkAdmitting(node: string, podUid: string): void {
    const pods = this.admitting.get(node);
    pods?.delete(podUid);
    if (pods?.size === 0) this.admitting.delete(node);
  }

  /** Whether the node is admitting an on-demand pod other than this one; forgets what has run out. */
  private admittingOther(node: string, podUid: string, now: number): boolean {
    const pods = this.admitting.get(node);
    if (!pods) return false;
    let other = false;
    for (const [uid, until] of pods) {
      if (until <= now) pods.delete(uid);
      else if (uid !== podUid) other = true;
    }
    if (pods.size === 0) this.admitting.delete(node);
    return other;
  }

  /**
   * An on-demand pod's scores: nodes admitting another on-demand pod last (0), every other passing node at least 1, so
   * that consecutive pods spread over the nodes that pack best instead of queueing behind one node's admission; the
   * node ranked first is marked as admitting this pod.
   */
  private spreadOnDemand(podUid: string, scores: HostPriority[]): void {
    const now = performance.now();
    if (this.admitting.size > 1024) for (const node of [...this.admitting.keys()]) this.admittingOther(node, '', now);
    let best: HostPriority | undefined;
    for (const s of scores) {
      if (s.Score <= 0) continue;
      s.Score = this.admittingOther(s.Host, podUid, now) ? 0 : Math.max(1, s.Score);
      if (s.Score > 0 && (!best || s.Score > best.Score)) best = s;
    }
    if (best) this.markAdmitting(best.Host, podUid, now + this.admittingMs);
  }

  /** One structured log line per call. */
  private logCall(verb: Verb, pod: { namespace?: string; name?: string; uid?: string }, started: number, outcome: string, fields: Record<string, unknown>) {
    const ms = Math.round((performance.now() - started) * 100) / 100;
    const level = outcome === 'error' || outcome === 'refused' ? 'warn' : 'info';
    this.d.log[level]('extender call', { verb, pod: `${pod.namespace}/${pod.name}`, uid: pod.uid, ...fields, outcome, ms });
    this.d.metrics?.onCall?.(verb, ms / 1000, outcome);
  }

  async filter(args: ExtenderArgs): Promise<ExtenderFilterResult> {
    const started = performance.now();
    const names = nodeNamesOf(args);
    this.rememberPod(args.Pod, started);
    try {
      const v = await this.judge(args.Pod, names);
      // An on-demand pod only: its mark keeps the next pods off the node (one admission per node); nothing would keep a
      // reservation's next pods off a node whose atoms this one is about to take.
      const alone = this.bestNodeOnly && v.onDemand && !hasSchedulingPreferences(args.Pod);
      const { best, fit } = this.bestFits(args.Pod.metadata.uid, names, v, alone ? 1 : this.filterNodes);
      const passing = best.map((i) => names[i]!);
      // kube-scheduler binds the one node it is passed, without prioritize: the mark prioritize would have set, set here.
      if (alone && passing.length === 1) this.markAdmitting(passing[0]!, args.Pod.metadata.uid, performance.now() + this.admittingMs);
      // Only what passed: prioritize is asked about no other node, and the call's names stay young and die with it.
      this.lastScores = { uid: args.Pod.metadata.uid, until: performance.now() + SCORES_REUSE_MS, names: passing, scores: Float64Array.from(best, (i) => v.scores[i]!) };
      const result: ExtenderFilterResult = {
        Nodes: null,
        NodeNames: passing,
        FailedNodes: v.failed,
        FailedAndUnresolvableNodes: v.unresolvable,
        Error: '',
      };
      const passed = passing.length;
      const reasons = [...new Set([...Object.values(v.unresolvable), ...Object.values(v.failed)])].slice(0, 3);
      this.logCall('filter', args.Pod.metadata, started, passed ? 'fit' : 'none', {
        nodes: names.length,
        fit,
        passed,
        ...(passed <= 5 ? { fits: passing } : {}),
        ...(passed ? {} : { reasons }),
      });
      return result;
    } catch (e) {
      this.logCall('filter', args.Pod.metadata, started, 'error', { nodes: names.length, ...errorFields(e) });
      throw e;
    }
  }

  async prioritize(args: ExtenderArgs): Promise<HostPriority[]> {
    const started = performance.now();
    const names = nodeNamesOf(args);
    try {
      const judged = this.filterScores(args.Pod.metadata.uid, names, started) ?? (await this.judge(args.Pod, names)).scores;
      const scores = names.map((n, i) => {
        const s = judged[i]!;
        return { Host: n, Score: Number.isNaN(s) ? 0 : Math.max(0, Math.min(this.maxPriority, Math.round(s))) };
      });
      const demand = podDemand(args.Pod.spec);
      if (!demand.invalid && !demand.reservation && demand.devices.length > 0) this.spreadOnDemand(args.Pod.metadata.uid, scores);
      const best = scores.reduce<HostPriority | undefined>((b, s) => (!b || s.Score > b.Score ? s : b), undefined);
      this.logCall('prioritize', args.Pod.metadata, started, 'ok', { nodes: names.length, ...(best ? { best: best.Host, score: best.Score } : {}) });
      return scores;
    } catch (e) {
      this.logCall('prioritize', args.Pod.metadata, started, 'error', { nodes: names.length, ...errorFields(e) });
      throw e;
    }
  }

  async bind(args: ExtenderBindingArgs): Promise<ExtenderBindingResult> {
    const started = performance.now();
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

  private rememberPod(pod: Pod, now: number): void {
    this.filtered.delete(pod.metadata.uid);
    this.filtered.set(pod.metadata.uid, { pod, until: now + RECENT_POD_MS });
    for (const [uid, p] of this.filtered) {
      if (this.filtered.size <= RECENT_PODS && p.until > now) break;
      this.filtered.delete(uid);
    }
  }

  /**
   * The pod to bind: as filter last saw it (the scheduler's copy, just before this bind), unless it holds atoms already
   * (a bind that stopped, or whose answer the scheduler never got, may have bound it since); else, and then, as the
   * API server has it now. The Binding itself is refused by the API server for a pod that is gone or bound.
   * `holdsNothing`: the pod was seen to hold no atoms (the booking then skips its own look).
   */
  private async podToBind(args: ExtenderBindingArgs): Promise<{ pod: Pod; holdsNothing: boolean }> {
    const seen = this.filtered.get(args.PodUID);
    this.filtered.delete(args.PodUID);
    if (seen && seen.until > performance.now() && seen.pod.metadata.namespace === args.PodNamespace && seen.pod.metadata.name === args.PodName && !seen.pod.spec.nodeName) {
      const mem = this.d.memory?.fresh() ? this.d.memory.state : undefined;
      const holding = mem ? mem.podHolding(args.PodUID) : await podHolding(this.d.db, args.PodUID);
      if (!holding) return { pod: seen.pod, holdsNothing: true };
    }
    const raw = await this.d.kube.getPod(args.PodNamespace, args.PodName);
    if (!raw) throw new BindError(`pod ${args.PodNamespace}/${args.PodName} not found`);
    const pod = PodSchema.parse(raw);
    if (pod.metadata.uid !== args.PodUID) throw new BindError(`pod ${args.PodNamespace}/${args.PodName} has another UID`);
    if (pod.spec.nodeName) throw new BindError(`pod ${args.PodNamespace}/${args.PodName} is bound to ${pod.spec.nodeName} already`);
    return { pod, holdsNothing: false };
  }

  /** `applied`: the pod was bound, and the in-memory state holds what the bind wrote already. */
  private async bindAndLog(
    args: ExtenderBindingArgs,
    who: { namespace: string; name: string; uid: string },
    started: number,
  ): Promise<{ result: ExtenderBindingResult; applied: boolean }> {
    try {
      const { pod, holdsNothing } = await this.podToBind(args);
      const demand = podDemand(pod.spec);
      if (demand.invalid) throw new BindError(demand.invalid);
      let applied = false;
      if (demand.reservation) await this.bindReservation(pod, demand.reservation, args.Node);
      else if (demand.devices.length) applied = await this.bindOnDemand(pod, demand.devices, args.Node, holdsNothing);
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

  // ---- filter / prioritize ------------------------------------------------------------------------------------

  /**
   * The names filter passes, in the call's order: every node that fits, or, when more than `limit` fit, the best `limit`
   * of them (`filterNodes`, ADR 0022; 1 for an on-demand pod without scheduling preferences, ADR 0030). Best: for an
   * on-demand pod, a node not admitting another on-demand pod before one that is (prioritize ranks those last, and a
   * bind there waits); then the higher score; then the earlier name. The
   * nodes left out fit and are not failures: they are not listed in FailedNodes (kube-scheduler reads those only when
   * no node passes, and then none is left out). `best`: their indexes, ascending; `fit`: how many fit.
   */
  private bestFits(podUid: string, names: string[], v: Verdict, limit: number): { best: number[]; fit: number } {
    const now = performance.now();
    // A node's rank: its score, less 1,000 when it is admitting another on-demand pod (scores lie in 0..maxPriority).
    const rank = (i: number) => v.scores[i]! - (v.onDemand && this.admittingOther(names[i]!, podUid, now) ? 1000 : 0);
    // The best `limit`, kept sorted best first (an insertion into a short list; most nodes rank below its last).
    // When no more than `limit` fit, that is every one of them.
    const best: number[] = [];
    const ranks: number[] = [];
    let fit = 0;
    for (let i = 0; i < names.length; i++) {
      const score = v.scores[i]!;
      if (Number.isNaN(score)) continue;
      fit++;
      // A node's rank is never above its score: one whose score does not beat the last rank kept is not asked about.
      if (best.length === limit && score <= ranks[best.length - 1]!) continue;
      const r = rank(i);
      if (best.length === limit && r <= ranks[best.length - 1]!) continue;
      let k = Math.min(best.length, limit - 1);
      while (k > 0 && ranks[k - 1]! < r) k--;
      best.splice(k, 0, i);
      ranks.splice(k, 0, r);
      if (best.length > limit) {
        best.pop();
        ranks.pop();
      }
    }
    best.sort((a, b) => a - b);
    return { best, fit };
  }

  /**
   * Filter's scores for these names, when its last answer was for this pod, is recent, and passed every one of them
   * (the scheduler sends them in filter's order: one walk along filter's names, no index built).
   */
  private filterScores(uid: string, names: string[], now: number): Float64Array | undefined {
    const last = this.lastScores;
    this.lastScores = undefined;
    if (!last || last.uid !== uid || last.until < now) return undefined;
    const out = new Float64Array(names.length);
    let j = 0;
    for (let i = 0; i < names.length; i++) {
      while (j < last.names.length && last.names[j] !== names[i]) j++;
      if (j === last.names.length || Number.isNaN(last.scores[j])) return undefined;
      out[i] = last.scores[j++]!;
    }
    return out;
  }

  private async judge(pod: Pod, names: string[]): Promise<Verdict> {
    const demand = podDemand(pod.spec);
    const v: Verdict = { scores: new Float64Array(names.length).fill(NaN), failed: {}, unresolvable: {}, onDemand: !demand.reservation && demand.devices.length > 0 };
    if (demand.invalid) {
      for (const n of names) v.unresolvable[n] = demand.invalid;
      return v;
    }
    if (!demand.reservation && !demand.devices.length) {
      for (const n of names) v.unresolvable[n] = notOurPod(pod.metadata.namespace, pod.metadata.name);
      return v;
    }
    // The pod holds atoms already (a bind stopped between its booking and its Binding): only that node passes, with
    // the top score. Its atoms are the pod's, and bind there honours them; letting another node pass would make the
    // scheduler free them and book others for nothing (and judging that node again would count the pod's own booking
    // against it). Only when the scheduler does not offer that node (cordoned, tainted, gone) are the others judged,
    // and bind on one of them moves the pod's holding in one transaction.
    // One look at freshness per call: the whole answer comes from memory, or the whole answer from the database.
    const mem = this.d.memory?.fresh() ? this.d.memory.state : undefined;
    const holding = mem ? mem.podHolding(pod.metadata.uid) : await podHolding(this.d.db, pod.metadata.uid);
    if (holding && names.includes(holding)) {
      names.forEach((n, i) => {
        if (n === holding) v.scores[i] = this.maxPriority;
        else v.failed[n] = `the pod holds atoms on node ${holding} already (a bind stopped before its Binding)`;
      });
      return v;
    }
    try {
      if (demand.reservation) await this.judgeReservation(pod, demand.reservation, names, v, mem);
      else await this.judgeOnDemand(pod, demand.devices, names, v, mem);
    } catch (e) {
      if (!(e instanceof NoTenantError)) throw e;
      for (const n of names) v.unresolvable[n] = e.message;
    }
    return v;
  }

  /** The namespace's tenant; throws NoTenantError when it is none (no label, tenancy by name off). */
  private async tenantOf(namespace: string): Promise<string> {
    const tenant = namespaceTenant(namespace, await this.d.kube.namespaceLabels(namespace), this.d.tenancyByName);
    if (tenant === undefined) throw new NoTenantError(noTenantMessage(namespace));
    return tenant;
  }

  private async judgeReservation(pod: Pod, want: NonNullable<PodDemand['reservation']>, names: string[], v: Verdict, mem?: ExtenderState) {
    const all = (reason: string) => {
      for (const n of names) v.unresolvable[n] = reason;
    };
    // The state knows the reservations that were live when it loaded and every one changed since; another (ended
    // long ago, or never there) is read from the database, for the reason.
    const r = mem?.reservation(want.id) ?? (await reservationAtoms(this.d.db, want.id));
    if (!r) return all(`reservation ${want.id} not found`);
    if (r.state !== 'held' && r.state !== 'confirmed') return all(`reservation ${want.id} is ${r.state}`);
    const tenant = await this.tenantOf(pod.metadata.namespace);
    if (tenant !== r.tenantId) return all(`reservation ${want.id} belongs to another tenant`);
    const now = this.d.clock.now();
    if (now < r.start) return all(`reservation ${want.id} starts at ${new Date(r.start).toISOString()}`);
    if (now >= r.end) return all(`reservation ${want.id} ended at ${new Date(r.end).toISOString()}`);
    await Promise.all(
      names.map(async (n, i) => {
        const atoms = r.atoms.get(n);
        if (!atoms) {
          v.unresolvable[n] = `reservation ${want.id} holds no atoms on this node`;
          return;
        }
        const free = atoms.length - (r.assigned.get(n) ?? 0);
        if (free < want.count) {
          v.failed[n] = `reservation ${want.id} holds ${atoms.length} atoms here, ${atoms.length - free} assigned to its pods; the pod asks ${want.count}`;
          return;
        }
        const allocatable = await this.d.kube.nodeAllocatable(n);
        const advertised = Number(allocatable?.[want.resource] ?? 0);
        if (advertised < want.count) {
          v.failed[n] = `the kubelet does not advertise ${want.count} of ${want.resource} yet (${advertised})`;
          return;
        }
        // Packing: the node this pod fills best (fewest of the reservation's atoms left over) scores highest.
        v.scores[i] = this.maxPriority - Math.min(this.maxPriority, free - want.count);
      }),
    );
  }

  private nodePools(): Promise<Map<string, string | null>> {
    const now = performance.now();
    if (!this.pools || now - this.pools.at > this.snapshotTtlMs) {
      const map = nodePools(this.d.db);
      map.catch(() => (this.pools = undefined));
      this.pools = { at: now, map };
    }
    return this.pools.map;
  }

  private snapshot(poolId: string): Promise<CachedSnap> {
    const hit = this.snaps.get(poolId);
    const now = performance.now();
    if (hit) {
      // Served while fresh; a stale one is replaced, and callers wait for the new one.
      const fresh = hit.then((c) => (now - c.at <= this.snapshotTtlMs ? c : undefined));
      return fresh.then((c) => c ?? this.loadSnapshot(poolId, hit));
    }
    return this.loadSnapshot(poolId);
  }

  private loadSnapshot(poolId: string, replacing?: Promise<CachedSnap>): Promise<CachedSnap> {
    const current = this.snaps.get(poolId);
    if (current && current !== replacing) return current;
    const p = (async () => {
      const info = await getPool(this.d.db, poolId);
      if (!info) throw new Error(`pool ${poolId} not found`);
      const nodes = await loadNodes(this.d.db, poolId);
      for (const n of nodes) n.summary = summarizeNode(n);
      return {
        at: performance.now(),
        info,
        byId: new Map(nodes.map((n) => [n.id, n])),
      };
    })();
    p.catch(() => this.snaps.delete(poolId));
    this.snaps.set(poolId, p);
    return p;
  }

  /** Drops cached reads after a write of ours (bind), so the next filter sees it. */
  invalidate(poolId?: string): void {
    if (poolId) this.snaps.delete(poolId);
    else this.snaps.clear();
  }

  private async judgeOnDemand(pod: Pod, devices: PodDemand['devices'], names: string[], v: Verdict, mem?: ExtenderState) {
    const [tenant, pools] = await Promise.all([this.tenantOf(pod.metadata.namespace), mem ? undefined : this.nodePools()]);
    // Each name resolved once from memory (its pool and snapshot), or its pool from the node-to-pool map; the map of
    // pools is asked only where the pool changes from one name to the next.
    const entries = mem ? mem.resolve(names) : undefined;
    const poolOf = (i: number) => (entries ? entries[i]?.poolId : pools!.get(names[i]!));
    const poolIds = new Set<string>();
    for (let i = 0, last: string | undefined; i < names.length; i++) {
      const poolId = poolOf(i);
      if (poolId && poolId !== last) poolIds.add((last = poolId));
    }
    // Each pool's judge of one name, made ready for all pools at once (a snapshot or quota read each, on the database
    // path); then one walk of the names. No list of each pool's members: at thousands of names, lists grown by push
    // (and walked with for…of) were most of a call's garbage.
    const now = this.d.clock.now();
    // How the name at an index is judged, for the names of one pool.
    const judgeOf = async (poolId: string): Promise<(i: number) => void> => {
      const fromMemory = mem?.pool(poolId);
      const c = fromMemory ?? (await this.snapshot(poolId));
      const refuse = (reason: string, unresolvable = false) => (i: number) => void ((unresolvable ? v.unresolvable : v.failed)[names[i]!] = reason);
      if (!isPoolVisible(c.info, tenant)) return refuse(`pool ${c.info.name} is not offered to tenant ${tenant}`, true);
      if (c.info.archived) return refuse(`pool ${c.info.name} is archived`, true);
      const deadline = pod.spec.activeDeadlineSeconds ?? null;
      const classes = devices.map((d) => d.class);
      const windowEnd = deadline ? now + deadline * 1000 : null;
      const quota = mem ? mem.quotaHeadroom(tenant, poolId, classes, now, windowEnd) : await quotaHeadroom(this.d.db, tenant, poolId, classes, windowEnd);
      for (const d of devices) {
        const q = quota.get(d.class);
        if (q && q.peak + d.count > q.max) {
          return refuse(`QuotaExceeded: tenant ${tenant} would exceed its ${d.class} quota in pool ${c.info.name} (${q.peak} of ${q.max} in use, the pod asks ${d.count})`);
        }
      }
      const req = toPlacementRequest(
        { tenantId: tenant, poolId, devices, duration: deadline ?? 0, binding: 'hold', idempotencyKey: pod.metadata.uid },
        now,
        deadline === null,
      );
      const scalars = requestScalars(req);
      // Nodes that share a summary (the state keeps equal ones as one object) share a verdict the summary decides.
      const bySummary = scalars.length === 0 ? new Map<NodeSummary, number | string | null>() : undefined;
      const shape = JSON.stringify([req.devices, req.binding, req.topology ?? null, req.window.end - req.window.start]);
      // Runs of nodes share one summary (all those without bookings): the last one's verdict, without the map.
      let lastSummary: NodeSummary | undefined;
      let lastVerdict: number | string | null | undefined;
      return (i) => {
        const n = names[i]!;
        const node = fromMemory ? entries![i]?.snap : c.byId.get(n);
        if (!node) {
          v.failed[n] = 'the node has reported no devices';
          return;
        }
        let r: number | string | null | undefined;
        const sum = node.summary;
        if (bySummary && sum && node.schedulable) {
          r = sum === lastSummary ? lastVerdict : bySummary.get(sum);
          if (r === undefined) {
            r = judgeFromSummary(sum, req) ?? null;
            bySummary.set(sum, r);
          }
          lastSummary = sum;
          lastVerdict = r;
        }
        r ??= bySummary ? this.nodeVerdict(node, req, shape) : scoreNode(node, req, scalars);
        if (typeof r === 'number') v.scores[i] = (r / 110) * this.maxPriority;
        else v.failed[n] = r;
      };
    };
    const judges = new Map<string, (i: number) => void>();
    await Promise.all([...poolIds].map(async (poolId) => judges.set(poolId, await judgeOf(poolId))));
    for (let i = 0, last: string | undefined, judge: ((i: number) => void) | undefined; i < names.length; i++) {
      const poolId = poolOf(i);
      if (!poolId) {
        v.unresolvable[names[i]!] = 'not a GPU node of any pool in the ledger';
        continue;
      }
      if (poolId !== last) {
        judge = judges.get(poolId)!;
        last = poolId;
      }
      judge!(i);
    }
  }

  /** scoreNode for a request without scalars, remembered per node snapshot (see nodeVerdicts). */
  private nodeVerdict(node: NodeSnap, req: PlacementRequest, shape: string): number | string {
    const now = req.window.start;
    const m = this.nodeVerdicts.get(node);
    if (m && m.shape === shape && m.from <= now && now < m.until) return m.r;
    const r = scoreNode(node, req, []);
    const until = overlapsChangeAt(node, now, req.window.end - req.window.start);
    this.nodeVerdicts.set(node, { shape, from: now, until, r });
    return r;
  }

  // ---- bind ---------------------------------------------------------------------------------------------------

  private async bindReservation(pod: Pod, want: NonNullable<PodDemand['reservation']>, node: string) {
    const { namespace, name, uid } = pod.metadata;
    // Filter checked tenant and window already; bind checks both again, in the same transaction as the assignment.
    const tenantId = await this.tenantOf(namespace);
    const assigned = await this.d.ledger.assignPod({
      podUid: uid,
      reservationId: want.id,
      tenantId,
      nodeId: node,
      namespace,
      podName: name,
      count: want.count,
    });
    if (!assigned.ok) throw new BindError(assigned.reason);
    if (assigned.movedFrom) this.d.log.info('moved a pod’s assignment left by a bind that stopped', { pod: `${namespace}/${name}`, uid, from: assigned.movedFrom, to: node });
    try {
      await this.d.kube.bindPod(namespace, name, uid, node);
    } catch (e) {
      if (!assigned.existing) await this.undo(pod, node, () => this.d.ledger.releasePod(uid));
      throw e;
    }
  }

  /**
   * Undoes a failed bind's writes (a release), retried with backoff while this call lasts: the scheduler binds this
   * pod again only after we answer, so no later bind can be honouring what is undone. Every failure is an error in the
   * log. Should it still fail, what the pod holds stays the pod's: filter and bind honour it, and the releaser frees it
   * when the pod goes; retrying after we answered could free atoms a new bind of the pod has just been handed.
   */
  private async undo(pod: Pod, node: string, fn: () => Promise<unknown>): Promise<void> {
    const { namespace, name, uid } = pod.metadata;
    const deadline = performance.now() + this.undoRetryMs;
    for (let delay = 50, attempt = 1; ; delay = Math.min(delay * 2, 1000), attempt++) {
      try {
        await fn();
        if (attempt > 1) this.d.log.info('undo of a failed bind committed', { pod: `${namespace}/${name}`, uid, node, attempt });
        return;
      } catch (e) {
        const giveUp = performance.now() + delay > deadline;
        this.d.log.error(giveUp ? 'undo of a failed bind failed; the pod keeps what it holds (its next bind honours it, the releaser frees it when the pod goes)' : 'undo of a failed bind failed; retrying', {
          pod: `${namespace}/${name}`,
          uid,
          node,
          attempt,
          ...errorFields(e),
        });
        if (giveUp) return;
        await new Promise((r) => setTimeout(r, delay));
      }
    }
  }

  /** Returns whether the in-memory state holds the booking already (applied here); false: it learns it by notification. */
  private async bindOnDemand(pod: Pod, devices: { class: DeviceClass; count: number }[], node: string, holdsNothing: boolean): Promise<boolean> {
    const { namespace, name, uid } = pod.metadata;
    // The node's pool from the state while it is fresh (no read); else from the cached map. Unknown there: read now.
    const known = this.d.memory?.fresh() ? this.d.memory.state.poolOfNode(node) : (await this.nodePools()).get(node);
    const poolId = known ?? (await nodePools(this.d.db)).get(node);
    if (!poolId) throw new BindError(`node ${node} is not a GPU node of any pool in the ledger`);
    const tenant = await this.tenantOf(namespace);
    const deadline = pod.spec.activeDeadlineSeconds ?? null;
    // The booking and the node's admission lease (with the atoms, for the agent) are one write; while another pod's
    // admission is in flight on the node, nothing is written, and the bind waits for it (one per node, ADR 0003).
    const waitUntil = performance.now() + this.waitMs;
    let booked: Extract<PodBookingOutcome, { ok: true }>;
    try {
      for (let delay = 20; ; delay = Math.min(delay * 2, 250)) {
        const out = await this.d.ledger.bookPod(
          {
            tenantId: tenant,
            poolId,
            podUid: uid,
            nodeId: node,
            devices,
            durationSeconds: deadline,
            admission: { namespace, podName: name, ttlSeconds: this.ttlSeconds },
            holdsNothing,
          },
          this.d.clock.now(),
        );
        if (out.ok) {
          booked = out;
          break;
        }
        if (out.code !== 'ADMISSION_BUSY') throw new BindError(out.code === 'QUOTA_EXCEEDED' ? `QuotaExceeded: ${out.message}` : `${out.code}: ${out.message}`);
        if (performance.now() > waitUntil) throw new BindError(`another on-demand admission is in flight on node ${node}; retry`);
        await new Promise((r) => setTimeout(r, delay));
      }
    } catch (e) {
      // Nothing of this bind committed, unless the ledger failed after its write: the lease is dropped if it is ours.
      if (!(e instanceof BindError)) await this.undo(pod, node, () => this.d.ledger.dropAdmission(node, uid));
      this.invalidate(poolId);
      throw e;
    }
    let applied = false;
    try {
      if (booked.nodeId !== node) throw new BindError(`pod already holds a booking on ${booked.nodeId}`);
      // The next filter sees the booking at once: the state applies it, not a reload of what its notifications name.
      if (booked.written) applied = this.d.memory?.applyPodBooking({ podUid: uid, nodeId: node, atoms: booked.atoms, ...booked.written }) ?? false;
      // The atoms on the pod for people and tools, in the Binding's own write (one API call, not two).
      await this.d.kube.bindPod(namespace, name, uid, node, {
        [ATOMS_ANNOTATION]: booked.atoms.join(','),
        [ALLOCATION_ANNOTATION]: booked.allocationId,
      });
      this.markAdmitting(node, uid, performance.now() + this.admittingMs);
      this.invalidate(poolId);
      this.d.log.info('bound on-demand pod', { pod: `${namespace}/${name}`, uid, node, atoms: booked.atoms, allocation: booked.allocationId });
      return applied;
    } catch (e) {
      // A new booking is released with the admission (one transaction); an existing one stays the pod's.
      if (!booked.existing) await this.undo(pod, node, () => this.d.ledger.releasePod(uid));
      else await this.undo(pod, node, () => this.d.ledger.dropAdmission(node, uid));
      this.unmarkAdmitting(node, uid);
      this.invalidate(poolId);
      throw e;
    }
  }
}
