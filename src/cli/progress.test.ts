import { describe, expect, it } from 'vitest';
import { createProgress, openingStep, redactedUrl } from './progress.ts';

function recorder(o: { flag?: boolean; isTTY?: boolean }) {
  const out: string[] = [];
  let t = 1000;
  const p = createProgress({ ...o, write: (s) => out.push(s), now: () => t });
  return { p, out, advance: (ms: number) => (t += ms) };
}

describe('createProgress', () => {
  it('says nothing unless stderr is a terminal or --progress is given', () => {
    const r = recorder({ flag: false, isTTY: false });
    r.p.step('starting');
    r.p.done();
    expect(r.out).toEqual([]);
  });

  it.each([
    ['--progress', { flag: true }],
    ['a terminal', { isTTY: true }],
  ])('with %s: one line per step with the seconds since the start, then done', (_n, o) => {
    const r = recorder(o);
    r.p.step('starting the embedded PostgreSQL');
    r.advance(3140);
    r.p.step('reading the reservations');
    r.advance(60);
    r.p.done();
    expect(r.out).toEqual(['[  0.0s] starting the embedded PostgreSQL\n', '[  3.1s] reading the reservations\n', '[  3.2s] done\n']);
  });

  it('no step, no done line', () => {
    const r = recorder({ flag: true });
    r.p.done();
    expect(r.out).toEqual([]);
  });
});

describe('openingStep', () => {
  it('names the embedded data directory, or the URL without its password', () => {
    expect(openingStep({ dataDir: '/data' })).toBe('starting the embedded PostgreSQL (data in /data/postgres)');
    expect(openingStep({ dataDir: '/d', databaseUrl: 'postgres://bc:s3cret@db:5432/bc' })).toBe('connecting to the database (postgres://bc:***@db:5432/bc)');
    expect(redactedUrl('not a url')).toBe('DATABASE_URL');
  });
});
