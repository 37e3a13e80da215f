// Spot preemption (docs/adr/0017-spot-preemption.md): which spot reservations a regular request displaces when it fits
// only without them. Pure: the ledger commits the choice, preview reports it.
import { plan, summarizeNode } from './planner.ts';
import { overlaps, type Candidate, type NodeSnap, type PlacementRequest, type PoolSnap } from './types.ts';

/** Beyond this many spot reservations in the window, subsets are not enumerated (2^n plans): see victimsOf's fallback. */
export const MAX_VICTIM_SEARCH = 10;

export interface Preemption {
  /** The spot reservations displaced (their refs), sorted. */
  readonly victims: readonly string[];
  /** How many spot atoms they hold in the window: what the choice minimizes. */
  readonly atoms: number;
  /** The placement on the atoms they free (the request's candidates, as plan() answers them). */
  readonly candidates: readonly Candidate[];
}

/** Spot reservations with a booking in `window`, and the atoms each holds there. */
export function spotHolders(pool: PoolSnap, window: { start: number; end: number }): Map<string, Set<string>> {
  const holders = new Map<string, Set<string>>();
  for (const n of pool.nodes) {
    for (const a of n.atoms) {
      for (const b of a.bookings) {
        if (!b.spot || !b.ref || !overlaps(b, window)) continue;
        let atoms = holders.get(b.ref);
        if (!atoms) holders.set(b.ref, (atoms = new Set()));
        atoms.add(a.id);
      }
    }
  }
  return holders;
}

/** The pool as it would be if these spot reservations' bookings were gone. */
export function withoutBookingsOf(pool: PoolSnap, refs: ReadonlySet<string>): PoolSnap {
  return {
    ...pool,
    nodes: pool.nodes.map((n) => {
      if (!n.atoms.some((a) => a.bookings.some((b) => b.spot && b.ref && refs.has(b.ref)))) return n;
      const node: NodeSnap = {
        ...n,
        atoms: n.atoms.map((a) => ({ ...a, bookings: a.bookings.filter((b) => !(b.spot && b.ref && refs.has(b.ref))) })),
      };
      if (n.summary) node.summary = summarizeNode(node);
      return node;
    }),
  };
}

/**
 * The spot reservations a regular request `req` displaces, choosing the set that frees room for it while displacing
 * the fewest spot atoms (ties: fewer reservations, then the smaller refs). `req.window` is the window it would get: from
 * the notice's deadline. Undefined when it fits without displacing anyone (nothing to preempt) or does not fit even
 * without every spot booking. Regular bookings are never candidates: spot never displaces regular work, and regular
 * never displaces regular.
 */
export function choosePreemption(pool: PoolSnap, req: PlacementRequest): Preemption | undefined {
  const holders = spotHolders(pool, req.window);
  if (holders.size === 0) return undefined;
  const all = plan(withoutBookingsOf(pool, new Set(holders.keys())), req);
  if (!all.ok) return undefined;
  if (plan(pool, req).ok) return undefined;
  const refs = [...holders.keys()].sort();
  const size = (set: readonly string[]) => set.reduce((s, r) => s + holders.get(r)!.size, 0);
  if (refs.length > MAX_VICTIM_SEARCH) {
    // Too many to enumerate: the placement the planner makes with every spot booking gone, and whom it displaces.
    return victimsOf(all.candidates, req, holders, size);
  }
  const subsets: string[][] = [];
  for (let mask = 1; mask < 1 << refs.length; mask++) subsets.push(refs.filter((_, i) => mask & (1 << i)));
  subsets.sort((a, b) => size(a) - size(b) || a.length - b.length || (a.join() < b.join() ? -1 : a.join() > b.join() ? 1 : 0));
  for (const subset of subsets) {
    const p = plan(withoutBookingsOf(pool, new Set(subset)), req);
    if (p.ok) return victimsOf(p.candidates, req, holders, size);
  }
  return undefined;
}

/** The victims a placement actually displaces (those whose atoms it takes), with the placement. */
function victimsOf(
  planned: readonly Candidate[],
  req: PlacementRequest,
  holders: Map<string, Set<string>>,
  size: (set: readonly string[]) => number,
): Preemption | undefined {
  const candidates = req.gang ? planned : planned.slice(0, 1);
  const taken = new Set(candidates.flatMap((c) => c.atoms));
  const victims = [...holders].filter(([, atoms]) => [...atoms].some((a) => taken.has(a))).map(([ref]) => ref).sort();
  if (victims.length === 0) return undefined;
  return { victims, atoms: size(victims), candidates };
}
