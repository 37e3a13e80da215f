// Capacity gauges: one gauge per rollup column, per pool and resource, read from the database at scrape time with
// one query (the nine gauges share it).
import { Gauge, type Registry } from 'prom-client';
import { domainCapacity, UNLABELLED_DOMAIN, type PoolDomains } from '../db/capacity.ts';
import type { Db } from '../db/pool.ts';

/** Rollup column → gauge name and help. `total` is `bettercompute_pool_capacity`: a gauge must not end in `_total`. */
export const CAPACITY_GAUGES = [
  ['total', 'bettercompute_pool_capacity', 'Everything the pool holds of a resource: allocatable plus the provisioning, unhealthy, maintenance and unreachable buckets (the rollup total).'],
  ['allocatable', 'bettercompute_pool_allocatable', 'Healthy, bookable atoms on schedulable nodes (scalars: allocatable times the overcommit ratio).'],
  ['allocated', 'bettercompute_pool_allocated', 'Atoms booked now: bookings whose range contains compute_now().'],
  ['reserved', 'bettercompute_pool_reserved', 'Atoms booked later: bookings that start after compute_now().'],
  ['available', 'bettercompute_pool_available', 'max(0, allocatable - allocated - reserved); conservative.'],
  ['provisioning', 'bettercompute_pool_provisioning', 'Atoms on nodes still provisioning or without a converged spec.'],
  ['unhealthy', 'bettercompute_pool_unhealthy', 'Atoms on nodes with a NoSchedule reason, and unhealthy atoms on schedulable nodes.'],
  ['maintenance', 'bettercompute_pool_maintenance', 'Atoms on nodes in maintenance or cordoned.'],
  ['unreachable', 'bettercompute_pool_unreachable', 'Atoms on nodes that are not connected.'],
] as const;

export type CapacityColumn = (typeof CAPACITY_GAUGES)[number][0];

const LABELS = ['pool', 'pool_id', 'resource', 'gpu_model'] as const;

interface ScrapeRow extends Record<CapacityColumn, number> {
  pool_id: string;
  pool: string;
  gpu_model: string | null;
  resource: string;
  updated: number;
}

// Every rollup row of every pool (archived ones included: their owner still sees them), with the pool's labels.
const SCRAPE_SQL = `
  SELECT c.pool_id, p.name AS pool, p.gpu_model, c.resource, c.total, c.allocatable, c.allocated, c.reserved, c.available,
         c.provisioning, c.unhealthy, c.maintenance, c.unreachable, extract(epoch FROM c.updated_at)::float8 AS updated
  FROM pool_capacity c JOIN pools p ON p.id = c.pool_id
  ORDER BY c.pool_id, c.resource`;

/**
 * Registers the capacity gauges on `registry`. Each scrape runs one query: prom-client collects all metrics of a
 * registry at once, so the first gauge's collect starts the query and the others wait for the same answer. Series
 * of pools and resources that are gone disappear at the next scrape.
 */
export function registerCapacityGauges(registry: Registry, db: Db): void {
  let inFlight: Promise<ScrapeRow[]> | undefined;
  const rows = (): Promise<ScrapeRow[]> => {
    if (!inFlight) {
      inFlight = db.query<ScrapeRow>(SCRAPE_SQL).then((r) => r.rows);
      const clear = () => {
        inFlight = undefined;
      };
      inFlight.then(clear, clear);
    }
    return inFlight;
  };
  const labelsOf = (r: ScrapeRow) => ({ pool: r.pool, pool_id: r.pool_id, resource: r.resource, gpu_model: r.gpu_model ?? 'other' });

  for (const [column, name, help] of CAPACITY_GAUGES) {
    new Gauge({
      name,
      help,
      labelNames: LABELS,
      registers: [registry],
      async collect() {
        const all = await rows();
        this.reset();
        for (const r of all) this.set(labelsOf(r), r[column]);
      },
    });
  }
  new Gauge({
    name: 'bettercompute_pool_rollup_updated_timestamp_seconds',
    help: 'When the rollup row (or its latest pending delta) was last written, by compute_now().',
    labelNames: LABELS,
    registers: [registry],
    async collect() {
      const all = await rows();
      this.reset();
      for (const r of all) this.set(labelsOf(r), r.updated);
    },
  });
}

/** Per placement domain: node counts, and rollup columns per resource (`available` of `gpu`: free whole GPUs). */
const DOMAIN_NODE_GAUGES = [
  ['total', 'bettercompute_domain_nodes', 'Nodes of the placement domain that count in capacity (not excluded).'],
  ['free', 'bettercompute_domain_free_nodes', 'Allocatable nodes of the domain with every atom healthy and none booked now or later: whole nodes a gang member or node lease could take.'],
] as const;
const DOMAIN_ROW_GAUGES = [
  ['total', 'bettercompute_domain_capacity', 'Everything the domain holds of a resource (the rollup total, per domain).'],
  ['allocatable', 'bettercompute_domain_allocatable', 'Healthy, bookable atoms of the resource on schedulable nodes of the domain.'],
  ['allocated', 'bettercompute_domain_allocated', 'Atoms of the resource in the domain booked now.'],
  ['available', 'bettercompute_domain_available', 'max(0, allocatable - allocated - reserved) in the domain; for gpu, the free whole GPUs.'],
] as const;

/**
 * The domain gauges, one query per scrape shared by all of them (as above; a second query beside the rollup's, since
 * the rollup has no domain). Nodes without the pool's topology label are the series with domain="(unlabelled)".
 */
export function registerDomainGauges(registry: Registry, db: Db): void {
  let inFlight: Promise<PoolDomains[]> | undefined;
  const pools = (): Promise<PoolDomains[]> => {
    if (!inFlight) {
      inFlight = domainCapacity(db);
      const clear = () => {
        inFlight = undefined;
      };
      inFlight.then(clear, clear);
    }
    return inFlight;
  };
  const base = (p: PoolDomains, domain: string | null) => ({ pool: p.name, pool_id: p.poolId, domain: domain ?? UNLABELLED_DOMAIN });
  for (const [field, name, help] of DOMAIN_NODE_GAUGES) {
    new Gauge({
      name,
      help,
      labelNames: ['pool', 'pool_id', 'domain'] as const,
      registers: [registry],
      async collect() {
        const all = await pools();
        this.reset();
        for (const p of all) for (const d of p.domains) this.set(base(p, d.domain), d.nodes[field]);
      },
    });
  }
  for (const [column, name, help] of DOMAIN_ROW_GAUGES) {
    new Gauge({
      name,
      help,
      labelNames: ['pool', 'pool_id', 'domain', 'resource'] as const,
      registers: [registry],
      async collect() {
        const all = await pools();
        this.reset();
        for (const p of all) for (const d of p.domains) for (const r of d.capacity) this.set({ ...base(p, d.domain), resource: r.resource }, r[column]);
      },
    });
  }
}
