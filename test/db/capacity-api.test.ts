// The capacity API over real HTTP on loopback, on a real database: every input constraint of capacity-api.md for
// every endpoint (both sides of each bound, each pattern, each default), the NOT_FOUND and archived-pool rules, the
// response shapes, and how malformed requests are answered.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CAPACITY_PATHS, MAX_BODY_BYTES } from '../../src/api/app.ts';
import { MAX_PREVIEW_CANDIDATES } from '../../src/api/capacity-service.ts';
import type { PlanAnswer, Previewer } from '../../src/core/preview.ts';
import { MAX_DURATION_SECONDS } from '../../src/core/duration.ts';
import { Ledger } from '../../src/db/ledger.ts';
import { startTestApi, TOKENS, type TestApi } from '../support/api.ts';
import { makeNode, makePool, reservation } from '../support/builders.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { expectError } from '../support/http-assert.ts';

const HOUR = 3_600_000;
const DAY = 24 * HOUR;
const TWO_47 = 140_737_488_355_328;
const ULID_CHARS = '0123456789abcdefghjkmnpqrstvwxyz';
const ulid = (n: number) => Array.from({ length: n }, (_, i) => ULID_CHARS[i % ULID_CHARS.length]).join('');
const poolOf = (n: number) => `pool_${ulid(n)}`;
const prj = (n: number) => `prj_${ulid(n)}`;

/** Tenants (other than the owner) whose ids sit on the edges of the pattern; the main pool is offered to each. */
const EDGE_TENANTS = ['a', 'a'.repeat(128), 'AZaz09._:-'];

let t: TestDatabase;
let api: TestApi;
let POOL: string; // acme's pool: 3 nodes of 8 GPUs, offered to the edge tenants
let BIG: string; // acme's pool of 12 one-GPU nodes in one zone
let OFFERED: string; // ops' pool offered to acme
let FOREIGN: string; // ops' pool, not offered to acme
let ARCHIVED_OFFERED: string; // ops' archived pool, offered to acme
let ARCHIVED_OWN: string; // acme's archived pool
const MISSING = poolOf(26); // well-formed, no such pool

beforeAll(async () => {
  t = await createTestDatabase();
  let b = makePool('api-main').owner('acme');
  for (const tenant of EDGE_TENANTS) b = b.offer(tenant);
  POOL = await b.create(t.db);
  for (const [id, zone] of [['api-n1', 'zone-a'], ['api-n2', 'zone-a'], ['api-n3', 'zone-b']] as const) {
    await makeNode(id).gpus(8).domain(zone).scalars({ vcpu: 64, memoryGiB: 512, hugepages1Gi: 16 }).create(t.db, POOL);
  }
  BIG = await makePool('api-big').owner('acme').create(t.db);
  for (let i = 0; i < 12; i++) await makeNode(`api-big-${String(i).padStart(2, '0')}`).gpus(1).domain('zone-a').create(t.db, BIG);
  OFFERED = await makePool('api-offered').owner('ops').offer('acme').create(t.db);
  await makeNode('api-off-n1').gpus(4).create(t.db, OFFERED);
  FOREIGN = await makePool('api-foreign').owner('ops').create(t.db);
  await makeNode('api-for-n1').gpus(4).create(t.db, FOREIGN);
  ARCHIVED_OFFERED = await makePool('api-archived-offered').owner('ops').offer('acme').archived().create(t.db);
  await makeNode('api-arch-n1').gpus(4).create(t.db, ARCHIVED_OFFERED);
  ARCHIVED_OWN = await makePool('api-archived-own').owner('acme').archived().create(t.db);
  await makeNode('api-arch-own-n1').gpus(4).create(t.db, ARCHIVED_OWN);
  api = await startTestApi(t.db);
});
afterAll(async () => {
  await api?.close();
  await t?.drop();
});

// ---------------------------------------------------------------------------------------------------------------
// Table machinery (as in src/core/schemas.test.ts, but every row is a real HTTP request)

const DEL = Symbol('delete');
/** Field path → value (a function is called when the row runs: fixtures exist only then), or DEL. */
type Patch = Record<string, unknown>;
type Expect =
  | { ok: true; status: number; check?: (json: Record<string, unknown>) => void }
  | { ok: false; path: string; msg: RegExp };
type Row = [name: string, patch: Patch, expect: Expect];

const ok = (check?: (json: Record<string, unknown>) => void): Expect => ({ ok: true, status: 200, ...(check ? { check } : {}) });
/** Valid input, for a pool that does not exist. */
const okNotFound: Expect = { ok: true, status: 404 };
const bad = (path: string, msg: RegExp): Expect => ({ ok: false, path, msg });

function patched(base: object, patch: Patch): unknown {
  const out = structuredClone(base) as Record<string, unknown>;
  for (const [path, value] of Object.entries(patch)) {
    const keys = path.split('.');
    let cur: Record<string, unknown> = out;
    for (const k of keys.slice(0, -1)) {
      cur[k] ??= {};
      cur = cur[k] as Record<string, unknown>;
    }
    const last = keys[keys.length - 1]!;
    if (value === DEL) delete cur[last];
    else cur[last] = typeof value === 'function' ? (value as () => unknown)() : value;
  }
  return out;
}

/** The message of one issue in an INVALID_INPUT body (`path: message; path: message`). */
function issueMessage(message: string, path: string): string | undefined {
  const prefix = `${path === '' ? 'input' : path}: `;
  // Issues are joined by '; ', and a message may contain '; ' too: split only where a path and ': ' follow.
  return message
    .split(/; (?=[A-Za-z_$[][\w$.[\]"-]*: )/)
    .find((part) => part.startsWith(prefix))
    ?.slice(prefix.length);
}

function runRows(path: string, base: () => object, rows: readonly Row[]): void {
  it.each(rows)('%s', async (_name, patch, expectation) => {
    const res = await api.client.post(path, patched(base(), patch));
    if (expectation.ok) {
      if (expectation.status === 404) {
        expectError(res, 'NOT_FOUND');
      } else {
        expect(res.status, res.text).toBe(200);
        expectation.check?.(res.json as Record<string, unknown>);
      }
    } else {
      const message = expectError(res, 'INVALID_INPUT');
      const issue = issueMessage(message, expectation.path);
      expect(issue, message).toBeDefined();
      expect(issue).toMatch(expectation.msg);
    }
  });
}

// ---------------------------------------------------------------------------------------------------------------
// Shared constraint tables

const tenantIdRows = (): Row[] => [
  ['tenantId: 1 character', { tenantId: 'a' }, ok()],
  ['tenantId: 128 characters', { tenantId: 'a'.repeat(128) }, ok()],
  ['tenantId: 129 characters', { tenantId: 'a'.repeat(129) }, bad('tenantId', /^must be at most 128 characters$/)],
  ['tenantId: every allowed character', { tenantId: 'AZaz09._:-' }, ok()],
  ['tenantId: empty', { tenantId: '' }, bad('tenantId', /must match/)],
  ['tenantId: space', { tenantId: 'ac me' }, bad('tenantId', /must match/)],
  ['tenantId: slash', { tenantId: 'acme/x' }, bad('tenantId', /must match/)],
  ['tenantId: non-ASCII', { tenantId: 'acmé' }, bad('tenantId', /must match/)],
  ['tenantId: trailing newline', { tenantId: 'acme\n' }, bad('tenantId', /must match/)],
  ['tenantId: missing', { tenantId: DEL }, bad('tenantId', /^is required$/)],
  ['tenantId: null', { tenantId: null }, bad('tenantId', /^must be a string$/)],
  ['tenantId: number', { tenantId: 5 }, bad('tenantId', /^must be a string$/)],
];

const poolIdRows = (): Row[] => [
  ['poolId: 26 ULID characters (the real pool)', { poolId: () => POOL }, ok()],
  ['poolId: 26 ULID characters (no such pool)', { poolId: poolOf(26) }, okNotFound],
  ['poolId: 52 ULID characters (57 in all)', { poolId: poolOf(52) }, okNotFound],
  ['poolId: 25 ULID characters', { poolId: poolOf(25) }, bad('poolId', /must match/)],
  ['poolId: 53 ULID characters', { poolId: poolOf(53) }, bad('poolId', /^must be at most 57 characters$/)],
  ['poolId: contains i', { poolId: `pool_${ulid(25)}i` }, bad('poolId', /must match/)],
  ['poolId: contains l', { poolId: `pool_${ulid(25)}l` }, bad('poolId', /must match/)],
  ['poolId: contains o', { poolId: `pool_${ulid(25)}o` }, bad('poolId', /must match/)],
  ['poolId: contains u', { poolId: `pool_${ulid(25)}u` }, bad('poolId', /must match/)],
  ['poolId: uppercase', { poolId: `pool_${ulid(26).toUpperCase()}` }, bad('poolId', /must match/)],
  ['poolId: uppercase prefix', { poolId: `POOL_${ulid(26)}` }, bad('poolId', /must match/)],
  ['poolId: wrong prefix', { poolId: `prj_${ulid(26)}` }, bad('poolId', /must match/)],
  ['poolId: no prefix', { poolId: ulid(26) }, bad('poolId', /must match/)],
  ['poolId: missing', { poolId: DEL }, bad('poolId', /^is required$/)],
  ['poolId: number', { poolId: 1 }, bad('poolId', /^must be a string$/)],
];

// ---------------------------------------------------------------------------------------------------------------

describe('POST /api/compute/capacity/summary', () => {
  runRows(CAPACITY_PATHS.summary, () => ({ tenantId: 'acme' }), [
    ...tenantIdRows(),
    ['unknown key (poolId is not a summary field)', { poolId: () => POOL }, bad('poolId', /^is not a known field$/)],
  ]);

  it('answers {tenantId, pools, byGpuModel}: owned and offered pools, archived ones only for their owner', async () => {
    const res = await api.client.post(CAPACITY_PATHS.summary, { tenantId: 'acme' });
    expect(res.status).toBe(200);
    type Totals = { total: number; allocatable: number; allocated: number; reserved: number; available: number };
    const s = res.json as { tenantId: string; pools: { poolId: string; name: string; archived: boolean; capacity: unknown[] }[]; byGpuModel: Record<string, Totals> };
    expect(Object.keys(s)).toEqual(['tenantId', 'pools', 'byGpuModel']);
    expect(s.tenantId).toBe('acme');
    const ids = s.pools.map((p) => p.poolId);
    expect(ids).toEqual(expect.arrayContaining([POOL, BIG, OFFERED, ARCHIVED_OWN]));
    expect(ids).not.toContain(FOREIGN);
    expect(ids).not.toContain(ARCHIVED_OFFERED);
    expect(s.pools.find((p) => p.poolId === ARCHIVED_OWN)?.archived).toBe(true);
    expect(Object.keys(s.pools[0]!).sort()).toEqual(['archived', 'capacity', 'gpuModel', 'name', 'ownerTenant', 'poolId']);
    // byGpuModel sums the gpu rows of the pools listed, and nothing else.
    const gpuRows = s.pools.map((p) => (p.capacity as { resource: string; total: number; allocatable: number; available: number }[]).find((r) => r.resource === 'gpu')!);
    expect(s.byGpuModel).toEqual({
      H100: {
        total: gpuRows.reduce((a, r) => a + r.total, 0),
        allocatable: gpuRows.reduce((a, r) => a + r.allocatable, 0),
        allocated: 0,
        reserved: 0,
        available: gpuRows.reduce((a, r) => a + r.available, 0),
      },
    });
    expect(s.byGpuModel.H100!.total).toBe(24 + 12 + 4 + 4);

    const ops = (await api.client.post(CAPACITY_PATHS.summary, { tenantId: 'ops' })).json as typeof s;
    expect(ops.pools.map((p) => p.poolId)).toEqual(expect.arrayContaining([OFFERED, FOREIGN, ARCHIVED_OFFERED]));
    expect(ops.pools.map((p) => p.poolId)).not.toContain(POOL);
  });

  it('a tenant with no pools gets an empty summary, not NOT_FOUND', async () => {
    const res = await api.client.post(CAPACITY_PATHS.summary, { tenantId: 'nobody-here' });
    expect(res.status).toBe(200);
    expect(res.json).toEqual({ tenantId: 'nobody-here', pools: [], byGpuModel: {} });
  });
});

describe('POST /api/compute/capacity/byPool', () => {
  runRows(CAPACITY_PATHS.byPool, () => ({ tenantId: 'acme', poolId: POOL }), [
    ...tenantIdRows(),
    ...poolIdRows(),
    ['unknown key', { projectId: prj(26) }, bad('projectId', /^is not a known field$/)],
  ]);

  it('answers {poolId, capacity}: one row per resource, ordered by resource, with every column', async () => {
    const res = await api.client.post(CAPACITY_PATHS.byPool, { tenantId: 'acme', poolId: POOL });
    expect(res.status).toBe(200);
    const body = res.json as { poolId: string; capacity: Record<string, unknown>[] };
    expect(Object.keys(body)).toEqual(['poolId', 'capacity']);
    expect(body.poolId).toBe(POOL);
    expect(body.capacity.map((r) => r.resource)).toEqual(['gpu', 'hugepages1Gi', 'memoryGiB', 'vcpu']);
    const gpu = body.capacity[0]!;
    expect(Object.keys(gpu).sort()).toEqual(
      ['allocatable', 'allocated', 'available', 'maintenance', 'poolId', 'provisioning', 'reserved', 'resource', 'total', 'unhealthy', 'unreachable', 'updatedAt'].sort(),
    );
    expect(gpu).toMatchObject({ poolId: POOL, resource: 'gpu', total: 24, allocatable: 24, available: 24 });
    expect(typeof gpu.updatedAt).toBe('number');
  });
});

// ---------------------------------------------------------------------------------------------------------------

const BASE_PREVIEW = () => ({
  tenantId: 'acme',
  poolId: POOL,
  devices: [{ class: 'gpu', count: 1 }],
  duration: '1h',
  idempotencyKey: 'req-1',
});

const devices = (n: number) => Array.from({ length: n }, () => ({ class: 'gpu', count: 1 }));
const fits = (expected: boolean) => (j: Record<string, unknown>) => expect(j.fits).toBe(expected);
const atomsOfFirst = (n: number) => (j: Record<string, unknown>) => {
  expect(j.fits).toBe(true);
  expect((j.candidates as { atoms: string[] }[])[0]!.atoms).toHaveLength(n);
};

describe('POST /api/compute/capacity/preview', () => {
  runRows(CAPACITY_PATHS.preview, BASE_PREVIEW, [
    ...tenantIdRows(),
    ...poolIdRows(),
    // projectId
    ['projectId: absent', {}, ok()],
    ['projectId: 26 ULID characters', { projectId: prj(26) }, ok()],
    ['projectId: 52 ULID characters (56 in all)', { projectId: prj(52) }, ok()],
    ['projectId: 25 ULID characters', { projectId: prj(25) }, bad('projectId', /must match/)],
    ['projectId: 53 ULID characters', { projectId: prj(53) }, bad('projectId', /^must be at most 56 characters$/)],
    ['projectId: contains i', { projectId: `prj_${ulid(25)}i` }, bad('projectId', /must match/)],
    ['projectId: contains l', { projectId: `prj_${ulid(25)}l` }, bad('projectId', /must match/)],
    ['projectId: contains o', { projectId: `prj_${ulid(25)}o` }, bad('projectId', /must match/)],
    ['projectId: contains u', { projectId: `prj_${ulid(25)}u` }, bad('projectId', /must match/)],
    ['projectId: uppercase', { projectId: `prj_${ulid(26).toUpperCase()}` }, bad('projectId', /must match/)],
    ['projectId: a pool id', { projectId: poolOf(26) }, bad('projectId', /must match/)],
    ['projectId: null', { projectId: null }, bad('projectId', /^must be a string$/)],
    // devices
    ['devices: 0 items', { devices: [] }, bad('devices', /^must have at least 1 items$/)],
    ['devices: 1 item', { devices: devices(1) }, ok(fits(true))],
    ['devices: 8 items', { devices: devices(8) }, ok(fits(true))],
    ['devices: 9 items', { devices: devices(9) }, bad('devices', /^must have at most 8 items$/)],
    ['devices: missing', { devices: DEL }, bad('devices', /^is required$/)],
    ['devices: an object', { devices: { class: 'gpu', count: 1 } }, bad('devices', /^must be a list$/)],
    ['devices[]: not an object', { devices: ['gpu'] }, bad('devices[0]', /^must be an object$/)],
    ['devices[]: unknown key', { 'devices.0.cout': 2 }, bad('devices[0].cout', /^is not a known field$/)],
    // devices[].class
    ...(['gpu', 'gpu.mig', 'gpu.slot', 'nic.vf', 'disk', 'node'] as const).map((c): Row => [`devices[].class: ${c}`, { 'devices.0.class': c }, ok()]),
    ['devices[].class: unknown', { 'devices.0.class': 'tpu' }, bad('devices[0].class', /^must be one of "gpu", "gpu.mig", "gpu.slot", "nic.vf", "disk", "node"$/)],
    ['devices[].class: wrong case', { 'devices.0.class': 'GPU' }, bad('devices[0].class', /must be one of/)],
    ['devices[].class: missing', { 'devices.0.class': DEL }, bad('devices[0].class', /^is required$/)],
    // devices[].count
    ['devices[].count: 0', { 'devices.0.count': 0 }, bad('devices[0].count', /^must be at least 1$/)],
    ['devices[].count: 1', { 'devices.0.count': 1 }, ok(atomsOfFirst(1))],
    ['devices[].count: 8', { 'devices.0.count': 8 }, ok(atomsOfFirst(8))],
    ['devices[].count: 64', { 'devices.0.count': 64 }, ok(fits(false))],
    ['devices[].count: 65', { 'devices.0.count': 65 }, bad('devices[0].count', /^must be at most 64$/)],
    ['devices[].count: -1', { 'devices.0.count': -1 }, bad('devices[0].count', /^must be at least 1$/)],
    ['devices[].count: 1.5', { 'devices.0.count': 1.5 }, bad('devices[0].count', /^must be an integer$/)],
    ['devices[].count: "5"', { 'devices.0.count': '5' }, bad('devices[0].count', /^must be an integer$/)],
    ['devices[].count: null', { 'devices.0.count': null }, bad('devices[0].count', /^must be an integer$/)],
    ['devices[].count: missing', { 'devices.0.count': DEL }, bad('devices[0].count', /^is required$/)],
    ['devices[].count: on the 8th device', { devices: [...devices(7), { class: 'gpu', count: 65 }] }, bad('devices[7].count', /^must be at most 64$/)],
    // devices[].selector
    ['devices[].selector: absent', {}, ok(fits(true))],
    ['devices[].selector: empty', { 'devices.0.selector': {} }, ok(fits(true))],
    ['devices[].selector: matching', { 'devices.0.selector': { gpuModel: 'H100', vramGiB: { gte: 80 }, numaNode: { in: [0, 1] } } }, ok(fits(true))],
    ['devices[].selector: matching nothing', { 'devices.0.selector': { vramGiB: { gt: 80 } } }, ok(fits(false))],
    ['devices[].selector: bad operator value', { 'devices.0.selector': { vramGiB: { gte: '80' } } }, bad('devices[0].selector', /^invalid selector: .*"vramGiB".*"gte".*finite number/)],
    ['devices[].selector: unknown operator', { 'devices.0.selector': { vramGiB: { between: [1, 2] } } }, bad('devices[0].selector', /unknown operator "between"/)],
    ['devices[].selector: empty in list', { 'devices.0.selector': { numaNode: { in: [] } } }, bad('devices[0].selector', /must not be empty/)],
    ['devices[].selector: bad attribute name', { 'devices.0.selector': { 'gpu model': 'H100' } }, bad('devices[0].selector', /invalid attribute name/)],
    ['devices[].selector: 64 clauses', { 'devices.0.selector': Object.fromEntries(Array.from({ length: 64 }, (_, i) => [`a${i}`, { exists: false }])) }, ok(fits(true))],
    ['devices[].selector: 65 clauses', { 'devices.0.selector': Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`a${i}`, i])) }, bad('devices[0].selector', /too many clauses/)],
    ['devices[].selector: a string', { 'devices.0.selector': 'vramGiB >= 80' }, bad('devices[0].selector', /^must be an object$/)],
    ['devices[].selector: a list', { 'devices.0.selector': [] }, bad('devices[0].selector', /^must be an object$/)],
    ['devices[].selector: null', { 'devices.0.selector': null }, bad('devices[0].selector', /^must be an object$/)],
    // devices[].topology and devices[].sharing
    ['devices[].topology: any', { 'devices.0.topology': 'any' }, ok(fits(true))],
    ['devices[].topology: nvlink-all', { 'devices.0.topology': 'nvlink-all' }, ok(fits(true))],
    ['devices[].topology: unknown', { 'devices.0.topology': 'ring' }, bad('devices[0].topology', /^must be one of "any", "nvlink-all"$/)],
    ...(['exclusive', 'mig', 'timeslice', 'mps'] as const).map((s): Row => [`devices[].sharing: ${s}`, { 'devices.0.sharing': s }, ok()]),
    ['devices[].sharing: unknown', { 'devices.0.sharing': 'shared' }, bad('devices[0].sharing', /^must be one of "exclusive", "mig", "timeslice", "mps"$/)],
    ['devices[].sharing: wrong case', { 'devices.0.sharing': 'MIG' }, bad('devices[0].sharing', /must be one of/)],
    // topology
    ['topology: absent', {}, ok()],
    ['topology: any', { topology: 'any' }, ok(fits(true))],
    ['topology: nvlink-all', { topology: 'nvlink-all' }, ok(fits(true))],
    ['topology: unknown', { topology: 'nvlink' }, bad('topology', /^must be one of "any", "nvlink-all"$/)],
    // start
    ['start: absent', {}, ok(fits(true))],
    ['start: 0', { start: 0 }, ok(fits(true))],
    ['start: 140737488355328', { start: TWO_47 }, ok(fits(true))],
    ['start: -1', { start: -1 }, bad('start', /^must be at least 0$/)],
    ['start: 140737488355329', { start: TWO_47 + 1 }, bad('start', /^must be at most 140737488355328$/)],
    ['start: 1.5', { start: 1.5 }, bad('start', /^must be an integer$/)],
    ['start: numeric string', { start: '1700000000000' }, bad('start', /^must be an integer$/)],
    ['start: ISO date string', { start: '2026-01-01T00:00:00Z' }, bad('start', /^must be an integer$/)],
    // duration
    ['duration: "1h"', { duration: '1h' }, ok(fits(true))],
    ['duration: integer seconds', { duration: 5400 }, ok(fits(true))],
    ['duration: integer string', { duration: '90' }, ok(fits(true))],
    ['duration: ISO 8601', { duration: 'P1DT12H' }, ok(fits(true))],
    ['duration: 1 second', { duration: 1 }, ok(fits(true))],
    ['duration: 366 days', { duration: MAX_DURATION_SECONDS }, ok(fits(true))],
    ['duration: 0', { duration: 0 }, bad('duration', /between 1 second and 366 days/)],
    ['duration: 366 days + 1 s', { duration: MAX_DURATION_SECONDS + 1 }, bad('duration', /between 1 second and 366 days/)],
    ['duration: 367d', { duration: '367d' }, bad('duration', /between 1 second and 366 days/)],
    ['duration: 1.5', { duration: 1.5 }, bad('duration', /whole number of seconds/)],
    ['duration: years', { duration: 'P1Y' }, bad('duration', /years and months/)],
    ['duration: garbage', { duration: 'soon' }, bad('duration', /invalid duration "soon"/)],
    ['duration: boolean', { duration: true }, bad('duration', /^must be a duration string or an integer number of seconds$/)],
    ['duration: null', { duration: null }, bad('duration', /^must be a duration string or an integer number of seconds$/)],
    ['duration: missing', { duration: DEL }, bad('duration', /^is required$/)],
    // binding (default "hold": one GPU takes one atom; "node" takes the whole node)
    ['binding: default "hold"', {}, ok(atomsOfFirst(1))],
    ['binding: "hold"', { binding: 'hold' }, ok(atomsOfFirst(1))],
    ['binding: "node"', { binding: 'node' }, ok(atomsOfFirst(8))],
    ['binding: any string', { binding: 'kubelet' }, ok()],
    ['binding: number', { binding: 1 }, bad('binding', /^must be a string$/)],
    ['binding: null', { binding: null }, bad('binding', /^must be a string$/)],
    // resources
    ['resources: absent', {}, ok(fits(true))],
    ['resources: empty', { resources: {} }, ok(fits(true))],
    ['resources.vcpu: -1', { 'resources.vcpu': -1 }, bad('resources.vcpu', /^must be at least 0$/)],
    ['resources.vcpu: 0', { 'resources.vcpu': 0 }, ok(fits(true))],
    ['resources.vcpu: 4096', { 'resources.vcpu': 4096 }, ok(fits(false))],
    ['resources.vcpu: 4097', { 'resources.vcpu': 4097 }, bad('resources.vcpu', /^must be at most 4096$/)],
    ['resources.vcpu: 0.5', { 'resources.vcpu': 0.5 }, bad('resources.vcpu', /^must be an integer$/)],
    ['resources.memoryGiB: -1', { 'resources.memoryGiB': -1 }, bad('resources.memoryGiB', /^must be at least 0$/)],
    ['resources.memoryGiB: 0', { 'resources.memoryGiB': 0 }, ok(fits(true))],
    ['resources.memoryGiB: 65536', { 'resources.memoryGiB': 65536 }, ok(fits(false))],
    ['resources.memoryGiB: 65537', { 'resources.memoryGiB': 65537 }, bad('resources.memoryGiB', /^must be at most 65536$/)],
    ['resources.memoryGiB: "64"', { 'resources.memoryGiB': '64' }, bad('resources.memoryGiB', /^must be an integer$/)],
    ['resources.hugepages1Gi: -1', { 'resources.hugepages1Gi': -1 }, bad('resources.hugepages1Gi', /^must be at least 0$/)],
    ['resources.hugepages1Gi: 0', { 'resources.hugepages1Gi': 0 }, ok(fits(true))],
    ['resources.hugepages1Gi: 4096', { 'resources.hugepages1Gi': 4096 }, ok(fits(false))],
    ['resources.hugepages1Gi: 4097', { 'resources.hugepages1Gi': 4097 }, bad('resources.hugepages1Gi', /^must be at most 4096$/)],
    ['resources: unknown key', { 'resources.vcpus': 4 }, bad('resources.vcpus', /^is not a known field$/)],
    ['resources: not an object', { resources: 4 }, bad('resources', /^must be an object$/)],
    // node
    ['node: absent', {}, ok()],
    ['node.profileId: typical', { node: { profileId: 'ubuntu-24.04/cuda:12.8_x' } }, ok()],
    ['node.profileId: 1 character', { node: { profileId: 'a' } }, ok()],
    ['node.profileId: 128 characters', { node: { profileId: 'p'.repeat(128) } }, ok()],
    ['node.profileId: 129 characters', { node: { profileId: 'p'.repeat(129) } }, bad('node.profileId', /^must be at most 128 characters$/)],
    ['node.profileId: empty', { node: { profileId: '' } }, bad('node.profileId', /must match/)],
    ['node.profileId: space', { node: { profileId: 'a b' } }, bad('node.profileId', /must match/)],
    ['node.profileId: backslash', { node: { profileId: 'a\\b' } }, bad('node.profileId', /must match/)],
    ['node.profileId: missing', { node: {} }, bad('node.profileId', /^is required$/)],
    ['node.profileVersion: 0', { node: { profileId: 'p', profileVersion: 0 } }, bad('node.profileVersion', /^must be at least 1$/)],
    ['node.profileVersion: 1', { node: { profileId: 'p', profileVersion: 1 } }, ok()],
    ['node.profileVersion: 2^53 - 1', { node: { profileId: 'p', profileVersion: Number.MAX_SAFE_INTEGER } }, ok()],
    ['node.profileVersion: 1.5', { node: { profileId: 'p', profileVersion: 1.5 } }, bad('node.profileVersion', /^must be an integer$/)],
    ['node.profileVersion: "2"', { node: { profileId: 'p', profileVersion: '2' } }, bad('node.profileVersion', /^must be an integer$/)],
    ['node: unknown key', { node: { profileId: 'p', version: 2 } }, bad('node.version', /^is not a known field$/)],
    // leaseSeconds
    ['leaseSeconds: absent', {}, ok()],
    ['leaseSeconds: 29', { leaseSeconds: 29 }, bad('leaseSeconds', /^must be at least 30$/)],
    ['leaseSeconds: 30', { leaseSeconds: 30 }, ok(fits(true))],
    ['leaseSeconds: 86400', { leaseSeconds: 86400 }, ok(fits(true))],
    ['leaseSeconds: 86401', { leaseSeconds: 86401 }, bad('leaseSeconds', /^must be at most 86400$/)],
    ['leaseSeconds: 60.5', { leaseSeconds: 60.5 }, bad('leaseSeconds', /^must be an integer$/)],
    ['leaseSeconds: "60"', { leaseSeconds: '60' }, bad('leaseSeconds', /^must be an integer$/)],
    // spot
    ['spot: absent', {}, ok()],
    ['spot: true', { spot: true }, ok(fits(true))],
    ['spot: false', { spot: false }, ok(fits(true))],
    ['spot: "true"', { spot: 'true' }, bad('spot', /^must be a boolean$/)],
    ['spot: 1', { spot: 1 }, bad('spot', /^must be a boolean$/)],
    // idempotencyKey (required although nothing is written)
    ['idempotencyKey: 1 character', { idempotencyKey: 'k' }, ok()],
    ['idempotencyKey: 128 characters', { idempotencyKey: 'k'.repeat(128) }, ok()],
    ['idempotencyKey: 129 characters', { idempotencyKey: 'k'.repeat(129) }, bad('idempotencyKey', /^must be at most 128 characters$/)],
    ['idempotencyKey: every allowed character', { idempotencyKey: 'AZaz09._:-' }, ok()],
    ['idempotencyKey: empty', { idempotencyKey: '' }, bad('idempotencyKey', /must match/)],
    ['idempotencyKey: slash', { idempotencyKey: 'a/b' }, bad('idempotencyKey', /must match/)],
    ['idempotencyKey: space', { idempotencyKey: 'a b' }, bad('idempotencyKey', /must match/)],
    ['idempotencyKey: missing', { idempotencyKey: DEL }, bad('idempotencyKey', /^is required$/)],
    ['idempotencyKey: number', { idempotencyKey: 12 }, bad('idempotencyKey', /^must be a string$/)],
    // wait
    ['wait: absent', {}, ok()],
    ['wait.timeoutMs: -1', { wait: { timeoutMs: -1 } }, bad('wait.timeoutMs', /^must be at least 0$/)],
    ['wait.timeoutMs: 0', { wait: { timeoutMs: 0 } }, ok(fits(true))],
    ['wait.timeoutMs: 30000', { wait: { timeoutMs: 30000 } }, ok(fits(true))],
    ['wait.timeoutMs: 30001', { wait: { timeoutMs: 30001 } }, bad('wait.timeoutMs', /^must be at most 30000$/)],
    ['wait.timeoutMs: 1.5', { wait: { timeoutMs: 1.5 } }, bad('wait.timeoutMs', /^must be an integer$/)],
    ['wait.timeoutMs: missing', { wait: {} }, bad('wait.timeoutMs', /^is required$/)],
    ['wait: true', { wait: true }, bad('wait', /^must be an object$/)],
    // gang
    ['gang: absent', {}, ok()],
    ['gang.size: 1', { gang: { size: 1 } }, bad('gang.size', /^must be at least 2$/)],
    ['gang.size: 2', { gang: { size: 2 } }, ok(fits(true))],
    ['gang.size: 64', { gang: { size: 64 } }, ok(fits(false))],
    ['gang.size: 65', { gang: { size: 65 } }, bad('gang.size', /^must be at most 64$/)],
    ['gang.size: 2.5', { gang: { size: 2.5 } }, bad('gang.size', /^must be an integer$/)],
    ['gang.size: missing', { gang: { topologyKey: 'rack' } }, bad('gang.size', /^is required$/)],
    ['gang.topologyKey: empty', { gang: { size: 2, topologyKey: '' } }, ok()],
    ['gang.topologyKey: 128 characters', { gang: { size: 2, topologyKey: 't'.repeat(128) } }, ok()],
    ['gang.topologyKey: 129 characters', { gang: { size: 2, topologyKey: 't'.repeat(129) } }, bad('gang.topologyKey', /^must be at most 128 characters$/)],
    ['gang.topologyKey: a label key', { gang: { size: 2, topologyKey: 'topology.kubernetes.io/zone' } }, ok(fits(true))],
    ['gang.topologyKey: number', { gang: { size: 2, topologyKey: 5 } }, bad('gang.topologyKey', /^must be a string$/)],
    // strictness
    ['unknown top-level key', { leaseSecond: 60 }, bad('leaseSecond', /^is not a known field$/)],
    ['unknown key with an odd name', { 'x-y': 1 }, bad('["x-y"]', /^is not a known field$/)],
  ]);

  it('a number too large for a double (1e400) is not an integer', async () => {
    const text = JSON.stringify(BASE_PREVIEW()).replace('"count":1', '"count":1e400');
    const res = await api.client.request({ path: CAPACITY_PATHS.preview, body: text, headers: { 'content-type': 'application/json' } });
    expect(issueMessage(expectError(res, 'INVALID_INPUT'), 'devices[0].count')).toBe('must be an integer');
  });

  it('answers {fits, candidates} with at most 10 ranked candidates, each {nodeId, atoms, score}', async () => {
    const res = await api.client.post(CAPACITY_PATHS.preview, { ...BASE_PREVIEW(), poolId: BIG });
    expect(res.status).toBe(200);
    const body = res.json as { fits: boolean; candidates: { nodeId: string; atoms: string[]; score: number }[] };
    expect(Object.keys(body)).toEqual(['fits', 'candidates']);
    expect(body.fits).toBe(true);
    expect(body.candidates).toHaveLength(MAX_PREVIEW_CANDIDATES);
    for (const c of body.candidates) {
      expect(Object.keys(c)).toEqual(['nodeId', 'atoms', 'score']);
      expect(c.atoms).toHaveLength(1);
    }
    const scores = body.candidates.map((c) => c.score);
    expect(scores).toEqual([...scores].sort((a, b) => b - a));
  });

  it('with a gang, the candidates are all the members of the best gang (more than 10 if it has more)', async () => {
    const res = await api.client.post(CAPACITY_PATHS.preview, { ...BASE_PREVIEW(), poolId: BIG, gang: { size: 12 } });
    expect(res.status).toBe(200);
    const body = res.json as { fits: boolean; candidates: { nodeId: string }[]; gangDomain?: string };
    expect(body.fits).toBe(true);
    expect(body.candidates).toHaveLength(12);
    expect(new Set(body.candidates.map((c) => c.nodeId)).size).toBe(12);
    expect(body.gangDomain).toBe('zone-a');
  });

  it('with binding "node", the candidates are whole nodes', async () => {
    const res = await api.client.post(CAPACITY_PATHS.preview, { ...BASE_PREVIEW(), binding: 'node' });
    const body = res.json as { candidates: { nodeId: string; atoms: string[] }[] };
    for (const c of body.candidates) expect(c.atoms).toHaveLength(8);
  });

  it('does not fit: {fits: false, candidates: [], reason}', async () => {
    const res = await api.client.post(CAPACITY_PATHS.preview, { ...BASE_PREVIEW(), devices: [{ class: 'gpu', count: 9 }] });
    expect(res.status).toBe(200);
    const body = res.json as { fits: boolean; candidates: unknown[]; reason: string };
    expect(Object.keys(body).sort()).toEqual(['candidates', 'fits', 'reason']);
    expect(body.fits).toBe(false);
    expect(body.candidates).toEqual([]);
    expect(body.reason.length).toBeGreaterThan(0);
  });

  // Found by the fuzz test (capacity-fuzz.test.ts): two requests of one class that fit a node one by one but not together.
  it('5 + 7 GPUs on 8-GPU nodes does not fit', async () => {
    const res = await api.client.post(CAPACITY_PATHS.preview, { ...BASE_PREVIEW(), devices: [{ class: 'gpu', count: 5 }, { class: 'gpu', count: 7 }] });
    expect(res.status, res.text).toBe(200);
    expect(res.json).toMatchObject({ fits: false });
  });

  it('books nothing: the rollup and the bookings are the same after a preview', async () => {
    const before = await t.db.query('SELECT count(*)::int AS n FROM device_bookings');
    const rows = (await api.client.post(CAPACITY_PATHS.byPool, { tenantId: 'acme', poolId: POOL })).json;
    await api.client.post(CAPACITY_PATHS.preview, { ...BASE_PREVIEW(), devices: [{ class: 'gpu', count: 8 }] });
    expect((await t.db.query('SELECT count(*)::int AS n FROM device_bookings')).rows).toEqual(before.rows);
    expect((await api.client.post(CAPACITY_PATHS.byPool, { tenantId: 'acme', poolId: POOL })).json).toEqual(rows);
  });

  it('sees bookings: a full pool does not fit, a window after the booking does', async () => {
    const pool = await makePool('api-full').owner('acme').create(t.db);
    await makeNode('api-full-n1').gpus(2).create(t.db, pool);
    const ledger = new Ledger(t.db);
    const now = api.clock.now();
    expect((await ledger.reserve(reservation(pool, { devices: [{ class: 'gpu', count: 2 }], duration: 3600 }), now)).ok).toBe(true);
    const body = { ...BASE_PREVIEW(), poolId: pool, devices: [{ class: 'gpu', count: 2 }] };
    expect((await api.client.post(CAPACITY_PATHS.preview, body)).json).toMatchObject({ fits: false });
    expect((await api.client.post(CAPACITY_PATHS.preview, { ...body, start: now + 2 * HOUR })).json).toMatchObject({ fits: true });
  });
});

describe('preview: preemptible is passed through from the ledger', () => {
  let fake: TestApi;
  let answer: PlanAnswer;
  beforeAll(async () => {
    const previewer: Previewer = { preview: async () => answer };
    fake = await startTestApi(t.db, { previewer });
  });
  afterAll(async () => fake.close());

  it('a regular request that does not fit says how many spot reservations would get a notice and when it would start', async () => {
    answer = { ok: false, reason: 'no node has 8 free GPUs', preemptible: { count: 3, start: 1_790_000_000_000 } };
    const res = await fake.client.post(CAPACITY_PATHS.preview, BASE_PREVIEW());
    expect(res.json).toEqual({ fits: false, candidates: [], reason: 'no node has 8 free GPUs', preemptible: { count: 3, start: 1_790_000_000_000 } });
  });

  it('a spot request never reports preemption', async () => {
    answer = { ok: false, reason: 'full', preemptible: { count: 3, start: 1 } };
    const res = await fake.client.post(CAPACITY_PATHS.preview, { ...BASE_PREVIEW(), spot: true });
    expect(res.json).toEqual({ fits: false, candidates: [], reason: 'full' });
  });

  it('only a count and a time: nothing else the ledger adds reaches the caller', async () => {
    answer = { ok: false, reason: 'full', preemptible: { count: 1, start: 2, ids: ['rsv_x'] } as never };
    const res = await fake.client.post(CAPACITY_PATHS.preview, BASE_PREVIEW());
    expect((res.json as { preemptible: unknown }).preemptible).toEqual({ count: 1, start: 2 });
  });

  it('more than 10 candidates without a gang are cut to the 10 best', async () => {
    answer = { ok: true, candidates: Array.from({ length: 14 }, (_, i) => ({ nodeId: `n${i}`, atoms: [`a${i}`], score: 100 - i, scalars: {} })) };
    const res = await fake.client.post(CAPACITY_PATHS.preview, BASE_PREVIEW());
    expect((res.json as { candidates: { nodeId: string }[] }).candidates.map((c) => c.nodeId)).toEqual(Array.from({ length: 10 }, (_, i) => `n${i}`));
  });
});

// ---------------------------------------------------------------------------------------------------------------

describe('POST /api/compute/capacity/timeline', () => {
  // A fixed window for the rows that are not about the window (the defaults depend on the clock).
  const T0 = Date.UTC(2026, 0, 15, 10, 0, 0, 0);
  const base = () => ({ tenantId: 'acme', poolId: POOL, from: T0, to: T0 + DAY });
  const buckets = (n: number) => (j: Record<string, unknown>) => expect(j.buckets).toHaveLength(n);
  const window = (from: number, to: number, stepMinutes: number) => (j: Record<string, unknown>) =>
    expect(j).toMatchObject({ from, to, stepMinutes, buckets: expect.any(Array) });

  runRows(CAPACITY_PATHS.timeline, base, [
    ...tenantIdRows(),
    ...poolIdRows(),
    // from
    ['from: 0', { from: 0, to: HOUR }, ok(window(0, HOUR, 60))],
    ['from: 0, to defaults to from + 24 h', { from: 0, to: DEL }, ok(window(0, DAY, 60))],
    ['from: 140737488355328 (to defaults to from + 24 h)', { from: TWO_47, to: DEL }, ok(window(TWO_47, TWO_47 + DAY, 60))],
    ['from: -1', { from: -1 }, bad('from', /^must be at least 0$/)],
    ['from: 140737488355329', { from: TWO_47 + 1 }, bad('from', /^must be at most 140737488355328$/)],
    ['from: 1.5', { from: 1.5 }, bad('from', /^must be an integer$/)],
    ['from: numeric string', { from: '0' }, bad('from', /^must be an integer$/)],
    ['from: null', { from: null }, bad('from', /^must be an integer$/)],
    // to
    ['to: 0 passes the bound, then is not after from', { from: 0, to: 0 }, bad('to', /^must be after from/)],
    ['to: 1 (from 0)', { from: 0, to: 1 }, ok(window(0, 1, 60))],
    ['to: 140737488355328', { from: TWO_47 - HOUR, to: TWO_47 }, ok(window(TWO_47 - HOUR, TWO_47, 60))],
    ['to: -1', { to: -1 }, bad('to', /^must be at least 0$/)],
    ['to: 140737488355329', { to: TWO_47 + 1 }, bad('to', /^must be at most 140737488355328$/)],
    ['to: 1.5', { to: T0 + 1.5 }, bad('to', /^must be an integer$/)],
    ['to: "1"', { to: '1' }, bad('to', /^must be an integer$/)],
    // stepMinutes
    ['stepMinutes: default 60', {}, ok((j) => expect(j).toMatchObject({ stepMinutes: 60, buckets: expect.any(Array) }))],
    ['stepMinutes: 4', { stepMinutes: 4 }, bad('stepMinutes', /^must be at least 5$/)],
    ['stepMinutes: 5', { stepMinutes: 5, to: T0 + 5 * 60_000 * 336 }, ok(buckets(336))],
    ['stepMinutes: 1440', { stepMinutes: 1440 }, ok(buckets(1))],
    ['stepMinutes: 1441', { stepMinutes: 1441 }, bad('stepMinutes', /^must be at most 1440$/)],
    ['stepMinutes: 7.5', { stepMinutes: 7.5 }, bad('stepMinutes', /^must be an integer$/)],
    ['stepMinutes: "60"', { stepMinutes: '60' }, bad('stepMinutes', /^must be an integer$/)],
    ['stepMinutes: null', { stepMinutes: null }, bad('stepMinutes', /^must be an integer$/)],
    // the window
    ['to == from', { to: T0 }, bad('to', /must be after from/)],
    ['to before from', { to: T0 - 1 }, bad('to', /must be after from/)],
    ['to = from + 1 ms: one bucket', { to: T0 + 1 }, ok(buckets(1))],
    ['exactly 7 days', { to: T0 + 7 * DAY }, ok(buckets(168))],
    ['7 days + 1 ms', { to: T0 + 7 * DAY + 1, stepMinutes: 1440 }, bad('to', /at most 7 days/)],
    ['336 buckets (7 days of 30 minutes)', { to: T0 + 7 * DAY, stepMinutes: 30 }, ok(buckets(336))],
    ['337 buckets (by 1 ms)', { to: T0 + 336 * 300_000 + 1, stepMinutes: 5 }, bad('stepMinutes', /337 buckets.*at most 336/)],
    ['a partial last bucket counts', { to: T0 + 90 * 60_000 }, ok(buckets(2))],
    ['unknown key', { step: 5 }, bad('step', /^is not a known field$/)],
  ]);

  it('defaults: from = the start of the current hour by compute_now(), to = from + 24 h, stepMinutes = 60', async () => {
    const before = api.clock.now();
    const res = await api.client.post(CAPACITY_PATHS.timeline, { tenantId: 'acme', poolId: POOL });
    const after = api.clock.now();
    expect(res.status).toBe(200);
    const body = res.json as { from: number; to: number; stepMinutes: number; buckets: unknown[] };
    const hours = [before, after].map((n) => Math.floor(n / HOUR) * HOUR);
    expect(hours).toContain(body.from);
    expect(body.to).toBe(body.from + DAY);
    expect(body.stepMinutes).toBe(60);
    expect(body.buckets).toHaveLength(24);
  });

  it('to given alone: from defaults to the start of the current hour', async () => {
    const hour = Math.floor(api.clock.now() / HOUR) * HOUR;
    const res = await api.client.post(CAPACITY_PATHS.timeline, { tenantId: 'acme', poolId: POOL, to: hour + 3 * HOUR });
    expect(res.json).toMatchObject({ from: hour, to: hour + 3 * HOUR });
  });

  it('answers {poolId, from, to, stepMinutes, allocatable, buckets[{start, end, booked, free}]}', async () => {
    const pool = await makePool('api-timeline').owner('acme').create(t.db);
    await makeNode('api-tl-n1').gpus(4).create(t.db, pool);
    const now = api.clock.now();
    const from = Math.floor(now / HOUR) * HOUR + HOUR;
    await new Ledger(t.db).reserve(reservation(pool, { devices: [{ class: 'gpu', count: 3 }], start: from + HOUR, duration: 3600 }), now);
    const res = await api.client.post(CAPACITY_PATHS.timeline, { tenantId: 'acme', poolId: pool, from, to: from + 3 * HOUR });
    expect(res.status).toBe(200);
    expect(Object.keys(res.json as object)).toEqual(['poolId', 'from', 'to', 'stepMinutes', 'allocatable', 'buckets']);
    expect(res.json).toEqual({
      poolId: pool,
      from,
      to: from + 3 * HOUR,
      stepMinutes: 60,
      allocatable: 4,
      buckets: [
        { start: from, end: from + HOUR, booked: 0, free: 4 },
        { start: from + HOUR, end: from + 2 * HOUR, booked: 3, free: 1 },
        { start: from + 2 * HOUR, end: from + 3 * HOUR, booked: 0, free: 4 },
      ],
    });
  });
});

// ---------------------------------------------------------------------------------------------------------------

describe('NOT_FOUND and archived pools', () => {
  const poolMethods = [
    ['byPool', CAPACITY_PATHS.byPool, (tenantId: string, poolId: string) => ({ tenantId, poolId })],
    ['preview', CAPACITY_PATHS.preview, (tenantId: string, poolId: string) => ({ ...BASE_PREVIEW(), tenantId, poolId })],
    ['timeline', CAPACITY_PATHS.timeline, (tenantId: string, poolId: string) => ({ tenantId, poolId })],
  ] as const;

  const cases: [string, () => string, string, number][] = [
    ['a pool that does not exist', () => MISSING, 'acme', 404],
    ['another tenant’s pool, not offered', () => FOREIGN, 'acme', 404],
    ['a pool offered to the tenant', () => OFFERED, 'acme', 200],
    ['the tenant’s own pool', () => POOL, 'acme', 200],
    ['an archived pool offered to the tenant (not its owner)', () => ARCHIVED_OFFERED, 'acme', 404],
    ['an archived pool, asked by its owner', () => ARCHIVED_OFFERED, 'ops', 200],
    ['the tenant’s own archived pool', () => ARCHIVED_OWN, 'acme', 200],
    ['a pool offered to someone else', () => POOL, 'ops', 404],
  ];

  for (const [method, path, body] of poolMethods) {
    describe(method, () => {
      it.each(cases)('%s → %#', async (_name, pool, tenant, status) => {
        const res = await api.client.post(path, body(tenant, pool()));
        if (status === 404) {
          expect(expectError(res, 'NOT_FOUND')).toBe(`pool ${pool()} not found`);
        } else {
          expect(res.status, res.text).toBe(200);
        }
      });

      it('says the same for a pool that does not exist and one the tenant may not see', async () => {
        const a = (await api.client.post(path, body('acme', FOREIGN))).json as { error: { message: string } };
        const b = (await api.client.post(path, body('acme', MISSING))).json as { error: { message: string } };
        expect(a.error.message.replace(FOREIGN, 'X')).toBe(b.error.message.replace(MISSING, 'X'));
      });
    });
  }

  it('the owner previews its archived pool: nothing fits (archived pools take no bookings)', async () => {
    const res = await api.client.post(CAPACITY_PATHS.preview, { ...BASE_PREVIEW(), poolId: ARCHIVED_OWN });
    expect(res.json).toMatchObject({ fits: false, candidates: [] });
  });
});

// ---------------------------------------------------------------------------------------------------------------

describe('malformed requests are INVALID_INPUT, never 5xx', () => {
  const paths = Object.values(CAPACITY_PATHS);
  const raw = (path: string, body: string | Buffer | undefined, headers: Record<string, string>) =>
    api.client.request({ path, ...(body !== undefined ? { body } : {}), headers });

  it.each(paths)('%s: malformed JSON', async (path) => {
    expect(expectError(await raw(path, '{"tenantId": "acme"', { 'content-type': 'application/json' }), 'INVALID_INPUT')).toBe('the body is not valid JSON');
  });

  it.each(paths)('%s: wrong content type', async (path) => {
    const message = expectError(await raw(path, '{"tenantId":"acme"}', { 'content-type': 'text/plain' }), 'INVALID_INPUT');
    expect(message).toMatch(/Content-Type: application\/json/);
  });

  it.each(paths)('%s: no content type', async (path) => {
    expectError(await raw(path, '{"tenantId":"acme"}', {}), 'INVALID_INPUT');
  });

  it.each(paths)('%s: no body', async (path) => {
    expectError(await raw(path, undefined, { 'content-type': 'application/json' }), 'INVALID_INPUT');
  });

  it.each(paths)('%s: an empty body', async (path) => {
    expectError(await raw(path, '', { 'content-type': 'application/json' }), 'INVALID_INPUT');
  });

  it.each(paths.flatMap((p) => ['null', '[]', '"acme"', '42', 'true'].map((b) => [p, b] as const)))('%s: a body that is %s', async (path, body) => {
    const message = expectError(await raw(path, body, { 'content-type': 'application/json' }), 'INVALID_INPUT');
    expect(message).toMatch(/^input: must be (an object|a list)$/);
  });

  it.each(paths)('%s: a body over the limit', async (path) => {
    const body = JSON.stringify({ tenantId: 'acme', pad: 'x'.repeat(MAX_BODY_BYTES) });
    expect(expectError(await raw(path, body, { 'content-type': 'application/json' }), 'INVALID_INPUT')).toMatch(/too large/);
  });

  it('a body just under the limit is read (and then refused for its unknown key)', async () => {
    const body = JSON.stringify({ tenantId: 'acme', pad: '' });
    const padded = body.replace('"pad":""', `"pad":"${'x'.repeat(MAX_BODY_BYTES - body.length)}"`);
    expect(padded.length).toBe(MAX_BODY_BYTES);
    expect(issueMessage(expectError(await raw(CAPACITY_PATHS.summary, padded, { 'content-type': 'application/json' }), 'INVALID_INPUT'), 'pad')).toBe('is not a known field');
  });

  it('a charset other than UTF-8', async () => {
    expectError(await raw(CAPACITY_PATHS.summary, '{"tenantId":"acme"}', { 'content-type': 'application/json; charset=latin1' }), 'INVALID_INPUT');
  });

  it('an unknown content encoding', async () => {
    expectError(await raw(CAPACITY_PATHS.summary, '{"tenantId":"acme"}', { 'content-type': 'application/json', 'content-encoding': 'br-nope' }), 'INVALID_INPUT');
  });

  it('gzip that is not gzip', async () => {
    expectError(await raw(CAPACITY_PATHS.summary, 'not gzip', { 'content-type': 'application/json', 'content-encoding': 'gzip' }), 'INVALID_INPUT');
  });

  it('a __proto__ key is an unknown field, not a prototype', async () => {
    const res = await raw(CAPACITY_PATHS.summary, '{"tenantId":"acme","__proto__":{"tenantId":"x"}}', { 'content-type': 'application/json' });
    expect(issueMessage(expectError(res, 'INVALID_INPUT'), '__proto__')).toBe('is not a known field');
  });

  it('GET on a capacity method, and unknown paths, are NOT_FOUND', async () => {
    expectError(await api.client.request({ method: 'GET', path: CAPACITY_PATHS.summary }), 'NOT_FOUND');
    expectError(await api.client.post('/api/compute/capacity/nope', { tenantId: 'acme' }), 'NOT_FOUND');
    expectError(await api.client.request({ method: 'GET', path: '/' }), 'NOT_FOUND');
  });
});

describe('authorization over HTTP', () => {
  it('no token: UNAUTHENTICATED, before the body is read', async () => {
    const res = await api.client.request({ path: CAPACITY_PATHS.summary, body: '{not json', token: '', headers: { 'content-type': 'application/json' } });
    expect(expectError(res, 'UNAUTHENTICATED')).toBe('a bearer token is required');
  });

  it('an unknown token: UNAUTHENTICATED', async () => {
    expectError(await api.client.post(CAPACITY_PATHS.summary, { tenantId: 'acme' }, 'not-a-known-token'), 'UNAUTHENTICATED');
  });

  it('a token that is not a bearer token: UNAUTHENTICATED', async () => {
    const res = await api.client.request({ path: CAPACITY_PATHS.summary, body: { tenantId: 'acme' }, token: '', headers: { authorization: `Basic ${TOKENS.acme}` } });
    expectError(res, 'UNAUTHENTICATED');
  });

  it.each([
    ['summary', CAPACITY_PATHS.summary, (tenantId: string) => ({ tenantId })],
    ['byPool', CAPACITY_PATHS.byPool, (tenantId: string) => ({ tenantId, poolId: OFFERED })],
    ['preview', CAPACITY_PATHS.preview, (tenantId: string) => ({ ...BASE_PREVIEW(), tenantId, poolId: OFFERED })],
    ['timeline', CAPACITY_PATHS.timeline, (tenantId: string) => ({ tenantId, poolId: OFFERED })],
  ] as const)('%s: decided on the request’s tenant', async (_name, path, body) => {
    expect((await api.client.post(path, body('acme'), TOKENS.acme)).status).toBe(200);
    expect(expectError(await api.client.post(path, body('ops'), TOKENS.acme), 'FORBIDDEN')).toMatch(/^alice may not read the capacity of/);
    expectError(await api.client.post(path, body('acme'), TOKENS.none), 'FORBIDDEN');
    // ops owns OFFERED but the token is acme's: the decision is on the tenant asked about, not on the pool's owner.
    expectError(await api.client.post(path, body('acme'), TOKENS.ops), 'FORBIDDEN');
  });

  it('FORBIDDEN comes before NOT_FOUND: a caller learns nothing about pools of tenants it may not read', async () => {
    expectError(await api.client.post(CAPACITY_PATHS.byPool, { tenantId: 'ops', poolId: MISSING }, TOKENS.acme), 'FORBIDDEN');
  });
});

describe('health, readiness, metrics', () => {
  it('GET /healthz and /readyz', async () => {
    const h = await api.client.request({ method: 'GET', path: '/healthz' });
    expect([h.status, h.json]).toEqual([200, { status: 'ok' }]);
    const r = await api.client.request({ method: 'GET', path: '/readyz' });
    expect([r.status, r.json]).toEqual([200, { status: 'ready' }]);
  });

  it('GET /metrics needs no token and speaks the Prometheus text format', async () => {
    const m = await api.client.request({ method: 'GET', path: '/metrics', token: '' });
    expect(m.status).toBe(200);
    expect(m.headers['content-type']).toMatch(/^text\/plain; version=0\.0\.4/);
    expect(m.text).toContain(`bettercompute_pool_allocatable{pool="api-main",pool_id="${POOL}",resource="gpu",gpu_model="H100"} 24`);
  });
});
