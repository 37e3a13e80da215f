import { describe, expect, it } from 'vitest';
import { parseInput, resolveUsageWindow, UsageInput, ValidationError } from './schemas.ts';

const POOL = 'pool_0123456789abcdefghjkmnpqrs';
const NOW = Date.parse('2026-11-15T10:20:00Z');
const at = (iso: string) => Date.parse(iso);

/** The issues of a refused input, as `path: message`. */
function issues(body: unknown): string[] {
  try {
    parseInput(UsageInput, body);
  } catch (e) {
    if (e instanceof ValidationError) return e.issues.map((i) => `${i.path}: ${i.message}`);
    throw e;
  }
  throw new Error(`accepted: ${JSON.stringify(body)}`);
}

function windowOf(body: unknown): { from: string; to: string } {
  const w = resolveUsageWindow(parseInput(UsageInput, body), NOW);
  return { from: new Date(w.from).toISOString(), to: new Date(w.to).toISOString() };
}

function windowIssue(body: unknown): string {
  try {
    resolveUsageWindow(parseInput(UsageInput, body), NOW);
  } catch (e) {
    if (e instanceof ValidationError) return e.issues.map((i) => `${i.path}: ${i.message}`).join('; ');
    throw e;
  }
  throw new Error(`accepted: ${JSON.stringify(body)}`);
}

describe('UsageInput', () => {
  it('accepts a tenant alone, a pool, ISO times, a period; hourly defaults to false', () => {
    expect(parseInput(UsageInput, { tenantId: 'acme' })).toEqual({ tenantId: 'acme', hourly: false });
    expect(parseInput(UsageInput, { tenantId: 'acme', poolId: POOL, from: '2026-11-01', to: '2026-11-02T10:00Z', hourly: true })).toEqual({
      tenantId: 'acme',
      poolId: POOL,
      from: at('2026-11-01T00:00Z'),
      to: at('2026-11-02T10:00Z'),
      hourly: true,
    });
    expect(parseInput(UsageInput, { tenantId: 'acme', from: '2026-11-01T10:00:00.5+01:00' }).from).toBe(at('2026-11-01T09:00:00.500Z'));
    expect(parseInput(UsageInput, { tenantId: 'acme', period: '2026-02' }).period).toEqual({ kind: 'month', year: 2026, month: 2 });
    expect(parseInput(UsageInput, { tenantId: 'acme', period: '7d' }).period).toEqual({ kind: 'last', hours: 168 });
    expect(parseInput(UsageInput, { tenantId: 'acme', period: 'PT48H' }).period).toEqual({ kind: 'last', hours: 48 });
  });

  it('is strict: unknown keys, bounded and patterned strings, types', () => {
    expect(issues({ tenantId: 'acme', tenant: 'x' })).toEqual(['tenant: is not a known field']);
    expect(issues({})).toEqual(['tenantId: is required']);
    expect(issues({ tenantId: 'a'.repeat(129) })).toEqual(['tenantId: must be at most 128 characters']);
    expect(issues({ tenantId: 'acme', poolId: 'pool_X' })).toEqual(['poolId: must match /^pool_[0-9a-hjkmnp-tv-z]{26,52}$/']);
    expect(issues({ tenantId: 'acme', hourly: 'true' })).toEqual(['hourly: must be a boolean']);
    expect(issues({ tenantId: 'acme', from: 1_700_000_000_000 })).toEqual(['from: must be a string']);
    expect(issues({ tenantId: 'acme', period: 'x'.repeat(65) })).toEqual(['period: must be at most 64 characters']);
    expect(issues({ tenantId: 'acme', from: `2026-11-01T00:00:00.${'0'.repeat(40)}Z` })).toEqual(['from: must be at most 40 characters']);
  });

  it('times: ISO 8601 with a zone, or a date; real calendar dates only', () => {
    for (const bad of ['2026-11-01T10:00', '2026-11-01 10:00Z', '20261101', '2026-11-01T24:00Z', 'yesterday', '']) {
      expect(issues({ tenantId: 'acme', from: bad }), bad).toEqual([
        'from: must be an ISO 8601 date (2026-11-01) or date-time with a zone (2026-11-01T10:00Z)',
      ]);
    }
    for (const bad of ['2026-02-29', '2026-13-01', '2026-04-31', '2026-00-10']) {
      expect(issues({ tenantId: 'acme', from: bad })[0], bad).toMatch(/^from: is not a time between 1970 and \d{4}$/);
    }
    expect(issues({ tenantId: 'acme', from: '1969-12-31T23:00Z' })[0]).toMatch(/^from: is not a time/);
    expect(parseInput(UsageInput, { tenantId: 'acme', from: '2028-02-29' }).from).toBe(at('2028-02-29T00:00Z'));
  });

  it('period: a month or whole hours, bounded', () => {
    expect(issues({ tenantId: 'acme', period: '2026-13' })[0]).toMatch(/^period: a month \(2026-11\) or a duration/);
    expect(issues({ tenantId: 'acme', period: '1969-12' })).toEqual(['period: a month between 1970-01 and 6000-12']);
    expect(issues({ tenantId: 'acme', period: '90m' })).toEqual(['period: a duration of whole hours (24h, 7d), or a month (2026-11)']);
    expect(issues({ tenantId: 'acme', period: '367d' })[0]).toMatch(/^period: .*between 1 second and 366 days/);
    expect(issues({ tenantId: 'acme', period: 24 })).toEqual(['period: must be a string']);
  });
});

describe('resolveUsageWindow', () => {
  it('defaults to the current UTC month', () => {
    expect(windowOf({ tenantId: 'acme' })).toEqual({ from: '2026-11-01T00:00:00.000Z', to: '2026-12-01T00:00:00.000Z' });
  });

  it('a named month; December ends at the next year', () => {
    expect(windowOf({ tenantId: 'acme', period: '2026-12' })).toEqual({ from: '2026-12-01T00:00:00.000Z', to: '2027-01-01T00:00:00.000Z' });
  });

  it('the last N hours end with the current hour (10:20 → 11:00)', () => {
    expect(windowOf({ tenantId: 'acme', period: '24h' })).toEqual({ from: '2026-11-14T11:00:00.000Z', to: '2026-11-15T11:00:00.000Z' });
  });

  it('from/to widened to whole hours; to defaults to the end of the current hour', () => {
    expect(windowOf({ tenantId: 'acme', from: '2026-11-15T08:45Z', to: '2026-11-15T09:10Z' })).toEqual({
      from: '2026-11-15T08:00:00.000Z',
      to: '2026-11-15T10:00:00.000Z',
    });
    expect(windowOf({ tenantId: 'acme', from: '2026-11-15T08:00Z' })).toEqual({ from: '2026-11-15T08:00:00.000Z', to: '2026-11-15T11:00:00.000Z' });
  });

  it('refuses: both forms, to without from, to before from, over 366 days, hourly over 31 days', () => {
    expect(windowIssue({ tenantId: 'acme', period: '24h', from: '2026-11-01' })).toBe('period: give either period or from/to, not both');
    expect(windowIssue({ tenantId: 'acme', to: '2026-11-01' })).toBe('from: is required with to');
    expect(windowIssue({ tenantId: 'acme', from: '2026-11-02', to: '2026-11-01' })).toMatch(/^to: must be after from/);
    expect(windowIssue({ tenantId: 'acme', from: '2025-11-01', to: '2026-11-03' })).toMatch(/^to: the window spans 8808 hours; at most 366 days$/);
    expect(windowIssue({ tenantId: 'acme', from: '2026-10-01', to: '2026-11-01T01:00Z', hourly: true })).toBe(
      'hourly: the window spans 745 hours; hourly rows for at most 31 days (744 hours)',
    );
    // A month of 31 days (744 hours) is allowed with hourly rows.
    expect(windowOf({ tenantId: 'acme', period: '2026-10', hourly: true })).toEqual({ from: '2026-10-01T00:00:00.000Z', to: '2026-11-01T00:00:00.000Z' });
  });
});
