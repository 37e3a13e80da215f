import { describe, expect, it } from 'vitest';
import type { TimelineResult } from '../api/capacity-service.ts';
import type { CapacityRow } from '../db/capacity.ts';
import { CHART_WIDTH, renderDomains, renderPoolRows, renderPreview, renderSummary, renderTimeline, table } from './render.ts';

const T0 = Date.UTC(2026, 0, 15, 10, 0, 0, 0);
const HOUR = 3_600_000;
const row = (resource: string, n: Partial<CapacityRow> = {}): CapacityRow => ({
  poolId: 'pool_x',
  resource,
  total: 16,
  allocatable: 12,
  allocated: 4,
  reserved: 2,
  available: 6,
  provisioning: 1,
  unhealthy: 1,
  maintenance: 2,
  unreachable: 0,
  updatedAt: T0,
  ...n,
});

describe('table', () => {
  it('pads columns to their widest cell, numbers right-aligned, no trailing spaces', () => {
    expect(table(['NAME', 'N', 'NOTE'], [['a', 1, ''], ['long-name', 1234, 'x']])).toBe(
      ['NAME          N  NOTE', 'a             1', 'long-name  1234  x'].join('\n'),
    );
  });
});

describe('renderSummary', () => {
  it('one line per pool and resource, then whole GPUs per model', () => {
    const out = renderSummary({
      tenantId: 'acme',
      pools: [
        { poolId: 'pool_a', name: 'train', gpuModel: 'H100', ownerTenant: 'acme', archived: false, capacity: [row('gpu'), row('vcpu', { total: 512, allocatable: 512, allocated: 0, reserved: 0, available: 512, provisioning: 0, unhealthy: 0, maintenance: 0 })] },
        { poolId: 'pool_b', name: 'old', gpuModel: null, ownerTenant: 'acme', archived: true, capacity: [] },
      ],
      byGpuModel: { H100: { total: 16, allocatable: 12, allocated: 4, reserved: 2, available: 6 } },
    });
    expect(out).toBe(
      [
        'Tenant acme: 2 pools',
        '',
        'POOL            POOL ID  MODEL  RESOURCE  TOTAL  ALLOCATABLE  ALLOCATED  RESERVED  AVAILABLE  PROVISIONING  UNHEALTHY  MAINTENANCE  UNREACHABLE',
        'train           pool_a   H100   gpu          16           12          4         2          6             1          1            2            0',
        'train           pool_a   H100   vcpu        512          512          0         0        512             0          0            0            0',
        'old (archived)  pool_b   -      -             -            -          -         -          -             -          -            -            -',
        '',
        'Whole GPUs per model:',
        'GPU MODEL  TOTAL  ALLOCATABLE  ALLOCATED  RESERVED  AVAILABLE',
        'H100          16           12          4         2          6',
        '',
      ].join('\n'),
    );
  });

  it('no pools', () => {
    expect(renderSummary({ tenantId: 'x', pools: [], byGpuModel: {} })).toBe('Tenant x: 0 pools\n');
  });
});

describe('renderPoolRows', () => {
  it('one line per resource with the update time', () => {
    const out = renderPoolRows({ poolId: 'pool_x', capacity: [row('gpu'), row('gpu.mig', { total: 7 })] });
    expect(out.split('\n')).toEqual([
      'Pool pool_x',
      '',
      'RESOURCE  TOTAL  ALLOCATABLE  ALLOCATED  RESERVED  AVAILABLE  PROVISIONING  UNHEALTHY  MAINTENANCE  UNREACHABLE  UPDATED',
      'gpu          16           12          4         2          6             1          1            2            0  2026-01-15 10:00Z',
      'gpu.mig       7           12          4         2          6             1          1            2            0  2026-01-15 10:00Z',
      '',
    ]);
  });
});

describe('renderDomains', () => {
  const cap = (resource: string, total: number, allocated: number) => {
    const { poolId: _p, updatedAt: _u, ...r } = row(resource, { total, allocatable: total, allocated, reserved: 0, available: total - allocated, provisioning: 0, unhealthy: 0, maintenance: 0 });
    return r;
  };

  it('one line per domain and resource with the node counts; a domain without rows; the unlabelled nodes named and explained', () => {
    const out = renderDomains({
      poolId: 'pool_x',
      topologyKey: 'example.com/rack',
      domains: [
        { domain: 'rack-a', nodes: { total: 2, allocatable: 2, free: 1 }, capacity: [cap('gpu', 8, 3), cap('vcpu', 64, 8)] },
        { domain: 'rack-b', nodes: { total: 1, allocatable: 0, free: 0 }, capacity: [] },
        { domain: null, nodes: { total: 1, allocatable: 1, free: 1 }, capacity: [cap('gpu', 2, 0)] },
      ],
    });
    expect(out.split('\n')).toEqual([
      'Pool pool_x: capacity per placement domain (example.com/rack)',
      '',
      'DOMAIN        NODES  ALLOCATABLE NODES  FREE NODES  RESOURCE  TOTAL  ALLOCATABLE  ALLOCATED  RESERVED  AVAILABLE  PROVISIONING  UNHEALTHY  MAINTENANCE  UNREACHABLE',
      'rack-a            2                  2           1  gpu           8            8          3         0          5             0          0            0            0',
      'rack-a            2                  2           1  vcpu         64           64          8         0         56             0          0            0            0',
      'rack-b            1                  0           0  -             -            -          -         -          -             -          -            -            -',
      '(unlabelled)      1                  1           1  gpu           2            2          0         0          2             0          0            0            0',
      '',
      '(unlabelled): nodes without the label example.com/rack; a gang never uses them.',
      '',
    ]);
  });

  it('every node labelled: no footnote', () => {
    const out = renderDomains({ poolId: 'pool_x', topologyKey: 'k', domains: [{ domain: 'a', nodes: { total: 1, allocatable: 1, free: 1 }, capacity: [cap('gpu', 4, 0)] }] });
    expect(out).not.toContain('(unlabelled)');
    expect(out.endsWith('0\n')).toBe(true);
  });

  it('a pool without nodes', () => {
    expect(renderDomains({ poolId: 'pool_x', topologyKey: 'k', domains: [] })).toBe('Pool pool_x: capacity per placement domain (k)\n\nNo nodes.\n');
  });
});

describe('renderPreview', () => {
  it('fits', () => {
    const out = renderPreview({ fits: true, candidates: [{ nodeId: 'n1', atoms: ['GPU-a', 'GPU-b'], score: 100 }, { nodeId: 'node-22', atoms: ['GPU-c'], score: 7 }] });
    expect(out.split('\n')).toEqual([
      'Fits: yes — 2 candidates',
      '',
      '#  NODE     SCORE  ATOMS  ATOM IDS',
      '1  n1         100      2  GPU-a,GPU-b',
      '2  node-22      7      1  GPU-c',
      '',
    ]);
  });

  it('a gang names its domain', () => {
    expect(renderPreview({ fits: true, candidates: [{ nodeId: 'n1', atoms: ['a'], score: 1 }], gangDomain: 'zone-a' })).toMatch(/^Fits: yes — 1 candidate \(gang in zone-a\)\n/);
  });

  it('does not fit, with preemption', () => {
    expect(renderPreview({ fits: false, candidates: [], reason: 'no node has 8 free GPUs', preemptible: { count: 2, start: T0 } })).toBe(
      'Fits: no — no node has 8 free GPUs\nPreempting: 2 spot reservations would get a notice; the request would start at 2026-01-15 10:00Z\n',
    );
  });
});

describe('renderTimeline', () => {
  const tl = (allocatable: number, booked: number[], stepMinutes = 60): TimelineResult => ({
    poolId: 'pool_x',
    from: T0,
    to: T0 + booked.length * stepMinutes * 60_000,
    stepMinutes,
    allocatable,
    buckets: booked.map((b, i) => ({ start: T0 + i * stepMinutes * 60_000, end: T0 + (i + 1) * stepMinutes * 60_000, booked: b, free: Math.max(0, allocatable - b) })),
  });

  it('one line per bucket: a # per booked GPU and a . per free one', () => {
    expect(renderTimeline(tl(8, [0, 3, 8])).split('\n')).toEqual([
      'Pool pool_x: whole GPUs booked per 60-minute bucket, 2026-01-15 10:00Z to 2026-01-15 13:00Z',
      'Allocatable now: 8 GPUs   # booked   . free   ! booked beyond allocatable',
      '',
      '2026-01-15 10:00Z  ........   booked 0  free 8',
      '2026-01-15 11:00Z  ###.....   booked 3  free 5',
      '2026-01-15 12:00Z  ########   booked 8  free 0',
      '',
    ]);
  });

  it('scales a large pool to the chart width; one booked or one free GPU still shows', () => {
    const lines = renderTimeline(tl(1000, [1, 500, 999, 1000])).split('\n');
    expect(lines[1]).toMatch(/one character = 25\.0 GPUs/);
    const bars = lines.slice(3, 7).map((l) => l.split('  ')[1]!.trimEnd());
    expect(bars.map((b) => b.length)).toEqual([CHART_WIDTH, CHART_WIDTH, CHART_WIDTH, CHART_WIDTH]);
    expect(bars.map((b) => b.split('#').length - 1)).toEqual([1, 20, 39, 40]);
  });

  it('marks GPUs booked beyond allocatable', () => {
    expect(renderTimeline(tl(2, [3])).split('\n')[3]).toBe('2026-01-15 10:00Z  ##!  booked 3  free 0');
  });

  it('daily buckets from midnight show dates only', () => {
    const t = { ...tl(2, [0, 1], 1440), from: Date.UTC(2026, 0, 15) };
    t.buckets = t.buckets.map((b, i) => ({ ...b, start: Date.UTC(2026, 0, 15 + i) }));
    expect(renderTimeline(t).split('\n')[3]).toBe('2026-01-15  ..   booked 0  free 2');
  });

  it('a pool with no allocatable GPU', () => {
    expect(renderTimeline(tl(0, [0])).split('\n')[3]).toBe('2026-01-15 10:00Z     booked 0  free 0');
  });
  void HOUR;
});
