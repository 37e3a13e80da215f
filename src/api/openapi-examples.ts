// Example requests of the OpenAPI document (openapi.ts), one or more per capacity method. Each is a real request: the
// unit test parses every one with the method's zod schema (src/api/openapi.test.ts).

export type CapacityMethodName = 'summary' | 'byPool' | 'preview' | 'timeline' | 'byDomain' | 'usage' | 'quota';

interface Example {
  summary: string;
  value: Record<string, unknown>;
}

const POOL = 'pool_01k9x3m4n5p6q7r8s9t0v1w2x3';

export const OPENAPI_EXAMPLES: Record<CapacityMethodName, Record<string, Example>> = {
  summary: { tenant: { summary: "A tenant's pools", value: { tenantId: 'acme' } } },
  byPool: { pool: { summary: "One pool's rows", value: { tenantId: 'acme', poolId: POOL } } },
  preview: {
    eightGpus: {
      summary: '8 whole GPUs for a day, on GPUs with at least 80 GiB',
      value: {
        tenantId: 'acme',
        poolId: POOL,
        devices: [{ class: 'gpu', count: 8, selector: { vramGiB: { gte: 80 } } }],
        duration: '1d',
        idempotencyKey: 'train-2026-12-01',
      },
    },
    gang: {
      summary: 'A gang of 4 nodes in one rack, 8 GPUs each, next Tuesday for 6 hours',
      value: {
        tenantId: 'acme',
        poolId: POOL,
        devices: [{ class: 'gpu', count: 8, topology: 'nvlink-all' }],
        start: 1_796_457_600_000,
        duration: 'PT6H',
        gang: { size: 4, topologyKey: 'example.com/rack' },
        idempotencyKey: 'gang-run-17',
      },
    },
    spot: {
      summary: 'Two MIG slices as spot, for 90 minutes',
      value: { tenantId: 'acme', poolId: POOL, devices: [{ class: 'gpu.mig', count: 2 }], duration: '1h30m', spot: true, idempotencyKey: 'spot-1' },
    },
  },
  timeline: {
    defaults: { summary: 'The next 24 hours in 60-minute buckets', value: { tenantId: 'acme', poolId: POOL } },
    week: {
      summary: 'A week in 30-minute buckets',
      value: { tenantId: 'acme', poolId: POOL, from: 1_796_428_800_000, to: 1_797_033_600_000, stepMinutes: 30 },
    },
  },
  byDomain: {
    own: { summary: "By the pool's own topology key", value: { tenantId: 'acme', poolId: POOL } },
    zone: { summary: 'By zone', value: { tenantId: 'acme', poolId: POOL, topologyKey: 'topology.kubernetes.io/zone' } },
  },
  usage: {
    month: { summary: 'A UTC month, per pool and resource', value: { tenantId: 'acme', period: '2026-11' } },
    hourly: { summary: 'The last 24 hours, one row per hour', value: { tenantId: 'acme', poolId: POOL, period: '24h', hourly: true } },
    window: { summary: 'From one date to another', value: { tenantId: 'acme', from: '2026-11-01', to: '2026-11-08T00:00Z' } },
  },
  quota: {
    all: { summary: 'Every pool the tenant sees', value: { tenantId: 'acme' } },
    pool: { summary: 'One pool', value: { tenantId: 'acme', poolId: POOL } },
  },
};
