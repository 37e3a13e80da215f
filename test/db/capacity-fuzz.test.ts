// Fuzz: at least 10,000 random request bodies against each capacity endpoint, over HTTP keep-alive on loopback, on a
// real database. Arbitrary JSON values, valid bodies with random mutations, wrong types in every field, huge strings,
// deeply nested junk, raw bytes and odd content types. Every answer must be a 200 with the method's shape or an error
// with exactly `{"error":{"code","message"}}` and its status; never a 5xx, never a dropped connection.
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CAPACITY_PATHS, MAX_BODY_BYTES } from '../../src/api/app.ts';
import { ERROR_STATUS } from '../../src/http/errors.ts';
import { makeNode, makePool } from '../support/builders.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { isErrorBody } from '../support/http-assert.ts';
import { HttpClient, type HttpRequest, type HttpResponse } from '../support/http.ts';
import { startServeProcess, writeTokenFile, type ServeProcess } from '../support/serve-process.ts';

const RUNS_PER_ENDPOINT = 10_000;
const CONCURRENCY = 16;
const SEED = 20261129;

const TOKEN = 'fuzz-token-0123456789';

let t: TestDatabase;
let serve: ServeProcess;
let tokens: Awaited<ReturnType<typeof writeTokenFile>>;
let client: HttpClient;
let POOL: string;
/** The server's error log lines: an INTERNAL error is logged with its stack, so a failure shows what went wrong. */
const internalErrors = () => serve.logs.filter((l) => l.level === 'error');

beforeAll(async () => {
  t = await createTestDatabase();
  POOL = await makePool('fuzz').owner('acme').offer('beta').create(t.db);
  await makeNode('fuzz-n1').gpus(8).domain('zone-a').scalars({ vcpu: 64, memoryGiB: 512 }).create(t.db, POOL);
  await makeNode('fuzz-n2').gpus(8).domain('zone-a').mig(2).create(t.db, POOL);
  await makeNode('fuzz-n3').gpus(4).domain('zone-b').create(t.db, POOL);
  // The real `better-compute serve` in its own process (request logs off: 40,000 lines are not worth their cost),
  // so that it and this client run on separate cores.
  tokens = await writeTokenFile([{ token: TOKEN, subject: 'fuzzer', tenants: ['*'] }]);
  serve = await startServeProcess({ databaseUrl: t.url, tokenFile: tokens.file, env: { LOG_LEVEL: 'warn' } });
  client = new HttpClient(serve.url, TOKEN, CONCURRENCY);
});
afterAll(async () => {
  client?.close();
  const code = await serve?.stop();
  await tokens?.remove();
  await t?.drop();
  expect(code).toBe(0);
});

// ---------------------------------------------------------------------------------------------------------------
// Generators

const json = fc.jsonValue({ maxDepth: 4 });
const wrongType = fc.oneof(
  fc.string({ maxLength: 20 }),
  fc.integer(),
  fc.double(),
  fc.boolean(),
  fc.constant(null),
  fc.array(fc.integer(), { maxLength: 3 }),
  fc.dictionary(fc.string({ maxLength: 5 }), fc.integer(), { maxKeys: 3 }),
  fc.constantFrom(-1, 0, 1, 2 ** 47, 2 ** 47 + 1, 2 ** 53, -(2 ** 53), 1e308, -0, 0.5, 4096, 65536, 86400, 30000, 1440, 5, 336),
  fc.constantFrom('', ' ', 'acme', 'pool_', '\u0000', '\u202e', '\ud800', '1h', 'P1Y', '0', '__proto__', 'constructor'),
);
const tenant = fc.oneof(fc.constantFrom('acme', 'beta', 'ops', 'a', 'a'.repeat(128), 'a'.repeat(129)), fc.stringMatching(/^[A-Za-z0-9._:-]{1,12}$/));
const poolId = () => fc.oneof(fc.constant(POOL), fc.stringMatching(/^pool_[0-9a-hjkmnp-tv-z]{26}$/), fc.string({ maxLength: 60 }));
const device = fc.record(
  {
    class: fc.constantFrom('gpu', 'gpu.mig', 'gpu.slot', 'nic.vf', 'disk', 'node', 'tpu'),
    count: fc.oneof(fc.integer({ min: 0, max: 70 }), wrongType),
    selector: fc.oneof(
      fc.constant({}),
      fc.record({ vramGiB: fc.record({ gte: fc.oneof(fc.integer({ min: 0, max: 200 }), wrongType) }, { requiredKeys: [] }) }, { requiredKeys: [] }),
      fc.dictionary(fc.string({ maxLength: 8 }), json, { maxKeys: 4 }),
    ),
    topology: fc.constantFrom('any', 'nvlink-all', 'ring'),
    sharing: fc.constantFrom('exclusive', 'mig', 'timeslice', 'mps', 'shared'),
  },
  { requiredKeys: ['class', 'count'] },
);

/** Valid-looking bodies per endpoint (valid most of the time), before mutation. */
const baseBodies = {
  summary: () => fc.record({ tenantId: tenant }),
  byPool: () => fc.record({ tenantId: tenant, poolId: poolId() }),
  timeline: () =>
    fc.record(
      {
        tenantId: tenant,
        poolId: poolId(),
        from: fc.oneof(fc.integer({ min: 0, max: 2 ** 47 }), fc.constant(Date.UTC(2026, 0, 1))),
        to: fc.oneof(fc.integer({ min: 0, max: 2 ** 47 }), fc.constant(Date.UTC(2026, 0, 2))),
        stepMinutes: fc.integer({ min: 0, max: 2000 }),
      },
      { requiredKeys: ['tenantId', 'poolId'] },
    ),
  preview: () =>
    fc.record(
      {
        tenantId: tenant,
        poolId: poolId(),
        projectId: fc.stringMatching(/^prj_[0-9a-hjkmnp-tv-z]{26}$/),
        devices: fc.array(device, { minLength: 0, maxLength: 9 }),
        topology: fc.constantFrom('any', 'nvlink-all'),
        start: fc.oneof(fc.integer({ min: 0, max: 2 ** 47 }), fc.constant(Date.UTC(2027, 0, 1))),
        duration: fc.oneof(fc.constantFrom('1h', '1d', 'PT30M', '366d', '367d', 'P1Y', '', 'soon'), fc.integer({ min: -5, max: 40_000_000 })),
        binding: fc.constantFrom('hold', 'node', 'kubelet'),
        resources: fc.record({ vcpu: fc.integer({ min: -1, max: 5000 }), memoryGiB: fc.integer({ min: -1, max: 70000 }), hugepages1Gi: fc.integer({ min: -1, max: 5000 }) }, { requiredKeys: [] }),
        node: fc.record({ profileId: fc.stringMatching(/^[A-Za-z0-9._:/-]{0,130}$/), profileVersion: fc.integer({ min: 0, max: 10 }) }, { requiredKeys: [] }),
        leaseSeconds: fc.integer({ min: 0, max: 90000 }),
        spot: fc.boolean(),
        idempotencyKey: fc.stringMatching(/^[A-Za-z0-9._:-]{0,130}$/),
        wait: fc.record({ timeoutMs: fc.integer({ min: -1, max: 31000 }) }, { requiredKeys: [] }),
        gang: fc.record({ size: fc.integer({ min: 0, max: 70 }), topologyKey: fc.constantFrom('topology.kubernetes.io/zone', '', 'rack', 'x'.repeat(129)) }, { requiredKeys: [] }),
      },
      { requiredKeys: ['tenantId', 'poolId', 'devices', 'duration', 'idempotencyKey'] },
    ),
  byDomain: () =>
    fc.record(
      { tenantId: tenant, poolId: poolId(), topologyKey: fc.constantFrom('topology.kubernetes.io/zone', '', 'rack', 'x'.repeat(128), 'x'.repeat(129)) },
      { requiredKeys: ['tenantId', 'poolId'] },
    ),
  quota: () => fc.record({ tenantId: tenant, poolId: poolId() }, { requiredKeys: ['tenantId'] }),
  usage: () =>
    fc.record(
      {
        tenantId: tenant,
        poolId: poolId(),
        from: fc.constantFrom('2026-11-01', '2026-11-01T10:00:00Z', '2026-02-30', '2026-11-01T25:00:00Z', 'yesterday', '', 'x'.repeat(41)),
        to: fc.constantFrom('2026-11-02', '2026-12-01T00:00:00+01:00', '2028-01-01', '1970-01-01', '2026-13-01'),
        period: fc.constantFrom('2026-11', '24h', '0h', '9000h', '2026-00', 'P1M', 'month'),
        hourly: fc.oneof(fc.boolean(), wrongType),
      },
      { requiredKeys: ['tenantId'] },
    ),
} as const;

/** Bodies that pass validation (so that authorization, the NOT_FOUND rules, the planner and the reads run). */
const validDevice = fc.record(
  {
    class: fc.constantFrom('gpu', 'gpu', 'gpu', 'gpu.mig', 'gpu.slot', 'nic.vf', 'node'),
    count: fc.integer({ min: 1, max: 20 }),
    selector: fc.oneof(
      fc.constant({}),
      fc.record({ vramGiB: fc.record({ gte: fc.integer({ min: 0, max: 100 }) }) }),
      fc.record({ gpuModel: fc.constantFrom('H100', 'A100'), numaNode: fc.record({ in: fc.array(fc.integer({ min: 0, max: 2 }), { minLength: 1, maxLength: 3 }) }) }, { requiredKeys: [] }),
      fc.record({ nvlinkDomain: fc.record({ exists: fc.boolean() }) }),
    ),
    topology: fc.constantFrom('any', 'nvlink-all'),
    sharing: fc.constantFrom('exclusive', 'mig', 'timeslice', 'mps'),
  },
  { requiredKeys: ['class', 'count'] },
);
const validPool = () => fc.oneof({ weight: 4, arbitrary: fc.constant(POOL) }, { weight: 1, arbitrary: fc.stringMatching(/^pool_[0-9a-hjkmnp-tv-z]{26}$/) });
const validTenant = fc.constantFrom('acme', 'acme', 'beta', 'ops');
const T0 = Date.UTC(2026, 10, 29);
const validBodies = {
  summary: () => fc.record({ tenantId: validTenant }),
  byPool: () => fc.record({ tenantId: validTenant, poolId: validPool() }),
  timeline: () =>
    fc
      .tuple(validTenant, validPool(), fc.integer({ min: 0, max: 14 * 24 }), fc.constantFrom(5, 15, 30, 60, 120, 1440), fc.integer({ min: 1, max: 336 }), fc.boolean())
      .map(([tenantId, poolId, h, step, n, defaults]) =>
        defaults ? { tenantId, poolId } : { tenantId, poolId, from: T0 + h * 3_600_000, to: T0 + h * 3_600_000 + Math.min(n * step, 7 * 1440) * 60_000, stepMinutes: step },
      ),
  preview: () =>
    fc.record(
      {
        tenantId: validTenant,
        poolId: validPool(),
        devices: fc.array(validDevice, { minLength: 1, maxLength: 3 }),
        topology: fc.constantFrom('any', 'nvlink-all'),
        start: fc.integer({ min: T0 - 86_400_000, max: T0 + 30 * 86_400_000 }),
        duration: fc.oneof(fc.constantFrom('1h', '1d', 'PT30M', '366d', '90'), fc.integer({ min: 1, max: 366 * 86_400 })),
        binding: fc.constantFrom('hold', 'node'),
        resources: fc.record({ vcpu: fc.integer({ min: 0, max: 128 }), memoryGiB: fc.integer({ min: 0, max: 1024 }) }, { requiredKeys: [] }),
        spot: fc.boolean(),
        idempotencyKey: fc.stringMatching(/^[A-Za-z0-9._:-]{1,20}$/),
        gang: fc.record({ size: fc.integer({ min: 2, max: 4 }), topologyKey: fc.constantFrom('topology.kubernetes.io/zone', 'rack') }, { requiredKeys: ['size'] }),
      },
      { requiredKeys: ['tenantId', 'poolId', 'devices', 'duration', 'idempotencyKey'] },
    ),
  byDomain: () =>
    fc.record({ tenantId: validTenant, poolId: validPool(), topologyKey: fc.constantFrom('topology.kubernetes.io/zone', 'rack') }, { requiredKeys: ['tenantId', 'poolId'] }),
  quota: () => fc.record({ tenantId: validTenant, poolId: validPool() }),
  usage: () =>
    fc.oneof(
      fc.record({ tenantId: validTenant, poolId: validPool(), period: fc.constantFrom('2026-11', '24h', '168h'), hourly: fc.boolean() }),
      fc.record({ tenantId: validTenant, poolId: validPool(), from: fc.constantFrom('2026-11-01', '2026-11-28T10:00:00Z'), to: fc.constantFrom('2026-11-30', '2026-11-29T00:00:00Z') }),
    ),
} as const;

type Endpoint = keyof typeof baseBodies;
const FIELDS: Record<Endpoint, string[]> = {
  summary: ['tenantId'],
  byPool: ['tenantId', 'poolId'],
  timeline: ['tenantId', 'poolId', 'from', 'to', 'stepMinutes'],
  preview: ['tenantId', 'poolId', 'projectId', 'devices', 'topology', 'start', 'duration', 'binding', 'resources', 'node', 'leaseSeconds', 'spot', 'idempotencyKey', 'wait', 'gang'],
  byDomain: ['tenantId', 'poolId', 'topologyKey'],
  quota: ['tenantId', 'poolId'],
  usage: ['tenantId', 'poolId', 'from', 'to', 'period', 'hourly'],
};

type Mutation = (body: Record<string, unknown>) => void;
const mutation = (endpoint: Endpoint): fc.Arbitrary<Mutation> => {
  const field = fc.constantFrom(...FIELDS[endpoint], 'extra', '__proto__', 'constructor', 'devices.0', 'devices.0.count', 'gang.size', 'resources.vcpu');
  const setPath = (body: Record<string, unknown>, path: string, value: unknown) => {
    const keys = path.split('.');
    let cur: unknown = body;
    for (const k of keys.slice(0, -1)) {
      if (typeof cur !== 'object' || cur === null) return;
      cur = (cur as Record<string, unknown>)[k];
    }
    if (typeof cur === 'object' && cur !== null) Object.defineProperty(cur, keys[keys.length - 1]!, { value, enumerable: true, configurable: true, writable: true });
  };
  return fc.oneof(
    fc.tuple(field, wrongType).map(([f, v]): Mutation => (b) => setPath(b, f, v)),
    fc.tuple(field, json).map(([f, v]): Mutation => (b) => setPath(b, f, v)),
    field.map((f): Mutation => (b) => delete b[f]),
    fc.tuple(field, fc.constantFrom(129, 1000, 20_000)).map(([f, n]): Mutation => (b) => setPath(b, f, 'x'.repeat(n))),
  );
};

/** A request: the body as text, and headers. */
interface Fuzzed {
  kind: string;
  body: string | Buffer;
  headers: Record<string, string>;
}

const asJson = (kind: string) => (v: unknown): Fuzzed => ({ kind, body: JSON.stringify(v) ?? 'null', headers: { 'content-type': 'application/json' } });

function nested(depth: number, open: string, close: string, inner: string): string {
  return open.repeat(depth) + inner + close.repeat(depth);
}

const fuzzed = (endpoint: Endpoint): fc.Arbitrary<Fuzzed> =>
  fc.oneof(
    // A valid body: the service, the planner and the reads run.
    { weight: 20, arbitrary: validBodies[endpoint]().map(asJson('valid')) },
    // A valid body with one mutation, and a rough one with up to three.
    {
      weight: 10,
      arbitrary: fc
        .tuple(validBodies[endpoint](), mutation(endpoint))
        .map(([b, m]) => {
          const body = structuredClone(b) as Record<string, unknown>;
          m(body);
          return body;
        })
        .map(asJson('valid-mutated')),
    },
    {
      weight: 25,
      arbitrary: fc
        .tuple(baseBodies[endpoint](), fc.array(mutation(endpoint), { maxLength: 3 }))
        .map(([b, ms]) => {
          const body = structuredClone(b) as Record<string, unknown>;
          for (const m of ms) m(body);
          return body;
        })
        .map(asJson('mutated')),
    },
    // Any JSON value.
    { weight: 10, arbitrary: json.map(asJson('json')) },
    // An object with the right keys and values of every type.
    { weight: 10, arbitrary: fc.dictionary(fc.constantFrom(...FIELDS[endpoint]), wrongType, { maxKeys: FIELDS[endpoint].length }).map(asJson('wrong-types')) },
    // Huge strings (some over the body limit).
    {
      weight: 4,
      arbitrary: fc
        .tuple(fc.constantFrom(...FIELDS[endpoint]), fc.constantFrom(1_000, 60_000, MAX_BODY_BYTES, MAX_BODY_BYTES + 1, 200_000))
        .map(([f, n]) => ({ tenantId: 'acme', poolId: POOL, [f]: 'é'.repeat(n / 2) }))
        .map(asJson('huge')),
    },
    // Deeply nested junk, as text (deeper than JSON.stringify of a generated value would go).
    {
      weight: 4,
      arbitrary: fc
        .tuple(fc.integer({ min: 1, max: 30_000 }), fc.constantFrom<[string, string]>(['[', ']'], ['{"a":', '}'], ['{"tenantId":', '}'], ['{"devices":[', ']}']))
        .map(([d, [o, c]]): Fuzzed => ({ kind: 'nested', body: nested(d, o, c, '1'), headers: { 'content-type': 'application/json' } })),
    },
    // Text that is mostly not JSON, and raw bytes.
    { weight: 6, arbitrary: fc.string({ maxLength: 200 }).map((s): Fuzzed => ({ kind: 'text', body: s, headers: { 'content-type': 'application/json' } })) },
    { weight: 3, arbitrary: fc.uint8Array({ maxLength: 300 }).map((u): Fuzzed => ({ kind: 'bytes', body: Buffer.from(u), headers: { 'content-type': 'application/json' } })) },
    // Odd content types and charsets.
    {
      weight: 3,
      arbitrary: fc
        .tuple(baseBodies[endpoint](), fc.constantFrom('text/plain', 'application/x-www-form-urlencoded', 'application/json; charset=utf-16', 'application/json; charset=latin1', 'application/jsonx', '', 'multipart/form-data; boundary=x'))
        .map(([b, ct]): Fuzzed => ({ kind: 'content-type', body: JSON.stringify(b), headers: ct ? { 'content-type': ct } : {} })),
    },
  );

// ---------------------------------------------------------------------------------------------------------------

const OK_KEYS: Record<Endpoint, string[]> = {
  summary: ['byGpuModel', 'pools', 'tenantId'],
  byPool: ['capacity', 'poolId'],
  timeline: ['allocatable', 'buckets', 'from', 'poolId', 'stepMinutes', 'to'],
  preview: ['candidates', 'fits'],
  byDomain: ['domains', 'poolId', 'topologyKey'],
  quota: ['quotas', 'tenantId'],
  usage: ['from', 'tenantId', 'to', 'totals'],
};

function problem(endpoint: Endpoint, res: HttpResponse): string | undefined {
  if (res.status >= 500) return `status ${res.status}`;
  if (res.json === undefined) return 'the body is not JSON';
  if (!String(res.headers['content-type']).startsWith('application/json')) return `content type ${res.headers['content-type']}`;
  if (res.status === 200) {
    const keys = Object.keys(res.json as object).sort();
    const required = OK_KEYS[endpoint];
    if (!required.every((k) => keys.includes(k))) return `200 without ${required.join(', ')}`;
    if (endpoint === 'preview') {
      const p = res.json as { fits: unknown; candidates: unknown[]; gang?: unknown };
      if (typeof p.fits !== 'boolean' || !Array.isArray(p.candidates)) return 'preview shape';
    }
    return undefined;
  }
  if (!isErrorBody(res.json)) return `not an error body: ${res.text.slice(0, 200)}`;
  if (ERROR_STATUS[res.json.error.code] !== res.status) return `code ${res.json.error.code} with status ${res.status}`;
  return undefined;
}

describe('fuzz', () => {
  const endpoints = Object.keys(baseBodies) as Endpoint[];
  const stats: Record<string, { n: number; ms: number; byStatus: Record<number, number> }> = {};

  afterAll(() => {
    // One line per endpoint, for the record (vitest shows console output of the file).
    for (const [e, s] of Object.entries(stats)) console.log(`fuzz ${e}: ${s.n} requests in ${s.ms} ms, statuses ${JSON.stringify(s.byStatus)}`);
  });

  it.each(endpoints)(
    '%s: 10,000 random bodies, no 5xx, every error well-formed',
    async (endpoint) => {
      const samples = fc.sample(fuzzed(endpoint), { numRuns: RUNS_PER_ENDPOINT, seed: SEED + endpoints.indexOf(endpoint) });
      expect(samples).toHaveLength(RUNS_PER_ENDPOINT);
      const failures: { kind: string; body: string; problem: string }[] = [];
      const byStatus: Record<number, number> = {};
      let next = 0;
      const started = performance.now();
      await Promise.all(
        Array.from({ length: CONCURRENCY }, async () => {
          while (next < samples.length) {
            const s = samples[next++]!;
            const req: HttpRequest = { path: CAPACITY_PATHS[endpoint], body: s.body, headers: s.headers };
            let res: HttpResponse;
            try {
              res = await client.request(req);
            } catch (e) {
              failures.push({ kind: s.kind, body: String(s.body).slice(0, 300), problem: `request failed: ${(e as Error).message}` });
              continue;
            }
            byStatus[res.status] = (byStatus[res.status] ?? 0) + 1;
            const p = problem(endpoint, res);
            if (p) failures.push({ kind: s.kind, body: String(s.body).slice(0, 300), problem: p });
          }
        }),
      );
      stats[endpoint] = { n: samples.length, ms: Math.round(performance.now() - started), byStatus };
      expect(failures.slice(0, 5), JSON.stringify(internalErrors().slice(0, 3))).toEqual([]);
      expect(internalErrors()).toEqual([]);
      // The fuzz reached past validation too: some requests were answered 200 and some NOT_FOUND.
      expect(byStatus[200] ?? 0).toBeGreaterThan(100);
      expect(byStatus[400] ?? 0).toBeGreaterThan(100);
      // usage reads only the tenant's own rows: an unknown pool shows nothing rather than NOT_FOUND (ADR 0011).
      if (endpoint !== 'summary' && endpoint !== 'usage') expect(byStatus[404] ?? 0).toBeGreaterThan(10);
    },
    120_000,
  );

  it('the server still answers after the fuzz', async () => {
    const res = await client.post(CAPACITY_PATHS.byPool, { tenantId: 'acme', poolId: POOL });
    expect(res.status).toBe(200);
  });
});
