import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import YAML from 'yaml';
import { describe, expect, it, vi } from 'vitest';
import { loadConfig } from '../config.ts';
import { createLogger } from '../log.ts';
import { DiscoveryError, DiscoveryHistory, mergeDiscovery, modelOf, nvidiaSmiSource, parseFabric, parseList, parseMigTable, parseQueryGpu, parseTopology } from './discovery.ts';
import { agentCommand } from '../cli/agent.ts';

const fixture = (name: string) => fs.readFileSync(path.join(import.meta.dirname, '../../test/fixtures/nvidia-smi', name), 'utf8');

describe('nvidia-smi parsers', () => {
  it('reads --query-gpu CSV, marking a GPU that needs a reset unhealthy', () => {
    const gpus = parseQueryGpu(fixture('h100x8.query-gpu.csv'));
    expect(gpus).toHaveLength(8);
    expect(gpus[0]).toMatchObject({ uuid: 'GPU-8a3e2f4b-91c2-4d3e-a1b2-0c1d2e3f4a50', model: 'H100', vramGiB: 80, memoryMiB: 81559, healthy: true, index: 0 });
    expect(gpus[7]!.healthy).toBe(false);
  });

  it('reads topo -m: NUMA affinity and one NVLink domain', () => {
    const t = parseTopology(fixture('h100x8.topo-m.txt'));
    expect([...t.numa.values()]).toEqual([0, 0, 0, 0, 1, 1, 1, 1]);
    expect(new Set(t.nvlink.values())).toEqual(new Set(['nvl0']));
    expect(t.nvlink.size).toBe(8);
  });

  it('reads MIG devices from -L and the MIG table', () => {
    const l = parseList(fixture('a100-mig.L.txt'));
    expect(l[0]!.mig.map((m) => m.profile)).toEqual(['3g.20gb', '2g.10gb', '1g.5gb']);
    expect(parseMigTable(fixture('a100-mig.smi.txt')).map((r) => [r.gi, r.ci, r.device])).toEqual([
      [1, 0, 0],
      [5, 0, 1],
      [13, 0, 2],
    ]);
    const gpus = mergeDiscovery('n1', {
      queryGpu: fixture('a100-mig.query-gpu.csv'),
      list: fixture('a100-mig.L.txt'),
      smi: fixture('a100-mig.smi.txt'),
      topo: fixture('a100-mig.topo-m.txt'),
    });
    expect(gpus[0]!.mig).toEqual([
      { gi: 1, ci: 0, profile: '3g.20gb', memoryGiB: 19.5, memoryMiB: 19968, healthy: true, uuid: 'MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f' },
      { gi: 5, ci: 0, profile: '2g.10gb', memoryGiB: 9.6, memoryMiB: 9856, healthy: true, uuid: 'MIG-cba663e8-9bed-5b17-b0fe-1b4d4a8d5d96' },
      { gi: 13, ci: 0, profile: '1g.5gb', memoryGiB: 4.8, memoryMiB: 4864, healthy: true, uuid: 'MIG-1f0e6a1c-3b5e-5c2f-8a5d-2e6f7a8b9c0d' },
    ]);
    expect(gpus[1]!.mig).toBeUndefined();
    expect(gpus.map((g) => g.nvlinkDomain)).toEqual(['n1-nvl0', 'n1-nvl0']);
    expect(gpus.map((g) => g.model)).toEqual(['A100', 'A100']);
  });

  it('says MIG mode on: a GPU in MIG mode without instances is migEnabled with no MIG instance, not a whole GPU', () => {
    const parts = {
      // GPU 1 of the fixture switched to MIG mode, no instance created yet (-L lists none for it).
      queryGpu: fixture('a100-mig.query-gpu.csv').replace(/, Disabled$/m, ', Enabled'),
      list: fixture('a100-mig.L.txt'),
      smi: fixture('a100-mig.smi.txt'),
      topo: fixture('a100-mig.topo-m.txt'),
    };
    const gpus = mergeDiscovery('n1', parts);
    expect(gpus.map((g) => [g.migEnabled, g.mig?.length])).toEqual([
      [true, 3],
      [true, 0],
    ]);
    // MIG mode off: no migEnabled at all (the published spec stays as before).
    const off = mergeDiscovery('n1', { ...parts, queryGpu: fixture('a100-mig.query-gpu.csv') });
    expect(off[1]).not.toHaveProperty('migEnabled');
    expect(off[1]!.mig).toBeUndefined();
    // Its mode unreadable next time: the last good layout stands, MIG mode included (unhealthy).
    const unreadable = parts.queryGpu.replace(/^1, (GPU-\S+), .*$/m, '1, $1, [GPU requires reset], [GPU requires reset], 00000000:0F:00.0, [GPU requires reset]');
    const after = mergeDiscovery('n1', { ...parts, queryGpu: unreadable }, gpus);
    expect(after[1]).toMatchObject({ migEnabled: true, mig: [], healthy: false });
  });

  it('reads legacy MIG UUIDs that carry GI/CI', () => {
    const l = parseList('GPU 0: A100 (UUID: GPU-aaaa)\n  MIG 1g.5gb Device 0: (UUID: MIG-GPU-aaaa/7/0)\n');
    expect(l[0]!.mig[0]).toMatchObject({ gi: 7, ci: 0 });
  });

  it('reads a real H200 (driver 580.159.04, captured on a lent machine): one GPU, no MIG, no NVLink peers', () => {
    const gpus = mergeDiscovery('n1', {
      queryGpu: fixture('h200.query-gpu.csv'),
      list: fixture('h200.L.txt'),
      topo: fixture('h200.topo-m.txt'),
    });
    expect(gpus).toEqual([
      {
        uuid: 'GPU-d9fe4a0e-88a4-895b-a1f0-991368230f66',
        index: 0,
        product: 'NVIDIA H200',
        model: 'H200',
        vramGiB: 140,
        memoryMiB: 143771,
        pciBusId: '00000000:00:06.0',
        healthy: true,
        numaNode: 0,
      },
    ]);
    // Its plain table shows MIG "Disabled" and no MIG devices section; its topo header is underlined with ANSI escapes.
    expect(parseMigTable(fixture('h200.smi.txt'))).toEqual([]);
    expect(fixture('h200.topo-m.txt')).toContain('\x1b[4m');
  });

  it('topo -m: a NUMA affinity that is no node id (N/A, a range, -1) gives no NUMA node', () => {
    const topo = fixture('h100x8.topo-m.txt');
    // GPU0's row: the GPU, 8 GPU columns, NIC0, CPU affinity, then its NUMA affinity (the 12th cell).
    const row = (numa: string) => topo.replace(/^GPU0\t.*$/m, (l) => l.split('\t').map((c, i) => (i === 11 ? numa : c)).join('\t'));
    expect(parseTopology(topo).numa.get(0)).toBe(0);
    for (const bad of ['N/A', '0-1', '-1', '99999']) expect(parseTopology(row(bad)).numa.has(0), bad).toBe(false);
    expect(parseTopology(row('3')).numa.get(0)).toBe(3);
  });

  it('reads the NVLink fabric: a partition (cluster UUID and clique) only where registration completed with a non-zero cluster', () => {
    const cluster = '3E7EF3A4-2D1F-4E5B-9C67-13C24B3E9E2A';
    const uuid = (i: number) => `GPU-8a3e2f4b-91c2-4d3e-a1b2-0c1d2e3f4a5${i}`;
    const text = [
      `${uuid(0)}, Completed, Success, ${cluster}, 32766`,
      `${uuid(1)}, In Progress, N/A, ${cluster}, 32766`,
      `${uuid(2)}, Completed, Failure, ${cluster}, 32766`,
      `${uuid(3)}, Completed, Success, 00000000-0000-0000-0000-000000000000, 0`,
      `${uuid(4)}, Completed, Success, not-a-uuid, 7`,
      `${uuid(5)}, Completed, Success, ${cluster}, 4294967296`,
      `${uuid(6)}, Completed, Success, ${cluster}, -1`,
      `${uuid(7)}, [N/A], [N/A], [N/A], [N/A]`,
    ].join('\n');
    expect([...parseFabric(text)]).toEqual([[uuid(0), `${cluster.toLowerCase()}.32766`]]);
    expect(parseFabric(fixture('h100x8.fabric.csv')).size).toBe(0);
    expect(parseFabric(fixture('a100-mig.fabric.csv')).size).toBe(0);
    // A line that is not a GPU's five columns is unparsable output, as for the other calls.
    expect(() => parseFabric(`${uuid(0)}, Completed, Success, ${cluster}`)).toThrow(DiscoveryError);
    expect(() => parseFabric('Field "fabric.cliqueId" is not a valid field to query.')).toThrow(/unparsable/);
  });

  it('the NVLink domain: the fabric partition where there is one, else the node\'s NVLink peers, else none', () => {
    const parts = { queryGpu: fixture('h100x8.query-gpu.csv'), list: fixture('h100x8.L.txt'), topo: fixture('h100x8.topo-m.txt') };
    const nvl0 = Array.from({ length: 8 }, () => 'n1-nvl0');
    expect(mergeDiscovery('n1', parts).map((g) => g.nvlinkDomain)).toEqual(nvl0);
    expect(mergeDiscovery('n1', { ...parts, fabric: fixture('h100x8.fabric.csv') }).map((g) => g.nvlinkDomain)).toEqual(nvl0);
    const fabric = fixture('h100x8.fabric.csv').replace(/00000000-0000-0000-0000-000000000000, 0/g, '3e7ef3a4-2d1f-4e5b-9c67-13c24b3e9e2a, 5');
    expect(mergeDiscovery('n1', { ...parts, fabric }).map((g) => g.nvlinkDomain)).toEqual([...Array.from({ length: 7 }, () => '3e7ef3a4-2d1f-4e5b-9c67-13c24b3e9e2a.5'), 'n1-nvl0']);
  });

  it('names models', () => {
    expect(modelOf('Tesla V100-PCIE-16GB')).toBe('V100');
    expect(modelOf('NVIDIA L40S')).toBe('L40S');
    expect(modelOf('NVIDIA H200')).toBe('H200');
  });
});

/**
 * A stand-in nvidia-smi: prints the fixture of each call, or fails the calls named in `fail` (exit 255, as the real one
 * does when NVML cannot answer), or prints `garbage` for them.
 */
function fakeSmi(fixtures: string, o: { fail?: string[]; garbage?: Record<string, string> } = {}): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bc-smi-'));
  const out = (call: string, file: string) => {
    if (o.fail?.includes(call)) return `echo "Unable to determine the device handle for GPU0000:07:00.0: Unknown Error" >&2; exit 255`;
    if (o.garbage?.[call] !== undefined) {
      fs.writeFileSync(path.join(dir, `${call}.garbage`), o.garbage[call]!);
      return `cat '${path.join(dir, `${call}.garbage`)}'`;
    }
    return `cat '${path.join(import.meta.dirname, '../../test/fixtures/nvidia-smi', `${fixtures}.${file}`)}'`;
  };
  const bin = path.join(dir, 'nvidia-smi');
  fs.writeFileSync(
    bin,
    [
      '#!/bin/sh',
      'case "$*" in',
      // The fabric's query where a fixture has one; otherwise exit 2, as a driver that does not know its fields.
      `  --query-gpu=uuid,fabric.*) ${fs.existsSync(path.join(import.meta.dirname, '../../test/fixtures/nvidia-smi', `${fixtures}.fabric.csv`)) ? out('fabric', 'fabric.csv') : `echo 'Field "fabric.state" is not a valid field to query.'; exit 2`} ;;`,
      `  --query-gpu=index,*) ${out('query', 'query-gpu.csv')} ;;`,
      `  -L) ${out('L', 'L.txt')} ;;`,
      `  "topo -m") ${out('topo', 'topo-m.txt')} ;;`,
      `  "") ${out('plain', 'smi.txt')} ;;`,
      '  *) exit 2 ;;',
      'esac',
      '',
    ].join('\n'),
    { mode: 0o755 },
  );
  return bin;
}

describe('nvidia-smi failures are failed discoveries, never another layout', () => {
  it('all calls answer: the MIG layout of the fixtures', async () => {
    const spec = await nvidiaSmiSource('n1', fakeSmi('a100-mig')).discover();
    expect(spec.gpus[0]!.mig!.map((m) => `gi${m.gi}/ci${m.ci}`)).toEqual(['gi1/ci0', 'gi5/ci0', 'gi13/ci0']);
  });

  it('a failed -L on a MIG GPU fails the discovery (it made the GPU a whole bookable GPU)', async () => {
    await expect(nvidiaSmiSource('n1', fakeSmi('a100-mig', { fail: ['L'] })).discover()).rejects.toThrow(/nvidia-smi -L/);
  });

  it('a failed plain call fails the discovery (it renamed the MIG atoms gi<device>/ci0)', async () => {
    await expect(nvidiaSmiSource('n1', fakeSmi('a100-mig', { fail: ['plain'] })).discover()).rejects.toThrow(/nvidia-smi\b.*failed/);
  });

  it('a failed topo -m or --query-gpu fails the discovery', async () => {
    await expect(nvidiaSmiSource('n1', fakeSmi('a100-mig', { fail: ['topo'] })).discover()).rejects.toThrow(/topo -m/);
    await expect(nvidiaSmiSource('n1', fakeSmi('a100-mig', { fail: ['query'] })).discover()).rejects.toThrow(/--query-gpu=index/);
    // The fabric's query too, but for exit 2 (a driver that does not know its fields: no fabric, the H200 below).
    await expect(nvidiaSmiSource('n1', fakeSmi('a100-mig', { fail: ['fabric'] })).discover()).rejects.toThrow(/--query-gpu=uuid,fabric/);
  });

  it('the fabric read through the source: a partition becomes the GPUs\' NVLink domain', async () => {
    const fabric = fixture('h100x8.fabric.csv').replace(/00000000-0000-0000-0000-000000000000, 0/g, '3e7ef3a4-2d1f-4e5b-9c67-13c24b3e9e2a, 5');
    const spec = await nvidiaSmiSource('n1', fakeSmi('h100x8', { garbage: { fabric } })).discover();
    expect(spec.gpus.map((g) => g.nvlinkDomain)).toEqual([...Array.from({ length: 7 }, () => '3e7ef3a4-2d1f-4e5b-9c67-13c24b3e9e2a.5'), 'n1-nvl0']);
  });

  it('the real H200 outputs through the source: the same GPU, and the plain call is not made', async () => {
    const spec = await nvidiaSmiSource('n1', fakeSmi('h200', { fail: ['plain'] })).discover();
    expect(spec.gpus.map((g) => [g.uuid, g.model, g.vramGiB, g.numaNode, g.nvlinkDomain, g.mig])).toEqual([
      ['GPU-d9fe4a0e-88a4-895b-a1f0-991368230f66', 'H200', 140, 0, undefined, undefined],
    ]);
  });

  it('without MIG devices the plain call is not made; a GPU that needs a reset is unhealthy, not gone', async () => {
    const spec = await nvidiaSmiSource('n1', fakeSmi('h100x8', { fail: ['plain'] })).discover();
    expect(spec.gpus).toHaveLength(8);
    expect(spec.gpus.map((g) => g.healthy)).toEqual([true, true, true, true, true, true, true, false]);
    expect(spec.gpus.every((g) => g.mig === undefined)).toBe(true);
  });

  it('a MIG GPU whose mode nvidia-smi cannot read keeps its last good layout, unhealthy', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bc-smi-q-'));
    const query = path.join(dir, 'query.csv');
    fs.writeFileSync(query, fixture('a100-mig.query-gpu.csv'));
    const bin = fakeSmi('a100-mig');
    fs.writeFileSync(bin, fs.readFileSync(bin, 'utf8').replace(/--query-gpu=index,\*\) cat '[^']*'/, `--query-gpu=index,*) cat '${query}'`));
    const source = nvidiaSmiSource('n1', bin);
    const before = (await source.discover()).gpus[0]!;
    fs.writeFileSync(
      query,
      fixture('a100-mig.query-gpu.csv').replace(/^0, (GPU-\S+), .*$/m, '0, $1, [GPU requires reset], [GPU requires reset], 00000000:07:00.0, [GPU requires reset]'),
    );
    const after = (await source.discover()).gpus[0]!;
    expect(after.healthy).toBe(false);
    expect(after.mig!.map((m) => [m.gi, m.ci, m.healthy])).toEqual(before.mig!.map((m) => [m.gi, m.ci, false]));
  });

  it('garbage output of any call fails the discovery', async () => {
    const garbage = 'NVIDIA-SMI has failed because it couldn\'t communicate with the NVIDIA driver.\n';
    for (const call of ['query', 'L', 'plain', 'topo', 'fabric']) {
      await expect(nvidiaSmiSource('n1', fakeSmi('a100-mig', { garbage: { [call]: garbage } })).discover(), call).rejects.toThrow(/unparsable|failed|unexpected/);
    }
    // A truncated query line, a MIG table that lost a row, -L that disagrees with the query: all refused.
    const query = fixture('a100-mig.query-gpu.csv');
    await expect(nvidiaSmiSource('n1', fakeSmi('a100-mig', { garbage: { query: query.replace(/, Enabled\n/, '\n') } })).discover()).rejects.toThrow();
    const smi = fixture('a100-mig.smi.txt').replace(/\|  0    5   0   1  \|.*\n/, '');
    await expect(nvidiaSmiSource('n1', fakeSmi('a100-mig', { garbage: { plain: smi } })).discover()).rejects.toThrow(/MIG device 1 of GPU 0/);
    const list = fixture('a100-mig.L.txt').replace(/GPU 1:.*\n/, '');
    await expect(nvidiaSmiSource('n1', fakeSmi('a100-mig', { garbage: { L: list } })).discover()).rejects.toThrow(/-L/);
  });
});

describe('DiscoveryHistory', () => {
  const spec = { gpus: [{ uuid: 'GPU-a', healthy: true, mig: [{ gi: 1, ci: 0, healthy: true }] }], scalars: {} };
  it('nothing to report before a first good discovery; then the last good one, stale, unhealthy from the threshold on', () => {
    const h = new DiscoveryHistory(2);
    expect(h.failed('boom', 't0')).toEqual({ stale: 'since t0: boom', failures: 1, unhealthy: false });
    h.succeeded(spec);
    expect(h.failed('first', 't1')).toEqual({ spec, stale: 'since t1: first', failures: 1, unhealthy: false });
    const f = h.failed('second', 't2');
    expect(f).toMatchObject({ stale: 'since t1: first', failures: 2, unhealthy: true });
    expect(f.spec!.gpus).toEqual([{ uuid: 'GPU-a', healthy: false, mig: [{ gi: 1, ci: 0, healthy: false }] }]);
    expect(spec.gpus[0]!.healthy).toBe(true);
    h.succeeded(spec);
    expect(h.failed('again', 't3')).toMatchObject({ spec, stale: 'since t3: again', failures: 1 });
  });
});

describe('better-compute agent --discover', () => {
  async function discover(argv: string[]) {
    const out: string[] = [];
    const err: string[] = [];
    const stdout = vi.spyOn(process.stdout, 'write').mockImplementation((s) => (out.push(String(s)), true));
    const stderr = vi.spyOn(process.stderr, 'write').mockImplementation((s) => (err.push(String(s)), true));
    try {
      const rc = await agentCommand(['--discover', ...argv], loadConfig({}), createLogger({ level: 'error' }));
      return { rc, out: out.join(''), err: err.join('') };
    } finally {
      stdout.mockRestore();
      stderr.mockRestore();
    }
  }

  it('prints the NodeDevices spec it would publish, without controller or kubelet', async () => {
    const r = await discover(['--nvidia-smi', fakeSmi('a100-mig'), '--node', 'n1', '-o', 'json']);
    expect(r).toMatchObject({ rc: 0, err: '' });
    const spec = JSON.parse(r.out);
    expect(spec.gpus.map((g: { uuid: string; nvlinkDomain: string }) => [g.uuid, g.nvlinkDomain])).toEqual([
      ['GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77', 'n1-nvl0'],
      ['GPU-6e6cb1e7-e44e-3c3d-635e-af4e9e3c9b88', 'n1-nvl0'],
    ]);
    expect(spec.gpus[0].mig.map((m: { uuid: string }) => m.uuid)).toContain('MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f');
  });

  it('as a table: GPUs, then MIG instances', async () => {
    const r = await discover(['--nvidia-smi', fakeSmi('a100-mig'), '--node', 'n1']);
    expect(r.rc).toBe(0);
    expect(r.out.split('\n')[0]).toMatch(/^GPU\s+UUID\s+MODEL\s+MEMORY\s+MIG\s+NUMA\s+NVLINK\s+HEALTH$/);
    expect(r.out).toMatch(/\n\s+0\s+gi13\/ci0\s+1g\.5gb\s+4\.8 GiB\s+MIG-1f0e6a1c-\S+\s+healthy\n/);
  });

  it('a failed discovery: exit 1, the reason on stderr, nothing on stdout', async () => {
    const r = await discover(['--nvidia-smi', fakeSmi('h100x8', { fail: ['topo'] })]);
    expect(r).toMatchObject({ rc: 1, out: '' });
    expect(r.err).toMatch(/^discovery failed \(nvidia-smi\): nvidia-smi topo -m failed/);
  });

  it('-o yaml prints the same spec as -o json', async () => {
    const args = ['--nvidia-smi', fakeSmi('a100-mig'), '--node', 'n1'];
    const [json, yaml] = [await discover([...args, '-o', 'json']), await discover([...args, '-o', 'yaml'])];
    expect(yaml).toMatchObject({ rc: 0, err: '' });
    expect(YAML.parse(yaml.out)).toEqual(JSON.parse(json.out));
  });

  it('-o takes table, wide, json or yaml only', async () => {
    const r = await discover(['--devices-file', '/nonexistent', '-o', 'xml']);
    expect(r.rc).toBe(2);
    expect(r.err).toMatch(/^-o: one of table, wide, json, yaml, not xml\n/);
  });
});
