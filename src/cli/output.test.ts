// The -o formats and the wide renderers: data formats round-trip, wide adds exactly the columns the table leaves out.
import { describe, expect, it } from 'vitest';
import YAML from 'yaml';
import type { UsageResult } from '../api/capacity-service.ts';
import type { Summary } from '../db/capacity.ts';
import { formatFailure, formatOutput, OUTPUT_FORMATS, parseOutput } from './output.ts';
import { renderSummary, renderUsage } from './render.ts';
import { renderReservation, renderReservationList, type ReservationDetails } from './render-reservations.ts';

const T0 = Date.UTC(2026, 0, 15, 10, 0, 0, 0);
const HOUR = 3_600_000;

describe('parseOutput', () => {
  it.each(OUTPUT_FORMATS)('takes %s', (f) => expect(parseOutput(f)).toBe(f));
  it('defaults to table and refuses anything else', () => {
    expect(parseOutput(undefined)).toBe('table');
    for (const bad of ['xml', 'JSON', '', 'yml']) expect(parseOutput(bad)).toBeUndefined();
  });
});

describe('formatOutput', () => {
  const data = { tenantId: 'acme', pools: [{ poolId: 'pool_a', gpuModel: null, archived: false, n: 3 }], note: 'a: b # c' };
  const render = { table: () => 'TABLE\n', wide: () => 'WIDE\n' };

  it('json and yaml print the data, and parse back to it', () => {
    expect(JSON.parse(formatOutput('json', data, render))).toEqual(data);
    const yaml = formatOutput('yaml', data, render);
    expect(YAML.parse(yaml)).toEqual(data);
    expect(yaml).toMatch(/^tenantId: acme\npools:\n {2}- poolId: pool_a\n/);
    expect(yaml.endsWith('\n')).toBe(true);
  });

  it('wide uses the wide renderer, or the table where there is none', () => {
    expect(formatOutput('table', data, render)).toBe('TABLE\n');
    expect(formatOutput('wide', data, render)).toBe('WIDE\n');
    expect(formatOutput('wide', data, { table: render.table })).toBe('TABLE\n');
  });

  it('failures: a line for people, the error body for data formats', () => {
    expect(formatFailure('table', 'NOT_FOUND', 'pool x not found')).toBe('error NOT_FOUND: pool x not found\n');
    expect(formatFailure('wide', 'NOT_FOUND', 'x')).toBe('error NOT_FOUND: x\n');
    expect(formatFailure('json', 'NOT_FOUND', 'x')).toBe('{"error":{"code":"NOT_FOUND","message":"x"}}\n');
    expect(YAML.parse(formatFailure('yaml', 'NOT_FOUND', 'x'))).toEqual({ error: { code: 'NOT_FOUND', message: 'x' } });
  });
});

const summary: Summary = {
  tenantId: 'acme',
  pools: [
    {
      poolId: 'pool_a',
      name: 'train',
      gpuModel: 'H100',
      ownerTenant: 'ops',
      archived: false,
      capacity: [{ poolId: 'pool_a', resource: 'gpu', total: 8, allocatable: 8, allocated: 2, reserved: 0, available: 6, provisioning: 0, unhealthy: 0, maintenance: 0, unreachable: 0, updatedAt: T0 }],
    },
    { poolId: 'pool_b', name: 'empty', gpuModel: null, ownerTenant: 'acme', archived: false, capacity: [] },
  ],
  byGpuModel: {},
};

/** The header and data lines of the first table in `text`, split into cells on runs of two or more spaces. */
const firstTable = (text: string) =>
  text
    .split('\n\n')[1]!
    .split('\n')
    .map((l) => l.split(/ {2,}/));

describe('wide', () => {
  it('summary: the table plus each pool owner and row update time', () => {
    const [head, gpu, empty] = firstTable(renderSummary(summary, { wide: true }));
    const [narrowHead] = firstTable(renderSummary(summary));
    expect(head).toEqual([...narrowHead!, 'OWNER', 'UPDATED']);
    expect(gpu!.slice(-2)).toEqual(['ops', '2026-01-15 10:00Z']);
    expect(empty!.slice(-2)).toEqual(['acme', '-']);
    expect(renderSummary(summary)).not.toContain('ops');
  });

  it('usage: the table plus exact atom-seconds, totals and hours', () => {
    const u: UsageResult = {
      tenantId: 'acme',
      from: new Date(T0).toISOString(),
      to: new Date(T0 + 2 * HOUR).toISOString(),
      finalUntil: new Date(T0 + HOUR).toISOString(),
      totals: [{ poolId: 'pool_a', resource: 'gpu', atomSeconds: 5400.5, hours: 1.500139 }],
      hours: [
        { hour: new Date(T0).toISOString(), poolId: 'pool_a', resource: 'gpu', atomSeconds: 3600, hours: 1 },
        { hour: new Date(T0 + HOUR).toISOString(), poolId: 'pool_a', resource: 'gpu', atomSeconds: 1800.5, hours: 0.500139 },
      ],
    };
    const wide = renderUsage(u, { wide: true });
    expect(renderUsage(u)).not.toContain('ATOM-SECONDS');
    const [totalsHead, total] = wide.split('\n\n')[1]!.split('\n').map((l) => l.split(/ {2,}/));
    expect(totalsHead).toEqual(['POOL ID', 'RESOURCE', 'HOURS', 'UNIT', 'ATOM-SECONDS']);
    expect(total).toEqual(['pool_a', 'gpu', '1.500', 'GPU-hours', '5400.5']);
    const hours = wide.split('\n\n')[2]!.trimEnd().split('\n').map((l) => l.split(/ {2,}/));
    expect(hours.map((h) => h.at(-1))).toEqual(['ATOM-SECONDS', '3600', '1800.5']);
  });

  const rsv: ReservationDetails = {
    id: 'rsv_01jab0000000000000000000aa',
    idempotencyKey: 'uid-a',
    name: 'team-a/train',
    poolId: 'pool_01jab00000000000000000000p',
    pool: 'h100',
    state: 'confirmed',
    spot: false,
    start: T0,
    end: T0 + HOUR,
    leaseExpiresAt: null,
    atoms: 4,
    nodes: ['n1', 'n2'],
  };

  it('reservations list: the table plus pool id, nodes and uid', () => {
    const [head, line] = firstTable(renderReservationList('acme', [rsv], false, { wide: true }));
    const [narrowHead] = firstTable(renderReservationList('acme', [rsv], false));
    expect(head).toEqual([...narrowHead!, 'POOL ID', 'NODES', 'UID']);
    expect(line!.slice(-3)).toEqual([rsv.poolId, 'n1,n2', 'uid-a']);
  });

  it('reservations get: the details plus the uid', () => {
    expect(renderReservation(rsv)).not.toContain('uid-a');
    expect(renderReservation(rsv, { wide: true })).toMatch(/^UID: +uid-a$/m);
  });
});
