// Device discovery: nvidia-smi on real hardware, a JSON file for simulated GPUs. The parsers are pure and read
// nvidia-smi's own output formats (fixtures in test/fixtures/nvidia-smi/).
import { execFile } from 'node:child_process';
import fs from 'node:fs/promises';
import { z } from 'zod';
import type { GpuReport, MigInstanceReport } from '../core/inventory.ts';

export interface MigDevice extends MigInstanceReport {
  /** MIG-<uuid> as the driver names it, when known (what NVIDIA_VISIBLE_DEVICES takes). */
  uuid?: string;
}

export interface GpuDevice extends Omit<GpuReport, 'mig'> {
  mig?: MigDevice[];
  /** Agent-local: the driver's index and PCI bus id. */
  index?: number;
  pciBusId?: string;
}

/** The NodeDevices spec (cluster-scoped CR, one per node), as the controller reads it. */
export interface NodeDevicesSpec {
  gpus: GpuDevice[];
  scalars: { vcpu?: number; memoryGiB?: number; hugepages1Gi?: number };
}

export const QUERY_GPU_FIELDS = ['index', 'uuid', 'name', 'memory.total', 'pci.bus_id', 'mig.mode.current'] as const;
export const QUERY_GPU_ARGS = [`--query-gpu=${QUERY_GPU_FIELDS.join(',')}`, '--format=csv,noheader,nounits'];

const BAD_VALUE = /^\[?(ERR!|Unknown Error|GPU requires reset|GPU is lost)\]?$/i;

/** `nvidia-smi --query-gpu=index,uuid,name,memory.total,pci.bus_id,mig.mode.current --format=csv,noheader,nounits` */
export function parseQueryGpu(text: string): GpuDevice[] {
  const gpus: GpuDevice[] = [];
  for (const line of text.split('\n')) {
    if (!line.trim()) continue;
    const cols = line.split(',').map((c) => c.trim());
    const [index, uuid, name, memory, bus, mig] = cols;
    if (!uuid?.startsWith('GPU-')) continue;
    const memMiB = Number(memory);
    const healthy = !cols.some((c) => BAD_VALUE.test(c));
    gpus.push({
      uuid,
      index: Number(index),
      ...(name ? { product: name, model: modelOf(name) } : {}),
      ...(Number.isFinite(memMiB) && memMiB > 0 ? { vramGiB: Math.round(memMiB / 1024) } : {}),
      ...(bus ? { pciBusId: bus } : {}),
      healthy,
      ...(mig === 'Enabled' ? { mig: [] } : {}),
    });
  }
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

/** `nvidia-smi -L`: GPUs and their MIG devices (new "MIG-<uuid>" and legacy "MIG-GPU-<uuid>/<gi>/<ci>" forms). */
export function parseList(text: string): ListedGpu[] {
  const out: ListedGpu[] = [];
  for (const line of text.split('\n')) {
    const g = /^GPU (\d+): (.*) \(UUID: (GPU-[^)]+)\)/.exec(line.trim());
    if (g) {
      out.push({ index: Number(g[1]), product: g[2]!, uuid: g[3]!, mig: [] });
      continue;
    }
    const m = /^MIG\s+(\S+)\s+Device\s+(\d+):\s+\(UUID:\s+(MIG-[^)]+)\)/.exec(line.trim());
    if (m && out.length) {
      const legacy = /^MIG-GPU-[^/]+\/(\d+)\/(\d+)$/.exec(m[3]!);
      out[out.length - 1]!.mig.push({
        device: Number(m[2]),
        profile: m[1]!,
        uuid: m[3]!,
        ...(legacy ? { gi: Number(legacy[1]), ci: Number(legacy[2]) } : {}),
      });
    }
  }
  return out;
}

/** The "MIG devices" table of plain `nvidia-smi`: GPU index, GI, CI, MIG device index, memory (MiB). */
export function parseMigTable(text: string): { gpu: number; gi: number; ci: number; device: number; memoryMiB?: number }[] {
  const start = text.indexOf('MIG devices:');
  if (start < 0) return [];
  const out: { gpu: number; gi: number; ci: number; device: number; memoryMiB?: number }[] = [];
  for (const line of text.slice(start).split('\n')) {
    if (/Processes:/.test(line)) break;
    const m = /^\|\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+\|\s+\S+\s*\/\s*(\d+)MiB/.exec(line);
    if (m) out.push({ gpu: Number(m[1]), gi: Number(m[2]), ci: Number(m[3]), device: Number(m[4]), memoryMiB: Number(m[5]) });
  }
  return out;
}

export interface Topology {
  /** GPU index → NUMA node */
  numa: Map<number, number>;
  /** GPU index → NVLink domain: the connected component of NV# links, named by its lowest GPU index */
  nvlink: Map<number, string>;
}

/** `nvidia-smi topo -m`: the matrix of GPUs (tab separated), its "NUMA Affinity" column and NV# links. */
export function parseTopology(text: string): Topology {
  // Some driver versions underline the header with ANSI escapes even when piped.
  const lines = text.replace(/\x1b\[[0-9;]*m/g, '').split('\n').filter((l) => l.trim());
  const header = lines.find((l) => l.split('\t')[0]!.trim() === '' && /\bGPU0\b/.test(l));
  const topo: Topology = { numa: new Map(), nvlink: new Map() };
  if (!header) return topo;
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
      const n = Number(cells[numaCol]);
      if (cells[numaCol] !== '' && Number.isInteger(n)) topo.numa.set(gpu, n);
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

/** Joins the outputs into GPUs with MIG instances, NUMA node and NVLink domain (prefixed by the node name). */
export function mergeDiscovery(
  node: string,
  parts: { queryGpu: string; list?: string; smi?: string; topo?: string },
): GpuDevice[] {
  const gpus = parseQueryGpu(parts.queryGpu);
  const listed = parts.list ? parseList(parts.list) : [];
  const table = parts.smi ? parseMigTable(parts.smi) : [];
  const topo = parts.topo ? parseTopology(parts.topo) : undefined;
  for (const g of gpus) {
    const idx = g.index ?? -1;
    const l = listed.find((x) => x.uuid === g.uuid);
    if (g.mig || (l && l.mig.length)) {
      g.mig = (l?.mig ?? []).map((m) => {
        const row = table.find((t) => t.gpu === idx && t.device === m.device);
        const gi = m.gi ?? row?.gi;
        const ci = m.ci ?? row?.ci;
        return {
          gi: gi ?? m.device,
          ci: ci ?? 0,
          profile: m.profile,
          ...(row?.memoryMiB ? { memoryGiB: Math.round((row.memoryMiB / 1024) * 10) / 10 } : {}),
          healthy: g.healthy ?? true,
          uuid: m.uuid,
        };
      });
    }
    const numa = topo?.numa.get(idx);
    if (numa !== undefined) g.numaNode = numa;
    const nvl = topo?.nvlink.get(idx);
    if (nvl) g.nvlinkDomain = `${node}-${nvl}`;
  }
  return gpus;
}

function run(cmd: string, args: string[], timeoutMs = 15_000): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(cmd, args, { timeout: timeoutMs, maxBuffer: 16 << 20 }, (err, stdout) => (err ? reject(err) : resolve(stdout)));
  });
}

export interface DeviceSource {
  readonly kind: string;
  discover(): Promise<NodeDevicesSpec>;
}

/** Real GPUs. Read-only calls: queries, -L, the default table, topo -m. */
export function nvidiaSmiSource(node: string, binary = 'nvidia-smi', scalars: NodeDevicesSpec['scalars'] = {}): DeviceSource {
  return {
    kind: 'nvidia-smi',
    async discover() {
      const queryGpu = await run(binary, QUERY_GPU_ARGS);
      const [list, smi, topo] = await Promise.all([
        run(binary, ['-L']).catch(() => ''),
        run(binary, []).catch(() => ''),
        run(binary, ['topo', '-m']).catch(() => ''),
      ]);
      return { gpus: mergeDiscovery(node, { queryGpu, list, smi, topo }), scalars };
    },
  };
}

const MigFileSchema = z.object({
  gi: z.number().int().min(0),
  ci: z.number().int().min(0),
  profile: z.string().optional(),
  memoryGiB: z.number().positive().optional(),
  healthy: z.boolean().optional(),
  uuid: z.string().optional(),
});
export const NodeDevicesSpecSchema = z.object({
  gpus: z.array(
    z.object({
      uuid: z.string().min(1),
      product: z.string().optional(),
      model: z.string().optional(),
      vramGiB: z.number().positive().optional(),
      numaNode: z.number().int().min(0).optional(),
      nvlinkDomain: z.string().optional(),
      healthy: z.boolean().optional(),
      mig: z.array(MigFileSchema).optional(),
    }),
  ),
  scalars: z.object({ vcpu: z.number().optional(), memoryGiB: z.number().optional(), hugepages1Gi: z.number().optional() }).default({}),
});

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
