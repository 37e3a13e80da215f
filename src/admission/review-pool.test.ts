// Large AdmissionReviews decoded in worker threads (ADR 0047): the same answers as on the event loop, and a pool that
// refuses at once when full and gives up on a review at its deadline.
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { silentLogger } from '../log.ts';
import { createPodAdmissionRouter, MAX_REVIEW_BYTES, type AdmissionLookups, type PodAdmissionDeps } from './pods.ts';
import { decodeReview } from './review.ts';
import { REVIEW_WORKER_ABOVE_BYTES, REVIEW_WORKER_NICE, ReviewDecoderPool, ReviewPoolBusy, ReviewPoolTimeout } from './review-pool.ts';

/** A worker that takes reviews and never answers. */
const STALLING = new URL(`data:text/javascript,${encodeURIComponent("import { parentPort } from 'node:worker_threads'; parentPort.on('message', () => {});")}`);

let looked = 0;
const lookups: AdmissionLookups = {
  reservation: async (namespace, name) => (looked++, namespace === 'team-a' && name === 'train' ? { namespace, name, uid: 'u-train', tenant: 'acme', deleting: false } : undefined),
  reservationsIn: async () => (looked++, []),
  bookings: {
    byReservationUid: async (tenant, uid) => (tenant === 'acme' && uid === 'u-train' ? { id: `rsv_01k2${'a'.repeat(22)}`, tenantId: 'acme', idempotencyKey: 'u-train', state: 'confirmed', ended: false, start: 0, end: 3_600_000 } : undefined),
    byId: async () => undefined,
  },
};

/** A review of a pod labelled for Reservation `train`, padded with environment variables to about `bytes`. */
function bigReview(bytes: number, over: Record<string, unknown> = {}) {
  const env: { name: string; value: string }[] = [];
  const pod = {
    metadata: { generateName: 'job-', labels: { 'bettercompute.io/reservation': 'train', app: 'x' }, annotations: { note: 'y' } },
    spec: { containers: [{ name: 'main', image: 'busybox', env, resources: { limits: { 'bettercompute.io/gpu': '2', cpu: '1' } } }], restartPolicy: 'Never' },
  };
  const review = { apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', request: { uid: 'big-1', kind: { group: '', version: 'v1', kind: 'Pod' }, operation: 'CREATE', namespace: 'team-a', object: pod, ...over } };
  const one = { name: 'VAR_000000', value: 'v'.repeat(100) };
  const n = Math.floor((bytes - JSON.stringify(review).length) / (JSON.stringify(one).length + 1));
  for (let i = 0; i < n; i++) env.push({ name: `VAR_${String(i).padStart(6, '0')}`, value: 'v'.repeat(100) });
  return JSON.stringify(review);
}

const servers: http.Server[] = [];
const pools: ReviewDecoderPool[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => new Promise<void>((r) => (s.closeAllConnections(), s.close(() => r())))));
});
afterAll(async () => {
  await Promise.all(pools.map((p) => p.close()));
});

const newPool = (o: ConstructorParameters<typeof ReviewDecoderPool>[0] = {}) => {
  const p = new ReviewDecoderPool(o);
  pools.push(p);
  return p;
};

/** The admission router on loopback; its URL. */
async function serve(o: Partial<PodAdmissionDeps>): Promise<string> {
  const app = express();
  app.use('/admission', createPodAdmissionRouter({ ...lookups, log: silentLogger, ...o }));
  const s = http.createServer(app);
  servers.push(s);
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  return `http://127.0.0.1:${(s.address() as AddressInfo).port}/admission/pods`;
}

async function post(url: string, body: string) {
  const r = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
  return { status: r.status, body: (await r.json()) as Record<string, unknown> };
}

describe('decodeReview in a worker', () => {
  it('gives what it gives on the event loop, body by body', async () => {
    const pool = newPool();
    const bodies = [
      bigReview(4_000),
      bigReview(4_000, { operation: 'UPDATE' }),
      bigReview(4_000, { object: { spec: { containers: 'nope' } } }),
      JSON.stringify({ apiVersion: 'admission.k8s.io/v1beta1', kind: 'AdmissionReview', request: { uid: 'x', operation: 'CREATE' } }),
      '{not json',
      `\uFEFF${bigReview(1_000)}`,
      '',
      '"a string"',
    ];
    for (const body of bodies) {
      const bytes = Buffer.from(body);
      expect(await pool.decode(Buffer.from(bytes))).toEqual(decodeReview(bytes));
    }
    expect(decodeReview(Buffer.from('{not json'))).toMatchObject({ kind: 'malformed' });
    expect(decodeReview(Buffer.from(bigReview(4_000)))).toMatchObject({ kind: 'pod', uid: 'big-1' });
  });

  it.runIf(process.platform === 'linux')('the worker thread runs at a lower priority than the event loop (Linux: its own nice value)', async () => {
    /** The nice value of each thread of this process (field 19 of /proc/<pid>/task/<tid>/stat). */
    const nices = () => fs.readdirSync('/proc/self/task').map((tid) => Number(fs.readFileSync(`/proc/self/task/${tid}/stat`, 'utf8').split(') ')[1]!.split(' ')[16]));
    const lowered = () => nices().filter((n) => n === REVIEW_WORKER_NICE).length;
    const before = lowered();
    const pool = new ReviewDecoderPool();
    await pool.decode(Buffer.from('{}'));
    expect(lowered()).toBe(before + 1);
    expect(fs.readFileSync('/proc/thread-self/stat', 'utf8').split(') ')[1]!.split(' ')[16]).toBe('0');
    await pool.close();
  });

  it('the pod comes back cut down to what admission reads', async () => {
    const d = await newPool().decode(Buffer.from(bigReview(300_000)));
    expect(d).toEqual({
      kind: 'pod',
      uid: 'big-1',
      namespace: 'team-a',
      pod: {
        metadata: { generateName: 'job-', labels: { 'bettercompute.io/reservation': 'train' } },
        spec: { containers: [{ name: 'main', resources: { limits: { 'bettercompute.io/gpu': '2', cpu: '1' } } }] },
      },
    });
  });
});

describe('the admission router with large reviews', () => {
  it('a ~1.9 MiB review is decoded in the pool and admitted exactly as on the event loop', async () => {
    let decoded = 0;
    const pool = newPool();
    const counting = Object.assign(Object.create(pool) as ReviewDecoderPool, { decode: (b: Uint8Array) => (decoded++, pool.decode(b)) });
    const inPool = await serve({ reviewPool: counting });
    const onLoop = await serve({ workerAboveBytes: Infinity });
    const body = bigReview(1.9 * 1024 * 1024);
    expect(body.length).toBeGreaterThan(REVIEW_WORKER_ABOVE_BYTES);
    expect(body.length).toBeLessThan(MAX_REVIEW_BYTES);
    const a = await post(inPool, body);
    expect(decoded).toBe(1);
    const b = await post(onLoop, body);
    expect(decoded).toBe(1);
    expect(a).toEqual(b);
    expect(a.status).toBe(200);
    const response = a.body.response as { allowed: boolean; patch: string };
    expect(response.allowed).toBe(true);
    const ops = JSON.parse(Buffer.from(response.patch, 'base64').toString('utf8')) as unknown[];
    expect(ops).toEqual([
      { op: 'replace', path: '/spec/containers/0/resources/limits', value: { [`reservations.bettercompute.io/rsv-01k2${'a'.repeat(22)}`]: '2', cpu: '1' } },
      { op: 'add', path: '/spec/schedulerName', value: 'better-compute-scheduler' },
    ]);
  });

  it('a malformed large body gets the same 400 as on the event loop; no lookup runs', async () => {
    const inPool = await serve({});
    const onLoop = await serve({ workerAboveBytes: Infinity });
    const body = `${bigReview(1024 * 1024).slice(0, -40)},}`;
    looked = 0;
    const a = await post(inPool, body);
    expect(a.status).toBe(400);
    expect(a.body).toMatchObject({ error: { code: 'INVALID_ARGUMENT' } });
    expect(a).toEqual(await post(onLoop, body));
    const notPod = bigReview(600_000, { object: { metadata: { pad: 'x'.repeat(600_000) }, spec: { containers: 'nope' } } });
    const c = await post(inPool, notPod);
    expect(c.body.response).toMatchObject({ uid: 'big-1', allowed: false, status: { code: 400 } });
    expect(c).toEqual(await post(onLoop, notPod));
    expect(looked).toBe(0);
  });

  it('a review not decoded by the deadline: 503, and the worker on it is replaced', async () => {
    const pool = newPool({ script: STALLING, timeoutMs: 200 });
    const url = await serve({ reviewPool: pool });
    looked = 0;
    const r = await post(url, bigReview(400_000));
    expect(r.status).toBe(503);
    expect(r.body).toMatchObject({ error: { code: 'UNAVAILABLE' } });
    expect(pool.replaced).toBe(1);
    expect(looked).toBe(0);
    // Small reviews never wait for the pool.
    expect((await post(url, bigReview(4_000))).status).toBe(200);
  });

  it('the pool full: a large body is refused with 503 from its headers, before it is read', async () => {
    const pool = newPool({ script: STALLING, workers: 1, queue: 0, timeoutMs: 60_000 });
    const url = await serve({ reviewPool: pool });
    const first = pool.decode(Buffer.from(bigReview(300_000))).catch((e: unknown) => e);
    expect(pool.full()).toBe(true);
    // Headers only: a body that is never sent cannot have been read.
    const r = await new Promise<{ status: number; body: string; connection: string | undefined }>((resolve, reject) => {
      const req = http.request(url, { method: 'POST', agent: false, headers: { 'content-type': 'application/json', 'content-length': String(1024 * 1024) } }, (res) => {
        let body = '';
        res.on('data', (p: Buffer) => (body += p.toString('utf8')));
        res.on('end', () => (resolve({ status: res.statusCode ?? 0, body, connection: res.headers.connection }), req.destroy()));
      });
      req.on('error', reject);
      req.flushHeaders();
    });
    expect(r.status).toBe(503);
    expect(JSON.parse(r.body)).toMatchObject({ error: { code: 'UNAVAILABLE' } });
    expect(r.connection).toBe('close');
    // Small reviews are still answered.
    expect((await post(url, bigReview(4_000))).status).toBe(200);
    await pool.close();
    expect(await first).toBeInstanceOf(Error);
  });
});

describe('ReviewDecoderPool', () => {
  it('refuses at once beyond its workers and queue; closing refuses what waits', async () => {
    const pool = newPool({ script: STALLING, workers: 1, queue: 1, timeoutMs: 60_000 });
    const running = pool.decode(Buffer.from('{}')).catch((e: unknown) => e);
    expect(pool.full()).toBe(false);
    const queued = pool.decode(Buffer.from('{}')).catch((e: unknown) => e);
    expect(pool.full()).toBe(true);
    await expect(pool.decode(Buffer.from('{}'))).rejects.toBeInstanceOf(ReviewPoolBusy);
    await pool.close();
    expect(await running).toBeInstanceOf(Error);
    expect(await queued).toBeInstanceOf(Error);
    await expect(pool.decode(Buffer.from('{}'))).rejects.toThrow(/closed/);
  });

  it('a worker past the deadline is terminated, and the next review gets a new one', async () => {
    const pool = newPool({ script: STALLING, timeoutMs: 100 });
    await expect(pool.decode(Buffer.from('{}'))).rejects.toBeInstanceOf(ReviewPoolTimeout);
    await expect(pool.decode(Buffer.from('{}'))).rejects.toBeInstanceOf(ReviewPoolTimeout);
    expect(pool.replaced).toBe(2);
  });
});
