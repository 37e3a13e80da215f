// Prometheus: the capacity gauges (one per rollup column, per pool and resource) read at scrape time with one query,
// the placement metrics, `promtool check metrics` on a real scrape, and a real Prometheus server (Debian's package)
// scraping /metrics on loopback, read back through its query API.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { poolCapacity } from '../../src/db/capacity.ts';
import { Ledger } from '../../src/db/ledger.ts';
import type { Db } from '../../src/db/pool.ts';
import { CAPACITY_GAUGES, registerCapacityGauges } from '../../src/metrics/capacity.ts';
import { ledgerMetrics } from '../../src/metrics/ledger.ts';
import { createRegistry } from '../../src/metrics/registry.ts';
import { startTestApi, type TestApi } from '../support/api.ts';
import { makeNode, makePool, reservation } from '../support/builders.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { ensurePrometheus, promtoolCheck, startPrometheus, type PrometheusServer } from '../support/prometheus.ts';

let t: TestDatabase;
let api: TestApi;
let tools: { promtool: string; prometheus: string };
let prom: PrometheusServer | undefined;
let A: string;
let B: string;

beforeAll(async () => {
  tools = await ensurePrometheus();
  t = await createTestDatabase();
  A = await makePool('metrics-a').owner('acme').model('H100').create(t.db);
  await makeNode('met-a1').gpus(8).scalars({ vcpu: 64, memoryGiB: 512 }).create(t.db, A);
  await makeNode('met-a2').gpus(8).scalars({ vcpu: 64, memoryGiB: 512 }).create(t.db, A);
  B = await makePool('metrics-b').owner('ops').model(null).sharing('mig').create(t.db);
  await makeNode('met-b1').gpus(2).mig(3).create(t.db, B);
  api = await startTestApi(t.db, { defaultMetrics: true });
  // A placement through a Ledger wired to the registry's metrics.
  const ledger = new Ledger(t.db, { metrics: api.ledgerMetrics });
  expect((await ledger.reserve(reservation(A, { devices: [{ class: 'gpu', count: 3 }], resources: { vcpu: 8 } }), api.clock.now())).ok).toBe(true);
}, 600_000);

afterAll(async () => {
  await prom?.stop();
  await api?.close();
  await t?.drop();
});

const scrape = async () => {
  const res = await api.client.request({ method: 'GET', path: '/metrics', token: '' });
  expect(res.status).toBe(200);
  return res.text;
};

/** `name{labels} value` lines of one metric, as label objects and values. */
function samples(text: string, name: string): { labels: Record<string, string>; value: number }[] {
  const out: { labels: Record<string, string>; value: number }[] = [];
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]!] = l[2]!;
    out.push({ labels, value: Number(m[3]) });
  }
  return out;
}

describe('capacity gauges', () => {
  it('one gauge per rollup column, per pool and resource, labelled pool, pool_id, resource and gpu_model', async () => {
    const text = await scrape();
    for (const poolId of [A, B]) {
      const rows = await poolCapacity(t.db, poolId);
      expect(rows.length).toBeGreaterThan(0);
      for (const [column, name] of CAPACITY_GAUGES) {
        const got = samples(text, name).filter((s) => s.labels.pool_id === poolId);
        expect(got.map((s) => [s.labels.resource, s.value]).sort(), name).toEqual(rows.map((r) => [r.resource, r[column]]).sort());
        for (const s of got) {
          expect(s.labels).toEqual({
            pool: poolId === A ? 'metrics-a' : 'metrics-b',
            pool_id: poolId,
            resource: s.labels.resource,
            gpu_model: poolId === A ? 'H100' : 'other',
          });
        }
      }
    }
    // The booking shows: 3 of 16 GPUs allocated, 8 vCPUs.
    const allocated = samples(text, 'bettercompute_pool_allocated').filter((s) => s.labels.pool_id === A);
    expect(Object.fromEntries(allocated.map((s) => [s.labels.resource, s.value]))).toMatchObject({ gpu: 3, vcpu: 8 });
    expect(samples(text, 'bettercompute_pool_capacity').find((s) => s.labels.pool_id === B && s.labels.resource === 'gpu.mig')?.value).toBe(6);
    expect(samples(text, 'bettercompute_pool_rollup_updated_timestamp_seconds').filter((s) => s.labels.pool_id === A).length).toBeGreaterThan(0);
  });

  it('a scrape runs one query for all the gauges', async () => {
    let queries = 0;
    const counting = { query: (...args: unknown[]) => (queries++, (t.db.query as (...a: unknown[]) => unknown)(...args)) } as unknown as Db;
    const registry = createRegistry({ defaultMetrics: false });
    registerCapacityGauges(registry, counting);
    const text = await registry.metrics();
    expect(queries).toBe(1);
    expect(samples(text, 'bettercompute_pool_available').length).toBeGreaterThan(0);
    await registry.metrics();
    expect(queries).toBe(2);
  });

  it('a series whose row is gone disappears at the next scrape', async () => {
    const registry = createRegistry({ defaultMetrics: false });
    let rows = [{ pool_id: 'pool_x', pool: 'x', gpu_model: null, resource: 'gpu', total: 1, allocatable: 1, allocated: 0, reserved: 0, available: 1, provisioning: 0, unhealthy: 0, maintenance: 0, unreachable: 0, updated: 1 }];
    registerCapacityGauges(registry, { query: async () => ({ rows }) } as unknown as Db);
    expect(samples(await registry.metrics(), 'bettercompute_pool_capacity')).toHaveLength(1);
    rows = [];
    expect(samples(await registry.metrics(), 'bettercompute_pool_capacity')).toHaveLength(0);
  });
});

describe('placement metrics', () => {
  it('the Ledger reports placements into the histogram', async () => {
    const text = await scrape();
    const count = samples(text, 'bettercompute_placement_duration_seconds_count').find((s) => s.labels.outcome === 'reserved');
    expect(count?.value).toBe(1);
  });

  it('lost races by reason and replans are counters', async () => {
    const registry = createRegistry({ defaultMetrics: false });
    const m = ledgerMetrics(registry);
    m.onLostRace('booking_conflict');
    m.onLostRace('booking_conflict');
    m.onLostRace('retryable');
    m.onReplan();
    m.onPlacement(0.003, 'reserved');
    m.onPlacement(0.2, 'NO_CAPACITY');
    const text = await registry.metrics();
    expect(samples(text, 'bettercompute_placement_lost_races_total')).toEqual([
      { labels: { reason: 'booking_conflict' }, value: 2 },
      { labels: { reason: 'retryable' }, value: 1 },
    ]);
    expect(samples(text, 'bettercompute_placement_replans_total')).toEqual([{ labels: {}, value: 1 }]);
    expect(samples(text, 'bettercompute_placement_duration_seconds_bucket').find((s) => s.labels.outcome === 'reserved' && s.labels.le === '0.005')?.value).toBe(1);
    expect(samples(text, 'bettercompute_placement_duration_seconds_sum').find((s) => s.labels.outcome === 'NO_CAPACITY')?.value).toBeCloseTo(0.2);
  });

  it('HTTP requests are counted by route, not by raw path', async () => {
    await api.client.post('/api/compute/capacity/no-such-method', {});
    await api.client.post('/api/compute/capacity/summary', { tenantId: 'acme' });
    const text = await scrape();
    const routes = new Set(samples(text, 'bettercompute_http_request_duration_seconds_count').map((s) => s.labels.route));
    expect(routes.has('/api/compute/capacity/summary')).toBe(true);
    expect(routes.has('other')).toBe(true);
    expect([...routes].some((r) => r?.includes('no-such-method'))).toBe(false);
  });
});

describe('promtool and a real Prometheus', () => {
  it('promtool check metrics finds nothing to complain about in a real scrape', async () => {
    const text = await scrape();
    expect(text).toContain('bettercompute_pool_allocatable');
    expect(text).toContain('process_cpu_seconds_total');
    const { code, output } = await promtoolCheck(tools.promtool, text);
    expect(output).toBe('');
    expect(code).toBe(0);
  });

  it('promtool does complain about a bad exposition (the check is real)', async () => {
    const { code, output } = await promtoolCheck(tools.promtool, '# TYPE bad_total gauge\nbad_total 1\n');
    expect(code).not.toBe(0);
    expect(output).toMatch(/_total/);
  });

  it('a Prometheus server scrapes /metrics and answers a gauge through its query API', async () => {
    const target = new URL(api.url);
    prom = await startPrometheus(tools.prometheus, { host: target.hostname, port: Number(target.port) });
    const q = `bettercompute_pool_allocatable{pool_id="${A}",resource="gpu"}`;
    const expected = (await poolCapacity(t.db, A)).find((r) => r.resource === 'gpu')!.allocatable;
    const read = async (query: string, want: number) => {
      const deadline = performance.now() + 30_000;
      for (;;) {
        const result = await prom!.query(query);
        if (result.length === 1 && Number(result[0]!.value[1]) === want) return result[0]!;
        if (performance.now() > deadline) throw new Error(`${query}: ${JSON.stringify(result)}; prometheus: ${prom!.logs().slice(-2000)}`);
        await new Promise((r) => setTimeout(r, 250));
      }
    };
    const sample = await read(q, expected);
    expect(sample.metric).toMatchObject({ __name__: 'bettercompute_pool_allocatable', pool: 'metrics-a', pool_id: A, resource: 'gpu', gpu_model: 'H100', job: 'better-compute' });
    // A new booking shows up at a later scrape.
    const ledger = new Ledger(t.db);
    expect((await ledger.reserve(reservation(A, { devices: [{ class: 'gpu', count: 2 }] }), api.clock.now())).ok).toBe(true);
    await read(`bettercompute_pool_allocated{pool_id="${A}",resource="gpu"}`, 5);
    const up = await prom.query('up{job="better-compute"}');
    expect(up.map((s) => s.value[1])).toEqual(['1']);
  }, 90_000);
});
