import { describe, expect, it } from 'vitest';
import { stopBeginsAt, stopGraceSeconds, type StopPolicy } from './stop.ts';

const POLICY: StopPolicy = { stopGraceSeconds: 30, slackSeconds: 10 };
const END = Date.UTC(2026, 11, 2, 12, 0);

describe('when the pods of a booking stop', () => {
  it('begin the pool’s grace plus the slack before the deadline', () => {
    expect(END - stopBeginsAt(END, POLICY)).toBe(40_000);
    expect(END - stopBeginsAt(END, { stopGraceSeconds: 5, slackSeconds: 10 })).toBe(15_000);
  });

  it('a pod stopped when the stop begins gets its own grace, capped by the pool, and is done 5 s before the deadline', () => {
    const at = stopBeginsAt(END, POLICY);
    expect(stopGraceSeconds(END, at, 15, POLICY)).toBe(15);
    expect(stopGraceSeconds(END, at, 86_400, POLICY)).toBe(30);
    expect(stopGraceSeconds(END, at, undefined, POLICY)).toBe(30);
    // One sweep late (5 s): the full cap still ends 5 s before the deadline.
    expect(stopGraceSeconds(END, at + 5000, 86_400, POLICY)).toBe(30);
    expect(END - (at + 5000 + 30_000)).toBe(5000);
  });

  it('a pod stopped late gets only what is left before the deadline, never less than 1 s (0 would drop the pod before its container stops)', () => {
    expect(stopGraceSeconds(END, END - 20_000, 86_400, POLICY)).toBe(15);
    expect(stopGraceSeconds(END, END - 6000, 30, POLICY)).toBe(1);
    expect(stopGraceSeconds(END, END + 60_000, 30, POLICY)).toBe(1);
    expect(stopGraceSeconds(END, END - 20_000, 0, POLICY)).toBe(1);
  });

  it('a pod with no deadline (on a node in maintenance, its booking kept until it is gone) gets the capped grace', () => {
    expect(stopGraceSeconds(null, END, 86_400, POLICY)).toBe(30);
    expect(stopGraceSeconds(null, END, 10, POLICY)).toBe(10);
    expect(stopGraceSeconds(null, END, undefined, { stopGraceSeconds: 5, slackSeconds: 10 })).toBe(5);
  });
});
