// Recurring windows on a wall clock: "weekdays 09:00–17:00 Europe/Berlin until 2026-12-18" expanded into UTC ranges.
// Pure: no I/O and no clock (the caller says from when to when); the time zone rules are Node's own (Intl, ICU), so
// nothing beyond the runtime is needed. Wall clock → UTC follows Temporal's "compatible" disambiguation: a wall time
// that happens twice (the hour repeated when clocks go back) is its first instant; one that never happens (the hour
// skipped when clocks go forward) is read with the offset in force before the change, i.e. moved later by the gap
// (02:30 on a day Berlin skips 02:00–03:00 is 03:30), as RFC 5545 reads a DTSTART in a gap. A window whose start so
// moved lies at or after its end does not happen that day. See docs/adr/0013-recurring-reservations.md.

export const WEEKDAYS = ['Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat', 'Sun'] as const;
export type Weekday = (typeof WEEKDAYS)[number];

/** A daily window may last at most a day: consecutive occurrences of one recurrence never overlap. */
export const MAX_OCCURRENCE_SECONDS = 86_400;

export interface Recurrence {
  /** The days of the week (in the time zone) on which a window starts. */
  days: readonly Weekday[];
  /** Wall-clock start, "HH:MM". */
  startTime: string;
  /** Wall-clock end, "HH:MM"; at or before startTime, it is on the next day. Exactly one of endTime and durationSeconds. */
  endTime?: string;
  /** Elapsed length of each window (1 to 86,400 seconds), whatever the clocks do meanwhile. */
  durationSeconds?: number;
  /** An IANA time zone, e.g. "Europe/Berlin". */
  timeZone: string;
  /** Last local date ("YYYY-MM-DD") on which a window may start. */
  until?: string;
  /** How many windows in all: the first `count` windows that start at or after the anchor. */
  count?: number;
}

export interface Occurrence {
  /** UTC epoch milliseconds; end exclusive. */
  start: number;
  end: number;
}

export class RecurrenceError extends Error {
  readonly code = 'INVALID_RECURRENCE';

  constructor(message: string) {
    super(message);
    this.name = 'RecurrenceError';
  }
}

const DAY_MS = 86_400_000;
const CLOCK_RE = /^([01]\d|2[0-3]):([0-5]\d)$/;
const DATE_RE = /^(\d{4})-(\d{2})-(\d{2})$/;

/** "HH:MM" → minutes after midnight, or undefined. */
export function parseClock(s: string): number | undefined {
  const m = CLOCK_RE.exec(s);
  return m ? Number(m[1]) * 60 + Number(m[2]) : undefined;
}

/** "YYYY-MM-DD" → the civil date as UTC midnight epoch milliseconds, or undefined when no such date exists. */
export function parseCivilDate(s: string): number | undefined {
  const m = DATE_RE.exec(s);
  if (!m) return undefined;
  const [y, mo, d] = [Number(m[1]), Number(m[2]), Number(m[3])];
  const ms = Date.UTC(y, mo - 1, d);
  const back = new Date(ms);
  return back.getUTCFullYear() === y && back.getUTCMonth() === mo - 1 && back.getUTCDate() === d ? ms : undefined;
}

const formatters = new Map<string, Intl.DateTimeFormat>();

function formatter(timeZone: string): Intl.DateTimeFormat {
  let f = formatters.get(timeZone);
  if (!f) {
    f = new Intl.DateTimeFormat('en-US', {
      timeZone,
      hourCycle: 'h23',
      year: 'numeric',
      month: 'numeric',
      day: 'numeric',
      hour: 'numeric',
      minute: 'numeric',
      second: 'numeric',
    });
    formatters.set(timeZone, f);
  }
  return f;
}

/** Whether the runtime knows this IANA zone (Intl throws RangeError for an unknown one). */
export function isTimeZone(timeZone: string): boolean {
  try {
    formatter(timeZone);
    return true;
  } catch (e) {
    if (e instanceof RangeError) return false;
    throw e;
  }
}

/** The wall clock in the zone at a UTC instant, as if it were UTC (epoch milliseconds, whole seconds). */
function wallClock(utc: number, timeZone: string): number {
  const p: Record<string, number> = {};
  for (const { type, value } of formatter(timeZone).formatToParts(new Date(utc))) p[type] = Number(value);
  return Date.UTC(p.year!, p.month! - 1, p.day!, p.hour!, p.minute!, p.second!);
}

/** The zone's offset from UTC at a UTC instant, in milliseconds (Berlin in summer: +7,200,000). */
export function offsetAt(utc: number, timeZone: string): number {
  return wallClock(utc, timeZone) - Math.floor(utc / 1000) * 1000;
}

/**
 * The UTC instant of a wall-clock time in the zone (`local`: the wall clock as if it were UTC). A repeated wall time
 * gives its first instant; a skipped one is read with the offset before the change (moved later by the gap). Zones
 * change their offset at most once in two days, so the offsets a day either side are the only candidates.
 */
export function zonedToUtc(local: number, timeZone: string): number {
  const before = offsetAt(local - DAY_MS, timeZone);
  const after = offsetAt(local + DAY_MS, timeZone);
  const valid = [...new Set([before, after])].map((o) => local - o).filter((u) => offsetAt(u, timeZone) === local - u);
  if (valid.length > 0) return Math.min(...valid);
  return local - before;
}

/** Checks what the schema cannot (a known zone, a real date, exactly one way to end a window); throws RecurrenceError. */
export function checkRecurrence(r: Recurrence): void {
  if (r.days.length === 0) throw new RecurrenceError('days must name at least one day of the week');
  if (parseClock(r.startTime) === undefined) throw new RecurrenceError(`startTime ${r.startTime} must be HH:MM (00:00 to 23:59)`);
  if ((r.endTime === undefined) === (r.durationSeconds === undefined)) {
    throw new RecurrenceError('give exactly one of endTime and duration');
  }
  if (r.endTime !== undefined && parseClock(r.endTime) === undefined) throw new RecurrenceError(`endTime ${r.endTime} must be HH:MM (00:00 to 23:59)`);
  if (r.durationSeconds !== undefined && !(Number.isInteger(r.durationSeconds) && r.durationSeconds >= 1 && r.durationSeconds <= MAX_OCCURRENCE_SECONDS)) {
    throw new RecurrenceError(`duration must be 1 second to 24 hours (${MAX_OCCURRENCE_SECONDS} seconds)`);
  }
  if (!isTimeZone(r.timeZone)) throw new RecurrenceError(`timeZone ${r.timeZone} is not an IANA time zone this controller knows`);
  if (r.until !== undefined && parseCivilDate(r.until) === undefined) throw new RecurrenceError(`until ${r.until} must be a date YYYY-MM-DD`);
  if (r.count !== undefined && !(Number.isInteger(r.count) && r.count >= 1)) throw new RecurrenceError('count must be a positive whole number');
}

/**
 * The windows of a recurrence that start at or after `anchor`, end after `from` and start before `to` (UTC epoch
 * milliseconds), in order. `count` counts from the anchor. A window that a skipped hour reduces to nothing (its start
 * moved to or past its end) does not exist and is not counted.
 */
export function expandRecurrence(r: Recurrence, anchor: number, from: number, to: number): Occurrence[] {
  checkRecurrence(r);
  const startMin = parseClock(r.startTime)!;
  const endMin = r.endTime === undefined ? undefined : parseClock(r.endTime)!;
  const days = new Set(r.days.map((d) => (WEEKDAYS.indexOf(d) + 1) % 7)); // Date.getUTCDay(): Sunday is 0
  const localDay = (utc: number) => Math.floor(wallClock(utc, r.timeZone) / DAY_MS) * DAY_MS;
  // A count is counted from the anchor, so the walk starts there; without one it may start just before `from` (a
  // window starts at most a day before it ends). The day before the anchor's local date too: its window may be later.
  let day = localDay(r.count === undefined ? Math.max(anchor, from - 2 * DAY_MS) : anchor) - DAY_MS;
  const last = Math.min(r.until === undefined ? Infinity : parseCivilDate(r.until)!, localDay(to) + DAY_MS);
  let counted = 0;
  const out: Occurrence[] = [];
  for (; day <= last; day += DAY_MS) {
    if (r.count !== undefined && counted >= r.count) break;
    if (!days.has(new Date(day).getUTCDay())) continue;
    const start = zonedToUtc(day + startMin * 60_000, r.timeZone);
    const end =
      endMin === undefined
        ? start + r.durationSeconds! * 1000
        : zonedToUtc(day + (endMin > startMin ? 0 : DAY_MS) + endMin * 60_000, r.timeZone);
    if (start < anchor || end <= start) continue;
    if (start >= to) break;
    counted++;
    if (end > from) out.push({ start, end });
  }
  return out;
}
