import { describe, expect, it } from 'vitest';
import { HostRing, parseDbTargets } from './db-hosts.ts';

describe('parseDbTargets', () => {
  it('leaves a one-host URL, a socket URL and a URL with parameters to node-postgres', () => {
    expect(parseDbTargets('postgres://u:p@db:5432/ledger')).toBeUndefined();
    expect(parseDbTargets('postgres:///ledger?host=/var/run/postgresql')).toBeUndefined();
    expect(parseDbTargets('postgresql://u@db/ledger?sslmode=require')).toBeUndefined();
  });

  it('reads several hosts in order, with the default port, and read-write as the default', () => {
    const t = parseDbTargets('postgres://u:p%40ss@db-a:5433,db-b,[::1]:5434/ledger?sslmode=require')!;
    expect(t.hosts).toEqual([
      { host: 'db-a', port: 5433 },
      { host: 'db-b', port: 5432 },
      { host: '[::1]', port: 5434 },
    ]);
    expect(t.sessionAttrs).toBe('read-write');
    expect(t.urlFor(t.hosts[1]!)).toBe('postgres://u:p%40ss@db-b:5432/ledger?sslmode=require');
  });

  it('takes target_session_attrs off the per-host URL, also for one host, and refuses an unknown value', () => {
    const t = parseDbTargets('postgres://u@db:5432/ledger?target_session_attrs=primary&application_name=bc')!;
    expect(t.sessionAttrs).toBe('primary');
    expect(t.urlFor(t.hosts[0]!)).toBe('postgres://u@db:5432/ledger?application_name=bc');
    expect(parseDbTargets('postgres://u@a,b/ledger?target_session_attrs=any')!.sessionAttrs).toBe('any');
    expect(() => parseDbTargets('postgres://u@a,b/ledger?target_session_attrs=standby')).toThrow(/must be one of read-write, primary, any/);
    expect(() => parseDbTargets('postgres://u@a,,b/ledger')).toThrow(/malformed host/);
    expect(() => parseDbTargets('postgres://u@a:99999,b/ledger')).toThrow(/no valid port/);
  });
});

describe('HostRing', () => {
  it('keeps the host that works, moves past a failed one once, and comes round', () => {
    const a = { host: 'a', port: 1 };
    const b = { host: 'b', port: 1 };
    const ring = new HostRing([a, b]);
    expect(ring.current).toBe(a);
    ring.failed(a);
    expect(ring.current).toBe(b);
    ring.failed(a); // a second connection that also found a down: the ring has moved already
    expect(ring.current).toBe(b);
    ring.failed(b);
    expect(ring.current).toBe(a);
  });
});

describe('DATABASE_URL in the configuration', () => {
  it('takes one host or several, and says what is wrong with a bad list', async () => {
    const { loadConfig } = await import('../config.ts');
    expect(loadConfig({ DATABASE_URL: 'postgres://u:p@db:5432/ledger' }).databaseUrl).toBe('postgres://u:p@db:5432/ledger');
    const several = 'postgres://u:p@db-a:5432,db-b:5432/ledger?target_session_attrs=read-write';
    expect(loadConfig({ DATABASE_URL: several }).databaseUrl).toBe(several);
    expect(() => loadConfig({ DATABASE_URL: 'postgres://u@a,,b/ledger' })).toThrow(/malformed host/);
    expect(() => loadConfig({ DATABASE_URL: 'not a url' })).toThrow(/Invalid URL/);
  });
});
