// The GPU calendar's layout, pure: bookings → bars on node rows (lanes where they overlap), the timeline's buckets →
// free capacity cells, nodes → placement domains, and the tenant masking: another tenant's booking becomes a bar that
// says "booked" and carries no tenant, no reservation id and no atom ids (docs/adr/0039-the-gpu-calendar.md).
import type { CalendarBooking, CalendarNode } from '../db/calendar.ts';

export interface CalendarWindow {
  from: number;
  to: number;
}

/** Where a span sits in the window, in percent of its width (clipped to it). */
export interface Placed {
  leftPct: number;
  widthPct: number;
}

export interface Bar extends Placed {
  nodeId: string;
  /** The booking's span clipped to the window. */
  start: number;
  end: number;
  /** The booking starts before the window, or ends after it (or never). */
  clippedStart: boolean;
  clippedEnd: boolean;
  /** 0-based row within the node, so that overlapping bars do not cover each other. */
  lane: number;
  atomCount: number;
  /** `own-reservation` and `own-pod` for the caller's tenant; `booked` for anyone else's. */
  kind: 'own-reservation' | 'own-pod' | 'booked';
  /** The caller's own only. */
  reservationId?: string;
  atoms?: string[];
}

const round = (x: number) => Math.round(x * 1000) / 1000;

export function place(start: number, end: number, w: CalendarWindow): Placed {
  const span = w.to - w.from;
  const s = Math.max(start, w.from);
  const e = Math.min(end, w.to);
  return { leftPct: round(((s - w.from) / span) * 100), widthPct: round((Math.max(0, e - s) / span) * 100) };
}

/** One booking as the caller may see it. */
export function maskBooking(b: CalendarBooking, tenantId: string, w: CalendarWindow): Omit<Bar, 'lane'> {
  const start = Math.max(b.start, w.from);
  const end = Math.min(b.end, w.to);
  const common = {
    nodeId: b.nodeId,
    start,
    end,
    clippedStart: b.start < w.from,
    clippedEnd: b.end > w.to,
    atomCount: b.atoms.length,
    ...place(b.start, b.end, w),
  };
  if (b.tenantId !== tenantId) return { ...common, kind: 'booked' };
  if (b.kind === 'reservation' && b.reservationId) return { ...common, kind: 'own-reservation', reservationId: b.reservationId, atoms: [...b.atoms] };
  return { ...common, kind: 'own-pod', atoms: [...b.atoms] };
}

/** Lanes per node: each bar goes to the first lane whose last bar ended by its start (interval partitioning). */
export function assignLanes<T extends { nodeId: string; start: number; end: number }>(bars: readonly T[]): (T & { lane: number })[] {
  const sorted = [...bars].sort((a, b) => a.nodeId.localeCompare(b.nodeId) || a.start - b.start || a.end - b.end);
  const ends = new Map<string, number[]>();
  return sorted.map((bar) => {
    const lanes = ends.get(bar.nodeId) ?? [];
    ends.set(bar.nodeId, lanes);
    let lane = lanes.findIndex((end) => end <= bar.start);
    if (lane < 0) lane = lanes.length;
    lanes[lane] = bar.end;
    return { ...bar, lane };
  });
}

/** Bookings → bars in the window, masked for `tenantId`; bookings outside the window are left out. */
export function layoutBars(bookings: readonly CalendarBooking[], tenantId: string, w: CalendarWindow): Bar[] {
  const inside = bookings.filter((b) => b.end > w.from && b.start < w.to);
  return assignLanes(inside.map((b) => maskBooking(b, tenantId, w)));
}

export interface FreeCell extends Placed {
  start: number;
  end: number;
  free: number;
  allocatable: number;
  /** For the colour: nothing free, some, or all of it. */
  level: 'none' | 'some' | 'all';
}

/** The timeline's buckets → one free-capacity cell each. */
export function freeCells(buckets: readonly { start: number; end: number; free: number }[], allocatable: number, w: CalendarWindow): FreeCell[] {
  return buckets.map((b) => ({
    start: b.start,
    end: b.end,
    free: b.free,
    allocatable,
    level: b.free <= 0 ? 'none' : b.free >= allocatable ? 'all' : 'some',
    ...place(b.start, b.end, w),
  }));
}

export const UNLABELLED = '(no domain label)';

export interface DomainGroup {
  domain: string;
  nodes: CalendarNode[];
}

/** Nodes by placement domain: domains in name order, the unlabelled ones last; nodes by id within each. */
export function groupByDomain(nodes: readonly CalendarNode[]): DomainGroup[] {
  const groups = new Map<string | null, CalendarNode[]>();
  for (const n of nodes) groups.set(n.domain, [...(groups.get(n.domain) ?? []), n]);
  const keys = [...groups.keys()].sort((a, b) => (a === null ? 1 : b === null ? -1 : a.localeCompare(b)));
  return keys.map((k) => ({ domain: k ?? UNLABELLED, nodes: [...groups.get(k)!].sort((a, b) => a.id.localeCompare(b.id)) }));
}

export interface Tick extends Pick<Placed, 'leftPct'> {
  at: number;
  /** A day boundary (UTC midnight): labelled with the date. */
  day: boolean;
}

/** Hour ticks every `everyHours` (UTC), day boundaries always. */
export function ticks(w: CalendarWindow, everyHours = 3): Tick[] {
  const HOUR = 3_600_000;
  const out: Tick[] = [];
  for (let t = Math.ceil(w.from / HOUR) * HOUR; t < w.to; t += HOUR) {
    const hour = new Date(t).getUTCHours();
    if (hour % everyHours === 0) out.push({ at: t, day: hour === 0, leftPct: place(t, t, w).leftPct });
  }
  return out;
}

/** The "now" marker, or undefined when now is outside the window. */
export function nowMarker(now: number, w: CalendarWindow): number | undefined {
  return now >= w.from && now < w.to ? place(now, now, w).leftPct : undefined;
}
