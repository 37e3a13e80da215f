// The host's NVIDIA device nodes for the atoms Allocate hands over (docs/node-isolation.md). A whole GPU or a slot
// of it is /dev/nvidia<minor>; a MIG instance is its GPU's node and the two capability nodes of its GPU instance and
// compute instance (/dev/nvidia-caps/nvidia-cap<N>, N from /proc/driver/nvidia-caps/mig-minors); every container with
// a GPU node also gets the control nodes. The minor is the driver's (/proc/driver/nvidia/gpus/<bus id>/information,
// "Device Minor"), never nvidia-smi's index, which may differ. Only nodes that exist on the host are returned: a
// DeviceSpec for a missing node would fail the container's start. The parsers are pure; readHostDeviceNodes reads.
import fs from 'node:fs/promises';
import path from 'node:path';
import type { DeviceClass } from '../core/types.ts';

export const CONTROL_NODES = ['/dev/nvidiactl', '/dev/nvidia-uvm', '/dev/nvidia-uvm-tools'] as const;

export interface GpuInformation {
  uuid?: string;
  /** Bus Location, normalized (normalizeBusId). */
  busId?: string;
  minor?: number;
}

/** `/proc/driver/nvidia/gpus/<bus id>/information`: "GPU UUID", "Bus Location", "Device Minor" (tab-aligned). */
export function parseGpuInformation(text: string): GpuInformation {
  const out: GpuInformation = {};
  for (const line of text.split('\n')) {
    const m = /^([^:]+):\s*(.*?)\s*$/.exec(line);
    if (!m) continue;
    const key = m[1]!.trim();
    const value = m[2]!;
    if (key === 'GPU UUID' && /^GPU-[0-9a-fA-F-]+$/.test(value)) out.uuid = value;
    else if (key === 'Bus Location' && value) out.busId = normalizeBusId(value);
    else if (key === 'Device Minor' && /^\d+$/.test(value)) out.minor = Number(value);
  }
  return out;
}

/** nvidia-smi's `00000000:17:00.0` and the kernel's `0000:17:00.0` as one form: a 4-digit domain, lower case. */
export function normalizeBusId(id: string): string {
  const m = /^(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])$/.exec(id.trim());
  if (!m) return id.trim().toLowerCase();
  const hex = (s: string, n: number) => s.toLowerCase().padStart(n, '0').slice(-n);
  return `${hex(m[1] ?? '0', 4)}:${hex(m[2]!, 2)}:${hex(m[3]!, 2)}.${m[4]}`;
}

/** `/proc/driver/nvidia-caps/mig-minors`: `gpu0/gi1/access 12`, `gpu0/gi1/ci0/access 13`, … → name → minor. */
export function parseMigMinors(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    const m = /^(\S+)\s+(\d+)\s*$/.exec(line.trim());
    if (m) out.set(m[1]!, Number(m[2]));
  }
  return out;
}

export interface AtomRef {
  id: string;
  class: DeviceClass;
  /** The GPU's UUID. */
  gpu: string;
}

/**
 * The device nodes an atom needs, by the driver's numbers (pure): none without its GPU's minor, and a MIG instance's
 * capability nodes only where mig-minors names them.
 */
export function atomDeviceNodes(atom: AtomRef, gpuMinor: number | undefined, migMinors: ReadonlyMap<string, number>): string[] {
  if (gpuMinor === undefined) return [];
  const nodes = [`/dev/nvidia${gpuMinor}`];
  if (atom.class === 'gpu.mig') {
    const m = /\/gi(\d+)\/ci(\d+)$/.exec(atom.id);
    const gi = m && migMinors.get(`gpu${gpuMinor}/gi${m[1]}/access`);
    const ci = m && migMinors.get(`gpu${gpuMinor}/gi${m[1]}/ci${m[2]}/access`);
    // Without both, the instance cannot be opened; handing the whole GPU's node alone would be wrong too.
    if (gi === undefined || gi === null || ci === undefined || ci === null) return [];
    nodes.push(`/dev/nvidia-caps/nvidia-cap${gi}`, `/dev/nvidia-caps/nvidia-cap${ci}`);
  }
  return nodes;
}

export interface HostDirs {
  /** The host's /dev as the agent sees it (a read-only hostPath mount, e.g. /host/dev). */
  dev: string;
  /** A procfs with the NVIDIA driver's files (the agent's own /proc shows them: they are not per namespace). */
  proc: string;
}

export interface HostDeviceNodes {
  /** Atom id → its device nodes that exist on the host (host paths, /dev/...). */
  atomNodes: Map<string, string[]>;
  /** The control nodes that exist on the host. */
  controlNodes: string[];
  /** GPUs (UUIDs) of the atoms whose driver minor was not found. */
  unknownGpus: string[];
}

const devPath = (dirs: HostDirs, node: string) => path.join(dirs.dev, node.replace(/^\/dev\//, ''));

async function exists(file: string): Promise<boolean> {
  return fs.stat(file).then(
    () => true,
    () => false,
  );
}

async function readOrEmpty(file: string): Promise<string> {
  return fs.readFile(file, 'utf8').catch(() => '');
}

/**
 * The host's device nodes for these atoms. A GPU's minor is found by its UUID, else by its PCI bus id (`busIds`, from
 * nvidia-smi); what cannot be read (no driver: simulated GPUs) gives no nodes.
 */
export async function readHostDeviceNodes(dirs: HostDirs, atoms: readonly AtomRef[], busIds: ReadonlyMap<string, string> = new Map()): Promise<HostDeviceNodes> {
  const gpusDir = path.join(dirs.proc, 'driver/nvidia/gpus');
  const entries = await fs.readdir(gpusDir).catch(() => [] as string[]);
  const infos = await Promise.all(entries.map(async (e) => ({ dir: normalizeBusId(e), ...parseGpuInformation(await readOrEmpty(path.join(gpusDir, e, 'information'))) })));
  const minorOf = (gpu: string): number | undefined => {
    const byUuid = infos.find((i) => i.uuid === gpu && i.minor !== undefined);
    if (byUuid) return byUuid.minor;
    const bus = busIds.get(gpu);
    return bus === undefined ? undefined : infos.find((i) => (i.busId ?? i.dir) === normalizeBusId(bus) && i.minor !== undefined)?.minor;
  };
  const migMinors = atoms.some((a) => a.class === 'gpu.mig')
    ? parseMigMinors(await readOrEmpty(path.join(dirs.proc, 'driver/nvidia-caps/mig-minors')))
    : new Map<string, number>();
  const atomNodes = new Map<string, string[]>();
  const unknownGpus = new Set<string>();
  for (const a of atoms) {
    const minor = minorOf(a.gpu);
    if (minor === undefined) unknownGpus.add(a.gpu);
    const wanted = atomDeviceNodes(a, minor, migMinors);
    const present = await Promise.all(wanted.map((n) => exists(devPath(dirs, n))));
    // All of an atom's nodes or none: a MIG instance without its capability nodes cannot be opened.
    atomNodes.set(a.id, present.every(Boolean) ? wanted : []);
  }
  const controlNodes: string[] = [];
  for (const n of CONTROL_NODES) if (await exists(devPath(dirs, n))) controlNodes.push(n);
  return { atomNodes, controlNodes, unknownGpus: [...unknownGpus] };
}
