// The host's NVIDIA device nodes: the driver's files as the kernel writes them, and a fake host in a temp dir.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { fakeNvidiaHost, gpuInformation } from '../../test/support/nvidia-host.ts';
import { atomDeviceNodes, normalizeBusId, parseGpuInformation, parseMigMinors, readHostDeviceNodes } from './device-nodes.ts';

const G0 = 'GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77';
const G1 = 'GPU-0c8e7b4e-91a8-4a34-8a8e-1a2b3c4d5e6f';

describe('parsers', () => {
  it('information: UUID, bus location and the device minor; a UUID the driver hides ("...") is none', () => {
    expect(parseGpuInformation(gpuInformation(G0, '0000:17:00.0', 3))).toEqual({ uuid: G0, busId: '0000:17:00.0', minor: 3 });
    expect(parseGpuInformation(gpuInformation('...', '0000:2A:00.0', 0))).toEqual({ busId: '0000:2a:00.0', minor: 0 });
    expect(parseGpuInformation('')).toEqual({});
  });

  it('bus ids: nvidia-smi’s 8-digit domain and the kernel’s 4-digit one are the same id', () => {
    expect(normalizeBusId('00000000:2A:00.0')).toBe('0000:2a:00.0');
    expect(normalizeBusId('0000:2a:00.0')).toBe('0000:2a:00.0');
    expect(normalizeBusId('2a:00.0')).toBe('0000:2a:00.0');
  });

  it('mig-minors: capability name → minor', () => {
    const m = parseMigMinors('config 1\nmonitor 2\ngpu0/gi0/access 3\ngpu0/gi0/ci0/access 4\ngpu1/gi7/access 606\ngpu1/gi7/ci0/access 607\n');
    expect(m.get('gpu1/gi7/access')).toBe(606);
    expect(m.get('gpu1/gi7/ci0/access')).toBe(607);
    expect(m.size).toBe(6);
  });

  it('atomDeviceNodes: the GPU’s minor; a MIG instance adds its GI and CI capabilities; nothing without a minor', () => {
    const caps = parseMigMinors('gpu1/gi7/access 606\ngpu1/gi7/ci0/access 607\n');
    expect(atomDeviceNodes({ id: G0, class: 'gpu', gpu: G0 }, 2, caps)).toEqual(['/dev/nvidia2']);
    expect(atomDeviceNodes({ id: `${G0}/s3`, class: 'gpu.slot', gpu: G0 }, 2, caps)).toEqual(['/dev/nvidia2']);
    expect(atomDeviceNodes({ id: `${G0}/gi7/ci0`, class: 'gpu.mig', gpu: G0 }, 1, caps)).toEqual([
      '/dev/nvidia1',
      '/dev/nvidia-caps/nvidia-cap606',
      '/dev/nvidia-caps/nvidia-cap607',
    ]);
    // Capabilities of another GPU (minor 2 has none listed): no hand-over of a part.
    expect(atomDeviceNodes({ id: `${G0}/gi7/ci0`, class: 'gpu.mig', gpu: G0 }, 2, caps)).toEqual([]);
    expect(atomDeviceNodes({ id: G0, class: 'gpu', gpu: G0 }, undefined, caps)).toEqual([]);
  });
});

describe('readHostDeviceNodes on a fake host', () => {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'bc-devnodes-'));
  afterAll(() => fs.rmSync(root, { recursive: true, force: true }));
  // G0: minor 2 (not its index); G1: UUID hidden, found by its bus id; no nvidia-uvm-tools on this host.
  const dirs = fakeNvidiaHost(root, {
    gpus: [
      { uuid: G0, bus: '0000:17:00.0', minor: 2 },
      { uuid: '...', bus: '0000:2a:00.0', minor: 0 },
    ],
    migMinors: ['gpu2/gi1/access 21', 'gpu2/gi1/ci0/access 22', 'gpu2/gi2/access 30', 'gpu2/gi2/ci0/access 31'],
    nodes: ['nvidia0', 'nvidia2', 'nvidiactl', 'nvidia-uvm', 'nvidia-caps/nvidia-cap21', 'nvidia-caps/nvidia-cap22', 'nvidia-caps/nvidia-cap30'],
  });

  it('whole GPUs by UUID or bus id, the control nodes that exist, and what it could not place', async () => {
    const r = await readHostDeviceNodes(
      dirs,
      [
        { id: G0, class: 'gpu', gpu: G0 },
        { id: G1, class: 'gpu', gpu: G1 },
        { id: 'GPU-sim', class: 'gpu', gpu: 'GPU-sim' },
      ],
      new Map([[G1, '00000000:2A:00.0']]),
    );
    expect(Object.fromEntries(r.atomNodes)).toEqual({ [G0]: ['/dev/nvidia2'], [G1]: ['/dev/nvidia0'], 'GPU-sim': [] });
    expect(r.controlNodes).toEqual(['/dev/nvidiactl', '/dev/nvidia-uvm']);
    expect(r.unknownGpus).toEqual(['GPU-sim']);
  });

  it('MIG instances: all of their nodes, or none when one is missing on the host', async () => {
    const r = await readHostDeviceNodes(dirs, [
      { id: `${G0}/gi1/ci0`, class: 'gpu.mig', gpu: G0 },
      { id: `${G0}/gi2/ci0`, class: 'gpu.mig', gpu: G0 },
    ]);
    expect(r.atomNodes.get(`${G0}/gi1/ci0`)).toEqual(['/dev/nvidia2', '/dev/nvidia-caps/nvidia-cap21', '/dev/nvidia-caps/nvidia-cap22']);
    expect(r.atomNodes.get(`${G0}/gi2/ci0`)).toEqual([]);
  });

  it('a host without the driver (simulated GPUs): nothing', async () => {
    const empty = { dev: path.join(root, 'none/dev'), proc: path.join(root, 'none/proc') };
    const r = await readHostDeviceNodes(empty, [{ id: G0, class: 'gpu', gpu: G0 }]);
    expect(r).toEqual({ atomNodes: new Map([[G0, []]]), controlNodes: [], unknownGpus: [G0] });
  });
});
