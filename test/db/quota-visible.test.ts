// Quota visible (issue 13, ADR 0012): limit, used and reserved, in GPUs and GPU-hours, per offering in Pool status, in
// the quota gauges, and in `better-compute capacity --quota` (table and -o json) through the API. Frozen clock: now is
// 2027-03-10 12:00 UTC; the Pool's offering gives team acme 2 GPUs (+2 for a window around now) and 100 GPU-hours a
// month; acme has booked 3 GPUs from 11:00 for 2 h (3 GPU-hours burned, 3 ahead) and 1 GPU on the 20th for 5 h.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { capacityCommand } from '../../src/cli/capacity.ts';
import { loadConfig } from '../../src/config.ts';
import { PoolReconciler } from '../../src/controller/pool/reconciler.ts';
import type { PoolCR } from '../../src/kube/types.ts';
import { DbClock } from '../../src/db/clock.ts';
import { Ledger } from '../../src/db/ledger.ts';
import { registerQuotaGauges } from '../../src/metrics/quota.ts';
import { startTestApi, TOKENS, type TestApi } from '../support/api.ts';
import { makeNode, reservation } from '../support/builders.ts';
import { ensurePrometheus, promtoolCheck } from '../support/prometheus.ts';
import { fakeController, type FakeController } from '../support/controller-context.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';

const at = (iso: string) => Date.parse(iso);
let t: TestDatabase;
let f: FakeController;
let api: TestApi;
let poolId: string;

const poolCR = (name: string, offerings: NonNullable<PoolCR['spec']['offerings']>): PoolCR => ({
  apiVersion: 'bettercompute.io/v1alpha1',
  kind: 'Pool',
  metadata: { name, generation: 1 },
  spec: { nodeSelector: { pool: name }, ownerTenant: 'ops', offerings },
});

beforeAll(async () => {
  t = await createTestDatabase();
  await t.db.query(`UPDATE clock SET frozen_at = '2027-03-10T11:00:00Z'`);
  const clock = await DbClock.create(t.db);
  f = await fakeController({ db: t.db, clock });
  f.informers.pools.put(
    poolCR('visible', [
      {
        tenant: 'acme',
        quota: { gpu: 2 },
        gpuHours: { gpu: 100 },
        quotaOverrides: [{ resource: 'gpu', start: '2027-03-10T00:00:00Z', end: '2027-03-11T00:00:00Z', add: 2 }],
      },
    ]),
  );
  await new PoolReconciler(f.ctx).reconcile('visible');
  poolId = f.ctx.poolIds.get('visible')!;
  await makeNode('visible-n').gpus(4).create(t.db, poolId);
  const ledger = new Ledger(t.db);
  for (const r of [
    reservation(poolId, { devices: [{ class: 'gpu', count: 3 }], duration: 2 * 3600 }),
    reservation(poolId, { start: at('2027-03-20T00:00:00Z'), duration: 5 * 3600 }),
  ]) {
    const o = await ledger.reserve(r, clock.now());
    if (!o.ok) throw new Error(o.message);
  }
  await t.db.query(`UPDATE clock SET frozen_at = '2027-03-10T12:00:00Z'`);
  api = await startTestApi(t.db);
  registerQuotaGauges(api.registry, t.db);
});

afterAll(async () => {
  await api?.close();
  await t?.drop();
});

const EXPECTED = {
  tenant: 'acme',
  resource: 'gpu',
  limit: 4, // 2 + the override in force now
  used: 3,
  reserved: 1,
  gpuHours: {
    limit: 100,
    period: 'month',
    periodStart: '2027-03-01T00:00:00.000Z',
    periodEnd: '2027-04-01T00:00:00.000Z',
    used: 3, // 3 GPUs × 11:00–12:00
    reserved: 8, // 3 GPUs × 12:00–13:00 + 1 GPU × 5 h on the 20th
  },
};

describe('Pool status', () => {
  it('shows per offering the limit in force, GPUs used and reserved, and the GPU-hours of the period', async () => {
    await new PoolReconciler(f.ctx).reconcile('visible');
    expect(f.informers.pools.get('visible')!.status!.quota).toEqual([EXPECTED]);
  });

  it('a budget or override taken out of the spec is gone from the ledger (the offering is declarative)', async () => {
    f.informers.pools.put(poolCR('visible-undo', [{ tenant: 'undo', gpuHours: { gpu: 10, 'gpu.mig': 5 }, quotaOverrides: [{ resource: 'gpu', start: '2027-03-20T00:00:00Z', end: '2027-03-21T00:00:00Z', set: 1 }] }]));
    await new PoolReconciler(f.ctx).reconcile('visible-undo');
    const id = f.ctx.poolIds.get('visible-undo')!;
    const keys = async () =>
      (await t.db.query(`SELECT resource, hour_limit::float8 AS h, has_overrides AS o FROM quotas WHERE pool_id = $1 ORDER BY resource`, [id])).rows;
    expect(await keys()).toEqual([
      { resource: 'gpu', h: 10, o: true },
      { resource: 'gpu.mig', h: 5, o: false },
    ]);
    f.informers.pools.put({ ...poolCR('visible-undo', [{ tenant: 'undo', gpuHours: { gpu: 20 } }]), metadata: { name: 'visible-undo', generation: 2 } });
    await new PoolReconciler(f.ctx).reconcile('visible-undo');
    expect(await keys()).toEqual([
      { resource: 'gpu', h: 20, o: false },
      { resource: 'gpu.mig', h: null, o: false },
    ]);
  });

  it('a Pool whose override windows overlap is not synced, with the reason in its Ready condition', async () => {
    f.informers.pools.put(
      poolCR('visible-bad', [
        {
          tenant: 'acme',
          quotaOverrides: [
            { resource: 'gpu', start: '2027-03-20T00:00:00Z', end: '2027-03-27T00:00:00Z', add: 1 },
            { resource: 'gpu', start: '2027-03-26T00:00:00Z', end: '2027-03-28T00:00:00Z', set: 3 },
          ],
        },
      ]),
    );
    await expect(new PoolReconciler(f.ctx).reconcile('visible-bad')).rejects.toMatchObject({ code: 'INVALID_POOL_SPEC' });
    const ready = f.informers.pools.get('visible-bad')!.status!.conditions!.find((c) => c.type === 'Ready');
    expect(ready).toMatchObject({ status: 'False', reason: 'SyncFailed' });
    expect(ready!.message).toContain('offering acme: quotaOverrides: two gpu windows overlap');
  });
});

describe('metrics', () => {
  it('exports the limit, used and reserved in GPUs and GPU-hours per tenant, pool and resource', async () => {
    const res = await api.client.request({ method: 'GET', path: '/metrics', token: '' });
    const labels = `pool="visible",pool_id="${poolId}",tenant="acme",resource="gpu",period="month"`;
    for (const [name, value] of [
      ['bettercompute_quota_limit', 4],
      ['bettercompute_quota_used', 3],
      ['bettercompute_quota_reserved', 1],
      ['bettercompute_quota_budget_limit_atom_seconds', 100 * 3600],
      ['bettercompute_quota_budget_used_atom_seconds', 3 * 3600],
      ['bettercompute_quota_budget_reserved_atom_seconds', 8 * 3600],
    ] as const) {
      expect(res.text).toContain(`${name}{${labels}} ${value}\n`);
    }
    const quotaLines = res.text.split('\n').filter((l) => l.includes('bettercompute_quota_')).join('\n');
    const { promtool } = await ensurePrometheus();
    expect(await promtoolCheck(promtool, `${quotaLines}\n`)).toEqual({ code: 0, output: '' });
  });
});

describe('capacity --quota', () => {
  const config = () => loadConfig({ BETTER_COMPUTE_SERVER: api.url, BETTER_COMPUTE_TOKEN: TOKENS.acme, BETTER_COMPUTE_TENANT: 'acme' });
  async function cli(argv: string[]) {
    let stdout = '';
    let stderr = '';
    const code = await capacityCommand(argv, config(), { stdout: (s) => (stdout += s), stderr: (s) => (stderr += s) });
    return { code, stdout, stderr };
  }

  it('prints a table per pool and resource', async () => {
    const { code, stdout, stderr } = await cli(['--quota']);
    expect({ code, stderr }).toEqual({ code: 0, stderr: '' });
    expect(stdout.split('\n')).toEqual([
      'Tenant acme: 1 quota key',
      '',
      `POOL ID${' '.repeat(poolId.length - 5)}RESOURCE  LIMIT  USED  RESERVED  HOURS LIMIT  HOURS USED  HOURS RESERVED  PERIOD`,
      `${poolId}  gpu           4     3         1          100           3               8  2027-03-01..2027-04-01 (month)`,
      '',
    ]);
  });

  it('-o json prints what the API answers, for one pool', async () => {
    const { code, stdout } = await cli(['--quota', '--pool', poolId, '-o', 'json']);
    expect(code).toBe(0);
    expect(JSON.parse(stdout)).toEqual({
      tenantId: 'acme',
      quotas: [
        {
          tenantId: 'acme',
          poolId,
          resource: 'gpu',
          limit: 4,
          used: 3,
          reserved: 1,
          hours: { limit: 100, period: 'month', periodStart: at('2027-03-01T00:00:00Z'), periodEnd: at('2027-04-01T00:00:00Z'), used: 3, reserved: 8 },
        },
      ],
    });
  });

  it('another tenant sees none of it, and a pool it cannot see is NOT_FOUND', async () => {
    const res = await api.client.post('/api/compute/capacity/quota', { tenantId: 'beta' });
    expect(res.json).toEqual({ tenantId: 'beta', quotas: [] });
    const hidden = await cli(['--quota', '--tenant', 'ops', '--pool', poolId]);
    expect(hidden.code).toBe(1);
    expect(hidden.stderr).toMatch(/^error FORBIDDEN/);
    expect((await api.client.post('/api/compute/capacity/quota', { tenantId: 'beta', poolId })).json).toMatchObject({ error: { code: 'NOT_FOUND' } });
    expect((await api.client.post('/api/compute/capacity/quota', { tenantId: 'acme', extra: 1 })).json).toMatchObject({ error: { code: 'INVALID_INPUT' } });
  });
});
