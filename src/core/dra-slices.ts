// The node's atoms as ResourceSlices of driver gpu.bettercompute.io (resource.k8s.io/v1), one pool per node named
// after it, each atom one device named draDeviceName(atom id), as the controller's allocations name them (ADR 0043).
// Pure, and not published yet (docs/dra-node.md): the controller allocates without slices, and our DeviceClasses
// select nothing, so a published slice would inform and never be allocated from by kube-scheduler.
import { DRA_DRIVER } from './dra-allocate.ts';
import { draDeviceName } from './dra-names.ts';

/** The most devices one ResourceSlice may hold (the API server's limit). */
export const MAX_DEVICES_PER_SLICE = 128;
/** The longest string attribute value the API server takes. */
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
}

type Attribute = { string: string } | { int: number } | { bool: boolean };

export interface ResourceSliceObject {
  apiVersion: 'resource.k8s.io/v1';
  kind: 'ResourceSlice';
  metadata: { name: string; ownerReferences?: { apiVersion: 'v1'; kind: 'Node'; name: string; uid: string; controller: true }[] };
  spec: {
    driver: string;
    nodeName: string;
    pool: { name: string; generation: number; resourceSliceCount: number };
    devices: { name: string; attributes: Record<string, Attribute> }[];
  };
}

function stringAttribute(value: string): Attribute | undefined {
  return value.length <= MAX_ATTRIBUTE_STRING ? { string: value } : undefined;
}

/** One device: its name, and what a selector could read (class, atom id, GPU and UUID where they fit, health, NUMA). */
function deviceOf(a: SliceAtom): ResourceSliceObject['spec']['devices'][number] {
  const attributes: Record<string, Attribute> = { class: { string: a.class }, healthy: { bool: a.healthy } };
  const strings = { atomId: a.id, gpu: a.gpu, uuid: a.visible };
  for (const [k, v] of Object.entries(strings)) {
    const attr = stringAttribute(v);
    if (attr) attributes[k] = attr;
  }
  if (a.numaNode !== undefined) attributes.numaNode = { int: a.numaNode };
  return { name: draDeviceName(a.id), attributes };
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
