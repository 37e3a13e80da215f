// Fluent builders for ledger fixtures: makePool('p').owner('acme').offer('beta', {gpu: 4}), makeNode('n1').gpus(8).
import type { ReservationCreateInput } from '../../src/core/schemas.ts';
import type { ScalarResource, Sharing } from '../../src/core/types.ts';
import { applyInventory, upsertNode, upsertPool, type GpuReport, type PoolSpec } from '../../src/db/inventory.ts';
import type { Db } from '../../src/db/pool.ts';

export class PoolBuilder {
  private spec: PoolSpec;
  constructor(name: string) {
    this.spec = { name, ownerTenant: 'acme', gpuModel: 'H100', offerings: [] };
  }
  owner(t: string) {
    this.spec.ownerTenant = t;
    return this;
  }
  model(m: string | null) {
    this.spec.gpuModel = m;
    return this;
  }
  sharing(s: Sharing, slotsPerGpu = 1) {
    this.spec.sharing = s;
    this.spec.slotsPerGpu = slotsPerGpu;
    return this;
  }
  topologyKey(k: string) {
    this.spec.topologyKey = k;
    return this;
  }
  overcommit(o: Partial<Record<ScalarResource, number>>) {
    this.spec.overcommit = o;
    return this;
  }
  offer(tenantId: string, quota?: Record<string, number | null>) {
    this.spec.offerings!.push({ tenantId, ...(quota ? { quota } : {}) });
    return this;
  }
  archived(a = true) {
    this.spec.archived = a;
    return this;
  }
  handoff(h: 'devicePlugin' | 'dra') {
    this.spec.handoff = h;
    return this;
  }
  create(db: Db): Promise<string> {
    return upsertPool(db, this.spec);
  }
}

export class NodeBuilder {
  private gpuCount = 8;
  private numaNodes = 2;
  private labels: Record<string, string> = {};
  private scalarCaps: Partial<Record<ScalarResource, number>> = {};
  private migLayout: { gi: number; ci: number; profile: string; memoryGiB: number }[] | undefined;
  private model = 'H100';
  private vram = 80;
  private nvlink = true;
  constructor(readonly id: string) {}
  gpus(n: number) {
    this.gpuCount = n;
    return this;
  }
  numa(n: number) {
    this.numaNodes = n;
    return this;
  }
  gpuModel(model: string, vramGiB: number) {
    this.model = model;
    this.vram = vramGiB;
    return this;
  }
  noNvlink() {
    this.nvlink = false;
    return this;
  }
  label(k: string, v: string) {
    this.labels[k] = v;
    return this;
  }
  domain(zone: string) {
    return this.label('topology.kubernetes.io/zone', zone);
  }
  scalars(s: Partial<Record<ScalarResource, number>>) {
    this.scalarCaps = s;
    return this;
  }
  mig(instances: number) {
    this.migLayout = Array.from({ length: instances }, (_, i) => ({ gi: i + 1, ci: 0, profile: '1g.10gb', memoryGiB: 10 }));
    return this;
  }
  gpuUuid(i: number) {
    return `GPU-${this.id}-${String(i).padStart(2, '0')}`;
  }
  report(): GpuReport[] {
    return Array.from({ length: this.gpuCount }, (_, i) => ({
      uuid: this.gpuUuid(i),
      product: `NVIDIA ${this.model} 80GB HBM3`,
      model: this.model,
      vramGiB: this.vram,
      numaNode: Math.floor((i * this.numaNodes) / this.gpuCount),
      ...(this.nvlink ? { nvlinkDomain: `${this.id}-nvl` } : {}),
      ...(this.migLayout ? { mig: this.migLayout } : {}),
    }));
  }
  async create(db: Db, poolId: string): Promise<string> {
    await upsertNode(db, { id: this.id, poolId, labels: this.labels });
    await applyInventory(db, this.id, { gpus: this.report(), scalars: this.scalarCaps });
    return this.id;
  }
}

export const makePool = (name: string) => new PoolBuilder(name);
export const makeNode = (id: string) => new NodeBuilder(id);

let seq = 0;
/** A valid reservations.create input (already parsed): 1 GPU for an hour, unless overridden. */
export function reservation(poolId: string, over: Partial<ReservationCreateInput> = {}): ReservationCreateInput {
  return {
    tenantId: 'acme',
    poolId,
    devices: [{ class: 'gpu', count: 1 }],
    duration: 3600,
    binding: 'hold',
    idempotencyKey: `key-${process.pid}-${++seq}`,
    ...over,
  };
}
