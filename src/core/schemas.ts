// Input schemas of the capacity API, following docs/reference/api/capacity (shared/spec/capacity-api.md) to the
// character: every pattern, length and range there is here, inclusive at both ends. Pure: no I/O, no clock — the
// timeline's clock-dependent defaults are applied by resolveTimelineWindow(input, nowMs).
//
// Decision: every object is strict. An unknown key (top level or nested) is INVALID_INPUT, so that a typo such as
// `leaseSecond` or `resources.vcpus` fails loudly instead of being silently ignored. The one exception is
// `devices[].selector`, whose keys are device attribute names, checked by selectorFromObject.

import { z } from 'zod';
import { DurationError, MAX_DURATION_SECONDS, MAX_DURATION_STRING_LENGTH, MIN_DURATION_SECONDS, parseDuration } from './duration.ts';
import { SelectorError, selectorFromObject } from './selector.ts';

// ---------------------------------------------------------------------------------------------------------------
// Errors

export interface ValidationIssue {
  /** Where, e.g. `devices[0].count`; `''` for the input as a whole. */
  path: string;
  message: string;
}

export class ValidationError extends Error {
  readonly code = 'INVALID_INPUT';
  readonly issues: ValidationIssue[];

  constructor(issues: ValidationIssue[]) {
    super(issues.map((i) => `${i.path === '' ? 'input' : i.path}: ${i.message}`).join('; '));
    this.name = 'ValidationError';
    this.issues = issues;
  }
}

const IDENT_RE = /^[A-Za-z_$][A-Za-z0-9_$]*$/;

/** `['devices', 0, 'count']` → `devices[0].count`. */
export function formatPath(path: readonly PropertyKey[]): string {
  let out = '';
  for (const seg of path) {
    if (typeof seg === 'number') out += `[${seg}]`;
    else if (typeof seg === 'string' && IDENT_RE.test(seg)) out += out === '' ? seg : `.${seg}`;
    else out += `[${JSON.stringify(String(seg))}]`;
  }
  return out;
}

const TYPE_NAMES: Record<string, string> = {
  string: 'a string',
  number: 'a number',
  int: 'an integer',
  boolean: 'a boolean',
  object: 'an object',
  record: 'an object',
  array: 'a list',
};

function sizeUnit(origin: string): string {
  if (origin === 'string') return ' characters';
  if (origin === 'array' || origin === 'set') return ' items';
  return '';
}

// Messages for zod's built-in issues, applied per parse (a schema's own message wins over these).
function describeIssue(iss: z.core.$ZodRawIssue): string | undefined {
  switch (iss.code) {
    case 'invalid_type':
      if (iss.input === undefined) return 'is required';
      return `must be ${TYPE_NAMES[iss.expected] ?? iss.expected}`;
    case 'too_small': {
      const unit = sizeUnit(iss.origin);
      return unit === ' items' ? `must have at least ${String(iss.minimum)} items` : `must be at least ${String(iss.minimum)}${unit}`;
    }
    case 'too_big': {
      const unit = sizeUnit(iss.origin);
      return unit === ' items' ? `must have at most ${String(iss.maximum)} items` : `must be at most ${String(iss.maximum)}${unit}`;
    }
    case 'invalid_format':
      return iss.format === 'regex' && 'pattern' in iss ? `must match ${String(iss.pattern)}` : `must be a valid ${iss.format}`;
    case 'invalid_value':
      if (iss.input === undefined) return 'is required';
      return `must be one of ${iss.values.map((v) => JSON.stringify(v)).join(', ')}`;
    default:
      return undefined;
  }
}

function toIssues(error: z.ZodError): ValidationIssue[] {
  const out: ValidationIssue[] = [];
  const seen = new Set<string>();
  const add = (path: readonly PropertyKey[], message: string): void => {
    const p = formatPath(path);
    if (seen.has(p)) return; // the first problem per field is the one worth reading
    seen.add(p);
    out.push({ path: p, message });
  };
  for (const iss of error.issues) {
    if (iss.code === 'unrecognized_keys') {
      for (const key of iss.keys) add([...iss.path, key], 'is not a known field');
    } else {
      add(iss.path, iss.message);
    }
  }
  return out;
}

/** Validates `body` against `schema` and returns the parsed value (defaults applied), or throws ValidationError. */
export function parseInput<T>(schema: z.ZodType<T>, body: unknown): T {
  const result = schema.safeParse(body, { error: describeIssue });
  if (!result.success) throw new ValidationError(toIssues(result.error));
  return result.data;
}

// ---------------------------------------------------------------------------------------------------------------
// Building blocks

/** A JSON integer in [min, max]: no fractions, no numeric strings, no NaN or Infinity. */
function int(min: number, max: number = Number.MAX_SAFE_INTEGER) {
  // z.int(): a safe integer, and `type: integer` in the JSON Schema (src/api/openapi.ts) with the bounds below.
  return z
    .int({ error: (iss) => (iss.code === 'invalid_type' && iss.input !== undefined ? 'must be an integer' : undefined) })
    .min(min)
    .max(max);
}

function patterned(max: number, pattern: RegExp) {
  return z.string().max(max).regex(pattern);
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return false;
  const proto: unknown = Object.getPrototypeOf(v);
  return proto === Object.prototype || proto === null;
}

/** Largest epoch-millisecond value the API accepts (2^47). */
export const MAX_EPOCH_MS = 140_737_488_355_328;
const EpochMs = int(0, MAX_EPOCH_MS);

export const TENANT_ID_RE = /^[A-Za-z0-9._:-]{1,128}$/;
export const POOL_ID_RE = /^pool_[0-9a-hjkmnp-tv-z]{26,52}$/;
export const PROJECT_ID_RE = /^prj_[0-9a-hjkmnp-tv-z]{26,52}$/;
export const PROFILE_ID_RE = /^[A-Za-z0-9._:/-]{1,128}$/;
export const IDEMPOTENCY_KEY_RE = /^[A-Za-z0-9._:-]{1,128}$/;

export const TenantId = patterned(128, TENANT_ID_RE);
export const PoolId = patterned(57, POOL_ID_RE);
export const ProjectId = patterned(56, PROJECT_ID_RE);
export const IdempotencyKey = patterned(128, IDEMPOTENCY_KEY_RE);

export const DEVICE_CLASSES = ['gpu', 'gpu.mig', 'gpu.slot', 'nic.vf', 'disk', 'node'] as const;
export const TOPOLOGIES = ['any', 'nvlink-all'] as const;
export const SHARING_MODES = ['exclusive', 'mig', 'timeslice', 'mps'] as const;

export const DeviceClass = z.enum(DEVICE_CLASSES);
export const Topology = z.enum(TOPOLOGIES);
export const Sharing = z.enum(SHARING_MODES);

/** `devices[].selector`: the object form of a device selector, checked by selectorFromObject; kept as given. */
// A custom check rather than z.record, which copies the object and silently drops a `__proto__` key: the selector
// is checked, and returned, exactly as sent.
export const SelectorObject = z
  .custom<Record<string, unknown>>(isPlainObject, {
    error: (iss) => (iss.input === undefined ? 'is required' : 'must be an object'),
  })
  .superRefine((obj, ctx) => {
    try {
      selectorFromObject(obj);
    } catch (err) {
      if (!(err instanceof SelectorError)) throw err;
      ctx.addIssue({ code: 'custom', message: `invalid selector: ${err.message}` });
    }
  })
  // What the JSON Schema (src/api/openapi.ts) says of it: the checks above are code, not schema.
  .meta({
    type: 'object',
    description: 'Device attribute name → a value (equality) or an operator object, e.g. {"vramGiB": {"gte": 80}}.',
  });

/** `duration`: a string or an integer, checked by parseDuration; the parsed value is whole seconds. */
export const Duration = z
  .custom<string | number>((v) => typeof v === 'string' || typeof v === 'number', {
    error: (iss) => (iss.input === undefined ? 'is required' : 'must be a duration string or an integer number of seconds'),
  })
  .transform((v, ctx) => {
    try {
      return parseDuration(v);
    } catch (err) {
      if (!(err instanceof DurationError)) throw err;
      ctx.addIssue({ code: 'custom', message: err.message });
      return z.NEVER;
    }
  })
  .meta({
    description: `${MIN_DURATION_SECONDS} second to 366 days: whole seconds (3600, "3600"), units (90s, 1h30m, 2d, 1w) or ISO 8601 (PT1H30M, P1D)`,
    anyOf: [
      { type: 'string', maxLength: MAX_DURATION_STRING_LENGTH },
      { type: 'integer', minimum: MIN_DURATION_SECONDS, maximum: MAX_DURATION_SECONDS },
    ],
  });

export const DeviceRequest = z.strictObject({
  class: DeviceClass,
  count: int(1, 64),
  selector: SelectorObject.optional(),
  topology: Topology.optional(),
  sharing: Sharing.optional(),
});

export const HostResources = z.strictObject({
  vcpu: int(0, 4096).optional(),
  memoryGiB: int(0, 65536).optional(),
  hugepages1Gi: int(0, 4096).optional(),
});

export const NodeProfile = z.strictObject({
  profileId: patterned(128, PROFILE_ID_RE),
  profileVersion: int(1).optional(),
});

export const WaitOptions = z.strictObject({
  timeoutMs: int(0, 30_000),
});

export const GangOptions = z.strictObject({
  size: int(2, 64),
  topologyKey: z.string().max(128).optional(),
});

// ---------------------------------------------------------------------------------------------------------------
// Method inputs

export const SummaryInput = z.strictObject({
  tenantId: TenantId,
});

/** The quota method (ADR 0012): the tenant's quota keys, in one pool or in every pool it sees. */
export const QuotaInput = z.strictObject({
  tenantId: TenantId,
  poolId: PoolId.optional(),
});

export const ByPoolInput = z.strictObject({
  tenantId: TenantId,
  poolId: PoolId,
});

/**
 * `capacity.byDomain` (ours, not in the spec): one pool's capacity per placement domain. `topologyKey` is the node
 * label to group by, constrained as `gang.topologyKey` (a preview's gang may name any key); default: the pool's own.
 */
export const ByDomainInput = z.strictObject({
  tenantId: TenantId,
  poolId: PoolId,
  topologyKey: GangOptions.shape.topologyKey,
});

/**
 * `reservations.create` input. Output differences from the wire: `duration` becomes whole seconds and `binding`
 * defaults to "hold". `binding` is any string, as the reference says; which bindings exist is the reservations
 * module's business.
 */
export const ReservationCreateInput = z.strictObject({
  tenantId: TenantId,
  poolId: PoolId,
  projectId: ProjectId.optional(),
  devices: z.array(DeviceRequest).min(1).max(8),
  topology: Topology.optional(),
  start: EpochMs.optional(),
  duration: Duration,
  binding: z.string().default('hold'),
  resources: HostResources.optional(),
  node: NodeProfile.optional(),
  leaseSeconds: int(30, 86_400).optional(),
  spot: z.boolean().optional(),
  idempotencyKey: IdempotencyKey,
  wait: WaitOptions.optional(),
  gang: GangOptions.optional(),
});

/** `capacity.preview` takes the `reservations.create` input, validated the same way. */
export const PreviewInput = ReservationCreateInput;

export const TimelineInput = z.strictObject({
  tenantId: TenantId,
  poolId: PoolId,
  from: EpochMs.optional(),
  to: EpochMs.optional(),
  stepMinutes: int(5, 1440).default(60),
});

export type SummaryInput = z.output<typeof SummaryInput>;
export type QuotaInput = z.output<typeof QuotaInput>;
export type ByPoolInput = z.output<typeof ByPoolInput>;
export type ByDomainInput = z.output<typeof ByDomainInput>;
export type DeviceRequest = z.output<typeof DeviceRequest>;
export type ReservationCreateInput = z.output<typeof ReservationCreateInput>;
export type ReservationCreateRequest = z.input<typeof ReservationCreateInput>;
export type PreviewInput = z.output<typeof PreviewInput>;
export type TimelineInput = z.output<typeof TimelineInput>;

// ---------------------------------------------------------------------------------------------------------------
// Timeline window

export const HOUR_MS = 3_600_000;
export const DAY_MS = 24 * HOUR_MS;
export const MAX_TIMELINE_SPAN_MS = 7 * DAY_MS;
export const MAX_TIMELINE_BUCKETS = 336;
export const DEFAULT_STEP_MINUTES = 60;

export interface TimelineWindow {
  from: number;
  to: number;
  stepMinutes: number;
  stepMs: number;
  /** ceil((to - from) / stepMs); the last bucket may be shorter than a step. */
  buckets: number;
}

/**
 * Applies the timeline's clock-dependent defaults and rules: `from` defaults to the start of the current UTC hour,
 * `to` to `from` + 24 h, `stepMinutes` to 60; `to` must be after `from`, the span at most 7 days and the number of
 * buckets at most 336. Throws ValidationError.
 */
export function resolveTimelineWindow(
  input: { from?: number | undefined; to?: number | undefined; stepMinutes?: number | undefined },
  nowMs: number,
): TimelineWindow {
  const from = input.from ?? Math.floor(nowMs / HOUR_MS) * HOUR_MS;
  const to = input.to ?? from + DAY_MS;
  const stepMinutes = input.stepMinutes ?? DEFAULT_STEP_MINUTES;
  const stepMs = stepMinutes * 60_000;
  if (!(to > from)) {
    throw new ValidationError([{ path: 'to', message: `must be after from (from ${from}, to ${to})` }]);
  }
  if (to - from > MAX_TIMELINE_SPAN_MS) {
    throw new ValidationError([
      { path: 'to', message: `the window spans ${to - from} ms; at most 7 days (${MAX_TIMELINE_SPAN_MS} ms)` },
    ]);
  }
  const buckets = Math.ceil((to - from) / stepMs);
  if (buckets > MAX_TIMELINE_BUCKETS) {
    throw new ValidationError([
      {
        path: 'stepMinutes',
        message: `the window has ${buckets} buckets of ${stepMinutes} minutes; at most ${MAX_TIMELINE_BUCKETS}`,
      },
    ]);
  }
  return { from, to, stepMinutes, stepMs, buckets };
}

// ---------------------------------------------------------------------------------------------------------------
// Usage (not one of the spec's four methods; docs/adr/0011-usage-windows.md). Times are ISO 8601 on the wire.

/** `2026-11-01`, `2026-11-01T10:00Z`, `2026-11-01T10:00:00.000+01:00`: a date (UTC) or a date-time with a zone. */
export const ISO_TIME_RE = /^(\d{4})-(\d{2})-(\d{2})(?:T([01]\d|2[0-3]):([0-5]\d)(?::([0-5]\d)(?:\.\d{1,9})?)?(?:Z|[+-](?:[01]\d|2[0-3]):?[0-5]\d))?$/;
/** `2026-11`: a UTC calendar month. */
export const MONTH_RE = /^(\d{4})-(0[1-9]|1[0-2])$/;

const daysIn = (year: number, month: number) => new Date(Date.UTC(year, month, 0)).getUTCDate();

/** An ISO 8601 time as epoch ms; a real calendar date (no 2026-02-30), within [0, MAX_EPOCH_MS]. */
export const IsoTime = z
  .string()
  .max(40)
  .regex(ISO_TIME_RE, { error: 'must be an ISO 8601 date (2026-11-01) or date-time with a zone (2026-11-01T10:00Z)' })
  .transform((v, ctx) => {
    const m = ISO_TIME_RE.exec(v)!;
    const [year, month, day] = [Number(m[1]), Number(m[2]), Number(m[3])];
    const ms = Date.parse(v);
    if (month < 1 || month > 12 || day < 1 || day > daysIn(year, month) || !Number.isFinite(ms) || ms < 0 || ms > MAX_EPOCH_MS) {
      ctx.addIssue({ code: 'custom', message: `is not a time between 1970 and ${new Date(MAX_EPOCH_MS).getUTCFullYear()}` });
      return z.NEVER;
    }
    return ms;
  });

export type UsagePeriod = { kind: 'month'; year: number; month: number } | { kind: 'last'; hours: number };

/** `period`: a UTC month (`2026-11`) or the hours up to now (`24h`, `7d`, `PT48H`: whole hours, at most 366 days). */
export const UsagePeriod = z
  .string()
  .max(MAX_DURATION_STRING_LENGTH)
  .transform((v, ctx): UsagePeriod => {
    const month = MONTH_RE.exec(v);
    if (month) {
      const year = Number(month[1]);
      if (year < 1970 || year > 6000) {
        ctx.addIssue({ code: 'custom', message: 'a month between 1970-01 and 6000-12' });
        return z.NEVER;
      }
      return { kind: 'month', year, month: Number(month[2]) };
    }
    try {
      const seconds = parseDuration(v);
      if (seconds % 3600 !== 0) {
        ctx.addIssue({ code: 'custom', message: 'a duration of whole hours (24h, 7d), or a month (2026-11)' });
        return z.NEVER;
      }
      return { kind: 'last', hours: seconds / 3600 };
    } catch (err) {
      if (!(err instanceof DurationError)) throw err;
      ctx.addIssue({ code: 'custom', message: `a month (2026-11) or a duration of whole hours (24h, 7d): ${err.message}` });
      return z.NEVER;
    }
  });

export const UsageInput = z.strictObject({
  tenantId: TenantId,
  poolId: PoolId.optional(),
  from: IsoTime.optional(),
  to: IsoTime.optional(),
  period: UsagePeriod.optional(),
  /** Also the rows of each hour (a window of at most 31 days); otherwise totals per pool and resource only. */
  hourly: z.boolean().default(false),
});

export type UsageInput = z.output<typeof UsageInput>;

export const MAX_USAGE_SPAN_MS = 366 * DAY_MS;
export const MAX_HOURLY_SPAN_MS = 31 * DAY_MS;

export interface UsageWindow {
  /** Whole UTC hours, epoch ms. */
  from: number;
  to: number;
}

/**
 * The usage window in whole UTC hours: `period` (a month, or the last N hours up to the end of the current hour), or
 * `from` (floored to its hour) to `to` (raised to an hour; default the end of the current hour); neither: the current
 * UTC month. At most 366 days, and 31 with `hourly`. Throws ValidationError.
 */
export function resolveUsageWindow(
  input: { from?: number | undefined; to?: number | undefined; period?: UsagePeriod | undefined; hourly?: boolean | undefined },
  nowMs: number,
): UsageWindow {
  const fail = (path: string, message: string): never => {
    throw new ValidationError([{ path, message }]);
  };
  const endOfHour = Math.ceil(nowMs / HOUR_MS) * HOUR_MS;
  let from: number;
  let to: number;
  if (input.period !== undefined) {
    if (input.from !== undefined || input.to !== undefined) fail('period', 'give either period or from/to, not both');
  }
  const period: UsagePeriod | undefined =
    input.period ?? (input.from === undefined && input.to === undefined ? { kind: 'month', ...yearMonth(nowMs) } : undefined);
  if (period?.kind === 'month') {
    from = Date.UTC(period.year, period.month - 1, 1);
    to = Date.UTC(period.year, period.month, 1);
  } else if (period?.kind === 'last') {
    to = endOfHour;
    from = to - period.hours * HOUR_MS;
  } else {
    if (input.from === undefined) return fail('from', 'is required with to');
    from = Math.floor(input.from / HOUR_MS) * HOUR_MS;
    to = input.to === undefined ? endOfHour : Math.ceil(input.to / HOUR_MS) * HOUR_MS;
    if (!(to > from)) fail('to', `must be after from (from ${new Date(from).toISOString()}, to ${new Date(to).toISOString()})`);
  }
  if (to - from > MAX_USAGE_SPAN_MS) fail('to', `the window spans ${(to - from) / HOUR_MS} hours; at most 366 days`);
  if (input.hourly && to - from > MAX_HOURLY_SPAN_MS) {
    fail('hourly', `the window spans ${(to - from) / HOUR_MS} hours; hourly rows for at most 31 days (744 hours)`);
  }
  return { from, to };
}

function yearMonth(ms: number): { year: number; month: number } {
  const d = new Date(ms);
  return { year: d.getUTCFullYear(), month: d.getUTCMonth() + 1 };
}
