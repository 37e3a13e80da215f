import { describe, expect, it } from 'vitest';
import type { z } from 'zod';
import { MAX_DURATION_SECONDS } from './duration.ts';
import {
  ByDomainInput,
  ByPoolInput,
  formatPath,
  MAX_EPOCH_MS,
  parseInput,
  PoolId,
  PreviewInput,
  ProjectId,
  ReservationCreateInput,
  resolveTimelineWindow,
  SummaryInput,
  TenantId,
  TimelineInput,
  ValidationError,
  type TimelineWindow,
} from './schemas.ts';

// ---------------------------------------------------------------------------------------------------------------
// Helpers

/** 26 characters of the ULID alphabet used by ids: digits and lowercase letters without i, l, o, u. */
const ULID_CHARS = '0123456789abcdefghjkmnpqrstvwxyz';
const ulid = (n: number) => Array.from({ length: n }, (_, i) => ULID_CHARS[i % ULID_CHARS.length]).join('');
const pool = (n: number) => `pool_${ulid(n)}`;
const prj = (n: number) => `prj_${ulid(n)}`;

const POOL = pool(26);
const TWO_47 = 140_737_488_355_328;

const DEL = Symbol('delete');
type Patch = Record<string, unknown>;
type Expect = { ok: true; at?: string; value?: unknown } | { ok: false; path: string; msg: RegExp };
type Row = [name: string, patch: Patch, expect: Expect];

const ok = (at?: string, value?: unknown): Expect => (at === undefined ? { ok: true } : { ok: true, at, value });
const bad = (path: string, msg: RegExp): Expect => ({ ok: false, path, msg });

/** Applies `{ 'devices.0.count': 5, spot: DEL }` to a deep copy of `base`. */
function patched(base: object, patch: Patch): unknown {
  const out = structuredClone(base) as Record<string, unknown>;
  for (const [path, value] of Object.entries(patch)) {
    const keys = path.split('.');
    let cur: Record<string, unknown> = out;
    for (const k of keys.slice(0, -1)) {
      cur[k] ??= {};
      cur = cur[k] as Record<string, unknown>;
    }
    const last = keys[keys.length - 1] as string;
    if (value === DEL) delete cur[last];
    else cur[last] = value;
  }
  return out;
}

function get(obj: unknown, path: string): unknown {
  return path.split('.').reduce<unknown>((cur, k) => (cur as Record<string, unknown> | undefined)?.[k], obj);
}

function validationErrorOf(fn: () => unknown): ValidationError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(ValidationError);
    return err as ValidationError;
  }
  throw new Error('expected a ValidationError');
}

function runRows(schema: z.ZodType, base: object, rows: readonly Row[]): void {
  it.each(rows)('%s', (_name, patch, expectation) => {
    const body = patched(base, patch);
    if (expectation.ok) {
      const out = parseInput(schema, body);
      if (expectation.at !== undefined) expect(get(out, expectation.at)).toEqual(expectation.value);
    } else {
      const err = validationErrorOf(() => parseInput(schema, body));
      expect(err.code).toBe('INVALID_INPUT');
      const issue = err.issues.find((i) => i.path === expectation.path);
      expect(issue, `issues: ${JSON.stringify(err.issues)}`).toBeDefined();
      expect(issue?.message).toMatch(expectation.msg);
      expect(err.message).toContain(`${expectation.path === '' ? 'input' : expectation.path}: `);
    }
  });
}

// ---------------------------------------------------------------------------------------------------------------
// Shared constraint tables

const tenantIdRows: Row[] = [
  ['tenantId: 1 character', { tenantId: 'a' }, ok('tenantId', 'a')],
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

const poolIdRows: Row[] = [
  ['poolId: 26 ULID characters', { poolId: pool(26) }, ok('poolId', pool(26))],
  ['poolId: 52 ULID characters (57 in all)', { poolId: pool(52) }, ok()],
  ['poolId: 25 ULID characters', { poolId: pool(25) }, bad('poolId', /must match/)],
  ['poolId: 53 ULID characters', { poolId: pool(53) }, bad('poolId', /^must be at most 57 characters$/)],
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

const BASE_CREATE = {
  tenantId: 'acme',
  poolId: POOL,
  devices: [{ class: 'gpu', count: 1 }],
  duration: '1h',
  idempotencyKey: 'req-1',
};

const twoDevices = (n: number) => Array.from({ length: n }, () => ({ class: 'gpu', count: 1 }));

const createRows: Row[] = [
  ...tenantIdRows,
  ...poolIdRows,
  // projectId
  ['projectId: absent', {}, ok('projectId', undefined)],
  ['projectId: 26 ULID characters', { projectId: prj(26) }, ok('projectId', prj(26))],
  ['projectId: 52 ULID characters (56 in all)', { projectId: prj(52) }, ok()],
  ['projectId: 25 ULID characters', { projectId: prj(25) }, bad('projectId', /must match/)],
  ['projectId: 53 ULID characters', { projectId: prj(53) }, bad('projectId', /^must be at most 56 characters$/)],
  ['projectId: contains i', { projectId: `prj_${ulid(25)}i` }, bad('projectId', /must match/)],
  ['projectId: contains l', { projectId: `prj_${ulid(25)}l` }, bad('projectId', /must match/)],
  ['projectId: contains o', { projectId: `prj_${ulid(25)}o` }, bad('projectId', /must match/)],
  ['projectId: contains u', { projectId: `prj_${ulid(25)}u` }, bad('projectId', /must match/)],
  ['projectId: uppercase', { projectId: `prj_${ulid(26).toUpperCase()}` }, bad('projectId', /must match/)],
  ['projectId: pool id', { projectId: POOL }, bad('projectId', /must match/)],
  ['projectId: null', { projectId: null }, bad('projectId', /^must be a string$/)],
  // devices
  ['devices: 0 items', { devices: [] }, bad('devices', /^must have at least 1 items$/)],
  ['devices: 1 item', { devices: twoDevices(1) }, ok()],
  ['devices: 8 items', { devices: twoDevices(8) }, ok()],
  ['devices: 9 items', { devices: twoDevices(9) }, bad('devices', /^must have at most 8 items$/)],
  ['devices: missing', { devices: DEL }, bad('devices', /^is required$/)],
  ['devices: an object', { devices: { class: 'gpu', count: 1 } }, bad('devices', /^must be a list$/)],
  ['devices[]: not an object', { devices: ['gpu'] }, bad('devices[0]', /^must be an object$/)],
  ['devices[]: unknown key', { 'devices.0.cout': 2 }, bad('devices[0].cout', /^is not a known field$/)],
  // devices[].class
  ['devices[].class: gpu', { 'devices.0.class': 'gpu' }, ok('devices.0.class', 'gpu')],
  ['devices[].class: gpu.mig', { 'devices.0.class': 'gpu.mig' }, ok('devices.0.class', 'gpu.mig')],
  ['devices[].class: gpu.slot', { 'devices.0.class': 'gpu.slot' }, ok('devices.0.class', 'gpu.slot')],
  ['devices[].class: nic.vf', { 'devices.0.class': 'nic.vf' }, ok('devices.0.class', 'nic.vf')],
  ['devices[].class: disk', { 'devices.0.class': 'disk' }, ok('devices.0.class', 'disk')],
  ['devices[].class: node', { 'devices.0.class': 'node' }, ok('devices.0.class', 'node')],
  ['devices[].class: unknown', { 'devices.0.class': 'tpu' }, bad('devices[0].class', /^must be one of "gpu", "gpu.mig", "gpu.slot", "nic.vf", "disk", "node"$/)],
  ['devices[].class: wrong case', { 'devices.0.class': 'GPU' }, bad('devices[0].class', /must be one of/)],
  ['devices[].class: missing', { 'devices.0.class': DEL }, bad('devices[0].class', /^is required$/)],
  // devices[].count
  ['devices[].count: 0', { 'devices.0.count': 0 }, bad('devices[0].count', /^must be at least 1$/)],
  ['devices[].count: 1', { 'devices.0.count': 1 }, ok('devices.0.count', 1)],
  ['devices[].count: 64', { 'devices.0.count': 64 }, ok('devices.0.count', 64)],
  ['devices[].count: 65', { 'devices.0.count': 65 }, bad('devices[0].count', /^must be at most 64$/)],
  ['devices[].count: -1', { 'devices.0.count': -1 }, bad('devices[0].count', /^must be at least 1$/)],
  ['devices[].count: 1.5', { 'devices.0.count': 1.5 }, bad('devices[0].count', /^must be an integer$/)],
  ['devices[].count: 0.5', { 'devices.0.count': 0.5 }, bad('devices[0].count', /^must be an integer$/)],
  ['devices[].count: "5"', { 'devices.0.count': '5' }, bad('devices[0].count', /^must be an integer$/)],
  ['devices[].count: NaN', { 'devices.0.count': Number.NaN }, bad('devices[0].count', /^must be an integer$/)],
  ['devices[].count: Infinity', { 'devices.0.count': Number.POSITIVE_INFINITY }, bad('devices[0].count', /^must be an integer$/)],
  ['devices[].count: null', { 'devices.0.count': null }, bad('devices[0].count', /^must be an integer$/)],
  ['devices[].count: missing', { 'devices.0.count': DEL }, bad('devices[0].count', /^is required$/)],
  ['devices[].count: on the 8th device', { devices: [...twoDevices(7), { class: 'gpu', count: 65 }] }, bad('devices[7].count', /^must be at most 64$/)],
  // devices[].selector
  ['devices[].selector: absent', {}, ok('devices.0.selector', undefined)],
  ['devices[].selector: empty', { 'devices.0.selector': {} }, ok('devices.0.selector', {})],
  [
    'devices[].selector: the reference example, kept as given',
    { 'devices.0.selector': { gpuModel: 'H100', vramGiB: { gte: 80 }, numaNode: { in: [0, 1] }, nvlinkDomain: { exists: true } } },
    ok('devices.0.selector', { gpuModel: 'H100', vramGiB: { gte: 80 }, numaNode: { in: [0, 1] }, nvlinkDomain: { exists: true } }),
  ],
  ['devices[].selector: bad operator value', { 'devices.0.selector': { vramGiB: { gte: '80' } } }, bad('devices[0].selector', /^invalid selector: .*"vramGiB".*"gte".*finite number/)],
  ['devices[].selector: unknown operator', { 'devices.0.selector': { vramGiB: { between: [1, 2] } } }, bad('devices[0].selector', /unknown operator "between"/)],
  ['devices[].selector: empty in list', { 'devices.0.selector': { numaNode: { in: [] } } }, bad('devices[0].selector', /must not be empty/)],
  ['devices[].selector: bad attribute name', { 'devices.0.selector': { 'gpu model': 'H100' } }, bad('devices[0].selector', /invalid attribute name/)],
  ['devices[].selector: null value', { 'devices.0.selector': { gpuModel: null } }, bad('devices[0].selector', /attribute "gpuModel"/)],
  ['devices[].selector: 65 clauses', { 'devices.0.selector': Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`a${i}`, i])) }, bad('devices[0].selector', /too many clauses/)],
  ['devices[].selector: 64 clauses', { 'devices.0.selector': Object.fromEntries(Array.from({ length: 64 }, (_, i) => [`a${i}`, i])) }, ok()],
  ['devices[].selector: a string', { 'devices.0.selector': 'vramGiB >= 80' }, bad('devices[0].selector', /^must be an object$/)],
  ['devices[].selector: a list', { 'devices.0.selector': [] }, bad('devices[0].selector', /^must be an object$/)],
  ['devices[].selector: null', { 'devices.0.selector': null }, bad('devices[0].selector', /^must be an object$/)],
  ['devices[].selector: a __proto__ key', { 'devices.0.selector': JSON.parse('{"__proto__": {"gte": 1}}') as unknown }, bad('devices[0].selector', /invalid attribute name "__proto__"/)],
  ['devices[].selector: a Date', { 'devices.0.selector': new Date(0) }, bad('devices[0].selector', /^must be an object$/)],
  ['devices[].selector: on the 2nd device', { devices: [{ class: 'gpu', count: 1 }, { class: 'gpu', count: 1, selector: { a: { gt: true } } }] }, bad('devices[1].selector', /invalid selector/)],
  // devices[].topology and devices[].sharing
  ['devices[].topology: any', { 'devices.0.topology': 'any' }, ok('devices.0.topology', 'any')],
  ['devices[].topology: nvlink-all', { 'devices.0.topology': 'nvlink-all' }, ok('devices.0.topology', 'nvlink-all')],
  ['devices[].topology: unknown', { 'devices.0.topology': 'ring' }, bad('devices[0].topology', /^must be one of "any", "nvlink-all"$/)],
  ['devices[].sharing: exclusive', { 'devices.0.sharing': 'exclusive' }, ok('devices.0.sharing', 'exclusive')],
  ['devices[].sharing: mig', { 'devices.0.sharing': 'mig' }, ok('devices.0.sharing', 'mig')],
  ['devices[].sharing: timeslice', { 'devices.0.sharing': 'timeslice' }, ok('devices.0.sharing', 'timeslice')],
  ['devices[].sharing: mps', { 'devices.0.sharing': 'mps' }, ok('devices.0.sharing', 'mps')],
  ['devices[].sharing: unknown', { 'devices.0.sharing': 'shared' }, bad('devices[0].sharing', /^must be one of "exclusive", "mig", "timeslice", "mps"$/)],
  ['devices[].sharing: wrong case', { 'devices.0.sharing': 'MIG' }, bad('devices[0].sharing', /must be one of/)],
  // topology
  ['topology: absent', {}, ok('topology', undefined)],
  ['topology: any', { topology: 'any' }, ok('topology', 'any')],
  ['topology: nvlink-all', { topology: 'nvlink-all' }, ok('topology', 'nvlink-all')],
  ['topology: unknown', { topology: 'nvlink' }, bad('topology', /^must be one of "any", "nvlink-all"$/)],
  // start
  ['start: absent', {}, ok('start', undefined)],
  ['start: 0', { start: 0 }, ok('start', 0)],
  ['start: 140737488355328', { start: TWO_47 }, ok('start', TWO_47)],
  ['start: -1', { start: -1 }, bad('start', /^must be at least 0$/)],
  ['start: 140737488355329', { start: TWO_47 + 1 }, bad('start', /^must be at most 140737488355328$/)],
  ['start: 1.5', { start: 1.5 }, bad('start', /^must be an integer$/)],
  ['start: numeric string', { start: '1700000000000' }, bad('start', /^must be an integer$/)],
  ['start: ISO date string', { start: '2026-01-01T00:00:00Z' }, bad('start', /^must be an integer$/)],
  // duration
  ['duration: "1h" → seconds', { duration: '1h' }, ok('duration', 3600)],
  ['duration: integer seconds', { duration: 5400 }, ok('duration', 5400)],
  ['duration: integer string', { duration: '90' }, ok('duration', 90)],
  ['duration: ISO 8601', { duration: 'P1DT12H' }, ok('duration', 129_600)],
  ['duration: 1 second', { duration: 1 }, ok('duration', 1)],
  ['duration: 366 days', { duration: MAX_DURATION_SECONDS }, ok('duration', MAX_DURATION_SECONDS)],
  ['duration: 0', { duration: 0 }, bad('duration', /between 1 second and 366 days/)],
  ['duration: 366 days + 1 s', { duration: MAX_DURATION_SECONDS + 1 }, bad('duration', /between 1 second and 366 days/)],
  ['duration: 367d', { duration: '367d' }, bad('duration', /between 1 second and 366 days/)],
  ['duration: 1.5', { duration: 1.5 }, bad('duration', /whole number of seconds/)],
  ['duration: years', { duration: 'P1Y' }, bad('duration', /years and months/)],
  ['duration: garbage', { duration: 'soon' }, bad('duration', /invalid duration "soon"/)],
  ['duration: boolean', { duration: true }, bad('duration', /^must be a duration string or an integer number of seconds$/)],
  ['duration: null', { duration: null }, bad('duration', /^must be a duration string or an integer number of seconds$/)],
  ['duration: missing', { duration: DEL }, bad('duration', /^is required$/)],
  // binding
  ['binding: default "hold"', {}, ok('binding', 'hold')],
  ['binding: "node"', { binding: 'node' }, ok('binding', 'node')],
  ['binding: any string', { binding: 'kubelet' }, ok('binding', 'kubelet')],
  ['binding: number', { binding: 1 }, bad('binding', /^must be a string$/)],
  ['binding: null', { binding: null }, bad('binding', /^must be a string$/)],
  // resources
  ['resources: absent', {}, ok('resources', undefined)],
  ['resources: empty', { resources: {} }, ok('resources', {})],
  ['resources.vcpu: -1', { 'resources.vcpu': -1 }, bad('resources.vcpu', /^must be at least 0$/)],
  ['resources.vcpu: 0', { 'resources.vcpu': 0 }, ok('resources.vcpu', 0)],
  ['resources.vcpu: 4096', { 'resources.vcpu': 4096 }, ok('resources.vcpu', 4096)],
  ['resources.vcpu: 4097', { 'resources.vcpu': 4097 }, bad('resources.vcpu', /^must be at most 4096$/)],
  ['resources.vcpu: 0.5', { 'resources.vcpu': 0.5 }, bad('resources.vcpu', /^must be an integer$/)],
  ['resources.memoryGiB: -1', { 'resources.memoryGiB': -1 }, bad('resources.memoryGiB', /^must be at least 0$/)],
  ['resources.memoryGiB: 0', { 'resources.memoryGiB': 0 }, ok('resources.memoryGiB', 0)],
  ['resources.memoryGiB: 65536', { 'resources.memoryGiB': 65536 }, ok('resources.memoryGiB', 65536)],
  ['resources.memoryGiB: 65537', { 'resources.memoryGiB': 65537 }, bad('resources.memoryGiB', /^must be at most 65536$/)],
  ['resources.memoryGiB: "64"', { 'resources.memoryGiB': '64' }, bad('resources.memoryGiB', /^must be an integer$/)],
  ['resources.hugepages1Gi: -1', { 'resources.hugepages1Gi': -1 }, bad('resources.hugepages1Gi', /^must be at least 0$/)],
  ['resources.hugepages1Gi: 0', { 'resources.hugepages1Gi': 0 }, ok('resources.hugepages1Gi', 0)],
  ['resources.hugepages1Gi: 4096', { 'resources.hugepages1Gi': 4096 }, ok('resources.hugepages1Gi', 4096)],
  ['resources.hugepages1Gi: 4097', { 'resources.hugepages1Gi': 4097 }, bad('resources.hugepages1Gi', /^must be at most 4096$/)],
  ['resources: unknown key', { 'resources.vcpus': 4 }, bad('resources.vcpus', /^is not a known field$/)],
  ['resources: not an object', { resources: 4 }, bad('resources', /^must be an object$/)],
  // node
  ['node: absent', {}, ok('node', undefined)],
  ['node.profileId: typical', { node: { profileId: 'ubuntu-24.04/cuda:12.8_x' } }, ok('node.profileId', 'ubuntu-24.04/cuda:12.8_x')],
  ['node.profileId: 1 character', { node: { profileId: 'a' } }, ok()],
  ['node.profileId: 128 characters', { node: { profileId: 'p'.repeat(128) } }, ok()],
  ['node.profileId: 129 characters', { node: { profileId: 'p'.repeat(129) } }, bad('node.profileId', /^must be at most 128 characters$/)],
  ['node.profileId: empty', { node: { profileId: '' } }, bad('node.profileId', /must match/)],
  ['node.profileId: space', { node: { profileId: 'a b' } }, bad('node.profileId', /must match/)],
  ['node.profileId: backslash', { node: { profileId: 'a\\b' } }, bad('node.profileId', /must match/)],
  ['node.profileId: missing', { node: {} }, bad('node.profileId', /^is required$/)],
  ['node.profileVersion: 0', { node: { profileId: 'p', profileVersion: 0 } }, bad('node.profileVersion', /^must be at least 1$/)],
  ['node.profileVersion: 1', { node: { profileId: 'p', profileVersion: 1 } }, ok('node.profileVersion', 1)],
  ['node.profileVersion: large', { node: { profileId: 'p', profileVersion: 2 ** 31 } }, ok('node.profileVersion', 2 ** 31)],
  ['node.profileVersion: 1.5', { node: { profileId: 'p', profileVersion: 1.5 } }, bad('node.profileVersion', /^must be an integer$/)],
  ['node.profileVersion: "2"', { node: { profileId: 'p', profileVersion: '2' } }, bad('node.profileVersion', /^must be an integer$/)],
  ['node: unknown key', { node: { profileId: 'p', version: 2 } }, bad('node.version', /^is not a known field$/)],
  // leaseSeconds
  ['leaseSeconds: absent', {}, ok('leaseSeconds', undefined)],
  ['leaseSeconds: 29', { leaseSeconds: 29 }, bad('leaseSeconds', /^must be at least 30$/)],
  ['leaseSeconds: 30', { leaseSeconds: 30 }, ok('leaseSeconds', 30)],
  ['leaseSeconds: 86400', { leaseSeconds: 86400 }, ok('leaseSeconds', 86400)],
  ['leaseSeconds: 86401', { leaseSeconds: 86401 }, bad('leaseSeconds', /^must be at most 86400$/)],
  ['leaseSeconds: 60.5', { leaseSeconds: 60.5 }, bad('leaseSeconds', /^must be an integer$/)],
  ['leaseSeconds: "60"', { leaseSeconds: '60' }, bad('leaseSeconds', /^must be an integer$/)],
  // spot
  ['spot: absent', {}, ok('spot', undefined)],
  ['spot: true', { spot: true }, ok('spot', true)],
  ['spot: false', { spot: false }, ok('spot', false)],
  ['spot: "true"', { spot: 'true' }, bad('spot', /^must be a boolean$/)],
  ['spot: 1', { spot: 1 }, bad('spot', /^must be a boolean$/)],
  // idempotencyKey
  ['idempotencyKey: 1 character', { idempotencyKey: 'k' }, ok('idempotencyKey', 'k')],
  ['idempotencyKey: 128 characters', { idempotencyKey: 'k'.repeat(128) }, ok()],
  ['idempotencyKey: 129 characters', { idempotencyKey: 'k'.repeat(129) }, bad('idempotencyKey', /^must be at most 128 characters$/)],
  ['idempotencyKey: every allowed character', { idempotencyKey: 'AZaz09._:-' }, ok()],
  ['idempotencyKey: empty', { idempotencyKey: '' }, bad('idempotencyKey', /must match/)],
  ['idempotencyKey: slash', { idempotencyKey: 'a/b' }, bad('idempotencyKey', /must match/)],
  ['idempotencyKey: space', { idempotencyKey: 'a b' }, bad('idempotencyKey', /must match/)],
  ['idempotencyKey: missing', { idempotencyKey: DEL }, bad('idempotencyKey', /^is required$/)],
  ['idempotencyKey: number', { idempotencyKey: 12 }, bad('idempotencyKey', /^must be a string$/)],
  // wait
  ['wait: absent', {}, ok('wait', undefined)],
  ['wait.timeoutMs: -1', { wait: { timeoutMs: -1 } }, bad('wait.timeoutMs', /^must be at least 0$/)],
  ['wait.timeoutMs: 0', { wait: { timeoutMs: 0 } }, ok('wait.timeoutMs', 0)],
  ['wait.timeoutMs: 30000', { wait: { timeoutMs: 30000 } }, ok('wait.timeoutMs', 30000)],
  ['wait.timeoutMs: 30001', { wait: { timeoutMs: 30001 } }, bad('wait.timeoutMs', /^must be at most 30000$/)],
  ['wait.timeoutMs: 1.5', { wait: { timeoutMs: 1.5 } }, bad('wait.timeoutMs', /^must be an integer$/)],
  ['wait.timeoutMs: missing', { wait: {} }, bad('wait.timeoutMs', /^is required$/)],
  ['wait: true', { wait: true }, bad('wait', /^must be an object$/)],
  // gang
  ['gang: absent', {}, ok('gang', undefined)],
  ['gang.size: 1', { gang: { size: 1 } }, bad('gang.size', /^must be at least 2$/)],
  ['gang.size: 2', { gang: { size: 2 } }, ok('gang.size', 2)],
  ['gang.size: 64', { gang: { size: 64 } }, ok('gang.size', 64)],
  ['gang.size: 65', { gang: { size: 65 } }, bad('gang.size', /^must be at most 64$/)],
  ['gang.size: 2.5', { gang: { size: 2.5 } }, bad('gang.size', /^must be an integer$/)],
  ['gang.size: missing', { gang: { topologyKey: 'rack' } }, bad('gang.size', /^is required$/)],
  ['gang.topologyKey: empty', { gang: { size: 2, topologyKey: '' } }, ok('gang.topologyKey', '')],
  ['gang.topologyKey: 128 characters', { gang: { size: 2, topologyKey: 't'.repeat(128) } }, ok()],
  ['gang.topologyKey: 129 characters', { gang: { size: 2, topologyKey: 't'.repeat(129) } }, bad('gang.topologyKey', /^must be at most 128 characters$/)],
  ['gang.topologyKey: any characters', { gang: { size: 2, topologyKey: 'topology.kubernetes.io/zone' } }, ok()],
  ['gang.topologyKey: number', { gang: { size: 2, topologyKey: 5 } }, bad('gang.topologyKey', /^must be a string$/)],
  // strictness
  ['unknown top-level key', { leaseSecond: 60 }, bad('leaseSecond', /^is not a known field$/)],
  ['unknown key with an odd name', { 'x-y': 1 }, bad('["x-y"]', /^is not a known field$/)],
];

// ---------------------------------------------------------------------------------------------------------------

describe('ReservationCreateInput', () => {
  runRows(ReservationCreateInput, BASE_CREATE, createRows);

  it('applies every default and normalises the duration', () => {
    expect(parseInput(ReservationCreateInput, BASE_CREATE)).toEqual({ ...BASE_CREATE, duration: 3600, binding: 'hold' });
  });

  it('accepts a request using every field', () => {
    const full = {
      tenantId: 'acme',
      poolId: POOL,
      projectId: prj(26),
      devices: [
        { class: 'gpu', count: 8, selector: { gpuModel: 'H100', vramGiB: { gte: 80 } }, topology: 'nvlink-all', sharing: 'exclusive' },
        { class: 'nic.vf', count: 2 },
      ],
      topology: 'any',
      start: 1_790_000_000_000,
      duration: 'PT2H',
      binding: 'node',
      resources: { vcpu: 32, memoryGiB: 256, hugepages1Gi: 16 },
      node: { profileId: 'ubuntu-24.04', profileVersion: 3 },
      leaseSeconds: 300,
      spot: true,
      idempotencyKey: 'req-2',
      wait: { timeoutMs: 5000 },
      gang: { size: 4, topologyKey: 'nvlinkDomain' },
    };
    const out: ReservationCreateInput = parseInput(ReservationCreateInput, full);
    expect(out).toEqual({ ...full, duration: 7200 });
  });

  it.each<[string, unknown]>([
    ['null', null],
    ['a list', [BASE_CREATE]],
    ['a string', 'hello'],
    ['undefined', undefined],
  ])('rejects a body that is %s', (_name, body) => {
    const err = validationErrorOf(() => parseInput(ReservationCreateInput, body));
    expect(err.issues).toEqual([{ path: '', message: body === undefined ? 'is required' : expect.stringMatching(/^must be (an object|a list)$/) }]);
    expect(err.message).toMatch(/^input: /);
  });

  it('reports every failing field, one issue per path, in one message', () => {
    const err = validationErrorOf(() =>
      parseInput(ReservationCreateInput, {
        tenantId: 'a'.repeat(129),
        poolId: POOL,
        devices: [{ class: 'gpu', count: 65 }, { class: 'tpu', count: 1, extra: true }],
        duration: '1h',
        idempotencyKey: 'k',
        wait: { timeoutMs: 30001 },
        typo: 1,
      }),
    );
    expect(err.code).toBe('INVALID_INPUT');
    expect(err.name).toBe('ValidationError');
    expect(err.issues.map((i) => i.path).sort()).toEqual(
      ['devices[0].count', 'devices[1].class', 'devices[1].extra', 'tenantId', 'typo', 'wait.timeoutMs'].sort(),
    );
    expect(err.message).toContain('devices[0].count: must be at most 64');
    expect(err.message).toContain('tenantId: must be at most 128 characters');
    expect(err.message).toContain('wait.timeoutMs: must be at most 30000');
    expect(err.message).toContain('typo: is not a known field');
    expect(err.message.split('; ')).toHaveLength(6);
  });
});

describe('PreviewInput', () => {
  it('is the reservations.create input, validated the same way', () => {
    expect(PreviewInput).toBe(ReservationCreateInput);
  });

  it('requires idempotencyKey too', () => {
    const { idempotencyKey: _omit, ...rest } = BASE_CREATE;
    expect(validationErrorOf(() => parseInput(PreviewInput, rest)).message).toBe('idempotencyKey: is required');
  });
});

describe('SummaryInput', () => {
  runRows(SummaryInput, { tenantId: 'acme' }, [
    ...tenantIdRows,
    ['unknown key (poolId is not a summary field)', { poolId: POOL }, bad('poolId', /^is not a known field$/)],
  ]);
});

describe('ByPoolInput', () => {
  runRows(ByPoolInput, { tenantId: 'acme', poolId: POOL }, [
    ...tenantIdRows,
    ...poolIdRows,
    ['unknown key', { projectId: prj(26) }, bad('projectId', /^is not a known field$/)],
  ]);
});

describe('ByDomainInput', () => {
  runRows(ByDomainInput, { tenantId: 'acme', poolId: POOL }, [
    ...tenantIdRows,
    ...poolIdRows,
    ['topologyKey: absent (the pool\'s own)', {}, ok('topologyKey', undefined)],
    ['topologyKey: a label key', { topologyKey: 'example.com/rack' }, ok('topologyKey', 'example.com/rack')],
    ['topologyKey: empty', { topologyKey: '' }, ok('topologyKey', '')],
    ['topologyKey: 128 characters', { topologyKey: 't'.repeat(128) }, ok('topologyKey', 't'.repeat(128))],
    ['topologyKey: 129 characters', { topologyKey: 't'.repeat(129) }, bad('topologyKey', /^must be at most 128 characters$/)],
    ['topologyKey: number', { topologyKey: 5 }, bad('topologyKey', /^must be a string$/)],
    ['topologyKey: null', { topologyKey: null }, bad('topologyKey', /^must be a string$/)],
    ['unknown key', { domain: 'rack-a' }, bad('domain', /^is not a known field$/)],
  ]);
});

describe('TimelineInput', () => {
  runRows(TimelineInput, { tenantId: 'acme', poolId: POOL }, [
    ...tenantIdRows,
    ...poolIdRows,
    ['from/to: absent (clock defaults left to resolveTimelineWindow)', {}, ok('from', undefined)],
    ['from: 0', { from: 0 }, ok('from', 0)],
    ['from: 140737488355328', { from: TWO_47 }, ok('from', TWO_47)],
    ['from: -1', { from: -1 }, bad('from', /^must be at least 0$/)],
    ['from: 140737488355329', { from: TWO_47 + 1 }, bad('from', /^must be at most 140737488355328$/)],
    ['from: 1.5', { from: 1.5 }, bad('from', /^must be an integer$/)],
    ['from: numeric string', { from: '0' }, bad('from', /^must be an integer$/)],
    ['to: 0', { to: 0 }, ok('to', 0)],
    ['to: 140737488355328', { to: TWO_47 }, ok('to', TWO_47)],
    ['to: -1', { to: -1 }, bad('to', /^must be at least 0$/)],
    ['to: 140737488355329', { to: TWO_47 + 1 }, bad('to', /^must be at most 140737488355328$/)],
    ['to: NaN', { to: Number.NaN }, bad('to', /^must be an integer$/)],
    ['stepMinutes: default 60', {}, ok('stepMinutes', 60)],
    ['stepMinutes: 4', { stepMinutes: 4 }, bad('stepMinutes', /^must be at least 5$/)],
    ['stepMinutes: 5', { stepMinutes: 5 }, ok('stepMinutes', 5)],
    ['stepMinutes: 1440', { stepMinutes: 1440 }, ok('stepMinutes', 1440)],
    ['stepMinutes: 1441', { stepMinutes: 1441 }, bad('stepMinutes', /^must be at most 1440$/)],
    ['stepMinutes: 7.5', { stepMinutes: 7.5 }, bad('stepMinutes', /^must be an integer$/)],
    ['stepMinutes: "60"', { stepMinutes: '60' }, bad('stepMinutes', /^must be an integer$/)],
    ['stepMinutes: null', { stepMinutes: null }, bad('stepMinutes', /^must be an integer$/)],
    ['unknown key', { step: 5 }, bad('step', /^is not a known field$/)],
  ]);

  it('applies the stepMinutes default and leaves from/to unset', () => {
    expect(parseInput(TimelineInput, { tenantId: 'acme', poolId: POOL })).toEqual({ tenantId: 'acme', poolId: POOL, stepMinutes: 60 });
  });
});

describe('id schemas', () => {
  it('MAX_EPOCH_MS is 2^47', () => {
    expect(MAX_EPOCH_MS).toBe(2 ** 47);
  });

  it.each<[string, z.ZodType, string, boolean]>([
    ['TenantId', TenantId, 'acme', true],
    ['TenantId', TenantId, '', false],
    ['PoolId', PoolId, pool(26), true],
    ['PoolId', PoolId, pool(25), false],
    ['ProjectId', ProjectId, prj(52), true],
    ['ProjectId', ProjectId, prj(53), false],
  ])('%s accepts %j: %s', (_name, schema, value, valid) => {
    expect(schema.safeParse(value).success).toBe(valid);
  });
});

// ---------------------------------------------------------------------------------------------------------------

describe('resolveTimelineWindow', () => {
  const HOUR = 3_600_000;
  const DAY = 24 * HOUR;
  const T0 = Date.UTC(2026, 0, 15, 10, 0, 0, 0);
  const NOW = T0 + 37 * 60_000 + 12_345; // 10:37:12.345 UTC

  it.each<[string, { from?: number; to?: number; stepMinutes?: number }, number, TimelineWindow]>([
    ['all defaults', {}, NOW, { from: T0, to: T0 + DAY, stepMinutes: 60, stepMs: HOUR, buckets: 24 }],
    ['now exactly on the hour', {}, T0, { from: T0, to: T0 + DAY, stepMinutes: 60, stepMs: HOUR, buckets: 24 }],
    ['now at the epoch', {}, 0, { from: 0, to: DAY, stepMinutes: 60, stepMs: HOUR, buckets: 24 }],
    ['from given, to defaults to from + 24 h', { from: NOW }, 0, { from: NOW, to: NOW + DAY, stepMinutes: 60, stepMs: HOUR, buckets: 24 }],
    ['to given, from defaults to the hour', { to: T0 + 2 * HOUR }, NOW, { from: T0, to: T0 + 2 * HOUR, stepMinutes: 60, stepMs: HOUR, buckets: 2 }],
    ['a step of 15 minutes', { stepMinutes: 15 }, NOW, { from: T0, to: T0 + DAY, stepMinutes: 15, stepMs: 900_000, buckets: 96 }],
    ['to = from + 1 ms', { from: T0, to: T0 + 1 }, 0, { from: T0, to: T0 + 1, stepMinutes: 60, stepMs: HOUR, buckets: 1 }],
    ['a partial last bucket counts', { from: T0, to: T0 + 90 * 60_000 }, 0, { from: T0, to: T0 + 90 * 60_000, stepMinutes: 60, stepMs: HOUR, buckets: 2 }],
    ['exactly 7 days', { from: T0, to: T0 + 7 * DAY }, 0, { from: T0, to: T0 + 7 * DAY, stepMinutes: 60, stepMs: HOUR, buckets: 168 }],
    ['exactly 7 days in 336 buckets of 30 minutes', { from: T0, to: T0 + 7 * DAY, stepMinutes: 30 }, 0, { from: T0, to: T0 + 7 * DAY, stepMinutes: 30, stepMs: 1_800_000, buckets: 336 }],
    ['336 buckets of 5 minutes', { from: T0, to: T0 + 336 * 300_000, stepMinutes: 5 }, 0, { from: T0, to: T0 + 336 * 300_000, stepMinutes: 5, stepMs: 300_000, buckets: 336 }],
    ['one 1440-minute bucket per day for 7 days', { from: T0, to: T0 + 7 * DAY, stepMinutes: 1440 }, 0, { from: T0, to: T0 + 7 * DAY, stepMinutes: 1440, stepMs: DAY, buckets: 7 }],
    ['from 0', { from: 0, to: HOUR }, NOW, { from: 0, to: HOUR, stepMinutes: 60, stepMs: HOUR, buckets: 1 }],
  ])('%s', (_name, input, now, expected) => {
    expect(resolveTimelineWindow(input, now)).toEqual(expected);
  });

  it.each<[string, { from?: number; to?: number; stepMinutes?: number }, number, string, RegExp]>([
    ['to == from', { from: T0, to: T0 }, 0, 'to', /must be after from/],
    ['to before from', { from: T0, to: T0 - 1 }, 0, 'to', /must be after from/],
    ['to == the defaulted from', { to: T0 }, NOW, 'to', /must be after from/],
    ['to before the defaulted from', { to: T0 - HOUR }, NOW, 'to', /must be after from/],
    ['7 days + 1 ms', { from: T0, to: T0 + 7 * DAY + 1, stepMinutes: 1440 }, 0, 'to', /at most 7 days/],
    ['8 days', { from: T0, to: T0 + 8 * DAY }, 0, 'to', /at most 7 days/],
    ['337 buckets of 5 minutes (by 1 ms)', { from: T0, to: T0 + 336 * 300_000 + 1, stepMinutes: 5 }, 0, 'stepMinutes', /337 buckets.*at most 336/],
    ['337 buckets of 5 minutes', { from: T0, to: T0 + 337 * 300_000, stepMinutes: 5 }, 0, 'stepMinutes', /337 buckets/],
    ['7 days of 29-minute buckets', { from: T0, to: T0 + 7 * DAY, stepMinutes: 29 }, 0, 'stepMinutes', /348 buckets/],
    ['7 days of 5-minute buckets', { from: T0, to: T0 + 7 * DAY, stepMinutes: 5 }, 0, 'stepMinutes', /2016 buckets/],
  ])('rejects %s', (_name, input, now, path, message) => {
    const err = validationErrorOf(() => resolveTimelineWindow(input, now));
    expect(err.code).toBe('INVALID_INPUT');
    expect(err.issues).toHaveLength(1);
    expect(err.issues[0]?.path).toBe(path);
    expect(err.issues[0]?.message).toMatch(message);
    expect(err.message).toMatch(new RegExp(`^${path}: `));
  });

  it('works on the parsed TimelineInput', () => {
    const input = parseInput(TimelineInput, { tenantId: 'acme', poolId: POOL, stepMinutes: 30 });
    expect(resolveTimelineWindow(input, NOW)).toMatchObject({ from: T0, to: T0 + DAY, buckets: 48 });
  });
});

describe('formatPath and ValidationError', () => {
  it.each<[PropertyKey[], string]>([
    [[], ''],
    [['tenantId'], 'tenantId'],
    [['devices', 0, 'count'], 'devices[0].count'],
    [['devices', 1, 'selector'], 'devices[1].selector'],
    [['a', 'b', 'c'], 'a.b.c'],
    [['x-y'], '["x-y"]'],
    [['a', 'b c'], 'a["b c"]'],
  ])('%j → %j', (path, text) => {
    expect(formatPath(path)).toBe(text);
  });

  it('builds its message from its issues', () => {
    const err = new ValidationError([
      { path: 'devices[0].count', message: 'must be at most 64' },
      { path: '', message: 'must be an object' },
    ]);
    expect(err).toBeInstanceOf(Error);
    expect(err.code).toBe('INVALID_INPUT');
    expect(err.message).toBe('devices[0].count: must be at most 64; input: must be an object');
  });
});
