// LISTs in pages: every page is asked for with the limit and the previous page's token, the list is complete only
// once a page without a token arrived, a 410 on a continued page restarts it from the first page (not from the fresh
// token the 410 carries: that would mix snapshots), and a failed page fails the list. Against a function fake and,
// through the controller's own client, a paging HTTP server.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KubeClient, TimedKubeConfig } from './client.ts';
import { listAllPages, ListRestartsExhaustedError, type ListPage } from './paging.ts';

const gone = () => Object.assign(new Error('continue token expired'), { code: 410 });

/** `n` numbered items served `limit` at a time; `expireAt` lists the calls (1-based) answered 410. */
function fakeList(n: number, expireAt: number[] = []) {
  const asked: { limit: number; continue?: string }[] = [];
  const fetch = async (p: { limit: number; continue?: string }): Promise<ListPage<number>> => {
    asked.push(p);
    if (expireAt.includes(asked.length)) throw gone();
    const from = p.continue ? Number(p.continue.split(':')[1]) : 0;
    const to = Math.min(n, from + p.limit);
    const items = Array.from({ length: to - from }, (_, i) => from + i);
    return { items, metadata: { resourceVersion: `rv${asked.length}`, ...(to < n ? { continue: `tok:${to}` } : {}) } };
  };
  return { fetch, asked };
}

describe('listAllPages', () => {
  it('asks page after page with the limit and the last token until a page has none; every item once, mapped', async () => {
    const f = fakeList(1234);
    const r = await listAllPages(f.fetch, (x) => x * 2, { limit: 500 });
    expect(r.items).toEqual(Array.from({ length: 1234 }, (_, i) => i * 2));
    expect(r.pages).toBe(3);
    expect(f.asked).toEqual([{ limit: 500 }, { limit: 500, continue: 'tok:500' }, { limit: 500, continue: 'tok:1000' }]);
    // The first page's snapshot is the list's.
    expect(r.metadata?.resourceVersion).toBe('rv1');
  });

  it('a 410 on a continued page restarts the list from its first page; nothing of the abandoned pass is kept', async () => {
    const f = fakeList(1200, [2]);
    const r = await listAllPages(f.fetch, (x) => x, { limit: 500 });
    expect(r.items).toEqual(Array.from({ length: 1200 }, (_, i) => i));
    expect(r.restarts).toBe(1);
    expect(f.asked[2]).toEqual({ limit: 500 });
    expect(r.metadata?.resourceVersion).toBe('rv3');
  });

  it('gives up after maxRestarts expired tokens, and a failed page fails the list (never a partial one)', async () => {
    await expect(listAllPages(fakeList(1200, [2, 4, 6]).fetch, (x) => x, { limit: 500, maxRestarts: 2 })).rejects.toBeInstanceOf(ListRestartsExhaustedError);
    const f = fakeList(1200);
    let calls = 0;
    const failing = (p: { limit: number; continue?: string }) => (++calls === 2 ? Promise.reject(new Error('etcd is unhappy')) : f.fetch(p));
    await expect(listAllPages(failing, (x) => x, { limit: 500 })).rejects.toThrow('etcd is unhappy');
    // A 410 on the first page is no expired token: it is the list's error.
    await expect(listAllPages(() => Promise.reject(gone()), (x) => x)).rejects.toMatchObject({ code: 410 });
  });
});

describe('KubeClient lists page through a real HTTP exchange', () => {
  let server: http.Server;
  let url: string;
  const seen: URLSearchParams[] = [];
  let expireNextContinue = true;
  const nodes = Array.from({ length: 1203 }, (_, i) => ({ metadata: { name: `n${String(i).padStart(5, '0')}`, resourceVersion: '7' } }));

  beforeAll(async () => {
    server = http.createServer((req, res) => {
      const q = new URL(req.url ?? '/', 'http://x').searchParams;
      seen.push(q);
      res.setHeader('content-type', 'application/json');
      const cont = q.get('continue');
      if (cont && expireNextContinue) {
        expireNextContinue = false;
        res.statusCode = 410;
        res.end(JSON.stringify({ kind: 'Status', apiVersion: 'v1', status: 'Failure', reason: 'Expired', code: 410, metadata: { continue: 'fresh' } }));
        return;
      }
      const from = cont ? Number(cont) : 0;
      const limit = Number(q.get('limit') ?? nodes.length);
      const to = Math.min(nodes.length, from + limit);
      res.end(JSON.stringify({ kind: 'NodeList', apiVersion: 'v1', metadata: { resourceVersion: '7', ...(to < nodes.length ? { continue: String(to) } : {}) }, items: nodes.slice(from, to) }));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(() => new Promise((r) => server.close(r)));

  it('listNodes sends limit=500 and continue, restarts on the 410, and returns every node once', async () => {
    const kc = new TimedKubeConfig(5000);
    kc.loadFromOptions({
      clusters: [{ name: 'c', server: url, skipTLSVerify: true }],
      users: [{ name: 'u', token: 't' }],
      contexts: [{ name: 'x', cluster: 'c', user: 'u' }],
      currentContext: 'x',
    });
    const list = await new KubeClient(kc).listNodes();
    expect(list.items.map((n) => n.metadata.name)).toEqual(nodes.map((n) => n.metadata.name));
    expect(seen.every((q) => q.get('limit') === '500')).toBe(true);
    // first page, 410 on the second, then the list again from the first: 1 + 1 + 3 requests; never the 410's token.
    expect(seen.map((q) => q.get('continue'))).toEqual([null, '500', null, '500', '1000']);
  });
});
