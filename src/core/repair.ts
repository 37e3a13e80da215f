// BookingRepair's decision (ADR 0016): a reservation, the atoms it lost, the pool as it is → which allocations are cut
// and which new ones are placed, or how many atoms stay short. Pure: the planner on a snapshot, no I/O, no clock.
import { plan } from './planner.ts';
import type { Candidate, DeviceClass, DeviceRequest, NodeSnap, PlacementRequest, PoolSnap } from './types.ts';

export interface RepairAllocation {
  readonly id: string;
  readonly nodeId: string;
  /** Its atoms booked now or later (not yet cut). */
  readonly atoms: readonly string[];
}

export interface RepairInput {
  readonly pool: PoolSnap;
  /** The reservation's request, its window from greatest(now, start) to its end. */
  readonly request: PlacementRequest;
  /** Whether the window has started: a started allocation keeps the atoms it still has (pods may run on them). */
  readonly started: boolean;
  readonly allocations: readonly RepairAllocation[];
  /** Lost atoms by allocation id. */
  readonly lost: ReadonlyMap<string, readonly string[]>;
  /** The class of each lost atom (one that left the inventory is not in the snapshot). */
  readonly classes: ReadonlyMap<string, DeviceClass>;
}

export interface RepairCut {
  readonly allocationId: string;
  /** The atoms cut at now: the lost ones, or every atom when the allocation moves whole. */
  readonly atoms: readonly string[];
}

export interface RepairPlan {
  readonly cuts: RepairCut[];
  readonly placements: Candidate[];
  /** Lost atoms that nothing replaces (the reservation is Degraded while > 0), and why, per allocation. */
  readonly short: number;
  readonly reasons: string[];
}

/**
 * Per allocation that lost atoms, in node order: first the lost atoms alone on the same node (the kept ones stay where
 * they are); else, when the allocation may move (nothing kept, or the window not started), the whole allocation on
 * another node that the reservation does not use, inside the gang's domain for a gang; else it stays short. What one
 * allocation takes is booked in the working snapshot before the next is planned.
 */
export function planRepair(input: RepairInput): RepairPlan {
  const { request: req } = input;
  const nodes = new Map(input.pool.nodes.map((n) => [n.id, cloneNode(n)]));
  const pool: PoolSnap = { ...input.pool, nodes: [...nodes.values()] };
  const used = new Set(input.allocations.map((a) => a.nodeId));
  const topologyKey = req.gang?.topologyKey ?? input.pool.topologyKey;
  const domainOf = (nodeId: string) => nodes.get(nodeId)?.labels[topologyKey];
  // A gang's domain: that of a member that keeps every atom (a member that loses all may be on a node gone from the pool).
  let domain = req.gang
    ? input.allocations.filter((a) => !(input.lost.get(a.id)?.length)).map((a) => domainOf(a.nodeId)).find((d) => d !== undefined)
    : undefined;
  const cuts: RepairCut[] = [];
  const placements: Candidate[] = [];
  const reasons: string[] = [];
  let short = 0;
  const affected = input.allocations.filter((a) => (input.lost.get(a.id)?.length ?? 0) > 0);
  affected.sort((a, b) => (a.nodeId < b.nodeId ? -1 : a.nodeId > b.nodeId ? 1 : 0));
  for (const a of affected) {
    const lost = new Set(input.lost.get(a.id));
    const kept = a.atoms.filter((x) => !lost.has(x));
    const node = nodes.get(a.nodeId);
    if (kept.length > 0 && node?.schedulable && req.binding !== 'node') {
      const partial = plan({ ...pool, nodes: [node] }, { ...partialRequest(req, input.classes, [...lost]), window: req.window });
      if (partial.ok && partial.candidates[0]!.atoms.length === lost.size) {
        const c = { ...partial.candidates[0]!, scalars: {} };
        take(node, c.atoms, req.window);
        cuts.push({ allocationId: a.id, atoms: [...lost] });
        placements.push(c);
        continue;
      }
    }
    if (kept.length === 0 || !input.started) {
      const others = pool.nodes.filter(
        (n) => !used.has(n.id) && (domain === undefined || n.labels[topologyKey] === domain),
      );
      const { gang: _gang, ...single } = req;
      const whole = plan({ ...pool, nodes: others }, single);
      if (whole.ok) {
        const c = whole.candidates[0]!;
        take(nodes.get(c.nodeId)!, c.atoms, req.window);
        used.add(c.nodeId);
        // A gang that lost every member: the first replacement's domain is the gang's from now on.
        if (req.gang && domain === undefined) domain = domainOf(c.nodeId);
        cuts.push({ allocationId: a.id, atoms: [...a.atoms] });
        placements.push(c);
        continue;
      }
      reasons.push(`${lost.size} atoms of ${a.nodeId}: ${whole.reason}${domain !== undefined ? ` (gang domain ${domain})` : ''}`);
    } else {
      reasons.push(`${lost.size} atoms of ${a.nodeId}: no free atom left on that node, and a started allocation keeps its node`);
    }
    short += lost.size;
  }
  return { cuts, placements, short, reasons };
}

/** The lost atoms' share of the request: per class, as many as were lost, with that class's selector and sharing. */
function partialRequest(
  req: PlacementRequest,
  classes: ReadonlyMap<string, DeviceClass>,
  lost: readonly string[],
): Omit<PlacementRequest, 'window'> {
  const counts = new Map<DeviceClass, number>();
  for (const id of lost) {
    const c = classes.get(id);
    if (c) counts.set(c, (counts.get(c) ?? 0) + 1);
  }
  const devices: DeviceRequest[] = [];
  for (const [cls, count] of counts) {
    const d = req.devices.find((x) => x.class === cls);
    devices.push({ ...(d ?? { class: cls, selector: [] }), count });
  }
  return { devices, binding: req.binding, ...(req.topology ? { topology: req.topology } : {}) };
}

/** A copy whose bookings this plan may add to; no summary, so the planner visits its atoms. */
function cloneNode(n: NodeSnap): NodeSnap {
  const { summary: _summary, ...rest } = n;
  return { ...rest, atoms: n.atoms.map((a) => ({ ...a, bookings: [...a.bookings] })) };
}

function take(node: NodeSnap, atoms: readonly string[], window: { start: number; end: number }): void {
  const ids = new Set(atoms);
  for (const a of node.atoms) if (ids.has(a.id)) a.bookings.push({ ...window });
}

/**
 * Why an atom was lost, when its node still answers: its containers can be seen to stop, so what a running pod holds
 * is kept booked until the pod is gone (docs/repair.md). A node NotReady or gone cannot say so: it is re-placed after
 * the grace, and its pods, if they come back, are stopped (they hold no live booking there any more).
 */
export const KEPT_WHILE_IN_USE: ReadonlySet<string> = new Set(['Maintenance', 'DeviceGone', 'DeviceUnhealthy']);

/**
 * The lost atoms that repair may cut now: not those on a node where the reservation still has a live pod, lost for a
 * reason whose node answers. `podNodes` holds `${reservationId} ${nodeId}` for every live pod assignment.
 */
export function cuttableNow<T extends { reservationId: string; nodeId: string; reason: string }>(lost: readonly T[], podNodes: ReadonlySet<string>): T[] {
  return lost.filter((l) => !(KEPT_WHILE_IN_USE.has(l.reason) && podNodes.has(`${l.reservationId} ${l.nodeId}`)));
}
