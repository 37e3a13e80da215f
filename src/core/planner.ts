// The planning core: snapshot + request → ranked candidates with atoms and score, or a reason. Pure: no I/O, no clock.
import type { NodeGroups } from './node-groups.ts';
import { matchesSelector } from './selector.ts';
import {
  overlaps,
  type AtomSnap,
  type Candidate,
  type ClassSummary,
  type DeviceClass,
  type DeviceRequest,
  type Interval,
  type NodeSnap,
  type NodeSummary,
  type PlacementRequest,
  type PlanResult,
  type PoolSnap,
  type ScalarResource,
  type Sharing,
} from './types.ts';

export const MAX_CANDIDATES = 10;
const LOCALITY_BONUS = 10;

/** Why one node does not fit; counted per reason for the answer's message. */
type Misfit = 'unschedulable' | `devices:${string}` | `scalar:${ScalarResource}` | 'busy-node';

interface NodeFit {
  readonly candidate?: Candidate;
  readonly misfit?: Misfit;
}

export function atomSharing(atom: AtomSnap): Sharing {
  if (atom.class === 'gpu.mig') return 'mig';
  if (atom.class === 'gpu.slot') {
    const s = atom.attributes.sharing;
    return s === 'mps' ? 'mps' : 'timeslice';
  }
  return 'exclusive';
}

function isFree(atom: AtomSnap, req: PlacementRequest): boolean {
  if (!atom.bookable || !atom.healthy) return false;
  const bookings = atom.bookings;
  for (let i = 0; i < bookings.length; i++) if (overlaps(bookings[i]!, req.window)) return false;
  return true;
}

function groupBy<T>(items: readonly T[], key: (t: T) => string | null): Map<string | null, T[]> {
  const groups = new Map<string | null, T[]>();
  for (const item of items) {
    const k = key(item);
    const g = groups.get(k);
    if (g) g.push(item);
    else groups.set(k, [item]);
  }
  return groups;
}

function attrKey(atom: AtomSnap, name: string): string | null {
  const v = atom.attributes[name];
  return v === null || v === undefined ? null : String(v);
}

/**
 * Picks `count` atoms among `eligible`. With nvlink-all, all from one NVLink domain; otherwise one NUMA node when one can
 * hold them all. Among groups that can, the tightest fit wins (bin-packing inside the node). Returns the atoms and
 * whether they share a locality group.
 */
function pickAtoms(
  eligible: AtomSnap[],
  count: number,
  nvlinkAll: boolean,
  busySiblings: ReadonlyMap<string, number>,
): { atoms: AtomSnap[]; local: boolean } | undefined {
  if (eligible.length < count) return undefined;
  // Slots and MIG instances: prefer the GPUs that are already shared, so whole GPUs stay free.
  const ordered = [...eligible].sort(
    (a, b) =>
      (busySiblings.get(b.parentId ?? '') ?? 0) - (busySiblings.get(a.parentId ?? '') ?? 0) || cmp(a.id, b.id),
  );
  const groups = groupBy(ordered, (a) => attrKey(a, nvlinkAll ? 'nvlinkDomain' : 'numaNode'));
  let best: AtomSnap[] | undefined;
  for (const [key, group] of groups) {
    if (nvlinkAll && key === null) continue;
    if (group.length >= count && (!best || group.length < best.length)) best = group;
  }
  if (best) return { atoms: best.slice(0, count), local: true };
  if (nvlinkAll) return undefined;
  // No single NUMA node holds them: take from the largest groups first, to span as few as possible.
  const spread = [...groups.values()].sort((a, b) => b.length - a.length).flat();
  return { atoms: spread.slice(0, count), local: false };
}

function cmp(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

function fitNode(node: NodeSnap, req: PlacementRequest): NodeFit {
  if (!node.schedulable) return { misfit: 'unschedulable' };

  const scalars: Partial<Record<ScalarResource, number>> = {};
  for (const [name, amount] of Object.entries(req.resources ?? {}) as [ScalarResource, number][]) {
    if (!amount) continue;
    const s = node.scalars[name];
    if (!s || s.allocated + amount > Math.floor(s.allocatable * s.ratio)) return { misfit: `scalar:${name}` };
    scalars[name] = amount;
  }

  const free = node.atoms.filter((a) => isFree(a, req));
  const freeSet = new Set(free);
  const busySiblings = new Map<string, number>();
  for (const a of node.atoms) {
    if (a.parentId && a.bookable && !freeSet.has(a)) busySiblings.set(a.parentId, (busySiblings.get(a.parentId) ?? 0) + 1);
  }

  const taken = new Set<string>();
  const chosen: AtomSnap[] = [];
  let allLocal = true;
  for (const d of req.devices) {
    const eligible = free.filter((a) => !taken.has(a.id) && matchesDevice(a, d));
    const pick = pickAtoms(eligible, d.count, (d.topology ?? req.topology) === 'nvlink-all', busySiblings);
    if (!pick) return { misfit: `devices:${d.class}` };
    allLocal &&= pick.local;
    for (const a of pick.atoms) {
      taken.add(a.id);
      chosen.push(a);
    }
  }

  const bookable = node.atoms.filter((a) => a.bookable);
  if (req.binding === 'node') {
    // A node lease takes every atom, so every atom must be free.
    if (bookable.some((a) => !freeSet.has(a))) return { misfit: 'busy-node' };
    chosen.splice(0, chosen.length, ...bookable);
  }

  // Bin-packing: the fuller the node after this placement, the better, so whole nodes stay free for big requests.
  const classes = new Set(req.devices.map((d) => d.class));
  const relevant = bookable.filter((a) => classes.has(a.class));
  const busyAfter = relevant.length - free.filter((a) => classes.has(a.class)).length + chosen.length;
  const packing = relevant.length === 0 ? 0 : Math.round((100 * busyAfter) / relevant.length);
  return {
    candidate: {
      nodeId: node.id,
      atoms: chosen.map((a) => a.id).sort(cmp),
      scalars,
      score: packing + (allLocal ? LOCALITY_BONUS : 0),
    },
  };
}

function matchesDevice(atom: AtomSnap, d: DeviceRequest): boolean {
  if (atom.class !== d.class) return false;
  if (d.sharing && atomSharing(atom) !== d.sharing) return false;
  return d.selector.length === 0 || matchesSelector(d.selector, atom.attributes);
}

function byScore(a: Candidate, b: Candidate): number {
  return b.score - a.score || cmp(a.nodeId, b.nodeId);
}

/** Inserts into a list kept sorted by byScore, keeping at most `limit` entries. */
function insertRanked(list: Candidate[], c: Candidate, limit: number): void {
  let i = list.length;
  while (i > 0 && byScore(list[i - 1]!, c) > 0) i--;
  if (i >= limit) return;
  list.splice(i, 0, c);
  if (list.length > limit) list.pop();
}

/** Why a node does not fit, as a phrase after its count ("2 unschedulable", "1 without enough vcpu"). */
function misfitText(m: Misfit): string {
  if (m === 'unschedulable') return 'unschedulable';
  if (m === 'busy-node') return 'not wholly free for a node lease';
  if (m.startsWith('scalar:')) return `without enough ${m.slice(7)}`;
  return `without enough free ${m.slice(8)} atoms matching the request in the window`;
}

function describeMisfits(misfits: Map<Misfit, number>, total: number): string {
  const parts = [...misfits.entries()].sort((a, b) => b[1] - a[1]).map(([m, n]) => `${n} ${misfitText(m)}`);
  return `0/${total} nodes fit${parts.length ? `: ${parts.join(', ')}` : ''}`;
}

export type NodeVerdict = { readonly ok: true; readonly score: number } | { readonly ok: false; readonly reason: string };

/** The request's scalar amounts above zero (what screenNode checks), computed once per request. */
export function requestScalars(req: PlacementRequest): readonly [ScalarResource, number][] {
  return (Object.entries(req.resources ?? {}) as [ScalarResource, number][]).filter(([, n]) => n > 0);
}

/**
 * One node judged on its own, without allocating: the score of the best placement on it, or why nothing fits there.
 * The scheduler extender calls it for thousands of nodes per call.
 */
export function scoreNode(node: NodeSnap, req: PlacementRequest, scalars: readonly [ScalarResource, number][] = requestScalars(req)): number | string {
  const s = screenNode(node, req, scalars);
  if (typeof s !== 'number') return misfitText(s);
  // Most nodes are answered by their summary without visiting an atom.
  const quick = scoreFromSummary(node, req, s);
  if (quick !== undefined) return quick;
  const f = fitNode(node, req);
  return f.candidate ? f.candidate.score : misfitText(f.misfit ?? 'unschedulable');
}

/**
 * The first instant after `now` from which a window of `length` ms (Infinity: open-ended) starting then overlaps
 * another set of the node's bookings than one starting at `now`: a booking it overlaps ends, or its end reaches a
 * booking that starts later. scoreNode's answer for such a window depends on the node only through which bookings
 * the window overlaps, so the answer at `now` holds for every start in [now, the instant returned). Infinity: never.
 */
export function overlapsChangeAt(node: NodeSnap, now: number, length: number): number {
  let at = Infinity;
  for (const a of node.atoms) {
    for (const b of a.bookings) {
      if (b.end > now && b.end < at) at = b.end;
      // A window [t, t + length) reaches the booking once t > b.start - length.
      const reach = b.start - length;
      if (reach >= now && reach < at) at = reach;
    }
  }
  return at;
}

/**
 * scoreNode of a schedulable node, for a request without scalars, from the node's summary alone — when the summary
 * decides it (one device request without selector or sharing, no node lease, no NVLink requirement, no booking of the
 * node near the window); else undefined. Nodes with one summary get one answer: the extender judges each distinct
 * summary once per call.
 */
export function judgeFromSummary(sum: NodeSummary, req: PlacementRequest): number | string | undefined {
  const d = req.devices.length === 1 ? req.devices[0]! : undefined;
  if (!d || d.selector.length > 0 || d.sharing || req.binding === 'node' || (d.topology ?? req.topology) === 'nvlink-all') return undefined;
  if (!(req.window.end <= sum.busyFrom || req.window.start >= sum.busyUntil)) return undefined;
  const c = sum.classes.get(d.class);
  if (!c || c.healthy < d.count) return misfitText(`devices:${d.class}`);
  const packing = Math.round((100 * (c.bookable - c.healthy + d.count)) / c.bookable);
  return packing + (c.largestNuma >= d.count ? LOCALITY_BONUS : 0);
}

/**
 * Each node judged on its own (the scheduler extender's filter: the scheduler picks the node, we say which fit and
 * how well): the score of the best placement on it, or why nothing fits there.
 */
export function judgeNodes(nodes: readonly NodeSnap[], req: PlacementRequest): Map<string, NodeVerdict> {
  const scalars = requestScalars(req);
  const verdicts = new Map<string, NodeVerdict>();
  for (const node of nodes) {
    const r = scoreNode(node, req, scalars);
    verdicts.set(node.id, typeof r === 'number' ? { ok: true, score: r } : { ok: false, reason: r });
  }
  return verdicts;
}

/**
 * A cheap first pass over one node, without allocations: is the node possibly feasible, and what is its packing
 * score? Necessary, not sufficient (two device requests of one class may count the same atom), so feasible nodes
 * still go through fitNode(). The packing score is exact; fitNode() adds at most LOCALITY_BONUS.
 */
function screenNode(node: NodeSnap, req: PlacementRequest, scalars: readonly [ScalarResource, number][]): Misfit | number {
  if (!node.schedulable) return 'unschedulable';
  for (const [name, amount] of scalars) {
    const s = node.scalars[name];
    if (!s || s.allocated + amount > Math.floor(s.allocatable * s.ratio)) return `scalar:${name}`;
  }
  const devices = req.devices;
  const single = devices.length === 1 ? devices[0]! : undefined;
  const bySummary = single && screenBySummary(node, req, single);
  if (bySummary !== undefined) return bySummary;
  let relevant = 0;
  let relevantFree = 0;
  let anyBusy = false;
  let singleFree = 0;
  for (const a of node.atoms) {
    const free = isFree(a, req);
    if (!free) anyBusy = true;
    if (single) {
      if (a.class !== single.class) continue;
      relevant++;
      if (free) {
        relevantFree++;
        if (matchesDevice(a, single)) singleFree++;
      }
    } else if (devices.some((d) => d.class === a.class)) {
      relevant++;
      if (free) relevantFree++;
    }
  }
  let wanted = 0;
  if (single) {
    if (singleFree < single.count) return `devices:${single.class}`;
    wanted = single.count;
  } else {
    const many = wantedOfMany(node, req);
    if (typeof many === 'string') return many;
    wanted = many;
  }
  if (req.binding === 'node') return anyBusy ? 'busy-node' : 100;
  return relevant === 0 ? 0 : Math.round((100 * (relevant - relevantFree + wanted)) / relevant);
}

/**
 * screenNode's fast paths for a single device request, from the node's summary alone: no booking of the node touches
 * the window and the request needs no look at attributes, or every atom of the class is booked across the window.
 * Undefined when the atoms must be visited.
 */
function screenBySummary(node: NodeSnap, req: PlacementRequest, single: PlacementRequest['devices'][number]): Misfit | number | undefined {
  const sum = node.summary;
  if (
    sum &&
    single.selector.length === 0 &&
    !single.sharing &&
    (req.window.end <= sum.busyFrom || req.window.start >= sum.busyUntil)
  ) {
    const c = sum.classes.get(single.class);
    if (!c || c.healthy < single.count) return `devices:${single.class}`;
    if (req.binding === 'node') return c.healthy === c.bookable ? 100 : 'busy-node';
    return Math.round((100 * (c.bookable - c.healthy + single.count)) / c.bookable);
  }
  // Every atom of the class booked across the window: none free, without visiting them.
  const full = sum?.classes.get(single.class);
  if (full && req.window.start < full.fullUntil && full.fullFrom < req.window.end) return `devices:${single.class}`;
  return undefined;
}

/**
 * The atoms several device requests want on the node, or the first class short of them: requests of one class draw on
 * the same atoms, so together they may not want more than the class has free.
 */
function wantedOfMany(node: NodeSnap, req: PlacementRequest): Misfit | number {
  let wanted = 0;
  const wantedByClass = new Map<DeviceClass, number>();
  for (const d of req.devices) {
    let free = 0;
    for (const a of node.atoms) if (a.class === d.class && isFree(a, req) && matchesDevice(a, d)) free++;
    if (free < d.count) return `devices:${d.class}`;
    wanted += d.count;
    wantedByClass.set(d.class, (wantedByClass.get(d.class) ?? 0) + d.count);
  }
  for (const [cls, want] of wantedByClass) {
    let free = 0;
    for (const a of node.atoms) if (a.class === cls && isFree(a, req)) free++;
    if (free < want) return `devices:${cls}`;
  }
  return wanted;
}

/** The summary of a node's atoms; call again after changing their bookings or health. */
export function summarizeNode(node: NodeSnap): NodeSummary {
  const classes = new Map<AtomSnap['class'], { -readonly [K in keyof ClassSummary]: ClassSummary[K] }>();
  const numa = new Map<string, number>();
  let busyFrom = Infinity;
  let busyUntil = -Infinity;
  for (const a of node.atoms) {
    if (!a.bookable) continue;
    const c = classes.get(a.class) ?? { bookable: 0, healthy: 0, largestNuma: 0, fullFrom: -Infinity, fullUntil: Infinity };
    c.bookable++;
    let last: Interval | undefined;
    for (const b of a.bookings) {
      if (b.start < busyFrom) busyFrom = b.start;
      if (b.end > busyUntil) busyUntil = b.end;
      if (!last || b.end > last.end) last = b;
    }
    if (a.healthy) {
      c.healthy++;
      // Grouped as pickAtoms groups them.
      const key = `${a.class}\u0000${attrKey(a, 'numaNode') ?? '\u0000'}`;
      const n = (numa.get(key) ?? 0) + 1;
      numa.set(key, n);
      if (n > c.largestNuma) c.largestNuma = n;
      // The span every healthy atom so far is booked in.
      c.fullFrom = last ? Math.max(c.fullFrom, last.start) : Infinity;
      c.fullUntil = last ? Math.min(c.fullUntil, last.end) : -Infinity;
    }
    classes.set(a.class, c);
  }
  return { classes, busyFrom, busyUntil };
}

/**
 * The exact score of a node that screenNode found feasible with `packing`, from its summary alone, when fitNode would
 * add nothing the summary does not know: one device request without selector or sharing, no node lease, no NVLink
 * requirement, and no booking of the node near the window (every healthy atom free). Else undefined.
 */
function scoreFromSummary(node: NodeSnap, req: PlacementRequest, packing: number): number | undefined {
  const sum = node.summary;
  const d = req.devices.length === 1 ? req.devices[0]! : undefined;
  if (!sum || !d || d.selector.length > 0 || d.sharing || req.binding === 'node' || (d.topology ?? req.topology) === 'nvlink-all') return undefined;
  if (!(req.window.end <= sum.busyFrom || req.window.start >= sum.busyUntil)) return undefined;
  const c = sum.classes.get(d.class);
  if (!c) return undefined;
  return packing + (c.largestNuma >= d.count ? LOCALITY_BONUS : 0);
}

/**
 * summarizeNode, except that nodes without bookings and with the same counts get one shared summary object (kept in
 * `shared`), which plan() screens once for all of them.
 */
export function summarizeShared(node: NodeSnap, shared: Map<string, NodeSummary>): NodeSummary {
  const summary = summarizeNode(node);
  if (summary.busyFrom !== Infinity) return summary;
  const key = [...summary.classes].map(([c, n]) => `${c}:${n.bookable}:${n.healthy}:${n.largestNuma}`).sort().join(',');
  const existing = shared.get(key);
  if (existing) return existing;
  shared.set(key, summary);
  return summary;
}

/** plan()'s per-node scratch (a packing score, -1 for a misfit; the feasible nodes' order), grown when a pool is larger. */
let scratch = { score: new Int8Array(0), order: new Int32Array(0) };

/**
 * The request's ranked candidates in `pool`, or why none. With `groups` (of `pool.nodes`, kept current by the caller),
 * a request that reads only the nodes' summaries where they are free screens each shared summary once instead of each
 * of its nodes; the answer is the same.
 */
export function plan(pool: PoolSnap, req: PlacementRequest, groups?: NodeGroups): PlanResult {
  if (groups && groups.nodes !== pool.nodes) throw new Error('plan: the node groups are of another node list');
  const misfits = new Map<Misfit, number>();
  const miss = (m: Misfit) => misfits.set(m, (misfits.get(m) ?? 0) + 1);
  const nodes = pool.nodes;
  // Feasible nodes ordered by packing score (0–100), best first and in pool order within a score: a stable counting
  // sort on scratch arrays, so that the exact pass visits the best first and a plan allocates nothing per node.
  if (scratch.score.length < nodes.length) scratch = { score: new Int8Array(nodes.length * 2), order: new Int32Array(nodes.length * 2) };
  const { score, order } = scratch;
  const count = new Int32Array(101);
  const scalars = (Object.entries(req.resources ?? {}) as [ScalarResource, number][]).filter(([, n]) => n > 0);
  // Nodes that share one summary object (summarizeShared) screen alike on the fast path, which reads nothing else: one
  // screen serves the run of them. Exact, and at 10,000 nodes most of the plan's time otherwise.
  const single = req.devices.length === 1 ? req.devices[0]! : undefined;
  const memoable = scalars.length === 0 && single !== undefined && single.selector.length === 0 && !single.sharing;
  if (groups && memoable && !req.gang) return planByGroups(nodes, req, groups);
  let memoSummary: NodeSummary | undefined;
  let memoScreen: Misfit | number = 0;
  for (let i = 0; i < nodes.length; i++) {
    const node = nodes[i]!;
    const sum = node.summary;
    let s: Misfit | number;
    if (memoable && node.schedulable && sum !== undefined && sum === memoSummary) s = memoScreen;
    else {
      s = screenNode(node, req, scalars);
      if (memoable && node.schedulable && sum !== undefined && (req.window.end <= sum.busyFrom || req.window.start >= sum.busyUntil)) {
        memoSummary = sum;
        memoScreen = s;
      }
    }
    if (typeof s === 'number') {
      const b = Math.min(100, Math.max(0, s));
      score[i] = b;
      count[b]!++;
    } else {
      score[i] = -1;
      miss(s);
    }
  }
  // Where each score's nodes start in `order`, the highest score first.
  const start = new Int32Array(101);
  for (let b = 99, at = count[100]!; b >= 0; b--) {
    start[b] = at;
    at += count[b]!;
  }
  const feasible = start[0]! + count[0]!;
  for (let i = 0; i < nodes.length; i++) {
    const b = score[i]!;
    if (b >= 0) order[start[b]!++] = i;
  }
  const fits: Candidate[] = [];
  // Without a gang only the best MAX_CANDIDATES matter: stop once no node left can beat the last of them.
  for (let k = 0; k < feasible; k++) {
    const i = order[k]!;
    if (!req.gang && fits.length >= MAX_CANDIDATES && fits[MAX_CANDIDATES - 1]!.score >= score[i]! + LOCALITY_BONUS) break;
    const f = fitNode(nodes[i]!, req);
    if (f.candidate) insertRanked(fits, f.candidate, req.gang ? Infinity : MAX_CANDIDATES);
    else if (f.misfit) miss(f.misfit);
  }
  if (!req.gang) {
    if (fits.length === 0) return { ok: false, reason: describeMisfits(misfits, nodes.length) };
    return { ok: true, candidates: fits };
  }
  return planGang(pool, req.gang.size, req.gang.topologyKey ?? pool.topologyKey, fits, misfits);
}

/**
 * plan() of a request without gang, scalars, selector or sharing, on grouped nodes: the same candidates and reason as
 * its node-by-node pass. Each shared summary is screened once for its nodes (the fast path reads nothing else of
 * them); the exact pass visits the feasible nodes best score first and in pool order within a score, merging the
 * groups' ascending indices, and stops where plan() stops.
 */
function planByGroups(nodes: readonly NodeSnap[], req: PlacementRequest, groups: NodeGroups): PlanResult {
  const noScalars: readonly [ScalarResource, number][] = [];
  // Misfits counted, and ordered as the node-by-node pass meets them: by the first node of each.
  const firstMisfits = new Map<Misfit, { at: number; count: number }>();
  const missAt = (m: Misfit, at: number, count: number) => {
    const e = firstMisfits.get(m);
    if (!e) firstMisfits.set(m, { at, count });
    else {
      e.count += count;
      if (at < e.at) e.at = at;
    }
  };
  // Per packing score (sparse): ascending index lists, the other nodes' one first, then each shared group's.
  const feasible: number[][][] = [];
  const others: number[][] = [];
  for (const i of groups.others) {
    const s = screenNode(nodes[i]!, req, noScalars);
    if (typeof s !== 'number') missAt(s, i, 1);
    else (others[Math.min(100, Math.max(0, s))] ??= []).push(i);
  }
  others.forEach((list, b) => (feasible[b] = [list]));
  for (const list of groups.shared.values()) {
    const s = screenNode(nodes[list[0]!]!, req, noScalars);
    if (typeof s !== 'number') missAt(s, list[0]!, list.length);
    else (feasible[Math.min(100, Math.max(0, s))] ??= []).push(list);
  }
  const misfits = new Map([...firstMisfits].sort((a, b) => a[1].at - b[1].at).map(([m, e]) => [m, e.count]));
  const fits: Candidate[] = [];
  visit: for (let b = 100; b >= 0; b--) {
    const lists = feasible[b];
    if (!lists) continue;
    const next = lists.map(() => 0);
    for (;;) {
      let from = -1;
      for (let k = 0; k < lists.length; k++) {
        if (next[k]! < lists[k]!.length && (from < 0 || lists[k]![next[k]!]! < lists[from]![next[from]!]!)) from = k;
      }
      if (from < 0) break;
      const i = lists[from]![next[from]!++]!;
      if (fits.length >= MAX_CANDIDATES && fits[MAX_CANDIDATES - 1]!.score >= b + LOCALITY_BONUS) break visit;
      const f = fitNode(nodes[i]!, req);
      if (f.candidate) insertRanked(fits, f.candidate, MAX_CANDIDATES);
      else if (f.misfit) misfits.set(f.misfit, (misfits.get(f.misfit) ?? 0) + 1);
    }
  }
  if (fits.length === 0) return { ok: false, reason: describeMisfits(misfits, nodes.length) };
  return { ok: true, candidates: fits };
}

/** All or nothing: `size` fitting nodes inside one placement domain; the domain whose best members score highest. */
function planGang(
  pool: PoolSnap,
  size: number,
  topologyKey: string,
  fits: Candidate[],
  misfits: Map<Misfit, number>,
): PlanResult {
  const labelsOf = new Map(pool.nodes.map((n) => [n.id, n.labels]));
  const byDomain = groupBy(fits, (c) => labelsOf.get(c.nodeId)?.[topologyKey] ?? null);
  let best: { domain: string; members: Candidate[]; score: number } | undefined;
  let largest = 0;
  for (const [domain, members] of byDomain) {
    if (domain === null) continue;
    largest = Math.max(largest, members.length);
    if (members.length < size) continue;
    const top = members.sort(byScore).slice(0, size);
    const score = top.reduce((s, c) => s + c.score, 0) / size;
    if (!best || score > best.score || (score === best.score && domain < best.domain)) best = { domain, members: top, score };
  }
  if (!best) {
    const base = fits.length === 0 ? `${describeMisfits(misfits, pool.nodes.length)}; ` : '';
    return {
      ok: false,
      reason: `${base}no placement domain (${topologyKey}) has ${size} nodes that fit; the best has ${largest}`,
    };
  }
  // A gang commits all members at once, so the answer lists them all (size may exceed the shortlist of 10).
  return { ok: true, candidates: best.members, gangDomain: best.domain };
}
