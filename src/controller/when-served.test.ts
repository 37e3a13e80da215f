import { describe, expect, it } from 'vitest';
import { silentLogger } from '../log.ts';
import { startWhenServed } from './when-served.ts';

const until = async (cond: () => boolean) => {
  for (let i = 0; i < 200 && !cond(); i++) await new Promise((r) => setTimeout(r, 5));
  expect(cond()).toBe(true);
};

describe('startWhenServed', () => {
  it('asks again until served (errors included), then starts once; stop stops what started', async () => {
    const answers: (boolean | Error)[] = [false, new Error('boom'), true];
    let asked = 0;
    let started = 0;
    const stopped: string[] = [];
    const w = startWhenServed({
      what: 'test',
      served: async () => {
        const a = answers[asked++]!;
        if (a instanceof Error) throw a;
        return a;
      },
      start: () => (started++, 'work'),
      stopRunning: async (r) => void stopped.push(r),
      log: silentLogger,
      pollMs: 1,
    });
    await until(() => started === 1);
    expect(asked).toBe(3);
    expect(w.running()).toBe('work');
    await new Promise((r) => setTimeout(r, 20));
    expect(asked).toBe(3);
    await w.stop();
    expect(stopped).toEqual(['work']);
    expect(w.running()).toBeUndefined();
  });

  it('stopped while waiting: never starts, stops nothing', async () => {
    let asked = 0;
    let started = 0;
    const w = startWhenServed({ what: 'test', served: async () => (asked++, false), start: () => started++, stopRunning: async () => { throw new Error('nothing to stop'); }, log: silentLogger, pollMs: 1 });
    await until(() => asked >= 2);
    await w.stop();
    const at = asked;
    await new Promise((r) => setTimeout(r, 20));
    expect(asked).toBeLessThanOrEqual(at + 1);
    expect(started).toBe(0);
  });
});
