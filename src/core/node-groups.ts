// A pool's nodes grouped for plan(): the schedulable nodes that share one summary object without bookings
// (summarizeShared) answer a plain request alike, so plan() screens each such summary once and visits only the other
// nodes one by one. At 10,000 nodes, visiting every node cost the placer about 0.3 ms of CPU per placement on the
// development machine, most of it in reaching the node objects.
import type { NodeSnap, NodeSummary } from './types.ts';

/** Ascending indices: where `i` is, or where it would go. */
function search(list: readonly number[], i: number): number {
  let lo = 0;
  let hi = list.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (list[mid]! < i) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

function add(list: number[], i: number): void {
  list.splice(search(list, i), 0, i);
}

function remove(list: number[], i: number): void {
  const at = search(list, i);
  if (list[at] === i) list.splice(at, 1);
}

/**
 * Which group each node of `nodes` is in, kept current by whoever changes a node's summary (update()). The nodes'
 * order is the pool order that plan() breaks ties in.
 */
export class NodeGroups {
  /** Per summary shared by schedulable nodes without bookings: their indices, ascending. */
  readonly shared = new Map<NodeSummary, number[]>();
  /** The indices of every other node (booked, unschedulable, or without a summary), ascending. */
  readonly others: number[] = [];
  private readonly index = new Map<string, number>();
  /** Where each node is now: its shared summary, or undefined when it is among the others. */
  private readonly placed: (NodeSummary | undefined)[] = [];

  constructor(readonly nodes: readonly NodeSnap[]) {
    nodes.forEach((n, i) => {
      this.index.set(n.id, i);
      const g = NodeGroups.groupOf(n);
      this.placed.push(g);
      if (!g) this.others.push(i);
      else {
        const list = this.shared.get(g);
        if (list) list.push(i);
        else this.shared.set(g, [i]);
      }
    });
  }

  private static groupOf(n: NodeSnap): NodeSummary | undefined {
    const s = n.summary;
    return n.schedulable && s !== undefined && s.busyFrom === Infinity ? s : undefined;
  }

  /** After `node.summary` changed. A node that is not (or no longer) this object in `nodes` is ignored. */
  update(node: NodeSnap): void {
    const i = this.index.get(node.id);
    if (i === undefined || this.nodes[i] !== node) return;
    const was = this.placed[i];
    const now = NodeGroups.groupOf(node);
    if (was === now) return;
    if (was) {
      const list = this.shared.get(was)!;
      remove(list, i);
      if (list.length === 0) this.shared.delete(was);
    } else remove(this.others, i);
    if (now) {
      const list = this.shared.get(now);
      if (list) add(list, i);
      else this.shared.set(now, [i]);
    } else add(this.others, i);
    this.placed[i] = now;
  }
}
