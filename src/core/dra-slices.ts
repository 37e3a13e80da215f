// The node's atoms as ResourceSlices of driver gpu.bettercompute.io (resource.k8s.io/v1), one pool per node named
// after it, each atom one device named draDeviceName(atom id), as the controller's allocations name them (ADR 0043),
// and the agent's sync decisions: what to create, update and delete so that the node's slices are its healthy atoms.
// Pure. The agent publishes them (src/agent/dra/slices.ts, docs/dra-node.md); the controller allocates without them,
// and our DeviceClasses select nothing, so a published slice informs and is never allocated from by kube-scheduler.
import { z } from 'zod';
import { draDeviceName } from './dra-names.ts';
import { DRA_DRIVER } from './names.ts';

/** The most devices one ResourceSlice may hold (the API server's limit). */
export const MAX_DEVICES_PER_SLICE = 128;
/** The longest string attribute value the API server takes (in bytes; ours are printable ASCII, one byte each). */
const MAX_ATTRIBUTE_STRING = 64;

export interface SliceAtom {
  id: string;
  class: 'gpu' | 'gpu.mig' | 'gpu.slot';
  /** The GPU the atom is (or is part of). */
  gpu: string;
  /** The GPU or MIG UUID. */
  visible: string;
  healthy: boolean;
  numaNode?: number;
  /** The GPU's product name as nvidia-smi prints it ("NVIDIA H200"), and its model ("H200"). */
  product?: string;
  model?: string;
  /** The device's memory in GiB as the ledger has it: the GPU's, a MIG instance's own, a slot's GPU's. */
  vramGiB?: number;
  /** The device's own memory in MiB: the GPU's or the MIG instance's; none for a slot (it shares its GPU's). */
  memoryMiB?: number;
  /** The GPU's NVLink domain (its fabric partition, or its node's NVLink peers); none for a MIG instance (no NVLink). */
  nvlinkDomain?: string;
  /** A MIG instance's profile ("3g.40gb"). */
  migProfile?: string;
}

const SLICE_CLASSES: readonly string[] = ['gpu', 'gpu.mig', 'gpu.slot'] satisfies SliceAtom['class'][];

/** The atoms a slice can hold: those of the GPU classes (the ledger's other classes have no DRA device). */
export function sliceAtomsOf<A extends Omit<SliceAtom, 'class'> & { class: string }>(atoms: readonly A[]): (A & SliceAtom)[] {
  return atoms.filter((a): a is A & SliceAtom => SLICE_CLASSES.includes(a.class));
}

type Attribute = { string: string } | { int: number } | { bool: boolean };
/** A device's capacity (resource.k8s.io/v1 DeviceCapacity): a quantity, in the API server's canonical form. */
type Capacity = { value: string };

export interface ResourceSliceObject {
  apiVersion: 'resource.k8s.io/v1';
  kind: 'ResourceSlice';
  metadata: { name: string; ownerReferences?: { apiVersion: 'v1'; kind: 'Node'; name: string; uid: string; controller: true }[] };
  spec: {
    driver: string;
    nodeName: string;
    pool: { name: string; generation: number; resourceSliceCount: number };
    devices: { name: string; attributes: Record<string, Attribute>; capacity?: Record<string, Capacity> }[];
  };
}

// What a device says of itself comes from nvidia-smi on the node (src/agent/discovery.ts) or a devices file: each
// value is checked again here, and one that does not pass is left out of the slice, never published as it came.
/** Printable ASCII of what ids are made of, at most MAX_ATTRIBUTE_STRING: device ids, UUIDs, NVLink domains. */
const IdString = z.string().min(1).max(MAX_ATTRIBUTE_STRING).regex(/^[A-Za-z0-9._:/+-]+$/);
/** Printable ASCII with spaces (product names), at most MAX_ATTRIBUTE_STRING, not blank. */
const TextString = z.string().max(MAX_ATTRIBUTE_STRING).regex(/^[\x20-\x7e]*[\x21-\x7e][\x20-\x7e]*$/);
const STRING_ATTRIBUTES = { atomId: IdString, gpu: IdString, uuid: IdString, product: TextString, model: TextString, nvlinkDomain: IdString, migProfile: IdString };
/** A NUMA node the kernel could have. */
const NumaNodeSchema = z.number().int().min(0).max(1023);
/** Whole GiB, rounded (an attribute is an int64; the exact amount is the `memory` capacity), up to a PiB. */
const VramGiBSchema = z.number().finite().min(0).max(1 << 20).transform(Math.round);
/** MiB of device memory, whole, from 1 MiB up to a PiB. */
const MemoryMiBSchema = z.number().int().min(1).max(1 << 30);

/**
 * `mib` MiB as a quantity in the API server's canonical form (what it writes back, so that a slice read back equals
 * the one written): the largest binary suffix that keeps the number whole.
 */
export function mebibytesQuantity(mib: number): string {
  const suffixes = ['Mi', 'Gi', 'Ti', 'Pi', 'Ei'];
  let n = mib;
  let k = 0;
  while (n % 1024 === 0 && k < suffixes.length - 1) {
    n /= 1024;
    k++;
  }
  return `${n}${suffixes[k]}`;
}

/**
 * One device: its name, and what a selector could read (docs/dra.md, "What the slices say"): class, health, atom id,
 * GPU and UUID, product and model, vramGiB, NUMA node, NVLink domain, MIG profile; and its own memory as the capacity
 * `memory`. A value that is missing or does not pass its check is left out.
 */
function deviceOf(a: SliceAtom): ResourceSliceObject['spec']['devices'][number] {
  const attributes: Record<string, Attribute> = { class: { string: a.class }, healthy: { bool: a.healthy } };
  const strings = { atomId: a.id, gpu: a.gpu, uuid: a.visible, product: a.product, model: a.model, nvlinkDomain: a.class === 'gpu.mig' ? undefined : a.nvlinkDomain, migProfile: a.migProfile };
  for (const [k, v] of Object.entries(strings)) {
    const ok = STRING_ATTRIBUTES[k as keyof typeof STRING_ATTRIBUTES].safeParse(v);
    if (ok.success) attributes[k] = { string: ok.data };
  }
  const numa = NumaNodeSchema.safeParse(a.numaNode);
  if (numa.success) attributes.numaNode = { int: numa.data };
  const vram = VramGiBSchema.safeParse(a.vramGiB);
  if (vram.success) attributes.vramGiB = { int: vram.data };
  const memory = MemoryMiBSchema.safeParse(a.class === 'gpu.slot' ? undefined : a.memoryMiB);
  return { name: draDeviceName(a.id), attributes, ...(memory.success ? { capacity: { memory: { value: mebibytesQuantity(memory.data) } } } : {}) };
}

/**
 * The node's slices at `generation`: the atoms sorted by device name, at most MAX_DEVICES_PER_SLICE a slice, every
 * slice counting them all (`resourceSliceCount`); none for a node without atoms. Two atoms that give one device
 * name (which draDeviceName keeps apart) are an error.
 */
export function resourceSlicesFor(i: { node: string; nodeUid?: string; atoms: readonly SliceAtom[]; generation: number }): ResourceSliceObject[] {
  const devices = i.atoms.map(deviceOf).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const dup = devices.find((d, k) => k > 0 && devices[k - 1]!.name === d.name);
  if (dup) throw new Error(`two atoms of node ${i.node} give the device name ${dup.name}`);
  const count = Math.ceil(devices.length / MAX_DEVICES_PER_SLICE);
  return Array.from({ length: count }, (_, k) => ({
    apiVersion: 'resource.k8s.io/v1',
    kind: 'ResourceSlice',
    metadata: {
      name: `${i.node.slice(0, 200)}-${DRA_DRIVER}-${k}`,
      ...(i.nodeUid ? { ownerReferences: [{ apiVersion: 'v1', kind: 'Node', name: i.node, uid: i.nodeUid, controller: true }] } : {}),
    },
    spec: {
      driver: DRA_DRIVER,
      nodeName: i.node,
      pool: { name: i.node, generation: i.generation, resourceSliceCount: count },
      devices: devices.slice(k * MAX_DEVICES_PER_SLICE, (k + 1) * MAX_DEVICES_PER_SLICE),
    },
  }));
}

// ---- the agent's sync: the node's slices as the API server has them → what to write

/**
 * A ResourceSlice as the API server sends it, what the sync reads of it. A device's other fields (capacity, counters,
 * taints) are kept so that a slice whose fields differ from ours in any of them is written again.
 */
export const ResourceSliceSchema = z.looseObject({
  metadata: z.looseObject({
    name: z.string().min(1).max(253),
    resourceVersion: z.string().min(1),
    ownerReferences: z.array(z.looseObject({ apiVersion: z.string(), kind: z.string(), name: z.string(), uid: z.string() })).optional(),
  }),
  spec: z.looseObject({
    driver: z.string(),
    nodeName: z.string().optional().nullable(),
    pool: z.looseObject({ name: z.string(), generation: z.number().int().min(0), resourceSliceCount: z.number().int().min(1) }),
    devices: z.array(z.looseObject({ name: z.string(), attributes: z.record(z.string(), z.record(z.string(), z.unknown())).optional() })).optional().nullable(),
  }),
});
export type ExistingSlice = z.infer<typeof ResourceSliceSchema>;

/** A list of ResourceSlices as the API server sends it. */
export const ResourceSliceListSchema = z.looseObject({ items: z.array(ResourceSliceSchema) });

export interface SliceSyncPlan {
  /** The pool's generation the node's slices have after the plan (0: no slices). */
  generation: number;
  create: ResourceSliceObject[];
  /** Replaced whole, each at the resourceVersion read (a concurrent change is a 409, and the next sync decides again). */
  update: { slice: ResourceSliceObject; resourceVersion: string }[];
  delete: { name: string; resourceVersion: string }[];
}

/** Objects compared by value, whatever the order of their keys (the API server's JSON keeps its own). */
function canonical(x: unknown): unknown {
  if (Array.isArray(x)) return x.map(canonical);
  if (x && typeof x === 'object') {
    return Object.fromEntries(
      Object.entries(x as Record<string, unknown>)
        .filter(([, v]) => v !== undefined)
        .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
        .map(([k, v]) => [k, canonical(v)]),
    );
  }
  return x;
}

/** What a slice says, but its pool's generation and its metadata other than the owner: equal means nothing to write. */
function content(s: { metadata: { ownerReferences?: unknown }; spec: { driver: string; nodeName?: string | null; pool: { name: string; resourceSliceCount: number }; devices?: unknown } }): string {
  const owners = ((s.metadata.ownerReferences ?? []) as { uid?: string }[]).map((o) => o.uid);
  const { driver, nodeName, pool, devices } = s.spec;
  return JSON.stringify(canonical({ owners, driver, nodeName, pool: { name: pool.name, count: pool.resourceSliceCount }, devices: devices ?? [] }));
}

/**
 * What the agent writes so that node `node`'s slices of our driver are exactly its healthy atoms (an unhealthy atom is
 * no device: nothing could be given it). `existing` is what the API server listed for the node and our driver; a slice
 * of another node or driver in it is never touched. Nothing to write when every desired slice exists with the same
 * content and all of them share one generation; otherwise every desired slice is written at a generation above any
 * seen (the API server's and `lastGeneration`, the agent's last), and the node's other slices of our driver are deleted.
 */
export function planSliceSync(i: { node: string; nodeUid?: string; atoms: readonly SliceAtom[]; existing: readonly ExistingSlice[]; lastGeneration: number }): SliceSyncPlan {
  const existing = i.existing.filter((s) => s.spec.driver === DRA_DRIVER && s.spec.nodeName === i.node);
  const healthy = i.atoms.filter((a) => a.healthy);
  const draft = resourceSlicesFor({ node: i.node, ...(i.nodeUid ? { nodeUid: i.nodeUid } : {}), atoms: healthy, generation: 0 });
  const byName = new Map(existing.map((s) => [s.metadata.name, s]));
  const generations = new Set(existing.map((s) => s.spec.pool.generation));
  const current =
    existing.length === draft.length &&
    generations.size <= 1 &&
    draft.every((d) => {
      const e = byName.get(d.metadata.name);
      return e !== undefined && content(e) === content(d);
    });
  if (current) return { generation: existing[0]?.spec.pool.generation ?? 0, create: [], update: [], delete: [] };
  const generation = Math.max(i.lastGeneration, ...generations, 0) + 1;
  const desired = draft.map((d) => ({ ...d, spec: { ...d.spec, pool: { ...d.spec.pool, generation } } }));
  const wanted = new Set(desired.map((d) => d.metadata.name));
  return {
    generation: desired.length ? generation : 0,
    create: desired.filter((d) => !byName.has(d.metadata.name)),
    update: desired.flatMap((d) => {
      const e = byName.get(d.metadata.name);
      return e ? [{ slice: d, resourceVersion: e.metadata.resourceVersion }] : [];
    }),
    delete: existing.filter((s) => !wanted.has(s.metadata.name)).map((s) => ({ name: s.metadata.name, resourceVersion: s.metadata.resourceVersion })),
  };
}
