// The extender's verdicts for filter and prioritize: per node, a score or why it does not fit, from the in-memory state
// while it vouches for itself (ADR 0010), else from the database (cached reads, no writes). Its caches: the pools'
// snapshots and the node-to-pool map (snapshotTtlMs), scoreNode's last answer per node snapshot, and filter's last
// scores for the prioritize that follows.
import { judgeFromSummary, overlapsChangeAt, requestScalars, scoreNode, summarizeNode } from '../core/planner.ts';
import type { NodeSnap, NodeSummary, PlacementRequest } from '../core/types.ts';
import { toPlacementRequest } from '../db/ledger.ts';
import { nodePools, podHolding, quotaHeadroom, reservationAtoms, reservationAtomsHeld, waitsForMessage } from '../db/reads.ts';
import { getPool, isPoolVisible, loadNodes, type PoolInfo } from '../db/snapshot.ts';
import type { AdmittingTracker } from './admitting.ts';
import { NoTenantError, type ExtenderDeps } from './deps.ts';
import { namespaceTenant, noTenantMessage } from '../kube/types.ts';
import { podDemand, type PodDemand } from './resources.ts';
import type { ExtenderState } from './state.ts';
import type { Pod } from './wire.ts';

/**
 * Per name (by its index in the call's names): its score when it passes (NaN: it does not), and why not; `onDemand`:
 * the pod asks for devices, not a reservation's atoms (prioritize spreads such pods over nodes not admitting another).
 */
export interface Verdict {
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

/** How long prioritize takes filter's scores for the same pod (see lastScores). */
const SCORES_REUSE_MS = 1000;

/** The refusal of a pod that asks for none of our resources (it should never have been sent to this scheduler). */
export function notOurPod(namespace: string, name: string): string {
  return `pod ${namespace}/${name} requests no Better Compute resource (bettercompute.io/gpu, gpu.mig, gpu.slot or reservations.bettercompute.io/<reservation>); this scheduler places only those`;
}

/**
 * The tenant of a namespace: its tenant label, else (with tenancy by name on) its name (ADR 0005, ADR 0040); throws
 * NoTenantError when it is none.
 */
export async function tenantOf(d: Pick<ExtenderDeps, 'kube' | 'tenancyByName'>, namespace: string): Promise<string> {
  const tenant = namespaceTenant(namespace, await d.kube.namespaceLabels(namespace), d.tenancyByName);
  if (tenant === undefined) throw new NoTenantError(noTenantMessage(namespace));
  return tenant;
}

export class ExtenderJudge {
  private readonly snaps = new Map<string, Promise<CachedSnap>>();
  private pools?: { at: number; map: Promise<Map<string, string | null>> };
  /**
   * The names filter last passed, with their scores: kube-scheduler prioritizes those nodes, for the same pod, right after
   * (one pod at a time), and prioritize takes them from here instead of judging the same nodes again. Used once, and
   * within SCORES_REUSE_MS; the scores are preferences (bind is the arbiter), so they may be that much older.
   */
  private lastScores?: { uid: string; until: number; names: string[]; scores: Float64Array };
  /**
   * scoreNode's last answer per node snapshot, for one request shape (devices, binding, topology, window length): a
   * node whose bookings did not change is not judged again, call after call, until time reaches an instant from which
   * the window overlaps other bookings (overlapsChangeAt). Snapshots are replaced on every change, never changed in
   * place (ExtenderState, and this judge's own loads), so a changed node is a new key. Booked nodes are what filter
   * spends its time on: each is judged atom by atom.
   */
  private readonly nodeVerdicts = new WeakMap<NodeSnap, { shape: string; from: number; until: number; r: number | string }>();

  constructor(
    private readonly d: ExtenderDeps,
    private readonly o: { maxPriority: number; snapshotTtlMs: number; admitting: AdmittingTracker; now: () => number },
  ) {}

  /** The verdict on every name for this pod. One look at freshness per call: all from memory, or all from the database. */
  async judge(pod: Pod, names: string[]): Promise<Verdict> {
    const demand = podDemand(pod.spec);
    const v: Verdict = { scores: new Float64Array(names.length).fill(NaN), failed: {}, unresolvable: {}, onDemand: !demand.reservation && demand.devices.length > 0 };
    const all = (reason: string) => {
      for (const n of names) v.unresolvable[n] = reason;
      return v;
    };
    if (demand.invalid) return all(demand.invalid);
    if (!demand.reservation && !demand.devices.length) return all(notOurPod(pod.metadata.namespace, pod.metadata.name));
    // The pod holds atoms already (a bind stopped between its booking and its Binding): only that node passes, with
    // the top score. Its atoms are the pod's, and bind there honours them; letting another node pass would make the
    // scheduler free them and book others for nothing (and judging that node again would count the pod's own booking
    // against it). Only when the scheduler does not offer that node (cordoned, tainted, gone) are the others judged,
    // and bind on one of them moves the pod's holding in one transaction.
    const mem = this.d.memory?.fresh() ? this.d.memory.state : undefined;
    const holding = mem ? mem.podHolding(pod.metadata.uid) : await podHolding(this.d.db, pod.metadata.uid);
    if (holding && names.includes(holding)) {
      names.forEach((n, i) => {
        if (n === holding) v.scores[i] = this.o.maxPriority;
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

  /**
   * The names filter passes, in the call's order: every node that fits, or, when more than `limit` fit, the best `limit`
   * of them (`filterNodes`, ADR 0022; 1 for an on-demand pod without scheduling preferences, ADR 0030). Best: for an
   * on-demand pod, a node not admitting another on-demand pod before one that is (prioritize ranks those last, and a
   * bind there waits); then the higher score; then the earlier name. The
   * nodes left out fit and are not failures: they are not listed in FailedNodes (kube-scheduler reads those only when
   * no node passes, and then none is left out). `best`: their indexes, ascending; `fit`: how many fit.
   */
  bestFits(podUid: string, names: string[], v: Verdict, limit: number): { best: number[]; fit: number } {
    const now = this.o.now();
    // A node's rank: its score, less 1,000 when it is admitting another on-demand pod (scores lie in 0..maxPriority).
    const rank = (i: number) => v.scores[i]! - (v.onDemand && this.o.admitting.admittingOther(names[i]!, podUid, now) ? 1000 : 0);
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

  /** Filter's answer for the pod, for the prioritize that follows (filterScores). */
  rememberScores(uid: string, names: string[], scores: Float64Array): void {
    this.lastScores = { uid, until: this.o.now() + SCORES_REUSE_MS, names, scores };
  }

  /**
   * Filter's scores for these names, when its last answer was for this pod, is recent, and passed every one of them
   * (the scheduler sends them in filter's order: one walk along filter's names, no index built).
   */
  filterScores(uid: string, names: string[], now: number): Float64Array | undefined {
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

  private async judgeReservation(pod: Pod, want: NonNullable<PodDemand['reservation']>, names: string[], v: Verdict, mem?: ExtenderState) {
    const all = (reason: string) => {
      for (const n of names) v.unresolvable[n] = reason;
    };
    // The state knows the reservations that were live when it loaded and every one changed since; another (ended
    // long ago, or never there) is read from the database, for the reason.
    const r = mem?.reservation(want.id) ?? (await reservationAtoms(this.d.db, want.id));
    if (!r) return all(`reservation ${want.id} not found`);
    if (r.state !== 'held' && r.state !== 'confirmed') return all(`reservation ${want.id} is ${r.state}`);
    const tenant = await tenantOf(this.d, pod.metadata.namespace);
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
        // A pod of an earlier booking still stopping on these atoms: this pod waits for it (bind checks again, and
        // also for an on-demand pod's booking, which memory does not track by atom).
        const held = mem && !mem.othersAssignedOn(n, atoms, want.id) ? [] : await reservationAtomsHeld(this.d.db, want.id, n, pod.metadata.uid);
        if (held.length) {
          v.failed[n] = waitsForMessage(held);
          return;
        }
        // Packing: the node this pod fills best (fewest of the reservation's atoms left over) scores highest.
        v.scores[i] = this.o.maxPriority - Math.min(this.o.maxPriority, free - want.count);
      }),
    );
  }

  /** Node name → pool id (null: a node of no pool), read at most every snapshotTtlMs. */
  nodePools(): Promise<Map<string, string | null>> {
    const now = this.o.now();
    if (!this.pools || now - this.pools.at > this.o.snapshotTtlMs) {
      const map = nodePools(this.d.db);
      map.catch(() => (this.pools = undefined));
      this.pools = { at: now, map };
    }
    return this.pools.map;
  }

  private snapshot(poolId: string): Promise<CachedSnap> {
    const hit = this.snaps.get(poolId);
    const now = this.o.now();
    if (hit) {
      // Served while fresh; a stale one is replaced, and callers wait for the new one.
      const fresh = hit.then((c) => (now - c.at <= this.o.snapshotTtlMs ? c : undefined));
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
      return { at: this.o.now(), info, byId: new Map(nodes.map((n) => [n.id, n])) };
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
    const [tenant, pools] = await Promise.all([tenantOf(this.d, pod.metadata.namespace), mem ? undefined : this.nodePools()]);
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
    const call: OnDemandCall = { pod, devices, names, v, mem, entries, tenant, now: this.d.clock.now() };
    const judges = new Map<string, (i: number) => void>();
    await Promise.all([...poolIds].map(async (poolId) => judges.set(poolId, await this.poolJudge(call, poolId))));
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

  /** How the name at an index is judged, for the names of one pool: visibility and quota once, then node by node. */
  private async poolJudge(call: OnDemandCall, poolId: string): Promise<(i: number) => void> {
    const { pod, devices, names, v, mem, tenant, now } = call;
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
    const nodeOf = (i: number) => (fromMemory ? call.entries![i]?.snap : c.byId.get(names[i]!));
    return this.nodeJudge(call, req, nodeOf);
  }

  /** A pool's node-by-node judge: nodes that share a summary (the state keeps equal ones as one object) share a verdict. */
  private nodeJudge(call: OnDemandCall, req: PlacementRequest, nodeOf: (i: number) => NodeSnap | undefined): (i: number) => void {
    const { names, v } = call;
    const scalars = requestScalars(req);
    const bySummary = scalars.length === 0 ? new Map<NodeSummary, number | string | null>() : undefined;
    const shape = JSON.stringify([req.devices, req.binding, req.topology ?? null, req.window.end - req.window.start]);
    // Runs of nodes share one summary (all those without bookings): the last one's verdict, without the map.
    let lastSummary: NodeSummary | undefined;
    let lastVerdict: number | string | null | undefined;
    return (i) => {
      const n = names[i]!;
      const node = nodeOf(i);
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
      if (typeof r === 'number') v.scores[i] = (r / 110) * this.o.maxPriority;
      else v.failed[n] = r;
    };
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
}

/** One on-demand judge call: the pod, its devices, the names and their verdict, where the answer comes from. */
interface OnDemandCall {
  pod: Pod;
  devices: PodDemand['devices'];
  names: string[];
  v: Verdict;
  mem: ExtenderState | undefined;
  entries: ReturnType<ExtenderState['resolve']> | undefined;
  tenant: string;
  now: number;
}
