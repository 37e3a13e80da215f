// The extender's in-memory mirror of the ledger, indexed for its questions (ADR 0010): per pool its info and its nodes
// as the planner's snapshots; node → pool; per reservation its atoms and live assignments per node; pod uid → the node
// it holds atoms on; per limited quota key its limit and its live charges. Pure: src/extender/state-sync.ts loads the
// pieces from the ledger and hands them here; nothing here reads a clock or a database.
import { summarizeNode } from '../core/planner.ts';
import type { NodeSnap, NodeSummary, PoolSnap } from '../core/types.ts';
import type { PoolInfo } from '../db/snapshot.ts';
import type { ReservationAtoms } from '../db/reads.ts';

/** A reservation as filter sees it. */
export type ReservationView = ReservationAtoms;

/** A quota charge: `amount` over [start, end) in epoch milliseconds; end Infinity when unbounded. */
export interface QuotaCharge {
  readonly start: number;
  readonly end: number;
  readonly amount: number;
}

/** A pod's new booking as the ledger wrote it: its atoms on its node over [start, end) (end Infinity: open-ended). */
export interface PodBookingApplied {
  readonly podUid: string;
  readonly nodeId: string;
  readonly atoms: readonly string[];
  readonly start: number;
  readonly end: number;
}

export interface QuotaKey {
  readonly tenantId: string;
  readonly poolId: string;
  readonly resource: string;
}

/** A limited quota key: its limit and its charges that had not ended when loaded. */
export interface QuotaState {
  readonly max: number;
  readonly charges: readonly QuotaCharge[];
}

export interface PoolState {
  readonly info: PoolInfo;
  /** The pool's nodes by id, each with its summary. */
  readonly byId: Map<string, NodeSnap>;
  /** The planner's snapshot (nodes in id order, as the database path loads them), built on demand after a change. */
  snap?: PoolSnap;
}

/** A node as loaded: its pool (null: none) and, when in a pool, its snapshot. */
export interface NodeLoad {
  readonly id: string;
  readonly poolId: string | null;
  readonly snap?: NodeSnap;
}

/** Everything at once, for the initial load and the periodic full resync. */
export interface FullLoad {
  readonly pools: readonly { info: PoolInfo; nodes: readonly NodeSnap[] }[];
  readonly nodePools: ReadonlyMap<string, string | null>;
  readonly reservations: ReadonlyMap<string, ReservationView>;
  readonly holdings: ReadonlyMap<string, string>;
  readonly quotas: readonly (QuotaKey & { max: number | null; charges: readonly QuotaCharge[] })[];
  /**
   * When given, every loaded node carries its summary already, interned in this map (internSummary), and the state
   * takes the map over: the loader summarizes a batch of nodes as it comes, not all of them in replaceAll's one stretch.
   */
  readonly summaries?: Map<string, NodeSummary>;
}

/** Sets the node's summary, one object for equal summaries (those in `summaries`, where a new one is added). */
export function internSummary(n: NodeSnap, summaries: Map<string, NodeSummary>): void {
  const s = summarizeNode(n);
  const key = summaryKey(s);
  const known = summaries.get(key);
  if (known) n.summary = known;
  else {
    summaries.set(key, s);
    n.summary = s;
  }
}

export function quotaKeyOf(k: QuotaKey): string {
  return JSON.stringify([k.tenantId, k.poolId, k.resource]);
}

/**
 * The largest sum of charges at any instant of [winStart, winEnd): bc_quota_peak (migrations/functions/bc_quota_peak.sql) in
 * memory. A sweep over the charges' start points (clamped to the window's start) and end points, ends before starts
 * at the same instant (ranges are half-open). `winEnd` null is a window without an upper bound, as SQL has it: then
 * no end point counts (`upper(during) < NULL` is never true), exactly like the function.
 */
export function quotaPeak(charges: readonly QuotaCharge[], winStart: number, winEnd: number | null): number {
  const upper = winEnd ?? Infinity;
  const events: number[][] = [];
  for (const c of charges) {
    if (!(c.start < upper && winStart < c.end && c.start < c.end)) continue;
    events.push([Math.max(c.start, winStart), c.amount]);
    if (winEnd !== null && c.end < winEnd) events.push([c.end, -c.amount]);
  }
  events.sort((a, b) => a[0]! - b[0]! || a[1]! - b[1]!);
  let running = 0;
  let peak = 0;
  for (const [, delta] of events) {
    running += delta!;
    if (running > peak) peak = running;
  }
  return peak;
}

/**
 * A node as filter looks it up: its pool (null: none) and, when in a known pool, its snapshot. One lookup per name.
 * One object per node for as long as the node is known, updated in place, so that a resolved names list stays current.
 */
export interface NodeEntry {
  readonly poolId: string | null;
  readonly snap?: NodeSnap;
}

interface MutableEntry {
  poolId: string | null;
  snap?: NodeSnap;
}

export class ExtenderState {
  private pools = new Map<string, PoolState>();
  private nodes = new Map<string, MutableEntry>();
  /** Bumped when a node id comes or goes: the resolution of the last names list is reused while it stands. */
  private nodesVersion = 0;
  private lastResolved: { version: number; names: readonly string[]; entries: (NodeEntry | undefined)[] } | undefined;
  /** Equal summaries are one object, so that filter judges each distinct summary once per call. */
  private summaries = new Map<string, NodeSummary>();
  private reservations = new Map<string, ReservationView>();
  private holdings = new Map<string, string>();
  private quotas = new Map<string, QuotaState>();

  /** Replaces everything (the initial load, a full resync). */
  replaceAll(load: FullLoad): void {
    this.summaries = load.summaries ?? new Map();
    const pools = new Map<string, PoolState>();
    for (const p of load.pools) pools.set(p.info.id, { info: p.info, byId: this.indexNodes(p.nodes, !load.summaries) });
    const quotas = new Map<string, QuotaState>();
    for (const q of load.quotas) if (q.max !== null) quotas.set(quotaKeyOf(q), { max: q.max, charges: q.charges });
    const nodes = new Map<string, MutableEntry>();
    for (const [id, poolId] of load.nodePools) {
      const snap = poolId ? pools.get(poolId)?.byId.get(id) : undefined;
      nodes.set(id, snap ? { poolId, snap } : { poolId });
    }
    this.pools = pools;
    this.nodes = nodes;
    this.nodesVersion++;
    this.reservations = new Map(load.reservations);
    this.holdings = new Map(load.holdings);
    this.quotas = quotas;
  }

  /** A pool reloaded with all its nodes, or gone (undefined). */
  setPool(poolId: string, loaded: { info: PoolInfo; nodes: readonly NodeSnap[] } | undefined): void {
    if (!loaded) {
      this.pools.delete(poolId);
      for (const e of this.nodes.values()) if (e.poolId === poolId) this.setEntry(e, null);
      return;
    }
    const old = this.pools.get(poolId);
    for (const id of old?.byId.keys() ?? []) {
      const e = this.nodes.get(id);
      if (e?.poolId === poolId) this.setEntry(e, null);
    }
    const pool: PoolState = { info: loaded.info, byId: this.indexNodes(loaded.nodes) };
    this.pools.set(poolId, pool);
    for (const n of pool.byId.values()) this.entry(n.id, poolId, n);
  }

  /** Sets a node's entry in place (a new node id makes the last resolution stale). */
  private entry(id: string, poolId: string | null, snap?: NodeSnap): void {
    const e = this.nodes.get(id);
    if (e) this.setEntry(e, poolId, snap);
    else {
      this.nodes.set(id, snap ? { poolId, snap } : { poolId });
      this.nodesVersion++;
    }
  }

  private setEntry(e: MutableEntry, poolId: string | null, snap?: NodeSnap): void {
    e.poolId = poolId;
    if (snap) e.snap = snap;
    else delete e.snap;
  }

  /** Nodes reloaded: each moves to its pool (or out of every pool); `gone` are no longer in the ledger. */
  setNodes(nodes: readonly NodeLoad[], gone: readonly string[] = []): void {
    for (const id of gone) {
      this.removeFromPool(id);
      if (this.nodes.delete(id)) this.nodesVersion++;
    }
    for (const n of nodes) {
      const before = this.nodes.get(n.id)?.poolId;
      if (before && before !== n.poolId) this.removeFromPool(n.id);
      const pool = n.poolId ? this.pools.get(n.poolId) : undefined;
      if (!pool || !n.snap) {
        // Its pool's own reload brings its snapshot (a pool this state does not know yet).
        pool?.byId.delete(n.id);
        if (pool) delete pool.snap;
        this.entry(n.id, n.poolId);
        continue;
      }
      internSummary(n.snap, this.summaries);
      pool.byId.set(n.id, n.snap);
      delete pool.snap;
      this.entry(n.id, n.poolId, n.snap);
    }
  }

  private indexNodes(nodes: readonly NodeSnap[], summarize = true): Map<string, NodeSnap> {
    const byId = new Map<string, NodeSnap>();
    for (const n of nodes) {
      if (summarize) internSummary(n, this.summaries);
      byId.set(n.id, n);
    }
    return byId;
  }

  private removeFromPool(nodeId: string): void {
    const poolId = this.nodes.get(nodeId)?.poolId;
    const pool = poolId ? this.pools.get(poolId) : undefined;
    if (!pool) return;
    pool.byId.delete(nodeId);
    delete pool.snap;
  }

  /**
   * A pod's new booking as the ledger wrote it (ADR 0023): its atoms booked over [start, end) (end Infinity: open-ended)
   * on its node, and the pod holding atoms there. The node's snapshot is replaced, not changed in place (a call in
   * progress may hold the old one). Idempotent: an atom that shows the booking already (a reload brought it) keeps it
   * once. False, with nothing applied, when this state does not hold the node's snapshot or one of the atoms.
   */
  applyPodBooking(b: PodBookingApplied): boolean {
    const e = this.nodes.get(b.nodeId);
    if (!e?.poolId || !e.snap) return false;
    const booked = new Set(b.atoms);
    let found = 0;
    const atoms = e.snap.atoms.map((a) => {
      if (!booked.has(a.id)) return a;
      found++;
      if (a.bookings.some((x) => x.start === b.start && x.end === b.end)) return a;
      return { ...a, bookings: [...a.bookings, { start: b.start, end: b.end }] };
    });
    if (found !== booked.size) return false;
    this.setNodes([{ id: b.nodeId, poolId: e.poolId, snap: { ...e.snap, atoms } }]);
    this.setHolding(b.podUid, b.nodeId);
    return true;
  }

  setReservation(id: string, r: ReservationView | undefined): void {
    if (r) this.reservations.set(id, r);
    else this.reservations.delete(id);
  }

  setHolding(podUid: string, nodeId: string | undefined): void {
    if (nodeId) this.holdings.set(podUid, nodeId);
    else this.holdings.delete(podUid);
  }

  /** A quota key reloaded: its limit (null or absent: unlimited, nothing to check) and live charges. */
  setQuota(key: QuotaKey, q: { max: number | null; charges: readonly QuotaCharge[] } | undefined): void {
    if (q && q.max !== null) this.quotas.set(quotaKeyOf(key), { max: q.max, charges: q.charges });
    else this.quotas.delete(quotaKeyOf(key));
  }

  // ---- the extender's questions ---------------------------------------------------------------------------------

  pool(poolId: string): PoolState | undefined {
    return this.pools.get(poolId);
  }

  /** The pool as the planner's snapshot (capacity.preview plans on it). */
  poolSnap(poolId: string): PoolSnap | undefined {
    const p = this.pools.get(poolId);
    if (!p) return undefined;
    p.snap ??= {
      id: p.info.id,
      sharing: p.info.sharing,
      topologyKey: p.info.topologyKey,
      nodes: [...p.byId.values()].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0)),
    };
    return p.snap;
  }

  poolOfNode(nodeId: string): string | null | undefined {
    return this.nodes.get(nodeId)?.poolId;
  }

  /**
   * node() for every name of a call. kube-scheduler sends the same names call after call: while no node changed, the
   * last call's answer is reused after comparing the names, which costs less than looking each one up.
   */
  resolve(names: readonly string[]): readonly (NodeEntry | undefined)[] {
    const last = this.lastResolved;
    if (last && last.version === this.nodesVersion && last.names.length === names.length) {
      let same = true;
      for (let i = 0; i < names.length; i++) {
        if (last.names[i] !== names[i]) {
          same = false;
          break;
        }
      }
      if (same) return last.entries;
    }
    const entries = new Array<NodeEntry | undefined>(names.length);
    for (let i = 0; i < names.length; i++) entries[i] = this.nodes.get(names[i]!);
    this.lastResolved = { version: this.nodesVersion, names: [...names], entries };
    return entries;
  }

  /** The node's pool and snapshot in one lookup (filter's per-name question). */
  node(nodeId: string): NodeEntry | undefined {
    return this.nodes.get(nodeId);
  }

  /** A reservation this state knows (held or confirmed when loaded, or changed since); undefined: not known here. */
  reservation(id: string): ReservationView | undefined {
    return this.reservations.get(id);
  }

  /**
   * Whether a reservation other than `reservationId` (null: any) has live pod assignments on the node over any of
   * `atoms`: the first part of bc_atoms_held, from memory (whether filter or bind must ask the ledger which pod a
   * pod waits for).
   */
  othersAssignedOn(nodeId: string, atoms: readonly string[], reservationId: string | null): boolean {
    for (const [id, r] of this.reservations) {
      if (id === reservationId || !r.assigned.get(nodeId)) continue;
      if (r.atoms.get(nodeId)?.some((a) => atoms.includes(a))) return true;
    }
    return false;
  }

  podHolding(podUid: string): string | undefined {
    return this.holdings.get(podUid);
  }

  /** As queries.ts quotaHeadroom: per limited resource, its limit and the peak use over [now, windowEnd). */
  quotaHeadroom(tenantId: string, poolId: string, resources: readonly string[], now: number, windowEndMs: number | null): Map<string, { max: number; peak: number }> {
    const out = new Map<string, { max: number; peak: number }>();
    for (const resource of resources) {
      const q = this.quotas.get(quotaKeyOf({ tenantId, poolId, resource }));
      if (q) out.set(resource, { max: q.max, peak: quotaPeak(q.charges, now, windowEndMs) });
    }
    return out;
  }

  /**
   * Everything as plain data in a stable order (for tests and debugging): two states that answer alike describe
   * alike. Reservations are those held or confirmed (a state also keeps ended ones it saw end).
   */
  describe(): unknown {
    const sortBy = <T>(xs: Iterable<T>, key: (x: T) => string) => [...xs].sort((a, b) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0));
    return {
      pools: sortBy(this.pools.values(), (p) => p.info.id).map((p) => ({
        info: { ...p.info, offeredTo: [...p.info.offeredTo].sort() },
        nodes: sortBy(p.byId.values(), (n) => n.id).map((n) => ({
          id: n.id,
          schedulable: n.schedulable,
          labels: n.labels,
          scalars: n.scalars,
          atoms: sortBy(n.atoms, (a) => a.id).map((a) => ({ ...a, bookings: [...a.bookings].sort((x, y) => x.start - y.start || x.end - y.end) })),
        })),
      })),
      // With whether the node's entry holds the snapshot its pool holds (filter reads one, preview the other).
      nodePools: sortBy(this.nodes, ([id]) => id).map(([id, e]) => [id, e.poolId, (e.poolId ? this.pools.get(e.poolId)?.byId.get(id) : undefined) === e.snap]),
      reservations: sortBy(
        [...this.reservations].filter(([, r]) => r.state === 'held' || r.state === 'confirmed'),
        ([id]) => id,
      ).map(([id, r]) => ({ id, ...r, atoms: sortBy(r.atoms, ([n]) => n), assigned: sortBy(r.assigned, ([n]) => n) })),
      holdings: sortBy(this.holdings, ([uid]) => uid),
      quotas: sortBy(this.quotas, ([k]) => k).map(([k, q]) => ({ key: k, max: q.max, charges: [...q.charges].sort((x, y) => x.start - y.start || x.end - y.end || x.amount - y.amount) })),
    };
  }

  /** Sizes, for logs. */
  counts(): { pools: number; nodes: number; reservations: number; holdings: number; quotas: number } {
    let nodes = 0;
    for (const p of this.pools.values()) nodes += p.byId.size;
    return { pools: this.pools.size, nodes, reservations: this.reservations.size, holdings: this.holdings.size, quotas: this.quotas.size };
  }
}

function summaryKey(s: NodeSummary): string {
  const classes = [...s.classes].map(([c, v]) => `${c}:${v.bookable}/${v.healthy}/${v.largestNuma}/${v.fullFrom}/${v.fullUntil}`).sort();
  return `${s.busyFrom};${s.busyUntil};${classes.join(',')}`;
}
