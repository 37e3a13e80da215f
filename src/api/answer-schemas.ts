// The capacity API's answers as zod schemas: what src/api/openapi.ts publishes as each method's 200 body. The service
// builds its answers from TypeScript types (capacity-service.ts, db/capacity.ts); these schemas are held to them by
// `satisfies`-style assignments below and by test/db/openapi-client.test.ts, which parses real answers with them (strict
// objects: a field the service adds and this file lacks fails there).
import { z } from 'zod';
import { QUOTA_PERIODS } from '../core/quota.ts';
import type { ByDomainResult, ByPoolResult, PreviewResult, QuotaResult, TimelineResult, UsageResult } from './capacity-service.ts';
import type { Summary } from '../db/capacity.ts';
import { ERROR_STATUS, type ErrorBody } from '../http/errors.ts';

const count = z.number().describe('atoms (whole GPUs for `gpu`)');
const epochMs = z.number().describe('epoch milliseconds');
const isoTime = z.string().describe('ISO 8601, UTC');

const ROW_NUMBERS = {
  total: count,
  allocatable: count,
  allocated: count,
  reserved: count,
  available: count,
  provisioning: count,
  unhealthy: count,
  maintenance: count,
  unreachable: count,
};

export const CapacityRow = z
  .strictObject({ poolId: z.string(), resource: z.string(), ...ROW_NUMBERS, updatedAt: epochMs })
  .meta({ id: 'CapacityRow', description: "One pool's rollup row for one resource." });

export const Totals = z.strictObject({ total: count, allocatable: count, allocated: count, reserved: count, available: count });

export const SummaryAnswer = z.strictObject({
  tenantId: z.string(),
  pools: z.array(
    z.strictObject({
      poolId: z.string(),
      name: z.string(),
      gpuModel: z.string().nullable(),
      ownerTenant: z.string(),
      archived: z.boolean(),
      capacity: z.array(CapacityRow),
    }),
  ),
  byGpuModel: z.record(z.string(), Totals).describe('whole-GPU totals per GPU model; `other` for pools without one'),
});

export const ByPoolAnswer = z.strictObject({ poolId: z.string(), capacity: z.array(CapacityRow) });

export const PreviewAnswer = z.strictObject({
  fits: z.boolean(),
  candidates: z.array(z.strictObject({ nodeId: z.string(), atoms: z.array(z.string()), score: z.number() })),
  gangDomain: z.string().optional().describe('with `gang`: the placement domain of the chosen gang'),
  reason: z.string().optional().describe('why it does not fit'),
  preemptible: z
    .strictObject({ count: z.number(), start: epochMs })
    .optional()
    .describe('a regular request that does not fit: how many spot reservations it would displace, and when it would start'),
});

export const TimelineAnswer = z.strictObject({
  poolId: z.string(),
  from: epochMs,
  to: epochMs,
  stepMinutes: z.number(),
  allocatable: count,
  buckets: z.array(z.strictObject({ start: epochMs, end: epochMs, booked: count, free: count })),
});

const { poolId: _poolId, ...domainRow } = CapacityRow.shape;
const { updatedAt: _updatedAt, ...domainRowNumbers } = domainRow;

export const ByDomainAnswer = z.strictObject({
  poolId: z.string(),
  topologyKey: z.string(),
  domains: z.array(
    z.strictObject({
      domain: z.string().nullable().describe('the label value; null for nodes without the label'),
      nodes: z.strictObject({ total: z.number(), allocatable: z.number(), free: z.number() }),
      capacity: z.array(z.strictObject(domainRowNumbers)),
    }),
  ),
});

const UsageTotal = z.strictObject({ poolId: z.string(), resource: z.string(), atomSeconds: z.number(), hours: z.number() });

export const UsageAnswer = z.strictObject({
  tenantId: z.string(),
  poolId: z.string().optional(),
  from: isoTime,
  to: isoTime,
  finalUntil: isoTime.nullable(),
  totals: z.array(UsageTotal),
  hours: z.array(z.strictObject({ hour: isoTime, ...UsageTotal.shape })).optional(),
});

export const QuotaAnswer = z.strictObject({
  tenantId: z.string(),
  quotas: z.array(
    z.strictObject({
      tenantId: z.string(),
      poolId: z.string(),
      resource: z.string(),
      limit: z.number().nullable(),
      used: z.number(),
      reserved: z.number(),
      hours: z.strictObject({
        limit: z.number().nullable(),
        period: z.enum(QUOTA_PERIODS),
        periodStart: epochMs,
        periodEnd: epochMs,
        used: z.number(),
        reserved: z.number(),
      }),
    }),
  ),
});

const ERROR_CODES = Object.keys(ERROR_STATUS) as [keyof typeof ERROR_STATUS, ...(keyof typeof ERROR_STATUS)[]];

/** `{"error": {"code", "message"}}`, every failure of the API (src/http/errors.ts); `code` narrowed when given. */
export function errorAnswer(code?: keyof typeof ERROR_STATUS) {
  return z.strictObject({
    error: z.strictObject({ code: code === undefined ? z.enum(ERROR_CODES) : z.literal(code), message: z.string() }),
  });
}

// The answers' TypeScript types must be assignable to what the schemas describe (and back): a field renamed or
// retyped on either side fails `tsc`.
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
const typesAgree: [
  Same<z.output<typeof SummaryAnswer>, Summary>,
  Same<z.output<typeof ByPoolAnswer>, ByPoolResult>,
  Same<z.output<typeof PreviewAnswer>, PreviewResult>,
  Same<z.output<typeof TimelineAnswer>, TimelineResult>,
  Same<z.output<typeof ByDomainAnswer>, ByDomainResult>,
  Same<z.output<typeof UsageAnswer>, UsageResult>,
  Same<z.output<typeof QuotaAnswer>, QuotaResult>,
  Same<z.output<ReturnType<typeof errorAnswer>>, ErrorBody>,
] = [true, true, true, true, true, true, true, true];
void typesAgree;
