// A client generated from the served OpenAPI document by @hey-api/openapi-ts (its fetch client and SDK), generated here
// into a temporary directory at test time, calls the capacity API over real HTTP on a real database with a static
// bearer token: summary and preview answer what the ledger holds, every answer parses with the published answer schema
// (strict: a field the server adds and the document lacks fails), and errors come back as the document's error bodies.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createClient as generateClient } from '@hey-api/openapi-ts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { z } from 'zod';
import * as answers from '../../src/api/answer-schemas.ts';
import { OPENAPI_PATH } from '../../src/api/openapi.ts';
import { Ledger } from '../../src/db/ledger.ts';
import { startTestApi, TOKENS, type TestApi } from '../support/api.ts';
import { makeNode, makePool, reservation } from '../support/builders.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';

/** What the test uses of the generated code: the SDK's functions and its fetch client's factory. */
type Call = (o: { client: unknown; body: Record<string, unknown> }) => Promise<{ data?: unknown; error?: unknown; response: Response }>;
interface Sdk {
  capacitySummary: Call;
  capacityPreview: Call;
  capacityByPool: Call;
  capacityTimeline: Call;
  capacityByDomain: Call;
  capacityUsage: Call;
  capacityQuota: Call;
}
interface ClientModule {
  createClient(config: unknown): unknown;
  createConfig(o: { baseUrl: string; auth?: string }): unknown;
}

let t: TestDatabase;
let api: TestApi;
let dir: string;
let sdk: Sdk;
let clientModule: ClientModule;
let POOL: string;
let OFFERED: string;
let bookedNode: string;

const clientFor = (token?: string) => clientModule.createClient(clientModule.createConfig({ baseUrl: api.url, ...(token ? { auth: token } : {}) }));

beforeAll(async () => {
  t = await createTestDatabase();
  POOL = await makePool('oa-main').owner('acme').create(t.db);
  for (const id of ['oa-n1', 'oa-n2']) await makeNode(id).gpus(8).domain('zone-a').create(t.db, POOL);
  OFFERED = await makePool('oa-offered').owner('ops').offer('acme', { gpu: 4 }).create(t.db);
  await makeNode('oa-off-n1').gpus(4).create(t.db, OFFERED);
  api = await startTestApi(t.db);
  const booked = await new Ledger(t.db).reserve(reservation(POOL, { devices: [{ class: 'gpu', count: 6 }], duration: 7200 }), api.clock.now());
  if (!booked.ok) throw new Error('the fixture booking did not fit');
  bookedNode = booked.reservation.allocations[0]!.nodeId;

  // The document as served (no token), turned into a client.
  const served = await fetch(`${api.url}${OPENAPI_PATH}`);
  if (served.status !== 200) throw new Error(`GET ${OPENAPI_PATH}: ${served.status}`);
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'capacity-client-'));
  await generateClient({
    input: (await served.json()) as Record<string, unknown>,
    output: { path: dir },
    plugins: ['@hey-api/client-fetch', '@hey-api/typescript', '@hey-api/sdk'],
    logs: { level: 'silent' },
  });
  sdk = (await import(path.join(dir, 'sdk.gen.ts'))) as Sdk;
  clientModule = (await import(path.join(dir, 'client', 'index.ts'))) as ClientModule;
});
afterAll(async () => {
  await api?.close();
  await t?.drop();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

/** The call's 200 answer, parsed with its published schema. */
async function ok<S extends z.ZodType>(call: Promise<{ data?: unknown; error?: unknown; response: Response }>, schema: S): Promise<z.output<S>> {
  const res = await call;
  expect(res.error, JSON.stringify(res.error)).toBeUndefined();
  expect(res.response.status).toBe(200);
  return schema.parse(res.data);
}

describe('a client generated from the OpenAPI document', () => {
  it('generated the SDK functions of every capacity method', () => {
    const files = fs.readdirSync(dir);
    expect(files).toEqual(expect.arrayContaining(['sdk.gen.ts', 'types.gen.ts', 'client']));
    for (const f of ['capacitySummary', 'capacityPreview', 'capacityByPool', 'capacityTimeline', 'capacityByDomain', 'capacityUsage', 'capacityQuota']) {
      expect(typeof (sdk as unknown as Record<string, unknown>)[f]).toBe('function');
    }
    // The generated types carry the schemas' constraints' shapes (an enum becomes a union).
    expect(fs.readFileSync(path.join(dir, 'types.gen.ts'), 'utf8')).toMatch(/class: 'gpu' \| 'gpu\.mig' \| 'gpu\.slot' \| 'nic\.vf' \| 'disk' \| 'node'/);
  });

  it('summary: the pools acme owns and is offered, with the booking in the gpu row', async () => {
    const s = await ok(sdk.capacitySummary({ client: clientFor(TOKENS.acme), body: { tenantId: 'acme' } }), answers.SummaryAnswer);
    expect(s.tenantId).toBe('acme');
    expect(s.pools.map((p) => p.poolId).sort()).toEqual([POOL, OFFERED].sort());
    const gpu = s.pools.find((p) => p.poolId === POOL)!.capacity.find((r) => r.resource === 'gpu')!;
    expect(gpu).toMatchObject({ total: 16, allocatable: 16, allocated: 6 });
    expect(s.byGpuModel.H100).toMatchObject({ total: 20, allocated: 6 });
  });

  it('preview: 8 GPUs fit on the node without the booking; 12 on one node do not', async () => {
    const client = clientFor(TOKENS.acme);
    const body = { tenantId: 'acme', poolId: POOL, devices: [{ class: 'gpu', count: 8 }], duration: '1h', idempotencyKey: 'oa-preview-1' };
    const fits = await ok(sdk.capacityPreview({ client, body }), answers.PreviewAnswer);
    expect(fits.fits).toBe(true);
    expect(fits.candidates.length).toBeGreaterThan(0);
    expect(fits.candidates[0]!.atoms).toHaveLength(8);
    expect(fits.candidates.map((c) => c.nodeId)).toEqual([['oa-n1', 'oa-n2'].find((n) => n !== bookedNode)]);
    const tooBig = await ok(sdk.capacityPreview({ client, body: { ...body, devices: [{ class: 'gpu', count: 12 }] } }), answers.PreviewAnswer);
    expect(tooBig).toMatchObject({ fits: false, candidates: [] });
    expect(tooBig.reason).toEqual(expect.any(String));
  });

  it('every other method answers what its published schema says', async () => {
    const client = clientFor(TOKENS.acme);
    const pool = { tenantId: 'acme', poolId: POOL };
    expect((await ok(sdk.capacityByPool({ client, body: pool }), answers.ByPoolAnswer)).capacity.length).toBeGreaterThan(0);
    const tl = await ok(sdk.capacityTimeline({ client, body: pool }), answers.TimelineAnswer);
    expect(tl.buckets[0]).toMatchObject({ booked: 6, free: 10 });
    expect((await ok(sdk.capacityByDomain({ client, body: pool }), answers.ByDomainAnswer)).domains.length).toBeGreaterThan(0);
    await ok(sdk.capacityUsage({ client, body: { tenantId: 'acme', period: '24h', hourly: true } }), answers.UsageAnswer);
    const q = await ok(sdk.capacityQuota({ client, body: { tenantId: 'acme' } }), answers.QuotaAnswer);
    expect(q.quotas.find((r) => r.poolId === OFFERED && r.resource === 'gpu')?.limit).toBe(4);
  });

  it('errors come back as the error bodies the document gives each status', async () => {
    const cases: [client: unknown, body: Record<string, unknown>, status: number, code: 'UNAUTHENTICATED' | 'INVALID_INPUT' | 'FORBIDDEN'][] = [
      [clientFor(), { tenantId: 'acme' }, 401, 'UNAUTHENTICATED'],
      [clientFor(TOKENS.acme), { tenantId: 'acme', typo: 1 }, 400, 'INVALID_INPUT'],
      [clientFor(TOKENS.ops), { tenantId: 'acme' }, 403, 'FORBIDDEN'],
    ];
    for (const [client, body, status, code] of cases) {
      const res = await sdk.capacitySummary({ client, body });
      expect(res.response.status).toBe(status);
      expect(answers.errorAnswer(code).parse(res.error).error.code).toBe(code);
    }
  });
});
