import { describe, expect, it } from 'vitest';
import type { ReservationState } from '../db/ledger.ts';
import { parseWaitStates, waitForState, WaitFailure } from './reservation-wait.ts';

/** A reservation whose state follows `script` (one entry per read; the last repeats), on a fake clock. */
function scripted(script: (ReservationState | undefined)[], o: { pollMs?: number; reportEveryMs?: number } = {}) {
  let t = 0;
  let reads = 0;
  const steps: string[] = [];
  const deps = {
    read: async () => {
      const s = script[Math.min(reads++, script.length - 1)];
      return s === undefined ? undefined : { id: 'rsv_1', state: s };
    },
    progress: { step: (w: string) => steps.push(`${t} ${w}`), done: () => steps.push(`${t} done`) },
    now: () => t,
    sleep: async (ms: number) => {
      t += ms;
    },
    ...o,
  };
  return { deps, steps, reads: () => reads };
}

const failure = async (p: Promise<unknown>) => {
  try {
    await p;
  } catch (e) {
    expect(e).toBeInstanceOf(WaitFailure);
    return e as WaitFailure;
  }
  throw new Error('expected a WaitFailure');
};

describe('waitForState', () => {
  it('returns at once when the reservation is already in a wanted state', async () => {
    const s = scripted(['confirmed']);
    expect(await waitForState('rsv_1', ['confirmed'], 10_000, s.deps)).toEqual({ id: 'rsv_1', state: 'confirmed' });
    expect(s.steps).toEqual([]);
  });

  it('polls until it changes, reporting the state it waits in once, and again every reportEveryMs', async () => {
    const s = scripted(['held', 'held', 'held', 'held', 'confirmed'], { pollMs: 1000, reportEveryMs: 2500 });
    expect((await waitForState('rsv_1', ['confirmed'], 60_000, s.deps)).state).toBe('confirmed');
    expect(s.reads()).toBe(5);
    expect(s.steps).toEqual(['0 reservation rsv_1 is held; waiting for confirmed', '3000 reservation rsv_1 is held; waiting for confirmed']);
  });

  it('fails with ENDED when it ends in another state, NOT_FOUND when there is none, TIMEOUT at the deadline', async () => {
    expect((await failure(waitForState('rsv_1', ['confirmed'], 60_000, scripted(['held', 'expired']).deps))).code).toBe('ENDED');
    expect((await failure(waitForState('rsv_1', ['confirmed'], 60_000, scripted([undefined]).deps))).code).toBe('NOT_FOUND');
    const slow = scripted(['held'], { pollMs: 1000 });
    const timeout = await failure(waitForState('rsv_1', ['confirmed'], 3500, slow.deps));
    expect(timeout.code).toBe('TIMEOUT');
    expect(timeout.message).toBe('reservation rsv_1 is still held after 4 s');
    expect(slow.reads()).toBe(5); // 0, 1000, 2000, 3000, 3500
  });

  it('may wait for an end state too', async () => {
    expect((await waitForState('rsv_1', ['released', 'expired'], 10_000, scripted(['confirmed', 'released']).deps)).state).toBe('released');
  });
});

describe('parseWaitStates', () => {
  it('takes a comma list of states and refuses anything else', () => {
    expect(parseWaitStates('confirmed')).toEqual(['confirmed']);
    expect(parseWaitStates('released, expired')).toEqual(['released', 'expired']);
    for (const bad of ['', 'active', 'confirmed,', 'CONFIRMED']) expect(parseWaitStates(bad)).toBeUndefined();
  });
});
