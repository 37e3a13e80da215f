// What a node reports about its devices: the NodeDevices spec the agent publishes, and what applyInventory() takes;
// the device rows a report stands for, and the pure decisions applyInventory makes with them (layout changes, whose a
// reported device is).
import { z } from 'zod';
import type { ScalarResource, Sharing } from './types.ts';

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
  /**
   * MIG mode is on (nvidia-smi `mig.mode.current` Enabled): the GPU is only the parent of its MIG instances, never an
   * atom itself, even while it has none. Absent: off, unless `mig` lists instances.
   */
  migEnabled?: boolean;
  /** MIG instances; non-empty when the GPU is in MIG mode and partitioned. */
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
          migEnabled: z.boolean().optional(),
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

/** One row of the ledger's devices table for a node: a GPU, or a MIG instance or slot of one (its parent). */
export interface DeviceRow {
  id: string;
  class: 'gpu' | 'gpu.mig' | 'gpu.slot';
  parentId: string | null;
  attributes: Record<string, unknown>;
  healthy: boolean;
  bookable: boolean;
}

/**
 * The device rows a report stands for, given the pool's sharing mode. A GPU in MIG mode (`migEnabled`, or any MIG
 * instance listed) is an unbookable parent with one child per instance, none while it has no instances; otherwise, in
 * a timeslice or MPS pool, an unbookable parent of `slotsPerGpu` slots; otherwise one bookable whole GPU.
 */
export function devicesFromReport(report: InventoryReport, sharing: Sharing, slotsPerGpu: number): DeviceRow[] {
  const rows: DeviceRow[] = [];
  for (const g of report.gpus) {
    const attrs: Record<string, unknown> = {
      gpuProduct: g.product ?? null,
      gpuModel: g.model ?? null,
      vramGiB: g.vramGiB ?? null,
      numaNode: g.numaNode ?? null,
      nvlinkDomain: g.nvlinkDomain ?? null,
    };
    const healthy = g.healthy ?? true;
    const mig = g.mig ?? [];
    const migMode = g.migEnabled === true || mig.length > 0;
    const slots = !migMode && (sharing === 'timeslice' || sharing === 'mps');
    rows.push({ id: g.uuid, class: 'gpu', parentId: null, attributes: attrs, healthy, bookable: !migMode && !slots });
    for (const m of mig) {
      rows.push({
        id: `${g.uuid}/gi${m.gi}/ci${m.ci}`,
        class: 'gpu.mig',
        parentId: g.uuid,
        attributes: { ...attrs, migProfile: m.profile ?? null, vramGiB: m.memoryGiB ?? null },
        healthy: healthy && (m.healthy ?? true),
        bookable: true,
      });
    }
    if (slots) {
      for (let k = 0; k < slotsPerGpu; k++) {
        rows.push({
          id: `${g.uuid}/s${k}`,
          class: 'gpu.slot',
          parentId: g.uuid,
          attributes: { ...attrs, sharing },
          healthy,
          bookable: true,
        });
      }
    }
  }
  return rows;
}

/** What a GPU's layout is made of: whether the GPU itself is an atom, and its children. */
type LayoutRow = Pick<DeviceRow, 'id' | 'parentId' | 'bookable'>;

function layoutOf(rows: readonly LayoutRow[], gpu: string): string | undefined {
  const parent = rows.find((r) => r.id === gpu);
  if (!parent) return undefined;
  const children = rows
    .filter((r) => r.parentId === gpu)
    .map((r) => r.id)
    .sort();
  return `${parent.bookable}|${children.join(',')}`;
}

/**
 * The GPUs among `gpus` whose layout (the GPU an atom or not, its children) differs between the node's present rows
 * and the rows it reports now. A GPU new to the node is no change: nothing of it was bookable there.
 */
export function layoutChanges(current: readonly LayoutRow[], desired: readonly LayoutRow[], gpus: readonly string[]): string[] {
  return gpus.filter((gpu) => {
    const before = layoutOf(current, gpu);
    return before !== undefined && before !== layoutOf(desired, gpu);
  });
}

/** Every atom a layout change of `gpu` touches, old and new, parent included (what its layout booking holds). */
export function layoutAtoms(gpu: string, current: readonly LayoutRow[], desired: readonly LayoutRow[]): string[] {
  return [...new Set([gpu, ...[...current, ...desired].filter((r) => r.parentId === gpu).map((r) => r.id)])].sort();
}

/**
 * A GPU whose layout change must wait keeps its present rows; only their health follows the report: the GPU's own,
 * and each child's as reported when the new layout has it too, else the GPU's.
 */
export function keptLayoutHealth(gpu: string, current: readonly LayoutRow[], desired: readonly DeviceRow[]): { id: string; healthy: boolean }[] {
  const parent = desired.find((r) => r.id === gpu);
  if (!parent) return [];
  const reported = new Map(desired.filter((r) => r.parentId === gpu).map((r) => [r.id, r.healthy]));
  return [
    { id: gpu, healthy: parent.healthy },
    ...current.filter((r) => r.parentId === gpu).map((r) => ({ id: r.id, healthy: parent.healthy && (reported.get(r.id) ?? true) })),
  ];
}

/** The ledger's row of a reported GPU that another node holds, with that node's state. */
export interface OtherNodesDevice {
  id: string;
  nodeId: string;
  present: boolean;
  /** The other node's pool and connectivity in the ledger. */
  nodePoolId: string | null;
  nodeConnectivity: string;
}

/**
 * Whether another node still owns a device (a second report of it is refused, not moved): it is present in that node's
 * inventory, and that node is not gone. A Node deleted from Kubernetes stays in the ledger out of every pool and
 * unreachable (the Node reconciler's and the drift reconcile's `nodeGone`); its devices may be taken by the node that
 * reports them now.
 */
export function ownedByOtherNode(d: OtherNodesDevice): boolean {
  const gone = d.nodePoolId === null && d.nodeConnectivity === 'unreachable';
  return d.present && !gone;
}
