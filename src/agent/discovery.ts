// Device discovery: nvidia-smi on real hardware, a JSON file for simulated GPUs. The parsers are pure and read
// nvidia-smi's own output formats (fixtures in test/fixtures/nvidia-smi/).
import { execFile } from 'node:child_process';
import fs from 'node:fs/promises';
import { z } from 'zod';
import { InventoryReportSchema, type GpuReport, type MigInstanceReport } from '../core/inventory.ts';

export interface MigDevice extends MigInstanceReport {
  /** MIG-<uuid> as the driver names it, when known (what NVIDIA_VISIBLE_DEVICES takes). */
  uuid?: string;
  /** Agent-local: the instance's memory in MiB as nvidia-smi's MIG table prints it (memoryGiB is that, rounded). */
  memoryMiB?: number;
}

export interface GpuDevice extends Omit<GpuReport, 'mig'> {
  mig?: MigDevice[];
  /** Agent-local: the driver's index and PCI bus id. */
  index?: number;
  pciBusId?: string;
  /** Agent-local: memory.total in MiB (vramGiB is that, rounded); the DRA slice's `memory` capacity. */
  memoryMiB?: number;
}

/** The NodeDevices spec (cluster-scoped CR, one per node), as the controller reads it. */
export interface NodeDevicesSpec {
  gpus: GpuDevice[];
  scalars: { vcpu?: number; memoryGiB?: number; hugepages1Gi?: number };
}

export const QUERY_GPU_FIELDS = ['index', 'uuid', 'name', 'memory.total', 'pci.bus_id', 'mig.mode.current'] as const;
export const QUERY_GPU_ARGS = [`--query-gpu=${QUERY_GPU_FIELDS.join(',')}`, '--format=csv,noheader,nounits'];

/**
 * A failed or unparsable nvidia-smi call. nvidia-smi's output is input from another party: what we cannot read is a
 * failed discovery, never a different layout (docs/adr/0009-discovery-failures.md).
 */
export class DiscoveryError extends Error {}

/** What nvidia-smi prints in a field it cannot read: the GPU is unhealthy, and the field unknown. */
const BAD_VALUE = /^\[?(ERR!|Unknown Error|GPU requires reset|GPU is lost)\]?$/i;
const NOT_AVAILABLE = /^\[?N\/A\]?$/;
/** A UUID's 36 characters, as NVML prints them (a GPU's after `GPU-`, a fabric's cluster UUID alone). */
const UUID_BODY = '[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}';
const GPU_UUID = new RegExp(`^GPU-${UUID_BODY}$`);

const bad = (c: string) => BAD_VALUE.test(c);
const QueryGpuRow = z.tuple([
  z.string().regex(/^\d{1,3}$/, 'index: not a number').transform(Number),
  z.string().regex(GPU_UUID, 'uuid: not a GPU UUID'),
  z.string().min(1, 'name: empty'),
  z.string().refine((c) => /^\d+$/.test(c) || bad(c) || NOT_AVAILABLE.test(c), 'memory.total: not MiB'),
  z.string().refine((c) => /^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$/.test(c) || bad(c), 'pci.bus_id: not a bus id'),
  z.string().refine((c) => c === 'Enabled' || c === 'Disabled' || NOT_AVAILABLE.test(c) || bad(c), 'mig.mode.current: not Enabled/Disabled'),
]);

/** An unparsable line of a call's output (quoted, cut short). */
function unparsable(call: string, line: string, why: string): DiscoveryError {
  return new DiscoveryError(`nvidia-smi ${call}: unparsable output (${why}): ${JSON.stringify(line.slice(0, 160))}`);
}

/** The GPU's MIG mode as --query-gpu tells it; undefined when it printed an error for it. */
export type MigMode = 'enabled' | 'disabled' | undefined;

/**
 * `nvidia-smi --query-gpu=index,uuid,name,memory.total,pci.bus_id,mig.mode.current --format=csv,noheader,nounits`.
 * Every line must be a GPU (6 columns, a GPU UUID); a field nvidia-smi reports as an error makes the GPU unhealthy.
 */
export function parseQueryGpu(text: string): (GpuDevice & { migMode: MigMode })[] {
  const gpus: (GpuDevice & { migMode: MigMode })[] = [];
  for (const line of text.split('\n')) {
    if (!line.trim()) continue;
    const cols = line.split(',').map((c) => c.trim());
    const row = QueryGpuRow.safeParse(cols);
    if (!row.success) throw unparsable('--query-gpu', line, row.error.issues.map((i) => i.message).join('; ') || 'not 6 columns');
    const [index, uuid, name, memory, bus, mig] = row.data;
    const memMiB = Number(memory);
    gpus.push({
      uuid,
      index,
      ...(!bad(name) ? { product: name, model: modelOf(name) } : {}),
      ...(Number.isFinite(memMiB) && memMiB > 0 ? { vramGiB: Math.round(memMiB / 1024), memoryMiB: memMiB } : {}),
      ...(!bad(bus) ? { pciBusId: bus } : {}),
      healthy: !cols.some(bad),
      migMode: mig === 'Enabled' ? 'enabled' : bad(mig) ? undefined : 'disabled',
    });
  }
  if (!gpus.length) throw new DiscoveryError('nvidia-smi --query-gpu: no GPU in its output');
  if (new Set(gpus.map((g) => g.uuid)).size !== gpus.length) throw new DiscoveryError('nvidia-smi --query-gpu: a GPU UUID twice');
  return gpus;
}

/** "NVIDIA H100 80GB HBM3" → "H100", "NVIDIA A100-SXM4-40GB" → "A100", "Tesla V100-PCIE-16GB" → "V100". */
export function modelOf(product: string): string {
  const words = product.replace(/^(NVIDIA|Tesla|Quadro)\s+/i, '').split(/[\s-]+/);
  const m = words.find((w) => /^[A-Z]{1,3}\d{1,4}[A-Za-z]?$/.test(w));
  return m ?? words[0] ?? product;
}

export interface ListedGpu {
  index: number;
  product: string;
  uuid: string;
  mig: { device: number; profile: string; uuid: string; gi?: number; ci?: number }[];
}

/**
 * `nvidia-smi -L`: GPUs and their MIG devices (new "MIG-<uuid>" and legacy "MIG-GPU-<uuid>/<gi>/<ci>" forms). Every
 * line must be one of those two.
 */
export function parseList(text: string): ListedGpu[] {
  const out: ListedGpu[] = [];
  for (const line of text.split('\n')) {
    if (!line.trim()) continue;
    const g = /^GPU (\d+): (.*) \(UUID: (GPU-[^)\s]+)\)$/.exec(line.trim());
    if (g) {
      out.push({ index: Number(g[1]), product: g[2]!, uuid: g[3]!, mig: [] });
      continue;
    }
    const m = /^MIG\s+(\S+)\s+Device\s+(\d+):\s+\(UUID:\s+(MIG-[^)\s]+)\)$/.exec(line.trim());
    if (!m) throw unparsable('-L', line, 'neither a GPU nor a MIG device');
    if (!out.length) throw unparsable('-L', line, 'a MIG device before any GPU');
    const legacy = /^MIG-GPU-[^/]+\/(\d+)\/(\d+)$/.exec(m[3]!);
    out[out.length - 1]!.mig.push({
      device: Number(m[2]),
      profile: m[1]!,
      uuid: m[3]!,
      ...(legacy ? { gi: Number(legacy[1]), ci: Number(legacy[2]) } : {}),
    });
  }
  if (!out.length) throw new DiscoveryError('nvidia-smi -L: no GPU in its output');
  return out;
}

export interface MigTableRow {
  gpu: number;
  gi: number;
  ci: number;
  device: number;
  memoryMiB?: number;
}

/**
 * The "MIG devices" table of plain `nvidia-smi`: GPU index, GI, CI, MIG device index, memory (MiB). A row of the table
 * whose first cell holds numbers must be four of them; without the table (or with "No MIG devices found") it is empty.
 */
export function parseMigTable(text: string): MigTableRow[] {
  if (!/NVIDIA-SMI \d+\.\d+/.test(text)) throw unparsable('(plain)', text.split('\n').find((l) => l.trim()) ?? '', 'no NVIDIA-SMI banner');
  const start = text.indexOf('MIG devices:');
  if (start < 0) return [];
  const out: MigTableRow[] = [];
  for (const line of text.slice(start).split('\n')) {
    if (/Processes:/.test(line)) break;
    const first = /^\|([^|]*)\|/.exec(line)?.[1]?.trim() ?? '';
    if (!/\d/.test(first)) continue; // borders, headers, the BAR1 line of a row
    const m = /^\|\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+\|\s+(?:\S+\s*\/\s*(\d+)MiB)?/.exec(line);
    if (!m) throw unparsable('(plain)', line, 'a MIG table row that is not GPU, GI, CI, device');
    out.push({ gpu: Number(m[1]), gi: Number(m[2]), ci: Number(m[3]), device: Number(m[4]), ...(m[5] ? { memoryMiB: Number(m[5]) } : {}) });
  }
  return out;
}

/** A NUMA node id as topo -m prints it: a whole number the kernel could have (MAX_NUMNODES is at most 1024). */
const NumaNode = z.string().regex(/^\d{1,4}$/).transform(Number).pipe(z.number().int().min(0).max(1023));

export interface Topology {
  /** GPU index → NUMA node */
  numa: Map<number, number>;
  /** GPU index → NVLink domain: the connected component of NV# links, named by its lowest GPU index */
  nvlink: Map<number, string>;
}

/** `nvidia-smi topo -m`: the matrix of GPUs (tab separated), its "NUMA Affinity" column and NV# links; no matrix, no answer. */
export function parseTopology(text: string): Topology {
  // Some driver versions underline the header with ANSI escapes even when piped.
  const lines = text.replace(/\x1b\[[0-9;]*m/g, '').split('\n').filter((l) => l.trim());
  const header = lines.find((l) => l.split('\t')[0]!.trim() === '' && /\bGPU0\b/.test(l));
  const topo: Topology = { numa: new Map(), nvlink: new Map() };
  if (!header) throw unparsable('topo -m', lines[0] ?? '', 'no GPU matrix header');
  const cols = header.split('\t').map((c) => c.trim());
  const numaCol = cols.findIndex((c) => c === 'NUMA Affinity');
  const gpuCols = cols.map((c, i) => (/^GPU\d+$/.test(c) ? i : -1)).filter((i) => i >= 0);
  const links = new Map<number, number[]>();
  for (const line of lines) {
    const cells = line.split('\t').map((c) => c.trim());
    const row = /^GPU(\d+)$/.exec(cells[0] ?? '');
    if (!row) continue;
    const gpu = Number(row[1]);
    if (numaCol >= 0) {
      // A NUMA node id, or nothing ("N/A", a range, -1 as sysfs says "none"): never a made-up node.
      const n = NumaNode.safeParse(cells[numaCol]);
      if (n.success) topo.numa.set(gpu, n.data);
    }
    const peers: number[] = [];
    for (const i of gpuCols) if (/^NV\d+$/.test(cells[i] ?? '')) peers.push(Number(cols[i]!.slice(3)));
    links.set(gpu, peers);
  }
  // Connected components over NVLink edges; a GPU without NVLink peers has no domain.
  const seen = new Set<number>();
  for (const start of [...links.keys()].sort((a, b) => a - b)) {
    if (seen.has(start) || (links.get(start) ?? []).length === 0) continue;
    const stack = [start];
    while (stack.length) {
      const g = stack.pop()!;
      if (seen.has(g)) continue;
      seen.add(g);
      topo.nvlink.set(g, `nvl${start}`);
      for (const p of links.get(g) ?? []) stack.push(p);
    }
  }
  return topo;
}

/**
 * The NVLink fabric each GPU is part of, as NVML reports it (nvmlDeviceGetGpuFabricInfo): on NVLink-switch systems
 * whose fabric spans nodes (GB200 NVL72 and alike) a GPU's partition is its cluster UUID and clique id. A field a
 * driver does not know makes the whole call exit 2; see nvidiaSmiSource.
 */
export const QUERY_FABRIC_FIELDS = ['uuid', 'fabric.state', 'fabric.status', 'fabric.clusterUuid', 'fabric.cliqueId'] as const;
export const QUERY_FABRIC_ARGS = [`--query-gpu=${QUERY_FABRIC_FIELDS.join(',')}`, '--format=csv,noheader,nounits'];

const UUID = new RegExp(`^${UUID_BODY}$`);
/** One GPU's line: its UUID must be one, the other four are values that may say "not there". */
const FabricRow = z.tuple([z.string().regex(GPU_UUID, 'uuid: not a GPU UUID'), z.string(), z.string(), z.string(), z.string()]);
/**
 * A fabric that names a partition: registration completed with success, a cluster UUID that is not all zeros (a
 * single-node NVSwitch system registers with the zero UUID: no fabric beyond the node), a clique id that fits 32 bits.
 */
const FabricClique = z.tuple([
  z.string().regex(/^completed$/i),
  z.string().regex(/^success$/i),
  z.string().regex(UUID).refine((u) => /[1-9a-f]/i.test(u)).transform((u) => u.toLowerCase()),
  z.string().regex(/^\d{1,10}$/).transform(Number).pipe(z.number().int().min(0).max(0xffffffff)),
]);

/**
 * `nvidia-smi --query-gpu=uuid,fabric.state,fabric.status,fabric.clusterUuid,fabric.cliqueId --format=csv,noheader,nounits`:
 * GPU UUID → its NVLink fabric partition, `<cluster UUID>.<clique id>`, for the GPUs that have one. A line that is not
 * a GPU's 5 columns is unparsable output (a failed discovery, as for the other calls); a GPU whose fabric is not
 * supported ("[N/A]"), not registered, failed, or printed as something we cannot read has none.
 */
export function parseFabric(text: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const line of text.split('\n')) {
    if (!line.trim()) continue;
    const row = FabricRow.safeParse(line.split(',').map((c) => c.trim()));
    if (!row.success) throw unparsable('--query-gpu (fabric)', line, row.error.issues.map((i) => i.message).join('; ') || 'not 5 columns');
    const [uuid, ...fabric] = row.data;
    const clique = FabricClique.safeParse(fabric);
    if (clique.success) out.set(uuid, `${clique.data[2]}.${clique.data[3]}`);
  }
  return out;
}

/** Whether the MIG devices of -L need plain nvidia-smi's MIG table for their GI and CI (new-style MIG UUIDs). */
export function needsMigTable(list: readonly ListedGpu[]): boolean {
  return list.some((g) => g.mig.some((m) => m.gi === undefined || m.ci === undefined));
}

/**
 * Joins the outputs into GPUs with MIG instances, NUMA node and NVLink domain: the GPU's NVLink fabric partition where
 * `fabric` names one (parseFabric; absent: the driver cannot tell), otherwise its connected component of NVLink peers
 * in topo -m, prefixed by the node name (none without peers). Refuses
 * (DiscoveryError) what it cannot join exactly: -L and --query-gpu naming different GPUs, a MIG device without its GI
 * and CI, the same GI/CI twice. A GPU whose MIG mode nvidia-smi could not read keeps its layout in `previous` (the last
 * good discovery), unhealthy: an unreadable GPU is not a different GPU.
 */
export function mergeDiscovery(
  node: string,
  parts: { queryGpu: string; list: string; smi?: string; topo: string; fabric?: string },
  previous?: readonly GpuDevice[],
): GpuDevice[] {
  const queried = parseQueryGpu(parts.queryGpu);
  const listed = parseList(parts.list);
  const table = parts.smi !== undefined ? parseMigTable(parts.smi) : undefined;
  const topo = parseTopology(parts.topo);
  const fabric = parts.fabric !== undefined ? parseFabric(parts.fabric) : new Map<string, string>();
  const key = (uuids: string[]) => [...uuids].sort().join(',');
  if (key(queried.map((g) => g.uuid)) !== key(listed.map((g) => g.uuid))) {
    throw new DiscoveryError(`nvidia-smi -L lists GPUs ${key(listed.map((g) => g.uuid))}, --query-gpu ${key(queried.map((g) => g.uuid))}`);
  }
  return queried.map(({ migMode, ...g }) => {
    const idx = g.index!;
    const l = listed.find((x) => x.uuid === g.uuid)!;
    if (l.index !== idx) throw new DiscoveryError(`GPU ${g.uuid} is index ${l.index} in nvidia-smi -L, ${idx} in --query-gpu`);
    const out: GpuDevice = { ...g };
    // MIG mode on with no instance is no whole GPU: migEnabled tells the ledger (an unbookable parent, no atoms).
    if (migMode === 'enabled') out.migEnabled = true;
    if (migMode === 'enabled' || l.mig.length) {
      out.mig = l.mig.map((m) => {
        const row = table?.find((t) => t.gpu === idx && t.device === m.device);
        const gi = m.gi ?? row?.gi;
        const ci = m.ci ?? row?.ci;
        if (gi === undefined || ci === undefined) {
          throw new DiscoveryError(`MIG device ${m.device} of GPU ${idx} (${m.uuid}) is not in nvidia-smi's MIG table: its GI and CI are unknown`);
        }
        return {
          gi,
          ci,
          profile: m.profile,
          ...(row?.memoryMiB ? { memoryGiB: Math.round((row.memoryMiB / 1024) * 10) / 10, memoryMiB: row.memoryMiB } : {}),
          healthy: g.healthy ?? true,
          uuid: m.uuid,
        };
      });
      const ids = out.mig.map((m) => `gi${m.gi}/ci${m.ci}`);
      if (new Set(ids).size !== ids.length) throw new DiscoveryError(`GPU ${g.uuid}: nvidia-smi reports one GI/CI twice (${ids.join(', ')})`);
    } else if (migMode === undefined) {
      // Unknown mode: the last good layout stands; the GPU is unhealthy anyway (nvidia-smi printed an error for it).
      const before = previous?.find((p) => p.uuid === g.uuid);
      if (before?.migEnabled) out.migEnabled = true;
      if (before?.mig) out.mig = before.mig.map((m) => ({ ...m, healthy: false }));
    }
    const numa = topo.numa.get(idx);
    if (numa !== undefined) out.numaNode = numa;
    const nvl = topo.nvlink.get(idx);
    const clique = fabric.get(g.uuid);
    if (clique) out.nvlinkDomain = clique;
    else if (nvl) out.nvlinkDomain = `${node}-${nvl}`;
    return out;
  });
}

/** nvidia-smi's exit status for "a supplied argument or flag is invalid" (a query field this driver does not know). */
const INVALID_ARGUMENT = 2;

/**
 * Runs one nvidia-smi call; any failure (exit status, signal, timeout) is a DiscoveryError naming the call, but with
 * `unknownArgument: 'none'` exit status 2 (an argument this driver does not know) answers undefined.
 */
function run(cmd: string, args: string[]): Promise<string>;
function run(cmd: string, args: string[], o: { unknownArgument: 'none' }): Promise<string | undefined>;
function run(cmd: string, args: string[], o?: { unknownArgument: 'none' }): Promise<string | undefined> {
  return new Promise((resolve, reject) => {
    execFile(cmd, args, { timeout: 15_000, maxBuffer: 16 << 20 }, (err, stdout, stderr) => {
      if (!err) return resolve(stdout);
      if (o?.unknownArgument === 'none' && err.code === INVALID_ARGUMENT) return resolve(undefined);
      const said = String(stderr || stdout).trim().split('\n')[0]?.slice(0, 200);
      reject(new DiscoveryError(`nvidia-smi ${args.join(' ') || '(plain)'} failed: ${err.message.split('\n')[0]}${said ? ` (${said})` : ''}`));
    });
  });
}

export interface DeviceSource {
  readonly kind: string;
  /** The node's devices now; rejects when they cannot be read exactly (the caller keeps its last good report). */
  discover(): Promise<NodeDevicesSpec>;
}

/**
 * Real GPUs. Read-only calls: --query-gpu, -L, topo -m, --query-gpu of the NVLink fabric, and the default table when
 * a MIG device's GI/CI must be read from it. Any of them failing, or printing what we cannot parse, fails the whole
 * discovery; but a driver that does not know the fabric's fields (exit 2) just has no fabric to tell.
 */
export function nvidiaSmiSource(node: string, binary = 'nvidia-smi', scalars: NodeDevicesSpec['scalars'] = {}): DeviceSource {
  let last: GpuDevice[] | undefined;
  return {
    kind: 'nvidia-smi',
    async discover() {
      const [queryGpu, list, topo, fabric] = await Promise.all([
        run(binary, QUERY_GPU_ARGS),
        run(binary, ['-L']),
        run(binary, ['topo', '-m']),
        run(binary, QUERY_FABRIC_ARGS, { unknownArgument: 'none' }),
      ]);
      const smi = needsMigTable(parseList(list)) ? await run(binary, []) : undefined;
      const gpus = mergeDiscovery(node, { queryGpu, list, topo, ...(smi !== undefined ? { smi } : {}), ...(fabric !== undefined ? { fabric } : {}) }, last);
      last = gpus;
      return { gpus, scalars };
    },
  };
}


export interface FailedDiscovery {
  /** The report to publish: the last good one (unhealthy once failures reach the threshold); none before a first success. */
  spec?: NodeDevicesSpec;
  /** For DISCOVERY_STALE_ANNOTATION: since when discovery fails, and the first failure's reason. */
  stale: string;
  failures: number;
  unhealthy: boolean;
}

/**
 * Discovery over time (docs/adr/0009-discovery-failures.md): a failed discovery never changes the layout. The last good
 * report stands, marked stale; after `unhealthyAfterFailures` failures in a row its GPUs (and MIG instances) are
 * reported unhealthy, same atoms, so nothing new is booked on GPUs the node cannot see, and nothing booked is moved.
 */
export class DiscoveryHistory {
  private good?: NodeDevicesSpec;
  private failures = 0;
  private stale?: string;

  constructor(private readonly unhealthyAfterFailures = 3) {}

  succeeded(spec: NodeDevicesSpec): NodeDevicesSpec {
    this.good = spec;
    this.failures = 0;
    this.stale = undefined;
    return spec;
  }

  failed(reason: string, nowIso: string): FailedDiscovery {
    this.failures++;
    this.stale ??= `since ${nowIso}: ${reason}`.slice(0, 1024);
    const unhealthy = this.failures >= this.unhealthyAfterFailures;
    const good = this.good;
    const spec =
      good &&
      (unhealthy
        ? {
            ...good,
            gpus: good.gpus.map((g) => ({ ...g, healthy: false, ...(g.mig ? { mig: g.mig.map((m) => ({ ...m, healthy: false })) } : {}) })),
          }
        : good);
    return { ...(spec ? { spec } : {}), stale: this.stale, failures: this.failures, unhealthy };
  }
}

/** A NodeDevices spec as the ledger takes it (the file source's input, and the controller's check of NodeDevices). */
export const NodeDevicesSpecSchema = InventoryReportSchema;

/** Simulated GPUs: a JSON file holding a NodeDevices spec (re-read on each discovery, so tests can flip health). */
export function fileSource(file: string): DeviceSource {
  return {
    kind: 'file',
    async discover() {
      return NodeDevicesSpecSchema.parse(JSON.parse(await fs.readFile(file, 'utf8'))) as NodeDevicesSpec;
    },
  };
}

/** A spec of n simulated GPUs (e.g. for the demo and the tests). */
export function simulatedSpec(node: string, n: number, opts: { model?: string; vramGiB?: number } = {}): NodeDevicesSpec {
  const model = opts.model ?? 'H100';
  const slug = node.replace(/[^a-zA-Z0-9]/g, '');
  return {
    gpus: Array.from({ length: n }, (_, i) => ({
      uuid: `GPU-sim${slug}-${String(i).padStart(4, '0')}-0000-0000-000000000000`.slice(0, 60),
      product: `NVIDIA ${model} 80GB HBM3`,
      model,
      vramGiB: opts.vramGiB ?? 80,
      numaNode: Math.floor((i * 2) / n),
      nvlinkDomain: `${node}-nvl0`,
      healthy: true,
    })),
    scalars: { vcpu: 64, memoryGiB: 512 },
  };
}
