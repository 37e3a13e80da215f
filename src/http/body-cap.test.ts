// Bodies capped before anything else on the controller's express listeners (issue 35, item 2): a declared body over
// the cap is refused from its headers, before the token is reviewed and before a byte of it is parsed.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import { afterEach, describe, expect, it } from 'vitest';
import { createPodAdmissionRouter, MAX_REVIEW_BYTES, type PodAdmissionDeps } from '../admission/pods.ts';
import { AGENT_API_MAX_BODY_BYTES, createAgentApiRouter } from '../agentapi/router.ts';
import type { Db } from '../db/pool.ts';
import type { Clock } from '../db/clock.ts';
import { silentLogger } from '../log.ts';
import { CAPACITY_PATHS, createApp, MAX_BODY_BYTES } from '../api/app.ts';
import type { Authorizer } from '../api/authz.ts';
import type { CapacityService } from '../api/capacity-service.ts';
import { declaresBodyOver } from './body-cap.ts';

const servers: http.Server[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => new Promise<void>((r) => s.close(() => r()))));
});

async function serve(handler: http.RequestListener): Promise<string> {
  const s = http.createServer(handler);
  servers.push(s);
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  return `http://127.0.0.1:${(s.address() as AddressInfo).port}`;
}

const post = async (url: string, body: string, headers: Record<string, string> = {}) => {
  const r = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body });
  return { status: r.status, body: (await r.json()) as { error?: { code: string; message: string } } };
};

describe('declaresBodyOver', () => {
  it('reads Content-Length only', () => {
    expect(declaresBodyOver({}, 10)).toBe(false);
    expect(declaresBodyOver({ 'content-length': '10' }, 10)).toBe(false);
    expect(declaresBodyOver({ 'content-length': '11' }, 10)).toBe(true);
    expect(declaresBodyOver({ 'content-length': '1e3' }, 10_000)).toBe(true);
  });
});

/** The answer to a POST whose body is never finished: `start` is sent (or nothing), then the request is held open. */
function answerBeforeTheEnd(url: string, headers: Record<string, string>, start?: Buffer): Promise<{ status: number; body: { error?: { code: string } } }> {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method: 'POST', agent: false, headers: { 'content-type': 'application/json', ...headers } }, (res) => {
      const parts: Buffer[] = [];
      res.on('data', (p: Buffer) => parts.push(p));
      res.on('end', () => {
        resolve({ status: res.statusCode ?? 0, body: JSON.parse(Buffer.concat(parts).toString('utf8')) as { error?: { code: string } } });
        req.destroy();
      });
    });
    req.on('error', reject);
    req.setTimeout(20_000, () => req.destroy(new Error('no answer before the body ended')));
    if (start) req.write(start);
    else req.flushHeaders();
  });
}

describe('the admission endpoint (9443, /admission/pods): a 3 MiB body is refused before it is parsed or read (issue 35)', () => {
  let looked = 0;
  const deps: PodAdmissionDeps = {
    log: silentLogger,
    reservation: async () => void looked++,
    reservationsIn: async () => (looked++, []),
    bookings: { byReservationUid: async () => void looked++, byId: async () => void looked++ },
  };
  const url = async () => {
    const app = express();
    app.use('/admission', createPodAdmissionRouter(deps));
    return `${await serve(app)}/admission/pods`;
  };

  it('a 3 MiB AdmissionReview is refused with 413 before it is parsed: no lookup runs', async () => {
    looked = 0;
    const pod = { metadata: { name: 'p', labels: { 'bettercompute.io/reservation': 'train' } }, spec: { containers: [{ name: 'c', resources: { limits: { 'bettercompute.io/gpu': '1' } } }] } };
    const review = { apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', request: { uid: 'u', operation: 'CREATE', namespace: 'team-a', object: pod } };
    const text = JSON.stringify(review);
    const big = text.replace('"name":"p"', `"name":"p","pad":"${'x'.repeat(3 * 1024 * 1024 - text.length - 9)}"`);
    expect(big.length).toBeGreaterThan(MAX_REVIEW_BYTES);
    expect(big.length).toBeLessThanOrEqual(3 * 1024 * 1024);
    const r = await post(await url(), big);
    expect(r.status).toBe(413);
    expect(r.body.error?.code).toBe('PAYLOAD_TOO_LARGE');
    expect(looked).toBe(0);
  });

  it('declared (Content-Length: 3 MiB): 413 from the headers, before a byte of the body is sent', async () => {
    looked = 0;
    const r = await answerBeforeTheEnd(await url(), { 'content-length': String(3 * 1024 * 1024) });
    expect(r.status).toBe(413);
    expect(r.body.error?.code).toBe('PAYLOAD_TOO_LARGE');
    expect(looked).toBe(0);
  });

  it('chunked (no Content-Length): 413 once the cap is passed, while the rest of the body is still to come', async () => {
    looked = 0;
    // The review's start, then padding past the cap; the body never ends, so no answer could come from a parse.
    const start = Buffer.concat([Buffer.from('{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","pad":"'), Buffer.alloc(MAX_REVIEW_BYTES + 64 * 1024, 'x')]);
    const r = await answerBeforeTheEnd(await url(), { 'transfer-encoding': 'chunked' }, start);
    expect(r.status).toBe(413);
    expect(r.body.error?.code).toBe('PAYLOAD_TOO_LARGE');
    expect(looked).toBe(0);
  });
});

describe('the agent API (9443, /agent/v1)', () => {
  it('a declared body over its cap is refused before the token is reviewed', async () => {
    let reviews = 0;
    const app = express();
    app.use(
      '/agent/v1',
      createAgentApiRouter({
        db: {} as Db,
        clock: {} as Clock,
        log: silentLogger,
        agentUsername: 'system:serviceaccount:ns:better-compute-agent',
        authenticate: async () => {
          reviews++;
          throw new Error('not reached');
        },
      }),
    );
    const base = await serve(app);
    const r = await post(`${base}/agent/v1/nodes/n1/admissions/00000000-0000-0000-0000-000000000000/done`, 'x'.repeat(AGENT_API_MAX_BODY_BYTES + 1), { authorization: 'Bearer t' });
    expect(r.status).toBe(413);
    expect(reviews).toBe(0);
  });
});

describe('the capacity API (8080)', () => {
  it('a declared body over the cap is INVALID_INPUT before the token is reviewed', async () => {
    let reviews = 0;
    const authorizer: Authorizer = {
      authenticate: async () => {
        reviews++;
        return { subject: 'u', groups: [] } as never;
      },
      authorizeCapacityRead: async () => undefined,
    };
    const base = await serve(createApp({ service: {} as CapacityService, authorizer, log: silentLogger, ready: async () => undefined }));
    const r = await post(`${base}${CAPACITY_PATHS.summary}`, JSON.stringify({ tenantId: 'acme', pad: 'x'.repeat(MAX_BODY_BYTES) }), { authorization: 'Bearer t' });
    expect(r.status).toBe(400);
    expect(r.body.error?.code).toBe('INVALID_INPUT');
    expect(r.body.error?.message).toMatch(/too large/);
    expect(reviews).toBe(0);
  });
});
