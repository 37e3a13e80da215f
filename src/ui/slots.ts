// "Find a slot": N GPUs for D hours, as the earliest windows the placer would give. Each window is a capacity.preview
// (the API's own method, so the answer is the placer's): first from now (exactly what a preview without `start`
// answers), then from each later hour of the calendar whose free capacity could hold N GPUs, until `max` fit.
import { z } from 'zod';
import { parseInput, PreviewInput } from '../core/schemas.ts';
import type { PreviewCandidate, PreviewResult } from '../api/capacity-service.ts';

export const SlotQuery = z.strictObject({
  gpus: z.coerce.number().int().min(1).max(64),
  hours: z.coerce.number().int().min(1).max(168),
});
export type SlotQuery = z.output<typeof SlotQuery>;

export interface Slot {
  /** Epoch ms; `fromNow` when it is the preview without a start (now). */
  start: number;
  end: number;
  fromNow: boolean;
  candidates: PreviewCandidate[];
  gangDomain?: string;
}

export interface SlotAnswer {
  query: SlotQuery;
  slots: Slot[];
  /** Why it does not fit now (the preview's reason), when it does not. */
  nowReason?: string;
  /** How many previews were asked. */
  previews: number;
}

export const MAX_SLOTS = 3;
const MAX_PREVIEWS = 24;

/** The preview input for N whole GPUs for D hours, from `start` (now when absent). */
export function slotInput(tenantId: string, poolId: string, q: SlotQuery, start?: number): PreviewInput {
  return parseInput(PreviewInput, {
    tenantId,
    poolId,
    devices: [{ class: 'gpu', count: q.gpus }],
    duration: q.hours * 3600,
    ...(start !== undefined ? { start } : {}),
    idempotencyKey: 'calendar-find-slot',
  });
}

/** Later starts worth asking about: bucket starts after now with at least N GPUs free, earliest first. */
export function laterStarts(buckets: readonly { start: number; free: number }[], now: number, gpus: number): number[] {
  return buckets.filter((b) => b.start > now && b.free >= gpus).map((b) => b.start);
}

export async function findSlots(
  preview: (input: PreviewInput) => Promise<PreviewResult>,
  opts: { tenantId: string; poolId: string; query: SlotQuery; now: number; buckets: readonly { start: number; free: number }[] },
): Promise<SlotAnswer> {
  const { query, now } = opts;
  const durationMs = query.hours * 3_600_000;
  const slots: Slot[] = [];
  const first = await preview(slotInput(opts.tenantId, opts.poolId, query));
  let previews = 1;
  const add = (start: number, fromNow: boolean, r: PreviewResult) =>
    slots.push({ start, end: start + durationMs, fromNow, candidates: r.candidates, ...(r.gangDomain ? { gangDomain: r.gangDomain } : {}) });
  if (first.fits) add(now, true, first);
  for (const start of laterStarts(opts.buckets, now, query.gpus)) {
    if (slots.length >= MAX_SLOTS || previews >= MAX_PREVIEWS) break;
    const r = await preview(slotInput(opts.tenantId, opts.poolId, query, start));
    previews++;
    if (r.fits) add(start, false, r);
  }
  return { query, slots, previews, ...(first.fits ? {} : { nowReason: first.reason ?? 'does not fit' }) };
}
