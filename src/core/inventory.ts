// What a node reports about its devices: the NodeDevices spec the agent publishes, and what applyInventory() takes.
import { z } from 'zod';
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

const MigInstanceSchema = z.object({
  gi: z.number().int().min(0).max(255),
  ci: z.number().int().min(0).max(255),
  profile: z.string().max(64).optional(),
  memoryGiB: z.number().min(0).optional(),
  healthy: z.boolean().optional(),
});

/** A whole number of units (the ledger's counters are integers; 1.5 vCPU is not a count), as the CRD bounds it. */
const Count = (max: number) => z.number().int('must be a whole number').min(0).max(max);

/**
 * A NodeDevices spec as the ledger can take it: the CRD's constraints (crds/nodedevices.yaml) and what the API server
 * cannot check on its own: no GPU UUID twice, no MIG GI/CI twice on a GPU, whole scalar counts. Extra GPU fields pass
 * through (the agent's driver index, PCI bus id, MIG UUIDs); scalars are only the three the ledger counts.
 */
export const InventoryReportSchema = z.object({
  gpus: z
    .array(
      z
        .object({
          uuid: z.string().min(1).max(128).regex(/^[A-Za-z0-9._:-]+$/, 'not a device id'),
          product: z.string().max(128).optional(),
          model: z.string().max(128).optional(),
          vramGiB: z.number().min(0).optional(),
          numaNode: z.number().int().min(0).optional(),
          nvlinkDomain: z.string().max(128).optional(),
          healthy: z.boolean().optional(),
          mig: z.array(MigInstanceSchema.loose()).max(56).optional(),
        })
        .loose()
        .superRefine((g, ctx) => {
          const seen = new Set<string>();
          (g.mig ?? []).forEach((m, i) => {
            const id = `gi${m.gi}/ci${m.ci}`;
            if (seen.has(id)) ctx.addIssue({ code: 'custom', path: ['mig', i], message: `MIG instance ${id} of GPU ${g.uuid} is listed twice` });
            seen.add(id);
          });
        }),
    )
    .max(64)
    .superRefine((gpus, ctx) => {
      const seen = new Set<string>();
      gpus.forEach((g, i) => {
        if (seen.has(g.uuid)) ctx.addIssue({ code: 'custom', path: [i, 'uuid'], message: `GPU ${g.uuid} is listed twice` });
        seen.add(g.uuid);
      });
    }),
  scalars: z.strictObject({ vcpu: Count(1e6).optional(), memoryGiB: Count(1e9).optional(), hugepages1Gi: Count(1e9).optional() }).default({}),
});

/** Why a report is refused, one line: `gpus[1].mig[2]: MIG instance gi1/ci0 of GPU … is listed twice; …`. */
export function reportIssues(error: z.ZodError): string {
  return error.issues
    .map((i) => `${i.path.reduce<string>((s, p) => (typeof p === 'number' ? `${s}[${p}]` : s ? `${s}.${String(p)}` : String(p)), '')}: ${i.message}`)
    .join('; ');
}
