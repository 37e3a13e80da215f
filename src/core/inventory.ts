// What a node reports about its devices: the NodeDevices spec the agent publishes, and what applyInventory() takes.
import type { ScalarResource } from './types.ts';

export interface MigInstanceReport {
  gi: number;
  ci: number;
  profile?: string;
  memoryGiB?: number;
  healthy?: boolean;
}

export interface GpuReport {
  uuid: string;
  product?: string;
  model?: string;
  vramGiB?: number;
  numaNode?: number;
  nvlinkDomain?: string;
  healthy?: boolean;
  /** MIG instances; present and non-empty when the GPU is in MIG mode. */
  mig?: MigInstanceReport[];
}

export interface InventoryReport {
  gpus: GpuReport[];
  scalars?: Partial<Record<ScalarResource, number>>;
}
