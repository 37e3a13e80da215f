// A recurring Reservation's spec.recurrence: its validation (zod, as the CRD's schema says and more: a known zone, a
// real date) and the pure parts of booking it window by window: each window's idempotency key and ledger input, and
// the CR-level verdict over the windows' entries. The reconciler (reconciler.ts) does the I/O.
import { z } from 'zod';
import { Duration, parseInput, ValidationError, type ReservationCreateInput } from '../../core/schemas.ts';
import {
  isTimeZone,
  MAX_OCCURRENCE_SECONDS,
  parseCivilDate,
  parseClock,
  RecurrenceError,
  checkRecurrence,
  WEEKDAYS,
  type Occurrence,
  type Recurrence,
} from '../../core/recurrence.ts';
import type { OccurrenceStatus, Reservation, ReservationPhase } from '../../kube/types.ts';

/** Most windows a count may ask for (with `until` a recurrence may run for as long as it likes). */
export const MAX_RECURRENCE_COUNT = 1000;
/** Most windows booked ahead, and so listed in status, whatever the horizon. */
export const MAX_WINDOWS_AHEAD = 64;

const Clock = z.string().refine((s) => parseClock(s) !== undefined, 'must be HH:MM (00:00 to 23:59)');

export const RecurrenceSpec = z
  .strictObject({
    days: z
      .array(z.enum(WEEKDAYS))
      .min(1)
      .max(7)
      .refine((d) => new Set(d).size === d.length, 'names a day twice'),
    startTime: Clock,
    endTime: Clock.optional(),
    duration: Duration.optional(),
    timeZone: z.string().max(64).refine(isTimeZone, 'is not an IANA time zone (e.g. Europe/Berlin)'),
    until: z
      .string()
      .refine((d) => parseCivilDate(d) !== undefined, 'must be a date YYYY-MM-DD')
      .optional(),
    count: z.number().int().min(1).max(MAX_RECURRENCE_COUNT).optional(),
  })
  .superRefine((r, ctx) => {
    if ((r.endTime === undefined) === (r.duration === undefined)) {
      ctx.addIssue({ code: 'custom', path: ['endTime'], message: 'give exactly one of endTime and duration' });
    }
    if (r.duration !== undefined && r.duration > MAX_OCCURRENCE_SECONDS) {
      ctx.addIssue({ code: 'custom', path: ['duration'], message: `a window lasts at most a day (${MAX_OCCURRENCE_SECONDS} seconds)` });
    }
    if (r.until !== undefined && r.count !== undefined) {
      ctx.addIssue({ code: 'custom', path: ['count'], message: 'give at most one of until and count' });
    }
  });

/** The recurrence of a Reservation and the instant its windows are counted from; throws ValidationError. */
export function toRecurrence(r: Reservation, now: number): { recurrence: Recurrence; anchor: number } {
  const s = r.spec;
  let parsed: z.output<typeof RecurrenceSpec>;
  try {
    parsed = parseInput(RecurrenceSpec, s.recurrence);
  } catch (e) {
    if (!(e instanceof ValidationError)) throw e;
    throw new ValidationError(e.issues.map((i) => ({ ...i, path: i.path === '' ? 'spec.recurrence' : `spec.recurrence.${i.path}` })));
  }
  if (s.duration !== undefined) {
    throw new ValidationError([{ path: 'spec.duration', message: 'must be absent with a recurrence: give recurrence.endTime or recurrence.duration' }]);
  }
  const start = s.start === undefined ? undefined : Date.parse(s.start);
  if (start !== undefined && Number.isNaN(start)) throw new ValidationError([{ path: 'spec.start', message: 'must be an RFC 3339 date-time' }]);
  // Windows are counted from spec.start, else from the CR's creation (stable across reconciles, unlike now).
  const created = r.metadata.creationTimestamp === undefined ? Number.NaN : new Date(r.metadata.creationTimestamp).getTime();
  const anchor = start ?? (Number.isNaN(created) ? now : created);
  const recurrence: Recurrence = {
    days: parsed.days,
    startTime: parsed.startTime,
    timeZone: parsed.timeZone,
    ...(parsed.endTime !== undefined ? { endTime: parsed.endTime } : {}),
    ...(parsed.duration !== undefined ? { durationSeconds: parsed.duration } : {}),
    ...(parsed.until !== undefined ? { until: parsed.until } : {}),
    ...(parsed.count !== undefined ? { count: parsed.count } : {}),
  };
  try {
    checkRecurrence(recurrence);
  } catch (e) {
    if (!(e instanceof RecurrenceError)) throw e;
    throw new ValidationError([{ path: 'spec.recurrence', message: e.message }]);
  }
  return { recurrence, anchor };
}

/** A window's idempotency key: the CR's uid and the window's nominal start, so no restart books a window twice. */
export function windowKey(uid: string, o: Occurrence): string {
  return `${uid}:${new Date(o.start).toISOString()}`;
}

/**
 * The ledger input of one window: the one-shot input (`base`, booked from now on) over the window, or what is left of
 * it when it has begun; undefined when under a second is left. A window under way is booked from the first whole second
 * (durations are whole seconds) at least a second ahead: `now` is this process's reading of the database's clock, and a
 * start the database already sees as past is booked from its own now with the same duration, which would move the
 * window's end by the difference (CI: a window booked to 16:00:00.003Z for one ending at 16:00:00Z).
 */
export function windowInput(base: ReservationCreateInput, key: string, o: Occurrence, now: number): ReservationCreateInput | undefined {
  const start = Math.max(o.start, Math.ceil((now + 1000) / 1000) * 1000);
  const duration = Math.floor((o.end - start) / 1000);
  if (duration < 1) return undefined;
  return { ...base, start, duration, idempotencyKey: key };
}

export interface RecurringVerdict {
  phase: ReservationPhase;
  status: 'True' | 'False';
  reason: string;
  message: string;
  eventType: 'Normal' | 'Warning';
}

/** The CR-level verdict over its listed windows; `next` is the first window beyond them, if the recurrence has one. */
export function recurringVerdict(windows: readonly OccurrenceStatus[], next: Occurrence | undefined, horizonMs: number): RecurringVerdict {
  const iso = (ms: number) => new Date(ms).toISOString();
  if (windows.length === 0) {
    return next
      ? {
          phase: 'Pending',
          status: 'False',
          reason: 'Scheduled',
          message: `the next window, ${iso(next.start)} to ${iso(next.end)}, is booked from ${iso(next.start - horizonMs)}`,
          eventType: 'Normal',
        }
      : { phase: 'Released', status: 'False', reason: 'Ended', message: 'the recurrence has no more windows', eventType: 'Normal' };
  }
  const booked = windows.filter((w) => w.phase === 'Reserved').length;
  const refused = windows.filter((w) => w.phase === 'Pending' || w.phase === 'Failed');
  const first = refused[0];
  if (first) {
    return {
      phase: 'Pending',
      status: 'False',
      reason: first.reason ?? 'Unschedulable',
      message: `${booked} of ${windows.length} windows booked; ${refused.length} not, first ${first.start}: ${first.message ?? first.reason}`,
      eventType: 'Warning',
    };
  }
  if (booked === 0) {
    return { phase: 'Released', status: 'False', reason: 'Released', message: `${windows.length} windows released or expired before they ended`, eventType: 'Normal' };
  }
  return {
    phase: 'Reserved',
    status: 'True',
    reason: 'Reserved',
    message: `${booked} of ${windows.length} windows booked, ${windows[0]!.start} to ${windows[windows.length - 1]!.end}`,
    eventType: 'Normal',
  };
}
