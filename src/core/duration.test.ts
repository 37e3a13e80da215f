import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  DurationError,
  formatDuration,
  MAX_DURATION_SECONDS,
  MAX_DURATION_STRING_LENGTH,
  parseDuration,
} from './duration.ts';

const MIN = 60;
const H = 3_600;
const D = 86_400;
const W = 604_800;

function errorOf(fn: () => unknown): DurationError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(DurationError);
    return err as DurationError;
  }
  throw new Error('expected a DurationError');
}

describe('parseDuration accepts', () => {
  it.each<[string | number, number]>([
    // integers are seconds
    [1, 1],
    [3600, 3600],
    [MAX_DURATION_SECONDS, MAX_DURATION_SECONDS],
    // integer strings are seconds
    ['1', 1],
    ['3600', 3600],
    ['0090', 90],
    [String(MAX_DURATION_SECONDS), MAX_DURATION_SECONDS],
    // short units
    ['90s', 90],
    ['1s', 1],
    ['15m', 15 * MIN],
    ['1h', H],
    ['1h30m', H + 30 * MIN],
    ['2d', 2 * D],
    ['1w', W],
    ['1w2d3h4m5s', W + 2 * D + 3 * H + 4 * MIN + 5],
    ['1d12h', D + 12 * H],
    ['90m', 90 * MIN],
    ['36h', 36 * H],
    ['0h1s', 1],
    ['366d', MAX_DURATION_SECONDS],
    ['52w2d', MAX_DURATION_SECONDS],
    ['365d23h59m59s', MAX_DURATION_SECONDS - 1],
    [`${MAX_DURATION_SECONDS}s`, MAX_DURATION_SECONDS],
    // ISO 8601
    ['PT1H30M', H + 30 * MIN],
    ['PT1S', 1],
    ['PT45M', 45 * MIN],
    ['PT90S', 90],
    ['PT1H2M3S', H + 2 * MIN + 3],
    ['P1D', D],
    ['P2W', 2 * W],
    ['P1DT12H', D + 12 * H],
    ['P1W1D', W + D],
    ['P1WT1H', W + H],
    ['P366D', MAX_DURATION_SECONDS],
    ['PT0H1S', 1],
    ['P52W2D', MAX_DURATION_SECONDS],
  ])('%j → %i seconds', (input, seconds) => {
    expect(parseDuration(input)).toBe(seconds);
  });
});

describe('parseDuration rejects', () => {
  it.each<[string, unknown, RegExp]>([
    // bounds, both sides
    ['integer 0', 0, /between 1 second and 366 days/],
    ['integer -1', -1, /between 1 second and 366 days/],
    ['-0', -0, /between 1 second and 366 days/],
    ['one second over 366 days', MAX_DURATION_SECONDS + 1, /between 1 second and 366 days/],
    ['"0"', '0', /between 1 second and 366 days/],
    ['"000"', '000', /between 1 second and 366 days/],
    ['string one second over', String(MAX_DURATION_SECONDS + 1), /between 1 second and 366 days/],
    ['"0s"', '0s', /between/],
    ['"0m0s"', '0m0s', /between/],
    ['"PT0S"', 'PT0S', /between/],
    ['"P0D"', 'P0D', /between/],
    ['"367d"', '367d', /between/],
    ['"366d1s"', '366d1s', /between/],
    ['"53w"', '53w', /between/],
    ['"P367D"', 'P367D', /between/],
    ['"P366DT1S"', 'P366DT1S', /between/],
    ['huge digits', '9'.repeat(40), /between/],
    ['huge unit', `${'9'.repeat(30)}w`, /between/],
    ['unsafe integer', 2 ** 53, /whole number of seconds/],
    // numbers that are not integers
    ['1.5', 1.5, /whole number of seconds/],
    ['NaN', Number.NaN, /whole number of seconds/],
    ['Infinity', Number.POSITIVE_INFINITY, /whole number of seconds/],
    // malformed strings
    ['empty', '', /use seconds/],
    ['negative string', '-5', /between/],
    ['negative unit', '-5m', /between/],
    ['plus sign', '+5', /use seconds/],
    ['leading space', ' 5m', /whitespace/],
    ['trailing space', '5m ', /whitespace/],
    ['space between parts', '1h 30m', /use seconds/],
    ['decimal seconds', '1.5', /fractions/],
    ['decimal hours', '1.5h', /fractions/],
    ['ISO decimal', 'PT0.5H', /fractions/],
    ['ISO comma decimal', 'PT0,5H', /fractions/],
    ['no number', 'h', /use seconds/],
    ['unknown unit', '5y', /use seconds/],
    ['milliseconds', '500ms', /use seconds/],
    ['uppercase unit', '5M', /use seconds/],
    ['units out of order', '30m1h', /largest first/],
    ['repeated unit', '1h1h', /largest first/],
    ['trailing number', '1h30', /use seconds/],
    ['words', 'one hour', /use seconds/],
    ['ISO bare P', 'P', /ISO 8601/],
    ['ISO bare PT', 'PT', /ISO 8601/],
    ['ISO trailing T', 'P1DT', /ISO 8601/],
    ['ISO years', 'P1Y', /years and months/],
    ['ISO months', 'P1M', /years and months/],
    ['ISO year and time', 'P1Y2DT3H', /years and months/],
    ['ISO time in date part', 'P1H', /ISO 8601/],
    ['ISO days after T', 'PT1D', /ISO 8601/],
    ['ISO out of order', 'PT1M1H', /ISO 8601/],
    ['ISO lowercase', 'pt1h', /use seconds/],
    ['ISO missing P', 'T1H', /use seconds/],
    ['ISO number without designator', 'PT5', /ISO 8601/],
    ['too long', `${'0'.repeat(MAX_DURATION_STRING_LENGTH)}1`, /too long/],
    // wrong types (callers outside TypeScript)
    ['null', null, /string or an integer/],
    ['boolean', true, /string or an integer/],
    ['object', { seconds: 5 }, /string or an integer/],
  ])('%s', (_name, input, message) => {
    const err = errorOf(() => parseDuration(input as string | number));
    expect(err.code).toBe('INVALID_DURATION');
    expect(err.message).toMatch(message);
  });

  it(`accepts a string of exactly ${MAX_DURATION_STRING_LENGTH} characters`, () => {
    expect(parseDuration(`${'0'.repeat(MAX_DURATION_STRING_LENGTH - 1)}1`)).toBe(1);
  });

  it('names the rejected input in the message', () => {
    expect(errorOf(() => parseDuration('5y')).message).toContain('"5y"');
    expect(errorOf(() => parseDuration(0)).message).toContain('0');
  });
});

describe('formatDuration', () => {
  it.each<[number, string]>([
    [0, '0s'],
    [1, '1s'],
    [59, '59s'],
    [60, '1m'],
    [90, '1m30s'],
    [3600, '1h'],
    [5400, '1h30m'],
    [D, '1d'],
    [D + 12 * H, '1d12h'],
    [W, '1w'],
    [W + D + H + MIN + 1, '1w1d1h1m1s'],
    [MAX_DURATION_SECONDS, '52w2d'],
    [MAX_DURATION_SECONDS + 1, '52w2d1s'],
  ])('%i → %j', (seconds, text) => {
    expect(formatDuration(seconds)).toBe(text);
  });

  it.each([-1, 1.5, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 53])('rejects %d', (n) => {
    expect(errorOf(() => formatDuration(n)).code).toBe('INVALID_DURATION');
  });
});

describe('duration properties', () => {
  const valid = fc.integer({ min: 1, max: MAX_DURATION_SECONDS });

  it('parseDuration(formatDuration(n)) === n for every valid duration', () => {
    fc.assert(
      fc.property(valid, (n) => {
        expect(parseDuration(formatDuration(n))).toBe(n);
      }),
      { numRuns: 2000 },
    );
  });

  it('integers and integer strings mean the same seconds', () => {
    fc.assert(
      fc.property(valid, (n) => {
        expect(parseDuration(n)).toBe(n);
        expect(parseDuration(String(n))).toBe(n);
      }),
    );
  });

  it('the ISO spelling agrees with the short spelling', () => {
    fc.assert(
      fc.property(fc.nat(52), fc.nat(6), fc.nat(23), fc.nat(59), fc.nat(59), (w, d, h, m, s) => {
        const seconds = w * W + d * D + h * H + m * MIN + s;
        fc.pre(seconds >= 1 && seconds <= MAX_DURATION_SECONDS);
        const iso = `P${w}W${d}DT${h}H${m}M${s}S`;
        const short = `${w}w${d}d${h}h${m}m${s}s`;
        expect(parseDuration(iso)).toBe(seconds);
        expect(parseDuration(short)).toBe(seconds);
      }),
    );
  });

  it('throws nothing but DurationError on arbitrary input', () => {
    const alphabet = fc.constantFrom(...'0123456789PTWDHMSwdhms.-+ '.split(''));
    const input = fc.oneof(fc.string(), fc.string({ unit: alphabet, maxLength: 20 }), fc.double(), fc.integer());
    fc.assert(
      fc.property(input, (x) => {
        try {
          const n = parseDuration(x);
          expect(Number.isSafeInteger(n) && n >= 1 && n <= MAX_DURATION_SECONDS).toBe(true);
        } catch (err) {
          if (!(err instanceof DurationError)) throw err;
        }
      }),
      { numRuns: 3000 },
    );
  });
});
