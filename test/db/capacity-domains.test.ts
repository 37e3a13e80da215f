// Capacity per placement domain (issue 13, item 6): the byDomain method, its rows against a gang preview, the
// unlabelled nodes, a booking landing in one domain, the input rules, the domain gauges and `capacity --domains`.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CAPACITY_PATHS } from '../../src/api/app.ts';
import type { ByDomainResult, PreviewResult } from '../../src/api/capacity-service.ts';
import { capacityCommand } from '../../src/cli/capacity.ts';
import { loadConfig, type Config } from '../../src/config.ts';
import { poolCapacity, rebuildRollup, type CapacityRow, type DomainCapacity } from '../../src/db/capacity.ts';
import { setDeviceHealth, setNodeState } from '../../src/db/inventory.ts';
import { Ledger } from '../../src/db/ledger.ts';
import type { Db } from '../../src/db/pool.ts';
import { registerDomainGauges } from '../../src/metrics/capacity.ts';
import { createRegistry } from '../../src/metrics/registry.ts';
import { startTestApi, TOKENS, type TestApi } from '../support/api.ts';
import { makeNode, makePool, reservation } from '../support/builders.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { expectError } from '../support/http-assert.ts';

const RACK = 'example.com/rack';
const ZONE = 'topology.kubernetes.io/zone';
const HOUR = 3_600_000;

let t: TestDatabase;
let api: TestApi;
let config: Config;
let RACKS: string; // acme: rack-a (dom-a1, dom-a2) and rack-b (dom-b1, dom-b2), 4 GPUs per node, 16 in all
let MIXED: string; // acme: one node in rack-a (4 GPUs), one without the rack label (2 GPUs)
let BOOKED: string; // acme: like RACKS, for the booking test (the must-show pool stays untouched)
let FOREIGN: string; // ops, not offered to acme
const rackOf: Record<string, string> = {};

async function racks(name: string): Promise<string> {
  const pool = await makePool(name).owner('acme').topologyKey(RACK).create(t.db);
  for (const rack of ['a', 'b']) {
    for (const i of [1, 2]) {
      const id = `${name}-${rack}${i}`;
      rackOf[id] = `rack-${rack}`;
      // The zone label splits the pool differently from the rack: a1 and b1 in zone-1, the others in zone-2.
      await makeNode(id).gpus(4).label(RACK, `rack-${rack}`).label(ZONE, `zone-${i}`).scalars({ vcpu: 32 }).create(t.db, pool);
    }
  }
  return pool;
}

beforeAll(async () => {
  t = await createTestDatabase();
  RACKS = await racks('dom');
  BOOKED = await racks('bkd');
  MIXED = await makePool('dom-mixed').owner('acme').topologyKey(RACK).create(t.db);
  await makeNode('mix-1').gpus(4).label(RACK, 'rack-a').create(t.db, MIXED);
  await makeNode('mix-2').gpus(2).create(t.db, MIXED);
  FOREIGN = await makePool('dom-foreign').owner('ops').create(t.db);
  await makeNode('for-1').gpus(2).create(t.db, FOREIGN);
  api = await startTestApi(t.db);
  config = loadConfig({ BETTER_COMPUTE_SERVER: api.url, BETTER_COMPUTE_TOKEN: TOKENS.acme, BETTER_COMPUTE_TENANT: 'acme' });
});
afterAll(async () => {
  await api?.close();
  await t?.drop();
});

const byDomain = async (poolId: string, extra: Record<string, unknown> = {}): Promise<ByDomainResult> => {
  const res = await api.client.post(CAPACITY_PATHS.byDomain, { tenantId: 'acme', poolId, ...extra });
  expect(res.status, JSON.stringify(res.json)).toBe(200);
  return res.json as ByDomainResult;
};
const gpuRow = (d: DomainCapacity | undefined) => d?.capacity.find((r) => r.resource === 'gpu');
const domain = (r: ByDomainResult, name: string | null) => r.domains.find((d) => d.domain === name);
const gpuPreview = (poolId: string, gpus: number, gangSize: number) =>
  api.client.post(CAPACITY_PATHS.preview, {
    tenantId: 'acme',
    poolId,
    devices: [{ class: 'gpu', count: gpus }],
    duration: '1h',
    gang: { size: gangSize },
    idempotencyKey: 'preview',
  });

describe('a gang that no single domain can hold', () => {
  it('the preview says no while the pool has 16 free GPUs; the domain rows show 8 and 8', async () => {
    // 12 GPUs in one rack: 3 nodes × 4 GPUs. Each rack has 2 nodes of 4 GPUs: 8 GPUs, 2 whole nodes.
    const preview = await gpuPreview(RACKS, 4, 3);
    expect(preview.status).toBe(200);
    const p = preview.json as PreviewResult;
    expect(p.fits).toBe(false);
    expect(p.reason).toBe(`no placement domain (${RACK}) has 3 nodes that fit; the best has 2`);

    const pool = (await api.client.post(CAPACITY_PATHS.byPool, { tenantId: 'acme', poolId: RACKS })).json as { capacity: CapacityRow[] };
    expect(pool.capacity.find((r) => r.resource === 'gpu')).toMatchObject({ total: 16, allocatable: 16, available: 16 });

    const d = await byDomain(RACKS);
    expect(d.topologyKey).toBe(RACK);
    expect(d.domains.map((x) => x.domain)).toEqual(['rack-a', 'rack-b']);
    for (const x of d.domains) {
      expect(x.nodes).toEqual({ total: 2, allocatable: 2, free: 2 });
      expect(gpuRow(x)).toEqual({
        resource: 'gpu', total: 8, allocatable: 8, allocated: 0, reserved: 0, available: 8,
        provisioning: 0, unhealthy: 0, maintenance: 0, unreachable: 0,
      });
      // 2 nodes × 32 vCPUs.
      expect(x.capacity.find((r) => r.resource === 'vcpu')).toMatchObject({ total: 64, available: 64 });
    }
  });

  it('what the rows say fits does fit: 8 GPUs (2 nodes × 4) in one rack', async () => {
    const p = (await gpuPreview(RACKS, 4, 2)).json as PreviewResult;
    expect(p).toMatchObject({ fits: true });
    expect(['rack-a', 'rack-b']).toContain(p.gangDomain);
  });

  it('another topology key groups the same nodes by that label', async () => {
    const d = await byDomain(RACKS, { topologyKey: ZONE });
    expect(d.topologyKey).toBe(ZONE);
    expect(d.domains.map((x) => [x.domain, x.nodes.total, gpuRow(x)?.available])).toEqual([
      ['zone-1', 2, 8],
      ['zone-2', 2, 8],
    ]);
  });
});

describe('nodes without the domain label', () => {
  it('are one explicit row, domain null, listed last; the gang preview cannot use them', async () => {
    const d = await byDomain(MIXED);
    expect(d.domains).toEqual([
      { domain: 'rack-a', nodes: { total: 1, allocatable: 1, free: 1 }, capacity: [expect.objectContaining({ resource: 'gpu', total: 4, available: 4 })] },
      { domain: null, nodes: { total: 1, allocatable: 1, free: 1 }, capacity: [expect.objectContaining({ resource: 'gpu', total: 2, available: 2 })] },
    ]);
    // Two nodes with a free GPU each, but only one of them in a domain.
    const p = (await gpuPreview(MIXED, 1, 2)).json as PreviewResult;
    expect(p).toMatchObject({ fits: false, reason: `no placement domain (${RACK}) has 2 nodes that fit; the best has 1` });
  });

  it('a key no node carries puts every node under the unlabelled row', async () => {
    const d = await byDomain(MIXED, { topologyKey: 'example.com/fabric' });
    expect(d.domains).toHaveLength(1);
    expect(d.domains[0]).toMatchObject({ domain: null, nodes: { total: 2, allocatable: 2, free: 2 } });
    expect(gpuRow(d.domains[0])).toMatchObject({ total: 6, available: 6 });
  });
});

describe('a booking lands in one domain', () => {
  it('that domain’s rows change and the other’s do not; the domains add up to the rebuilt pool rows', async () => {
    const ledger = new Ledger(t.db);
    const now = api.clock.now();
    const out = await ledger.reserve(reservation(BOOKED, { devices: [{ class: 'gpu', count: 3 }], resources: { vcpu: 8 } }), now);
    if (!out.ok) throw new Error(`reserve failed: ${JSON.stringify(out)}`);
    const node = out.reservation.allocations[0]!.nodeId;
    const hit = rackOf[node]!;
    const other = hit === 'rack-a' ? 'rack-b' : 'rack-a';

    const d = await byDomain(BOOKED);
    // 8 GPUs in the rack, 3 booked now: 5 free; its booked node is no longer a free whole node.
    expect(gpuRow(domain(d, hit))).toMatchObject({ total: 8, allocatable: 8, allocated: 3, reserved: 0, available: 5 });
    expect(domain(d, hit)!.nodes).toEqual({ total: 2, allocatable: 2, free: 1 });
    expect(domain(d, hit)!.capacity.find((r) => r.resource === 'vcpu')).toMatchObject({ total: 64, allocated: 8, available: 56 });
    expect(gpuRow(domain(d, other))).toMatchObject({ total: 8, allocated: 0, available: 8 });
    expect(domain(d, other)!.nodes).toEqual({ total: 2, allocatable: 2, free: 2 });

    // A node lease that starts later: its node stops being a free whole node now (conservative, like `available`).
    const later = await ledger.reserve(
      reservation(BOOKED, { devices: [{ class: 'gpu', count: 4 }], binding: 'node', start: now + 5 * HOUR, duration: 3600 }),
      now,
    );
    if (!later.ok) throw new Error(`reserve failed: ${JSON.stringify(later)}`);
    const laterNode = later.reservation.allocations[0]!.nodeId;
    const d2 = await byDomain(BOOKED);
    // Hand count: 2 nodes per rack, minus the distinct booked nodes in it (the lease may take the node booked now,
    // which is free again from +1 h).
    const busy = new Set([node, laterNode]);
    const busyIn = (rack: string) => [...busy].filter((n) => rackOf[n] === rack).length;
    expect(Object.fromEntries(d2.domains.map((x) => [x.domain, x.nodes.free]))).toEqual({ [hit]: 2 - busyIn(hit), [other]: 2 - busyIn(other) });
    const laterRack = rackOf[laterNode]!;
    expect(Object.fromEntries(d2.domains.map((x) => [x.domain, gpuRow(x)!.reserved]))).toEqual({
      [hit]: laterRack === hit ? 4 : 0,
      [other]: laterRack === other ? 4 : 0,
    });

    // Same math as the rollup: after a rebuild the pool's rows are the column sums of its domains' rows.
    await rebuildRollup(t.db);
    const pool = await poolCapacity(t.db, BOOKED);
    for (const row of pool) {
      const sums = d2.domains.map((x) => x.capacity.find((r) => r.resource === row.resource)!);
      for (const col of ['total', 'allocatable', 'allocated', 'reserved', 'available'] as const) {
        expect(sums.reduce((s, r) => s + r[col], 0), `${row.resource}.${col}`).toBe(row[col]);
      }
    }
  });
});

describe('node state inside a domain', () => {
  it('a cordoned node and an unhealthy GPU move atoms into their buckets and take the nodes off the free list', async () => {
    const pool = await makePool('dom-state').owner('acme').topologyKey(RACK).create(t.db);
    const n1 = makeNode('st-1').gpus(4).label(RACK, 'rack-a');
    await n1.create(t.db, pool);
    const n2 = makeNode('st-2').gpus(4).label(RACK, 'rack-a');
    await n2.create(t.db, pool);
    await setNodeState(t.db, 'st-1', { cordoned: true });
    await setDeviceHealth(t.db, n2.gpuUuid(0), false);
    const [rack] = (await byDomain(pool)).domains;
    // st-1: 4 GPUs under maintenance; st-2: 3 allocatable, 1 unhealthy, so not a free whole node.
    expect(rack).toEqual({
      domain: 'rack-a',
      nodes: { total: 2, allocatable: 1, free: 0 },
      capacity: [
        { resource: 'gpu', total: 8, allocatable: 3, allocated: 0, reserved: 0, available: 3, provisioning: 0, unhealthy: 1, maintenance: 4, unreachable: 0 },
      ],
    });
  });
});

describe('the byDomain input', () => {
  const base = { tenantId: 'acme', poolId: '' };
  it.each<[string, Record<string, unknown>, string, RegExp]>([
    ['topologyKey of 129 characters', { topologyKey: 't'.repeat(129) }, 'topologyKey', /^must be at most 128 characters$/],
    ['topologyKey a number', { topologyKey: 5 }, 'topologyKey', /^must be a string$/],
    ['an unknown field', { domain: 'rack-a' }, 'domain', /^is not a known field$/],
    ['poolId not a pool id', { poolId: 'rack-a' }, 'poolId', /^must match/],
    ['tenantId missing', { tenantId: undefined }, 'tenantId', /^is required$/],
  ])('%s: INVALID_INPUT', async (_name, patch, path, msg) => {
    const body = { ...base, poolId: RACKS, ...patch };
    const res = await api.client.post(CAPACITY_PATHS.byDomain, JSON.parse(JSON.stringify(body)));
    const message = expectError(res, 'INVALID_INPUT');
    const issue = message.split('; ').find((m) => m.startsWith(`${path}: `));
    expect(issue?.slice(path.length + 2), message).toMatch(msg);
  });

  it('topologyKey of 128 characters, and empty, are accepted (as gang.topologyKey)', async () => {
    expect((await byDomain(RACKS, { topologyKey: 't'.repeat(128) })).domains.map((x) => x.domain)).toEqual([null]);
    expect((await byDomain(RACKS, { topologyKey: '' })).topologyKey).toBe('');
  });

  it('a pool the tenant cannot see is NOT_FOUND; another tenant’s token is FORBIDDEN', async () => {
    expectError(await api.client.post(CAPACITY_PATHS.byDomain, { tenantId: 'acme', poolId: FOREIGN }), 'NOT_FOUND');
    expectError(await api.client.post(CAPACITY_PATHS.byDomain, { tenantId: 'acme', poolId: RACKS }, TOKENS.ops), 'FORBIDDEN');
  });
});

describe('domain gauges', () => {
  it('free GPUs and free whole nodes per pool and domain, the unlabelled nodes as domain="(unlabelled)"', async () => {
    const text = await api.registry.metrics();
    const value = (name: string, labels: string) => {
      const line = text.split('\n').find((l) => l.startsWith(`${name}{`) && labels.split(',').every((x) => l.includes(x)));
      return line === undefined ? undefined : Number(line.slice(line.lastIndexOf(' ') + 1));
    };
    expect(value('bettercompute_domain_available', `pool="dom",domain="rack-a",resource="gpu"`)).toBe(8);
    expect(value('bettercompute_domain_free_nodes', `pool="dom",domain="rack-b"`)).toBe(2);
    expect(value('bettercompute_domain_nodes', `pool="dom-mixed",domain="(unlabelled)"`)).toBe(1);
    expect(value('bettercompute_domain_capacity', `pool="dom-mixed",domain="(unlabelled)",resource="gpu"`)).toBe(2);
  });

  it('a scrape runs one query for all the domain gauges', async () => {
    let queries = 0;
    const counting = { query: (...args: unknown[]) => (queries++, (t.db.query as (...a: unknown[]) => unknown)(...args)) } as unknown as Db;
    const registry = createRegistry({ defaultMetrics: false });
    registerDomainGauges(registry, counting);
    expect(await registry.metrics()).toContain('bettercompute_domain_free_nodes{');
    expect(queries).toBe(1);
  });
});

describe('capacity --domains', () => {
  async function cli(argv: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
    let stdout = '';
    let stderr = '';
    const code = await capacityCommand(argv, config, { stdout: (s) => (stdout += s), stderr: (s) => (stderr += s) });
    return { code, stdout, stderr };
  }

  it('a table, one line per domain and resource, the unlabelled nodes last', async () => {
    const r = await cli(['--domains', '--pool', MIXED]);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout.split('\n')).toEqual([
      `Pool ${MIXED}: capacity per placement domain (${RACK})`,
      '',
      'DOMAIN        NODES  ALLOCATABLE NODES  FREE NODES  RESOURCE  TOTAL  ALLOCATABLE  ALLOCATED  RESERVED  AVAILABLE  PROVISIONING  UNHEALTHY  MAINTENANCE  UNREACHABLE',
      'rack-a            1                  1           1  gpu           4            4          0         0          4             0          0            0            0',
      '(unlabelled)      1                  1           1  gpu           2            2          0         0          2             0          0            0            0',
      '',
      `(unlabelled): nodes without the label ${RACK}; a gang never uses them.`,
      '',
    ]);
  });

  it('-o json prints what the API answers; --topology-key is passed on', async () => {
    const r = await cli(['--domains', '--pool', RACKS, '--topology-key', ZONE, '-o', 'json']);
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual(await byDomain(RACKS, { topologyKey: ZONE }));
  });

  it.each<[string[], RegExp]>([
    [['--domains'], /--domains needs --pool/],
    [['--domains', '--timeline', '--pool', 'P'], /do not go together/],
    [['--pool', 'P', '--topology-key', 'k'], /--topology-key needs --preview or --domains/],
  ])('%j → exit 2', async (argv, message) => {
    const r = await cli(argv.map((a) => (a === 'P' ? RACKS : a)));
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(message);
  });
});
