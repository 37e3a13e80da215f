// What a capacity preview asks of the planner, and what it answers: the capacity API's previewer, served from the
// ledger or from the extender's in-memory state. Types only.
import type { PreviewInput } from './schemas.ts';

export interface Preemptible {
  /** How many spot reservations would get a notice. */
  count: number;
  /** When the request would start (epoch ms). */
  start: number;
}

/** What the planner answers; Ledger.preview satisfies it. `preemptible` is passed through when the ledger gives one. */
export type PlanAnswer =
  | {
      readonly ok: true;
      readonly candidates: readonly { readonly nodeId: string; readonly atoms: readonly string[]; readonly score: number }[];
      readonly gangDomain?: string;
    }
  | { readonly ok: false; readonly reason: string; readonly preemptible?: Preemptible };

export interface Previewer {
  preview(input: PreviewInput, nowMs: number): Promise<PlanAnswer>;
}
