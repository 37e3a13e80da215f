import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { mergeDiscovery, modelOf, parseList, parseMigTable, parseQueryGpu, parseTopology } from './discovery.ts';

const fixture = (name: string) => fs.readFileSync(path.join(import.meta.dirname, '../../test/fixtures/nvidia-smi', name), 'utf8');

describe('nvidia-smi parsers', () => {
  it('reads --query-gpu CSV, marking a GPU that needs a reset unhealthy', () => {
    const gpus = parseQueryGpu(fixture('h100x8.query-gpu.csv'));
    expect(gpus).toHaveLength(8);
    expect(gpus[0]).toMatchObject({ uuid: 'GPU-8a3e2f4b-91c2-4d3e-a1b2-0c1d2e3f4a50', model: 'H100', vramGiB: 80, healthy: true, index: 0 });
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
      { gi: 1, ci: 0, profile: '3g.20gb', memoryGiB: 19.5, healthy: true, uuid: 'MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f' },
      { gi: 5, ci: 0, profile: '2g.10gb', memoryGiB: 9.6, healthy: true, uuid: 'MIG-cba663e8-9bed-5b17-b0fe-1b4d4a8d5d96' },
      { gi: 13, ci: 0, profile: '1g.5gb', memoryGiB: 4.8, healthy: true, uuid: 'MIG-1f0e6a1c-3b5e-5c2f-8a5d-2e6f7a8b9c0d' },
    ]);
    expect(gpus[1]!.mig).toBeUndefined();
    expect(gpus.map((g) => g.nvlinkDomain)).toEqual(['n1-nvl0', 'n1-nvl0']);
    expect(gpus.map((g) => g.model)).toEqual(['A100', 'A100']);
  });

  it('reads legacy MIG UUIDs that carry GI/CI', () => {
    const l = parseList('GPU 0: A100 (UUID: GPU-aaaa)\n  MIG 1g.5gb Device 0: (UUID: MIG-GPU-aaaa/7/0)\n');
    expect(l[0]!.mig[0]).toMatchObject({ gi: 7, ci: 0 });
  });

  it('names models', () => {
    expect(modelOf('Tesla V100-PCIE-16GB')).toBe('V100');
    expect(modelOf('NVIDIA L40S')).toBe('L40S');
    expect(modelOf('NVIDIA H200')).toBe('H200');
  });
});
