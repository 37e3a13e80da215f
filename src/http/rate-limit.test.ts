// Per-source limits on a real listener: 429 RATE_LIMITED with Retry-After before the app runs; exempt requests pass.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listen, type RunningServer } from './server.ts';
import { isProbe, limitBySource, sourceKey } from './rate-limit.ts';
import { request } from '../../test/support/http.ts';

let server: RunningServer;
let clock = 0;
let reached = 0;
const limited: string[] = [];

beforeAll(async () => {
  const app = limitBySource(
    (_req, res) => {
      reached++;
      res.end('{}');
    },
    { perSecond: 1, burst: 2, exempt: isProbe, onLimited: (s) => limited.push(s), now: () => clock },
  );
  server = await listen(app, { host: '127.0.0.1', port: 0 });
});
afterAll(async () => server?.close(0));

describe('limitBySource', () => {
  it('the burst passes, the next is 429 with Retry-After and never reaches the app; time earns one back', async () => {
    const post = () => request(`${server.url}/api/compute/capacity/summary`, { method: 'POST', token: 'garbage', body: '{}' });
    expect((await post()).status).toBe(200);
    expect((await post()).status).toBe(200);
    const r = await post();
    expect(r.status).toBe(429);
    expect(r.json).toEqual({ error: { code: 'RATE_LIMITED', message: 'too many requests from 127.0.0.1; retry later' } });
    expect(r.headers['retry-after']).toBe('1');
    expect(reached).toBe(2);
    expect(limited).toEqual(['127.0.0.1']);
    // Probes are exempt.
    expect((await request(`${server.url}/healthz`)).status).toBe(200);
    clock += 1000;
    expect((await post()).status).toBe(200);
    expect((await post()).status).toBe(429);
  });

  it('sourceKey: IPv4-mapped addresses are the IPv4 source', () => {
    expect(sourceKey('::ffff:10.1.2.3')).toBe('10.1.2.3');
    expect(sourceKey('fd00::1')).toBe('fd00::1');
    expect(sourceKey(undefined)).toBe('unknown');
  });
});
