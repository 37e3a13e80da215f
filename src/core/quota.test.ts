import { describe, expect, it } from 'vitest';
import { overlappingOverrides, parseOfferingBudget, quotaRefusalMessage, type QuotaOverride } from './quota.ts';

const at = (iso: string) => Date.parse(iso);
const override = (resource: string, start: string, end: string): QuotaOverride => ({
  resource,
  start: at(start),
  end: at(end),
  kind: 'add',
  amount: 1,
});

describe('quotaRefusalMessage', () => {
  it('says the hour budget numbers of the period that would be exceeded', () => {
    expect(
      quotaRefusalMessage('team-a', 'pool_x', {
        kind: 'hours',
        resource: 'gpu',
        limit: 40,
        used: 12.5,
        reserved: 27.5,
        requested: 1,
        periodStart: at('2027-03-01T00:00:00Z'),
        periodEnd: at('2027-04-01T00:00:00Z'),
      }),
    ).toBe(
      'tenant team-a would exceed its gpu-hour quota in pool pool_x for 2027-03-01T00:00:00Z–2027-04-01T00:00:00Z: ' +
        'limit 40, used 12.5, reserved 27.5, requested 1 gpu-hours',
    );
  });

  it('says the instant, the limit in force then and the charges then', () => {
    expect(
      quotaRefusalMessage('team-a', 'pool_x', { kind: 'atoms', resource: 'gpu.mig', limit: 3, charged: 2, requested: 2, at: at('2027-03-27T00:00:00Z') }),
    ).toBe('tenant team-a would exceed its gpu.mig quota in pool pool_x at 2027-03-27T00:00:00Z: limit 3, charged 2, requested 2');
  });

  it('falls back to the window when the ledger gave no numbers', () => {
    expect(quotaRefusalMessage('t', 'p', undefined)).toBe('tenant t would exceed its quota in pool p during the requested window');
  });
});

describe('overlappingOverrides', () => {
  it('finds two windows of one resource that overlap, whatever their order', () => {
    const a = override('gpu', '2027-03-20T00:00:00Z', '2027-03-27T00:00:00Z');
    const b = override('gpu', '2027-03-26T00:00:00Z', '2027-03-28T00:00:00Z');
    expect(overlappingOverrides([b, a])).toEqual([a, b]);
  });

  it('accepts windows that only touch (half-open) and windows of different resources', () => {
    expect(
      overlappingOverrides([
        override('gpu', '2027-03-20T00:00:00Z', '2027-03-27T00:00:00Z'),
        override('gpu', '2027-03-27T00:00:00Z', '2027-03-28T00:00:00Z'),
        override('gpu.mig', '2027-03-20T00:00:00Z', '2027-03-28T00:00:00Z'),
      ]),
    ).toBeUndefined();
  });
});

describe('parseOfferingBudget', () => {
  it('turns the CR fields into limits, a period (a month by default) and override rows', () => {
    expect(
      parseOfferingBudget({
        gpuHours: { gpu: 5000 },
        quotaOverrides: [
          { resource: 'gpu', start: '2027-03-20T00:00:00Z', end: '2027-03-27T00:00:00Z', add: 32 },
          { resource: 'gpu', start: '2027-03-29T00:00:00+01:00', end: '2027-03-30T00:00:00+01:00', set: 0 },
        ],
      }),
    ).toEqual({
      ok: true,
      value: {
        hours: { gpu: 5000 },
        hoursPeriod: 'month',
        overrides: [
          { resource: 'gpu', start: at('2027-03-20T00:00:00Z'), end: at('2027-03-27T00:00:00Z'), kind: 'add', amount: 32 },
          { resource: 'gpu', start: at('2027-03-28T23:00:00Z'), end: at('2027-03-29T23:00:00Z'), kind: 'set', amount: 0 },
        ],
      },
    });
  });

  it.each([
    [{ gpuHoursPeriod: 'year' }, 'gpuHoursPeriod'],
    [{ gpuHours: { gpu: -1 } }, 'gpuHours.gpu'],
    [{ quotaOverrides: [{ resource: 'gpu', start: '2027-03-20T00:00:00Z', end: '2027-03-27T00:00:00Z' }] }, 'exactly one of add and set'],
    [{ quotaOverrides: [{ resource: 'gpu', start: '2027-03-20T00:00:00Z', end: '2027-03-27T00:00:00Z', add: 1, set: 2 }] }, 'exactly one of add and set'],
    [{ quotaOverrides: [{ resource: 'gpu', start: '2027-03-27T00:00:00Z', end: '2027-03-20T00:00:00Z', add: 1 }] }, 'end must be after start'],
    [{ quotaOverrides: [{ resource: 'gpu', start: '2027-03-20', end: '2027-03-27T00:00:00Z', add: 1 }] }, 'quotaOverrides.0.start'],
    [{ quotaOverrides: [{ resource: 'gpu', start: '2027-03-20T00:00:00Z', end: '2027-03-27T00:00:00Z', set: -1 }] }, 'quotaOverrides.0.set'],
    [
      {
        quotaOverrides: [
          { resource: 'gpu', start: '2027-03-20T00:00:00Z', end: '2027-03-27T00:00:00Z', add: 1 },
          { resource: 'gpu', start: '2027-03-26T00:00:00Z', end: '2027-03-28T00:00:00Z', add: 1 },
        ],
      },
      'two gpu windows overlap',
    ],
  ])('refuses %j', (spec, message) => {
    const r = parseOfferingBudget(spec);
    expect(r.ok).toBe(false);
    expect(r.ok ? '' : r.message).toContain(message);
  });
});
