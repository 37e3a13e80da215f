import { describe, expect, it } from 'vitest';
import type { UsageResult } from '../api/capacity-service.ts';
import { loadConfig } from '../config.ts';
import { CliError } from './capacity.ts';
import { renderUsage, usageUnit } from './render.ts';
import { usageCommand, type UsageClient } from './usage.ts';

const RESULT: UsageResult = {
  tenantId: 'acme',
  from: '2026-11-01T00:00:00.000Z',
  to: '2026-12-01T00:00:00.000Z',
  finalUntil: '2026-11-15T10:00:00.000Z',
  totals: [
    { poolId: 'pool_a', resource: 'gpu', atomSeconds: 7200, hours: 2 },
    { poolId: 'pool_a', resource: 'vcpu', atomSeconds: 14400, hours: 4 },
    { poolId: 'pool_bb', resource: 'gpu.mig', atomSeconds: 900, hours: 0.25 },
  ],
};

describe('renderUsage', () => {
  it('the window, what is final, then hours per pool and resource with their unit', () => {
    expect(renderUsage(RESULT)).toBe(
      [
        'Tenant acme: usage 2026-11-01 00:00Z to 2026-12-01 00:00Z (final before 2026-11-15 10:00Z)',
        '',
        'POOL ID  RESOURCE  HOURS  UNIT',
        'pool_a   gpu       2.000  GPU-hours',
        'pool_a   vcpu      4.000  vCPU-hours',
        'pool_bb  gpu.mig   0.250  MIG-instance-hours',
        '',
      ].join('\n'),
    );
  });

  it('hourly rows: an hour at or after finalUntil is open', () => {
    const out = renderUsage({
      ...RESULT,
      poolId: 'pool_a',
      totals: [RESULT.totals[0]!],
      hours: [
        { hour: '2026-11-15T09:00:00.000Z', poolId: 'pool_a', resource: 'gpu', atomSeconds: 3600, hours: 1 },
        { hour: '2026-11-15T10:00:00.000Z', poolId: 'pool_a', resource: 'gpu', atomSeconds: 3600, hours: 1 },
      ],
    });
    expect(out.split('\n').slice(0, 1)).toEqual(['Tenant acme, pool pool_a: usage 2026-11-01 00:00Z to 2026-12-01 00:00Z (final before 2026-11-15 10:00Z)']);
    expect(out.split('\n').slice(5)).toEqual([
      'HOUR               POOL ID  RESOURCE  HOURS  FINAL',
      '2026-11-15 09:00Z  pool_a   gpu       1.000  yes',
      '2026-11-15 10:00Z  pool_a   gpu       1.000  open',
      '',
    ]);
  });

  it('nothing in the window; no run yet', () => {
    expect(renderUsage({ ...RESULT, finalUntil: null, totals: [] })).toBe(
      'Tenant acme: usage 2026-11-01 00:00Z to 2026-12-01 00:00Z (no hour is final yet)\n\nNo usage in the window.\n',
    );
  });

  it('units by resource', () => {
    expect(['gpu', 'gpu.mig', 'gpu.slot', 'vcpu', 'memoryGiB', 'hugepages1Gi', 'disk'].map(usageUnit)).toEqual([
      'GPU-hours',
      'MIG-instance-hours',
      'slot-hours',
      'vCPU-hours',
      'GiB-hours',
      'hugepage-hours',
      'disk-hours',
    ]);
  });
});

describe('usageCommand', () => {
  const config = loadConfig({ BETTER_COMPUTE_TENANT: 'acme' });

  async function run(argv: string[], answer: (body: unknown) => Promise<UsageResult> = async () => RESULT) {
    const bodies: unknown[] = [];
    let stdout = '';
    let stderr = '';
    const client: UsageClient = {
      usage: (b) => {
        bodies.push(b);
        return answer(b);
      },
      async close() {},
    };
    const code = await usageCommand(argv, config, { stdout: (s) => (stdout += s), stderr: (s) => (stderr += s), client: async () => client });
    return { code, stdout, stderr, bodies };
  }

  it('sends the tenant, pool, period and hourly flag as given; prints the table', async () => {
    const r = await run(['--pool', 'pool_a', '--period', '2026-11', '--hourly']);
    expect(r.code).toBe(0);
    expect(r.bodies).toEqual([{ tenantId: 'acme', poolId: 'pool_a', period: '2026-11', hourly: true }]);
    expect(r.stdout).toBe(renderUsage(RESULT));
  });

  it('--from/--to go as ISO text (the API validates them); -o json prints the answer', async () => {
    const r = await run(['--tenant', 'beta', '--from', '2026-11-01', '--to', '2026-11-02T00:00Z', '-o', 'json']);
    expect(r.bodies).toEqual([{ tenantId: 'beta', from: '2026-11-01', to: '2026-11-02T00:00Z' }]);
    expect(JSON.parse(r.stdout)).toEqual(RESULT);
  });

  it('usage errors exit 2 without a call', async () => {
    for (const argv of [['--period', '24h', '--from', '2026-11-01'], ['--to', '2026-11-02'], ['-o', 'xml'], ['--bogus']]) {
      const r = await run(argv);
      expect(r.code, argv.join(' ')).toBe(2);
      expect(r.bodies).toEqual([]);
    }
    const none = await usageCommand([], loadConfig({}), { stdout: () => undefined, stderr: () => undefined, client: async () => ({ usage: async () => RESULT, async close() {} }) });
    expect(none).toBe(2);
  });

  it('an API error is printed with its code (as JSON with -o json), exit 1', async () => {
    const refuse = async () => {
      throw new CliError('FORBIDDEN', 'not allowed to read tenant beta');
    };
    expect(await run(['--tenant', 'beta'], refuse)).toMatchObject({ code: 1, stderr: 'error FORBIDDEN: not allowed to read tenant beta\n' });
    const json = await run(['--tenant', 'beta', '-o', 'json'], refuse);
    expect(JSON.parse(json.stderr)).toEqual({ error: { code: 'FORBIDDEN', message: 'not allowed to read tenant beta' } });
  });
});
