// The nodes admitting, or about to admit, an on-demand pod (one admission per node, ADR 0003): marked when prioritize
// ranks a node first for a pod (or filter passes it alone, ADR 0030) and again after the pod's bind there, each mark for
// `admittingMs`. Prioritize ranks such nodes last for other on-demand pods, filter keeps them behind the others, so
// consecutive pods spread over the nodes that pack best instead of queueing behind one node's admission.
import type { HostPriority } from './wire.ts';

export class AdmittingTracker {
  /** node → on-demand pod uid → until (the monotonic clock's ms). */
  private readonly admitting = new Map<string, Map<string, number>>();

  constructor(
    private readonly admittingMs: number,
    private readonly now: () => number,
  ) {}

  /** The node admits this pod from now for admittingMs. */
  mark(node: string, podUid: string): void {
    this.markAt(node, podUid, this.now() + this.admittingMs);
  }

  unmark(node: string, podUid: string): void {
    const pods = this.admitting.get(node);
    pods?.delete(podUid);
    if (pods?.size === 0) this.admitting.delete(node);
  }

  /** Whether the node is admitting an on-demand pod other than this one at `now`; forgets what has run out. */
  admittingOther(node: string, podUid: string, now: number): boolean {
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
   * An on-demand pod's scores: nodes admitting another on-demand pod last (0), every other passing node at least 1; the
   * node ranked first is marked as admitting this pod.
   */
  spread(podUid: string, scores: HostPriority[]): void {
    const now = this.now();
    if (this.admitting.size > 1024) for (const node of [...this.admitting.keys()]) this.admittingOther(node, '', now);
    let best: HostPriority | undefined;
    for (const s of scores) {
      if (s.Score <= 0) continue;
      s.Score = this.admittingOther(s.Host, podUid, now) ? 0 : Math.max(1, s.Score);
      if (s.Score > 0 && (!best || s.Score > best.Score)) best = s;
    }
    if (best) this.markAt(best.Host, podUid, now + this.admittingMs);
  }

  private markAt(node: string, podUid: string, until: number): void {
    const pods = this.admitting.get(node) ?? new Map<string, number>();
    pods.set(podUid, until);
    this.admitting.set(node, pods);
  }
}
