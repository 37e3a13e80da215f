import { describe, expect, it } from 'vitest';
import { ValidationError, type ReservationCreateInput } from '../../core/schemas.ts';
import type { Reservation } from '../../kube/types.ts';
import { recurringVerdict, toRecurrence, windowInput, windowKey } from './recurring.ts';

const rsv = (spec: Partial<Reservation['spec']>, creationTimestamp?: string): Reservation => ({
  metadata: { name: 'r', namespace: 'ns', uid: 'u', ...(creationTimestamp ? { creationTimestamp } : {}) },
  spec: {
    pool: 'p',
    devices: [{ class: 'gpu', count: 1 }],
    recurrence: { days: ['Mon'], startTime: '09:00', endTime: '17:00', timeZone: 'Europe/Berlin' },
    ...spec,
  } as Reservation['spec'],
});
const refusal = (r: Reservation): string => {
  try {
    toRecurrence(r, 0);
  } catch (e) {
    if (e instanceof ValidationError) return e.message;
    throw e;
  }
  return 'accepted';
};
const rec = { days: ['Mon'], startTime: '09:00', timeZone: 'Europe/Berlin' };

describe('toRecurrence', () => {
  it('refuses, with the field’s path, what the CRD refuses and what it cannot see', () => {
    expect(refusal(rsv({ recurrence: { ...rec, endTime: '17:00', duration: '8h' } }))).toMatch(/spec\.recurrence\.endTime: give exactly one/);
    expect(refusal(rsv({ recurrence: rec }))).toMatch(/give exactly one of endTime and duration/);
    expect(refusal(rsv({ recurrence: { ...rec, duration: '25h' } }))).toMatch(/spec\.recurrence\.duration: a window lasts at most a day/);
    expect(refusal(rsv({ recurrence: { ...rec, endTime: '17:00', until: '2026-12-18', count: 3 } }))).toMatch(/spec\.recurrence\.count/);
    expect(refusal(rsv({ recurrence: { ...rec, days: ['Mon', 'Mon'], endTime: '17:00' } }))).toMatch(/spec\.recurrence\.days: names a day twice/);
    expect(refusal(rsv({ recurrence: { ...rec, endTime: '17:00', until: '2026-02-29' } }))).toMatch(/spec\.recurrence\.until/);
    expect(refusal(rsv({ recurrence: { ...rec, endTime: '17:00', timeZone: 'Berlin' } }))).toMatch(/spec\.recurrence\.timeZone/);
    expect(refusal(rsv({ duration: '1h' }))).toMatch(/spec\.duration: must be absent with a recurrence/);
    expect(refusal(rsv({ start: 'tomorrow' }))).toMatch(/spec\.start/);
    expect(refusal(rsv({}))).toBe('accepted');
  });

  it('windows are counted from spec.start, else from the creation, else (never in a cluster) from now', () => {
    expect(toRecurrence(rsv({ start: '2027-01-05T00:00:00Z' }, '2027-01-01T00:00:00Z'), 7).anchor).toBe(Date.parse('2027-01-05T00:00:00Z'));
    expect(toRecurrence(rsv({}, '2027-01-01T00:00:00Z'), 7).anchor).toBe(Date.parse('2027-01-01T00:00:00Z'));
    expect(toRecurrence(rsv({}), 7).anchor).toBe(7);
    expect(toRecurrence(rsv({ recurrence: { ...rec, duration: '8h' } }), 0).recurrence).toMatchObject({ durationSeconds: 28_800 });
  });
});

describe('windowInput', () => {
  const base = { tenantId: 't', idempotencyKey: 'u' } as ReservationCreateInput;
  const o = { start: Date.parse('2027-01-04T08:00:00Z'), end: Date.parse('2027-01-04T16:00:00Z') };

  it('a window ahead: all of it; one under way: from the first whole second a second ahead to its end; one ending within two seconds: none', () => {
    expect(windowInput(base, windowKey('u', o), o, o.start - 5000)).toEqual({ ...base, start: o.start, duration: 28_800, idempotencyKey: 'u:2027-01-04T08:00:00.000Z' });
    expect(windowInput(base, 'k', o, o.start + 3_600_000 + 250)).toMatchObject({ start: o.start + 3_602_000, duration: 28_800 - 3602 });
    // On a whole second (the database's clock may be a few milliseconds ahead of this reading): a second ahead still.
    expect(windowInput(base, 'k', o, o.start + 3_600_000)).toMatchObject({ start: o.start + 3_601_000, duration: 28_800 - 3601 });
    expect(windowInput(base, 'k', o, o.end - 1400)).toBeUndefined();
  });
});

describe('recurringVerdict', () => {
  const w = (phase: 'Reserved' | 'Pending', reason?: string) => ({ start: 's', end: 'e', phase, ...(reason ? { reason, message: `m-${reason}` } : {}) });

  it('Pending with the first refusal when any window is refused; Reserved when all are booked; Scheduled or Ended when none is listed', () => {
    expect(recurringVerdict([w('Reserved'), w('Pending', 'QuotaExceeded'), w('Reserved')], undefined, 0)).toMatchObject({
      phase: 'Pending',
      reason: 'QuotaExceeded',
      message: '2 of 3 windows booked; 1 not, first s: m-QuotaExceeded',
      eventType: 'Warning',
    });
    expect(recurringVerdict([w('Reserved')], undefined, 0)).toMatchObject({ phase: 'Reserved', status: 'True', reason: 'Reserved' });
    expect(recurringVerdict([], { start: 10 * 86_400_000, end: 11 * 86_400_000 }, 7 * 86_400_000)).toMatchObject({
      phase: 'Pending',
      reason: 'Scheduled',
      message: expect.stringContaining('is booked from 1970-01-04T00:00:00.000Z'),
    });
    expect(recurringVerdict([], undefined, 0)).toMatchObject({ phase: 'Released', reason: 'Ended' });
  });
});
