// Reservation durations: whole seconds, from 1 second to 366 days. Accepted spellings:
//   3600 (a positive integer number of seconds), "3600" (the same as a string),
//   "90s", "15m", "1h30m", "2d", "1w", "1w2d3h4m5s" (units w d h m s, each at most once, largest first),
//   "PT1H30M", "P1D", "P2W", "P1DT12H" (ISO 8601 durations without years, months or fractions).
// Pure: no I/O, no clock.

export const MIN_DURATION_SECONDS = 1;
export const MAX_DURATION_SECONDS = 366 * 86_400;
/** Longest duration string accepted; far more than any valid spelling needs. */
export const MAX_DURATION_STRING_LENGTH = 64;

export class DurationError extends Error {
  readonly code = 'INVALID_DURATION';

  constructor(message: string) {
    super(message);
    this.name = 'DurationError';
  }
}

const UNITS = [
  ['w', 604_800],
  ['d', 86_400],
  ['h', 3_600],
  ['m', 60],
  ['s', 1],
] as const;

const DIGITS_RE = /^\d+$/;
const SHORT_RE = /^(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$/;
// P, then weeks and/or days, then optionally T followed by at least one of hours, minutes, seconds.
const ISO_RE = /^P(?!$)(?:(\d+)W)?(?:(\d+)D)?(?:T(?=\d)(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?)?$/;

const FORMS = 'use seconds (3600), units such as 90s, 15m, 1h30m, 2d, 1w, or ISO 8601 such as PT1H30M, P1D, P2W, P1DT12H';
const RANGE = `between 1 second and 366 days (${MAX_DURATION_SECONDS} seconds)`;

function checkRange(seconds: number, shown: string): number {
  if (!(seconds >= MIN_DURATION_SECONDS && seconds <= MAX_DURATION_SECONDS)) {
    throw new DurationError(`invalid duration ${shown}: must be ${RANGE}`);
  }
  return seconds;
}

function sum(groups: readonly (string | undefined)[], factors: readonly number[]): number {
  let total = 0;
  groups.forEach((g, i) => {
    // Any component above the maximum makes the total exceed it too, so float precision never matters here.
    if (g !== undefined) total += Number(g) * (factors[i] as number);
  });
  return total;
}

function explain(s: string): string {
  if (/^\s|\s$/.test(s)) return 'leading or trailing whitespace is not allowed';
  if (/^-/.test(s)) return `must be ${RANGE}`;
  if (/\d[.,]\d/.test(s)) return 'fractions are not supported; use a smaller unit, e.g. 1h30m instead of 1.5h';
  if (/^P/.test(s) && /^P[^T]*[YM]/.test(s)) return 'years and months are not supported (their length varies); use days or weeks';
  if (/^P/.test(s)) return 'ISO 8601 durations look like PT1H30M, P1D, P2W or P1DT12H';
  if (/^(\d+[wdhms])+$/.test(s)) return 'each unit may appear once, largest first (w, d, h, m, s)';
  return FORMS;
}

/**
 * Parses a duration into whole seconds, between 1 second and 366 days inclusive. Throws DurationError.
 */
export function parseDuration(d: string | number): number {
  if (typeof d === 'number') {
    if (!Number.isSafeInteger(d)) throw new DurationError(`invalid duration ${String(d)}: must be a whole number of seconds`);
    return checkRange(d, String(d));
  }
  if (typeof d !== 'string') {
    throw new DurationError('invalid duration: must be a string or an integer number of seconds');
  }
  if (d.length > MAX_DURATION_STRING_LENGTH) {
    throw new DurationError(`invalid duration: too long (${d.length} characters, at most ${MAX_DURATION_STRING_LENGTH})`);
  }
  const shown = JSON.stringify(d);
  if (d === '') throw new DurationError(`invalid duration "": ${FORMS}`);
  if (DIGITS_RE.test(d)) return checkRange(Number(d), shown);

  const short = SHORT_RE.exec(d);
  if (short) return checkRange(sum(short.slice(1), UNITS.map(([, f]) => f)), shown);

  const iso = ISO_RE.exec(d);
  if (iso) return checkRange(sum(iso.slice(1), [604_800, 86_400, 3_600, 60, 1]), shown);

  throw new DurationError(`invalid duration ${shown}: ${explain(d)}`);
}

/**
 * The short spelling of a whole number of seconds, largest unit first: 5400 → "1h30m", 604800 → "1w", 0 → "0s".
 * `parseDuration(formatDuration(n)) === n` for every valid duration. Throws DurationError on a negative or
 * non-integer input.
 */
export function formatDuration(seconds: number): string {
  if (!Number.isSafeInteger(seconds) || seconds < 0) {
    throw new DurationError(`cannot format duration ${String(seconds)}: must be a non-negative whole number of seconds`);
  }
  if (seconds === 0) return '0s';
  let rest = seconds;
  let out = '';
  for (const [unit, factor] of UNITS) {
    const n = Math.floor(rest / factor);
    if (n > 0) {
      out += `${n}${unit}`;
      rest -= n * factor;
    }
  }
  return out;
}
