// Human output of the CLI (`capacity`, `usage`, `agent --discover`): aligned tables and the timeline chart. Pure:
// strings in, strings out.
import type { ByDomainResult, ByPoolResult, PreviewResult, QuotaResult, TimelineResult, UsageResult } from '../api/capacity-service.ts';
import { UNLABELLED_DOMAIN, type CapacityRow, type Summary } from '../db/capacity.ts';
import type { NodeDevicesSpec } from '../agent/discovery.ts';

type Align = 'left' | 'right';

/** Columns padded to their widest cell, two spaces apart; numbers right-aligned. No trailing spaces. */
type Cell = string | number;

export function table(headers: readonly string[], rows: readonly (readonly Cell[])[], align?: readonly Align[]): string {
  const cells = rows.map((r) => r.map((c) => String(c)));
  const widths = headers.map((h, i) => Math.max(h.length, ...cells.map((r) => (r[i] ?? '').length)));
  const alignOf = (i: number): Align => align?.[i] ?? (rows.length > 0 && rows.every((r) => typeof r[i] === 'number') ? 'right' : 'left');
  const line = (r: readonly string[]) =>
    r
      .map((c, i) => (alignOf(i) === 'right' ? c.padStart(widths[i]!) : c.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  return [line(headers), ...cells.map(line)].join('\n');
}

const COLUMNS = ['total', 'allocatable', 'allocated', 'reserved', 'available', 'provisioning', 'unhealthy', 'maintenance', 'unreachable'] as const;
const COLUMN_HEADERS = COLUMNS.map((c) => c.toUpperCase());
const numbers = (r: Omit<CapacityRow, 'poolId' | 'updatedAt'>) => COLUMNS.map((c) => r[c]);

/** `2026-01-15 10:00Z` */
export function formatTime(ms: number, withTime = true): string {
  const iso = new Date(ms).toISOString();
  return withTime ? `${iso.slice(0, 10)} ${iso.slice(11, 16)}Z` : iso.slice(0, 10);
}

/** `wide`: also each pool's owner and each row's update time. */
export function renderSummary(s: Summary, o: { wide?: boolean } = {}): string {
  const out: string[] = [];
  const n = s.pools.length;
  out.push(`Tenant ${s.tenantId}: ${n} pool${n === 1 ? '' : 's'}`);
  if (n === 0) return `${out[0]}\n`;
  const rows: (string | number)[][] = [];
  const wide = (owner: string, updated: string) => (o.wide ? [owner, updated] : []);
  for (const p of s.pools) {
    const name = p.archived ? `${p.name} (archived)` : p.name;
    if (p.capacity.length === 0) rows.push([name, p.poolId, p.gpuModel ?? '-', '-', ...COLUMNS.map(() => '-'), ...wide(p.ownerTenant, '-')]);
    for (const r of p.capacity) rows.push([name, p.poolId, p.gpuModel ?? '-', r.resource, ...numbers(r), ...wide(p.ownerTenant, formatTime(r.updatedAt))]);
  }
  const headers = ['POOL', 'POOL ID', 'MODEL', 'RESOURCE', ...COLUMN_HEADERS, ...(o.wide ? ['OWNER', 'UPDATED'] : [])];
  const align = ['left', 'left', 'left', 'left', ...COLUMNS.map(() => 'right' as const), ...(o.wide ? (['left', 'left'] as const) : [])] as Align[];
  out.push('', table(headers, rows, align));
  const models = Object.entries(s.byGpuModel).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  if (models.length > 0) {
    out.push(
      '',
      'Whole GPUs per model:',
      table(
        ['GPU MODEL', 'TOTAL', 'ALLOCATABLE', 'ALLOCATED', 'RESERVED', 'AVAILABLE'],
        models.map(([m, t]) => [m, t.total, t.allocatable, t.allocated, t.reserved, t.available]),
      ),
    );
  }
  return `${out.join('\n')}\n`;
}

export function renderPoolRows(r: ByPoolResult): string {
  const rows = r.capacity.map((c) => [c.resource, ...numbers(c), formatTime(c.updatedAt)]);
  return `Pool ${r.poolId}\n\n${table(['RESOURCE', ...COLUMN_HEADERS, 'UPDATED'], rows, ['left', ...COLUMNS.map(() => 'right' as const), 'left'])}\n`;
}

/** One line per domain and resource, the domain's node counts repeated on each (lines stay greppable). */
export function renderDomains(r: ByDomainResult): string {
  const head = `Pool ${r.poolId}: capacity per placement domain (${r.topologyKey})`;
  if (r.domains.length === 0) return `${head}

No nodes.
`;
  const rows: Cell[][] = [];
  for (const d of r.domains) {
    const name = d.domain ?? UNLABELLED_DOMAIN;
    const nodes = [d.nodes.total, d.nodes.allocatable, d.nodes.free];
    if (d.capacity.length === 0) rows.push([name, ...nodes, '-', ...COLUMNS.map(() => '-')]);
    for (const c of d.capacity) rows.push([name, ...nodes, c.resource, ...numbers(c)]);
  }
  const out = [
    head,
    '',
    table(
      ['DOMAIN', 'NODES', 'ALLOCATABLE NODES', 'FREE NODES', 'RESOURCE', ...COLUMN_HEADERS],
      rows,
      ['left', 'right', 'right', 'right', 'left', ...COLUMNS.map(() => 'right' as const)],
    ),
  ];
  if (r.domains.some((d) => d.domain === null)) out.push('', `${UNLABELLED_DOMAIN}: nodes without the label ${r.topologyKey}; a gang never uses them.`);
  return `${out.join('\n')}\n`;
}

export function renderPreview(p: PreviewResult): string {
  if (!p.fits) {
    const lines = [`Fits: no — ${p.reason ?? 'no placement'}`];
    if (p.preemptible) {
      const c = p.preemptible.count;
      lines.push(
        `Preempting: ${c} spot reservation${c === 1 ? '' : 's'} would get a notice; the request would start at ${formatTime(p.preemptible.start)}`,
      );
    }
    return `${lines.join('\n')}\n`;
  }
  const head = `Fits: yes — ${p.candidates.length} candidate${p.candidates.length === 1 ? '' : 's'}${p.gangDomain !== undefined ? ` (gang in ${p.gangDomain})` : ''}`;
  const rows = p.candidates.map((c, i) => [i + 1, c.nodeId, c.score, c.atoms.length, c.atoms.join(',')]);
  return `${head}\n\n${table(['#', 'NODE', 'SCORE', 'ATOMS', 'ATOM IDS'], rows, ['right', 'left', 'right', 'right', 'left'])}\n`;
}

/** The widest bar, in characters. */
export const CHART_WIDTH = 40;

/**
 * One line per bucket: its start, a bar of booked (`#`) and free (`.`) GPUs scaled to the pool's allocatable GPUs,
 * and the numbers. Booked GPUs beyond allocatable (allocatable shrank after they were booked) show as `!`.
 */
export function renderTimeline(t: TimelineResult): string {
  const withTime = t.stepMinutes % 1440 !== 0 || t.from % 86_400_000 !== 0;
  const scale = t.allocatable > CHART_WIDTH ? CHART_WIDTH / t.allocatable : 1;
  const width = Math.round(t.allocatable * scale);
  const bw = String(Math.max(...t.buckets.map((b) => b.booked), 0)).length;
  const fw = String(Math.max(...t.buckets.map((b) => b.free), 0)).length;
  const lines = [
    `Pool ${t.poolId}: whole GPUs booked per ${t.stepMinutes}-minute bucket, ${formatTime(t.from)} to ${formatTime(t.to)}`,
    `Allocatable now: ${t.allocatable} GPU${t.allocatable === 1 ? '' : 's'}${scale < 1 ? ` (one character = ${(1 / scale).toFixed(1)} GPUs)` : ''}   # booked   . free${t.allocatable === 0 ? '' : '   ! booked beyond allocatable'}`,
    '',
  ];
  for (const b of t.buckets) {
    const within = Math.min(b.booked, t.allocatable);
    let booked = Math.round(within * scale);
    if (within > 0 && booked === 0) booked = 1; // any booking shows
    if (within < t.allocatable && booked === width && width > 0) booked = width - 1; // any free GPU shows
    const bar = `${'#'.repeat(booked)}${'.'.repeat(width - booked)}${b.booked > t.allocatable ? '!' : ' '}`;
    lines.push(`${formatTime(b.start, withTime)}  ${bar}  booked ${String(b.booked).padStart(bw)}  free ${String(b.free).padStart(fw)}`);
  }
  return `${lines.join('\n')}\n`;
}

/** What an hour of a resource is called: GPU-hours, MIG-instance-hours, slot-hours, vCPU-hours, ... */
export function usageUnit(resource: string): string {
  const units: Record<string, string> = {
    gpu: 'GPU-hours',
    'gpu.mig': 'MIG-instance-hours',
    'gpu.slot': 'slot-hours',
    vcpu: 'vCPU-hours',
    memoryGiB: 'GiB-hours',
    hugepages1Gi: 'hugepage-hours',
  };
  return units[resource] ?? `${resource}-hours`;
}

/** Hours with three decimals (the API gives six): 1.5 → `1.500`. */
const hoursText = (h: number) => h.toFixed(3);

/**
 * `better-compute usage`: the window and how much of it is final, then per pool and resource the hours burned; with
 * hourly rows, one line per hour, marked `open` while the hour may still change. `wide`: also the exact atom-seconds.
 */
export function renderUsage(u: UsageResult, o: { wide?: boolean } = {}): string {
  const from = Date.parse(u.from);
  const to = Date.parse(u.to);
  const final = u.finalUntil === null ? 'no hour is final yet' : `final before ${formatTime(Date.parse(u.finalUntil))}`;
  const out = [`Tenant ${u.tenantId}${u.poolId !== undefined ? `, pool ${u.poolId}` : ''}: usage ${formatTime(from)} to ${formatTime(to)} (${final})`];
  if (u.totals.length === 0) return `${out[0]}\n\nNo usage in the window.\n`;
  out.push(
    '',
    table(
      ['POOL ID', 'RESOURCE', 'HOURS', 'UNIT', ...(o.wide ? ['ATOM-SECONDS'] : [])],
      u.totals.map((t) => [t.poolId, t.resource, hoursText(t.hours), usageUnit(t.resource), ...(o.wide ? [String(t.atomSeconds)] : [])]),
      ['left', 'left', 'right', 'left', 'right'],
    ),
  );
  if (u.hours !== undefined) {
    const finalUntil = u.finalUntil === null ? -Infinity : Date.parse(u.finalUntil);
    out.push(
      '',
      u.hours.length === 0
        ? 'No hourly rows.'
        : table(
            ['HOUR', 'POOL ID', 'RESOURCE', 'HOURS', 'FINAL', ...(o.wide ? ['ATOM-SECONDS'] : [])],
            u.hours.map((h) => [
              formatTime(Date.parse(h.hour)),
              h.poolId,
              h.resource,
              hoursText(h.hours),
              Date.parse(h.hour) < finalUntil ? 'yes' : 'open',
              ...(o.wide ? [String(h.atomSeconds)] : []),
            ]),
            ['left', 'left', 'left', 'right', 'left', 'right'],
          ),
    );
  }
  return `${out.join('\n')}\n`;
}

/** Hours with at most two decimals, without trailing zeros. */
const hours = (h: number) => String(Math.round(h * 100) / 100);

/** `capacity --quota`: one line per pool and resource; '-' for no limit. */
export function renderQuota(r: QuotaResult): string {
  const n = r.quotas.length;
  const head = `Tenant ${r.tenantId}: ${n} quota key${n === 1 ? '' : 's'}`;
  if (n === 0) return `${head}\n`;
  const rows = r.quotas.map((q) => [
    q.poolId,
    q.resource,
    q.limit ?? '-',
    q.used,
    q.reserved,
    q.hours.limit === null ? '-' : hours(q.hours.limit),
    hours(q.hours.used),
    hours(q.hours.reserved),
    `${formatTime(q.hours.periodStart, false)}..${formatTime(q.hours.periodEnd, false)} (${q.hours.period})`,
  ]);
  const right = 'right' as const;
  const left = 'left' as const;
  return `${head}\n\n${table(
    ['POOL ID', 'RESOURCE', 'LIMIT', 'USED', 'RESERVED', 'HOURS LIMIT', 'HOURS USED', 'HOURS RESERVED', 'PERIOD'],
    rows,
    [left, left, right, right, right, right, right, right, left],
  )}\n`;
}

/** `better-compute agent --discover`: the node's GPUs, then their MIG instances, as NodeDevices would carry them. */
export function renderNodeDevices(spec: NodeDevicesSpec): string {
  const health = (h: boolean | undefined) => (h === false ? 'unhealthy' : 'healthy');
  const out = [
    table(
      ['GPU', 'UUID', 'MODEL', 'MEMORY', 'MIG', 'NUMA', 'NVLINK', 'HEALTH'],
      spec.gpus.map((g) => [
        g.index ?? '-',
        g.uuid,
        g.model ?? g.product ?? '-',
        g.vramGiB !== undefined ? `${g.vramGiB} GiB` : '-',
        g.mig ? g.mig.length : '-',
        g.numaNode ?? '-',
        g.nvlinkDomain ?? '-',
        health(g.healthy),
      ]),
      ['right', 'left', 'left', 'right', 'right', 'right', 'left', 'left'],
    ),
  ];
  const mig = spec.gpus.flatMap((g) => (g.mig ?? []).map((m) => [g.index ?? g.uuid, `gi${m.gi}/ci${m.ci}`, m.profile ?? '-', m.memoryGiB !== undefined ? `${m.memoryGiB} GiB` : '-', m.uuid ?? '-', health(m.healthy)]));
  if (mig.length) out.push('', table(['GPU', 'INSTANCE', 'PROFILE', 'MEMORY', 'UUID', 'HEALTH'], mig, ['right', 'left', 'left', 'right', 'left', 'left']));
  const scalars = Object.entries(spec.scalars ?? {}).filter(([, v]) => v !== undefined);
  if (scalars.length) out.push('', `scalars: ${scalars.map(([k, v]) => `${k}=${v}`).join(' ')}`);
  return `${out.join('\n')}\n`;
}
