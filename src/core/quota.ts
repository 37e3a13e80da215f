// Quota as a budget (ADR 0012): the GPU-hour limit's period, time-bounded overrides of the instantaneous limit, and the
// refusal's numbers. The checks themselves run in bc_place (migrations/functions/bc_place.sql); this is what the edges
// validate, show and say.
import { z } from 'zod';

export const QUOTA_PERIODS = ['day', 'week', 'month'] as const;
/** A calendar period in UTC ('week': ISO, from Monday 00:00). */
export type QuotaPeriod = (typeof QUOTA_PERIODS)[number];

export const QUOTA_RESOURCES = ['gpu', 'gpu.mig', 'gpu.slot'] as const;

/** The instantaneous limit of one key for [start, end) in epoch ms: `set` replaces it, `add` adds to it. */
export interface QuotaOverride {
  resource: string;
  start: number;
  end: number;
  kind: 'add' | 'set';
  amount: number;
}

/** What bc_place's quota refusal carries in `details`. */
export type QuotaRefusal =
  | { kind: 'atoms'; resource: string; limit: number; charged: number; requested: number; at: number }
  | {
      kind: 'hours';
      resource: string;
      limit: number;
      used: number;
      reserved: number;
      requested: number;
      periodStart: number;
      periodEnd: number;
    };

const iso = (ms: number) => new Date(ms).toISOString().replace('.000Z', 'Z');

/** The refusal as one sentence with its numbers (what reaches a Reservation's condition and the extender's bind). */
export function quotaRefusalMessage(tenantId: string, poolId: string, d: QuotaRefusal | undefined): string {
  if (!d) return `tenant ${tenantId} would exceed its quota in pool ${poolId} during the requested window`;
  if (d.kind === 'atoms') {
    return (
      `tenant ${tenantId} would exceed its ${d.resource} quota in pool ${poolId} at ${iso(d.at)}: ` +
      `limit ${d.limit}, charged ${d.charged}, requested ${d.requested}`
    );
  }
  return (
    `tenant ${tenantId} would exceed its ${d.resource}-hour quota in pool ${poolId} for ${iso(d.periodStart)}–${iso(d.periodEnd)}: ` +
    `limit ${d.limit}, used ${d.used}, reserved ${d.reserved}, requested ${d.requested} ${d.resource}-hours`
  );
}

/** The first two overrides of one resource whose windows overlap (the ledger refuses them), if any. */
export function overlappingOverrides(overrides: readonly QuotaOverride[]): [QuotaOverride, QuotaOverride] | undefined {
  const sorted = [...overrides].sort((a, b) => a.resource.localeCompare(b.resource) || a.start - b.start);
  for (let i = 1; i < sorted.length; i++) {
    const prev = sorted[i - 1]!;
    const cur = sorted[i]!;
    if (prev.resource === cur.resource && cur.start < prev.end) return [prev, cur];
  }
  return undefined;
}

/** The Pool CR's offering fields for budgets (crds/pools.yaml), as zod checks them at the reconciler. */
export const QuotaOverrideSpecSchema = z
  .object({
    resource: z.enum(QUOTA_RESOURCES),
    start: z.iso.datetime({ offset: true }),
    end: z.iso.datetime({ offset: true }),
    add: z.number().int().optional(),
    set: z.number().int().min(0).optional(),
  })
  .strict()
  .refine((o) => (o.add === undefined) !== (o.set === undefined), { message: 'exactly one of add and set' })
  .refine((o) => Date.parse(o.end) > Date.parse(o.start), { message: 'end must be after start' });

export const OfferingBudgetSchema = z.object({
  gpuHours: z.partialRecord(z.enum(QUOTA_RESOURCES), z.number().min(0)).optional(),
  gpuHoursPeriod: z.enum(QUOTA_PERIODS).optional(),
  quotaOverrides: z.array(QuotaOverrideSpecSchema).max(64).optional(),
});
export type OfferingBudgetSpec = z.infer<typeof OfferingBudgetSchema>;

export type OfferingBudget = { hours: Partial<Record<string, number>>; hoursPeriod: QuotaPeriod; overrides: QuotaOverride[] };

/** Parses an offering's budget fields: the budget, or the reason it is invalid (overlapping windows included). */
export function parseOfferingBudget(spec: unknown): { ok: true; value: OfferingBudget } | { ok: false; message: string } {
  const r = OfferingBudgetSchema.safeParse(spec);
  if (!r.success) return { ok: false, message: r.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ') };
  const overrides = (r.data.quotaOverrides ?? []).map(
    (o): QuotaOverride => ({
      resource: o.resource,
      start: Date.parse(o.start),
      end: Date.parse(o.end),
      kind: o.set !== undefined ? 'set' : 'add',
      amount: o.set ?? o.add ?? 0,
    }),
  );
  const clash = overlappingOverrides(overrides);
  if (clash) {
    return { ok: false, message: `quotaOverrides: two ${clash[0].resource} windows overlap (${iso(clash[1].start)} is before ${iso(clash[0].end)})` };
  }
  return { ok: true, value: { hours: { ...(r.data.gpuHours ?? {}) }, hoursPeriod: r.data.gpuHoursPeriod ?? 'month', overrides } };
}
