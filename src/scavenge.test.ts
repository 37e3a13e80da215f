import { execFileSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { loadConfig } from './config.ts';

/**
 * Runs a process that sets `mode` and then makes young collections with survivors (a ring of live objects, replaced as
 * it goes); V8's trace of the last 20 young collections: how long helper threads worked on each. (The first ones come
 * while tsx loads the module, before `mode` is set: about 15 of some 70.)
 */
function helperTimes(mode: string): number[] {
  const code = `
    const { setScavenges } = await import(${JSON.stringify(new URL('./scavenge.ts', import.meta.url).href)});
    setScavenges(process.env.MODE);
    const ring = new Array(8192);
    let sink;
    for (let i = 0; i < 1000000; i++) {
      ring[i & 8191] = { i, list: [i, i + 1, i + 2], name: 'n' + i };
      for (let j = 0; j < 8; j++) sink = [i, j, sink === undefined];
    }`;
  const out = execFileSync(process.execPath, ['--import', 'tsx', '--trace-gc-nvp', '--input-type=module', '-e', code], {
    env: { ...process.env, MODE: mode },
    encoding: 'utf8',
  });
  return out
    .split('\n')
    .filter((line) => / gc=s /.test(line))
    .map((line) => Number(/ background\.scavenge\.parallel=([\d.]+)/.exec(line)?.[1] ?? NaN))
    .slice(-20);
}

describe('young collections (ADR 0029)', () => {
  it('are on the event loop’s thread by default, helper threads only when asked', () => {
    expect(loadConfig({}).scavenges).toBe('main-thread');
    expect(loadConfig({ BETTER_COMPUTE_SCAVENGES: 'parallel' }).scavenges).toBe('parallel');
    expect(() => loadConfig({ BETTER_COMPUTE_SCAVENGES: 'threads' })).toThrow(/scavenges/);
  });

  it('main-thread: no helper thread works on a young collection; parallel: helpers do', () => {
    const alone = helperTimes('main-thread');
    expect(alone.length).toBe(20);
    expect(alone.every((ms) => ms === 0)).toBe(true);
    const helped = helperTimes('parallel');
    expect(helped.length).toBe(20);
    expect(helped.some((ms) => ms > 0)).toBe(true);
  }, 60_000);
});
