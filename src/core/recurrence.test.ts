// Wall-clock windows → UTC ranges. Every expected range is written out by hand from the zone's published rules:
// Europe/Berlin is UTC+2 (CEST) until 2026-10-25 03:00 local, when clocks go back to 02:00 and it is UTC+1 (CET); it
// skipped 02:00–03:00 on 2026-03-29. America/New_York is UTC−4 (EDT) until 2026-11-01 02:00 local, then UTC−5 (EST).
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { expandRecurrence, isTimeZone, offsetAt, RecurrenceError, zonedToUtc, type Recurrence } from './recurrence.ts';

const ms = (iso: string) => Date.parse(iso);
const ranges = (r: Recurrence, anchor: string, from: string, to: string) =>
  expandRecurrence(r, ms(anchor), ms(from), ms(to)).map((o) => [new Date(o.start).toISOString(), new Date(o.end).toISOString()]);

const WEEKDAYS_9_TO_5: Recurrence = { days: ['Mon', 'Tue', 'Wed', 'Thu', 'Fri'], startTime: '09:00', endTime: '17:00', timeZone: 'Europe/Berlin' };

describe('expandRecurrence', () => {
  it('weekdays 09:00–17:00 Europe/Berlin across the change to CET on 2026-10-25: 07:00–15:00Z before, 08:00–16:00Z after', () => {
    expect(ranges(WEEKDAYS_9_TO_5, '2026-10-01T00:00:00Z', '2026-10-19T00:00:00Z', '2026-11-02T00:00:00Z')).toEqual([
      // Mon 19 to Fri 23 October: CEST, UTC+2.
      ['2026-10-19T07:00:00.000Z', '2026-10-19T15:00:00.000Z'],
      ['2026-10-20T07:00:00.000Z', '2026-10-20T15:00:00.000Z'],
      ['2026-10-21T07:00:00.000Z', '2026-10-21T15:00:00.000Z'],
      ['2026-10-22T07:00:00.000Z', '2026-10-22T15:00:00.000Z'],
      ['2026-10-23T07:00:00.000Z', '2026-10-23T15:00:00.000Z'],
      // Sat 24 and Sun 25 (the change): no window. Mon 26 to Fri 30 October: CET, UTC+1.
      ['2026-10-26T08:00:00.000Z', '2026-10-26T16:00:00.000Z'],
      ['2026-10-27T08:00:00.000Z', '2026-10-27T16:00:00.000Z'],
      ['2026-10-28T08:00:00.000Z', '2026-10-28T16:00:00.000Z'],
      ['2026-10-29T08:00:00.000Z', '2026-10-29T16:00:00.000Z'],
      ['2026-10-30T08:00:00.000Z', '2026-10-30T16:00:00.000Z'],
    ]);
  });

  it('a window over the change itself: Sat 22:00 to Sun 06:00 lasts 9 hours that night, 8 the night before', () => {
    const night: Recurrence = { days: ['Fri', 'Sat'], startTime: '22:00', endTime: '06:00', timeZone: 'Europe/Berlin' };
    expect(ranges(night, '2026-10-01T00:00:00Z', '2026-10-23T00:00:00Z', '2026-10-26T00:00:00Z')).toEqual([
      ['2026-10-23T20:00:00.000Z', '2026-10-24T04:00:00.000Z'], // Fri 22:00 CEST → Sat 06:00 CEST
      ['2026-10-24T20:00:00.000Z', '2026-10-25T05:00:00.000Z'], // Sat 22:00 CEST → Sun 06:00 CET
    ]);
  });

  it('the skipped hour (2026-03-29, 02:00–03:00 Berlin does not exist): a window starting 02:30 starts at 03:30 CEST', () => {
    const r: Recurrence = { days: ['Sat', 'Sun'], startTime: '02:30', endTime: '04:00', timeZone: 'Europe/Berlin' };
    expect(ranges(r, '2026-03-01T00:00:00Z', '2026-03-28T00:00:00Z', '2026-03-30T00:00:00Z')).toEqual([
      ['2026-03-28T01:30:00.000Z', '2026-03-28T03:00:00.000Z'], // Sat: 02:30–04:00 CET
      ['2026-03-29T01:30:00.000Z', '2026-03-29T02:00:00.000Z'], // Sun: 03:30–04:00 CEST, half an hour
    ]);
    // With a duration the window keeps its length: 03:30–05:00 CEST.
    const d: Recurrence = { days: ['Sun'], startTime: '02:30', durationSeconds: 5400, timeZone: 'Europe/Berlin' };
    expect(ranges(d, '2026-03-01T00:00:00Z', '2026-03-29T00:00:00Z', '2026-03-30T00:00:00Z')).toEqual([
      ['2026-03-29T01:30:00.000Z', '2026-03-29T03:00:00.000Z'],
    ]);
    // Start and end both in the skipped hour: both move by the gap, 02:10–02:50 is 03:10–03:50 CEST.
    const inGap: Recurrence = { days: ['Sun'], startTime: '02:10', endTime: '02:50', timeZone: 'Europe/Berlin' };
    expect(ranges(inGap, '2026-03-01T00:00:00Z', '2026-03-29T00:00:00Z', '2026-03-30T00:00:00Z')).toEqual([
      ['2026-03-29T01:10:00.000Z', '2026-03-29T01:50:00.000Z'],
    ]);
    // 02:30–03:15: the start moves to 03:30, after the end: no window that day, and it is not counted.
    const gone: Recurrence = { days: ['Sat', 'Sun', 'Mon'], startTime: '02:30', endTime: '03:15', timeZone: 'Europe/Berlin', count: 2 };
    expect(ranges(gone, '2026-03-28T00:00:00Z', '2026-03-28T00:00:00Z', '2026-04-01T00:00:00Z')).toEqual([
      ['2026-03-28T01:30:00.000Z', '2026-03-28T02:15:00.000Z'], // Sat, CET
      ['2026-03-30T00:30:00.000Z', '2026-03-30T01:15:00.000Z'], // Mon, CEST
    ]);
  });

  it('the repeated hour (2026-10-25, 02:00–03:00 Berlin happens twice): a window starting 02:30 starts at the first 02:30', () => {
    const r: Recurrence = { days: ['Sun'], startTime: '02:30', durationSeconds: 3600, timeZone: 'Europe/Berlin' };
    expect(ranges(r, '2026-10-01T00:00:00Z', '2026-10-25T00:00:00Z', '2026-10-26T00:00:00Z')).toEqual([
      ['2026-10-25T00:30:00.000Z', '2026-10-25T01:30:00.000Z'], // 02:30 CEST, one hour
    ]);
    // Wall-clock end in the repeated hour: its first instant too (02:30 CEST), so 01:00–02:30 lasts 1.5 h.
    const e: Recurrence = { days: ['Sun'], startTime: '01:00', endTime: '02:30', timeZone: 'Europe/Berlin' };
    expect(ranges(e, '2026-10-01T00:00:00Z', '2026-10-25T00:00:00Z', '2026-10-26T00:00:00Z')).toEqual([
      ['2026-10-24T23:00:00.000Z', '2026-10-25T00:30:00.000Z'],
    ]);
  });

  it('another zone and rule: America/New_York leaves EDT on 2026-11-01', () => {
    const r: Recurrence = { days: ['Fri', 'Mon'], startTime: '08:30', endTime: '12:00', timeZone: 'America/New_York' };
    expect(ranges(r, '2026-10-01T00:00:00Z', '2026-10-30T00:00:00Z', '2026-11-03T00:00:00Z')).toEqual([
      ['2026-10-30T12:30:00.000Z', '2026-10-30T16:00:00.000Z'], // Fri, EDT (UTC−4)
      ['2026-11-02T13:30:00.000Z', '2026-11-02T17:00:00.000Z'], // Mon, EST (UTC−5)
    ]);
  });

  it('count is counted from the anchor, until is the last local date a window starts on', () => {
    // Anchored Wednesday 2026-10-21 12:00Z: that day's window (07:00Z) began before the anchor and is not one of them.
    const five = { ...WEEKDAYS_9_TO_5, count: 5 };
    const all = ranges(five, '2026-10-21T12:00:00Z', '2026-10-01T00:00:00Z', '2026-12-01T00:00:00Z');
    expect(all.map(([s]) => s!.slice(0, 10))).toEqual(['2026-10-22', '2026-10-23', '2026-10-26', '2026-10-27', '2026-10-28']);
    // Asked later, the count still ends on the 28th (the 29th is not a sixth).
    expect(ranges(five, '2026-10-21T12:00:00Z', '2026-10-27T20:00:00Z', '2026-12-01T00:00:00Z').map(([s]) => s!.slice(0, 10))).toEqual(['2026-10-28']);
    const untilTue = { ...WEEKDAYS_9_TO_5, until: '2026-10-27' };
    expect(ranges(untilTue, '2026-10-21T12:00:00Z', '2026-10-26T00:00:00Z', '2026-12-01T00:00:00Z').map(([s]) => s!.slice(0, 10))).toEqual(['2026-10-26', '2026-10-27']);
  });

  it('from and to: a window still running at `from` is included, one starting at `to` is not', () => {
    expect(ranges(WEEKDAYS_9_TO_5, '2026-10-01T00:00:00Z', '2026-10-19T10:00:00Z', '2026-10-20T07:00:00Z')).toEqual([
      ['2026-10-19T07:00:00.000Z', '2026-10-19T15:00:00.000Z'],
    ]);
  });

  it('refuses what the schema cannot check: an unknown zone, no end or two ends, an impossible date', () => {
    const bad = (r: Partial<Recurrence>) => () => expandRecurrence({ ...WEEKDAYS_9_TO_5, ...r }, 0, 0, 1);
    expect(bad({ timeZone: 'Europe/Atlantis' })).toThrow(RecurrenceError);
    expect(bad({ durationSeconds: 3600 })).toThrow(/exactly one of endTime and duration/);
    expect(bad({ endTime: undefined })).toThrow(/exactly one of endTime and duration/);
    expect(bad({ until: '2026-02-30' })).toThrow(/until/);
    expect(bad({ startTime: '24:00' })).toThrow(/startTime/);
    expect(bad({ durationSeconds: 86_401, endTime: undefined })).toThrow(/24 hours/);
    expect(isTimeZone('Europe/Berlin')).toBe(true);
  });
});

describe('zonedToUtc and offsetAt', () => {
  it('Berlin offsets either side of both changes', () => {
    expect(offsetAt(ms('2026-03-29T00:59:59Z'), 'Europe/Berlin')).toBe(3_600_000);
    expect(offsetAt(ms('2026-03-29T01:00:00Z'), 'Europe/Berlin')).toBe(7_200_000);
    expect(offsetAt(ms('2026-10-25T00:59:59Z'), 'Europe/Berlin')).toBe(7_200_000);
    expect(offsetAt(ms('2026-10-25T01:00:00Z'), 'Europe/Berlin')).toBe(3_600_000);
    // 03:00 local on the fall-back day happens once: 02:00Z (CET).
    expect(new Date(zonedToUtc(ms('2026-10-25T03:00:00Z'), 'Europe/Berlin')).toISOString()).toBe('2026-10-25T02:00:00.000Z');
  });
});

describe('zonedToUtc, for any instant in zones with odd rules', () => {
  // Half-hour DST (Lord Howe), 45-minute offsets (Chatham), DST in the southern summer (Santiago), Morocco's
  // Ramadan changes, Newfoundland, no DST (Kolkata).
  const zones = ['Europe/Berlin', 'America/New_York', 'Australia/Lord_Howe', 'Pacific/Chatham', 'America/Santiago', 'Africa/Casablanca', 'America/St_Johns', 'Asia/Kolkata'];

  // The hours of 2026 in which each zone's offset changes: instants are drawn around them as well as anywhere.
  const changes = zones.flatMap((zone) => {
    const out: [string, number][] = [];
    for (let t = Date.parse('2026-01-01T00:00:00Z'); t < Date.parse('2027-01-01T00:00:00Z'); t += 3_600_000) {
      if (offsetAt(t, zone) !== offsetAt(t + 3_600_000, zone)) out.push([zone, t]);
    }
    return out;
  });
  const anywhere = fc.tuple(fc.constantFrom(...zones), fc.integer({ min: Date.parse('2020-01-01T00:00:00Z') / 1000, max: Date.parse('2036-01-01T00:00:00Z') / 1000 }));
  const nearChange = fc
    .tuple(fc.constantFrom(...changes), fc.integer({ min: -3 * 3600, max: 4 * 3600 }))
    .map(([[zone, t], ds]) => [zone, t / 1000 + ds] as [string, number]);

  it('the wall clock of an instant converts back to that instant, or to the first instant of a repeated wall time', () => {
    expect(changes.filter(([z]) => z === 'Europe/Berlin').map(([, t]) => new Date(t).toISOString())).toEqual(['2026-03-29T00:00:00.000Z', '2026-10-25T00:00:00.000Z']);
    expect(changes.filter(([z]) => z === 'Asia/Kolkata')).toEqual([]);
    fc.assert(
      fc.property(fc.oneof(anywhere, nearChange), ([zone, s]) => {
        const u = s * 1000;
        const local = u + offsetAt(u, zone);
        const r = zonedToUtc(local, zone);
        expect(r + offsetAt(r, zone)).toBe(local);
        expect(r).toBeLessThanOrEqual(u);
        // Earlier only where the wall time happens twice: the first time, under another offset.
        if (r !== u) expect(offsetAt(r, zone)).toBeGreaterThan(offsetAt(u, zone));
      }),
      { numRuns: 3000 },
    );
  });

  it('a wall time that never happens is moved later by the gap: 02:15 on 2026-10-04 at Lord Howe (02:00→02:30) is 02:45', () => {
    // Lord Howe: UTC+10:30 until 2026-10-04 02:00 local, then UTC+11. 02:15 does not exist; read at +10:30 it is
    // 15:45Z on the 3rd, which is 02:45 at +11.
    expect(new Date(zonedToUtc(Date.parse('2026-10-04T02:15:00Z'), 'Australia/Lord_Howe')).toISOString()).toBe('2026-10-03T15:45:00.000Z');
  });
});
