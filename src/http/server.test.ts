import http from 'node:http';
import { describe, expect, it } from 'vitest';
import { listen } from './server.ts';

function get(url: string, agent?: http.Agent): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    http
      .get(url, { ...(agent ? { agent } : {}) }, (res) => {
        let body = '';
        res.on('data', (c: Buffer) => (body += c.toString()));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      })
      .on('error', reject);
  });
}

describe('listen and graceful close', () => {
  it('listens on loopback with a picked port', async () => {
    const s = await listen((_req, res) => res.end('ok'), { host: '127.0.0.1', port: 0 });
    expect(s.url).toBe(`http://127.0.0.1:${s.port}`);
    expect(await get(s.url)).toEqual({ status: 200, body: 'ok' });
    await s.close();
  });

  it('close() lets a request in flight finish, closes idle keep-alive connections, and refuses new ones', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const s = await listen(
      (req, res) => {
        if (req.url === '/slow') void gate.then(() => res.end('slow done'));
        else res.end('fast');
      },
      { host: '127.0.0.1', port: 0 },
    );
    const agent = new http.Agent({ keepAlive: true });
    expect((await get(`${s.url}/fast`, agent)).body).toBe('fast'); // leaves an idle keep-alive connection
    const slow = get(`${s.url}/slow`);
    await new Promise((r) => setTimeout(r, 50));
    let closed = false;
    const closing = s.close(5000).then(() => (closed = true));
    await new Promise((r) => setTimeout(r, 50));
    expect(closed).toBe(false); // waits for the request in flight
    await expect(get(`${s.url}/fast`)).rejects.toThrow(/ECONNREFUSED/);
    release();
    expect(await slow).toEqual({ status: 200, body: 'slow done' });
    await closing;
    expect(closed).toBe(true);
    agent.destroy();
  });

  it('after the drain time, connections still open are closed', async () => {
    const s = await listen(() => undefined /* never answers */, { host: '127.0.0.1', port: 0 });
    const hanging = get(`${s.url}/`).catch((e: Error) => e);
    await new Promise((r) => setTimeout(r, 50));
    const started = performance.now();
    await s.close(200);
    expect(performance.now() - started).toBeLessThan(2000);
    expect(await hanging).toBeInstanceOf(Error);
  });
});
