// The earliest window that fits (docs/kueue.md, docs/adr/0046-kueue-books-the-earliest-window.md): a booking of
// exclusive atoms that fits from some instant also fits from the latest instant before it at which an atom it uses
// became free, so the only starts worth asking the placer about are `from` itself and the ends of the bookings in the
// pool after it. Pure: the snapshot is the ledger's (Ledger.earliestWindow), the requests are the caller's, the planner
// decides each start.
import { plan } from './planner.ts';
import type { Candidate, PlacementRequest, PoolSnap } from './types.ts';

/** At most this many starts are asked about: each one is a plan of the whole pool. */
export const MAX_WINDOW_STARTS = 512;

/**
 * `from`, then every end of a booking on a schedulable node's bookable atom in (from, until] (whole ms, rounded up),
 * earliest first, unique, at most `max`.
 */
export function candidateStarts(snap: PoolSnap, from: number, until: number, max = MAX_WINDOW_STARTS): number[] {
  const ends = new Set<number>();
  for (const n of snap.nodes) {
    if (!n.schedulable) continue;
    for (const a of n.atoms) {
      if (!a.bookable || !a.healthy) continue;
      // Whole milliseconds, rounded up: a booking's end may carry the database's microseconds, and a start that
      // rounded down would overlap it.
      for (const b of a.bookings) if (b.end > from && b.end <= until && Number.isFinite(b.end)) ends.add(Math.ceil(b.end));
    }
  }
  ends.delete(from);
  return [from, ...[...ends].sort((x, y) => x - y)].slice(0, max);
}

export type WindowFound =
  | { ok: true; start: number; shape: number; candidates: readonly Candidate[]; gangDomain?: string; tried: number }
  | { ok: false; reason: string; tried: number };

/**
 * The earliest start in [from, until] at which one of the shapes fits, and which (the first that fits at that start:
 * shapes come in the caller's preference). `request(shape, start)` is the placement request of a shape from `start`.
 * Not fitting anywhere: the planner's reason at `from` for the first shape.
 */
export function earliestWindow(
  snap: PoolSnap,
  shapes: number,
  request: (shape: number, start: number) => PlacementRequest,
  from: number,
  until: number,
): WindowFound {
  let firstReason: string | undefined;
  let tried = 0;
  for (const start of candidateStarts(snap, from, until)) {
    for (let s = 0; s < shapes; s++) {
      const r = plan(snap, request(s, start));
      tried++;
      if (r.ok) return { ok: true, start, shape: s, candidates: r.candidates, ...(r.gangDomain !== undefined ? { gangDomain: r.gangDomain } : {}), tried };
      firstReason ??= r.reason;
    }
  }
  return { ok: false, reason: firstReason ?? 'no shape to place', tried };
}
