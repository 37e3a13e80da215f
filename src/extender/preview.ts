// capacity.preview from the extender's in-memory state (ADR 0010): the planner on the state's pool snapshot while the
// state vouches for itself, the ledger's own preview (which loads the pool) otherwise. Either answers alike.
import type { PlanAnswer, Previewer } from '../core/preview.ts';
import type { PreviewInput } from '../core/schemas.ts';
import { previewOn } from '../db/ledger.ts';
import type { ExtenderMemory } from './service.ts';

export class StatePreviewer implements Previewer {
  private readonly spotNoticeMs: number;

  constructor(
    private readonly memory: Pick<ExtenderMemory, 'state' | 'fresh'>,
    private readonly fallback: Previewer,
    opts: { spotNoticeSeconds?: number } = {},
  ) {
    this.spotNoticeMs = (opts.spotNoticeSeconds ?? 120) * 1000;
  }

  async preview(input: PreviewInput, nowMs: number): Promise<PlanAnswer> {
    const snap = this.memory.fresh() ? this.memory.state.poolSnap(input.poolId) : undefined;
    if (!snap) return this.fallback.preview(input, nowMs);
    return previewOn(snap, input, nowMs, this.spotNoticeMs);
  }
}
