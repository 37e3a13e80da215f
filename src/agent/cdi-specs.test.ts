// The node's CDI specs as `auto` reads them: names by kind, other parties' files checked and left out when wrong.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { cdiNamesOfSpec, readCdiNames } from './cdi-specs.ts';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bc-cdi-'));
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

describe('CDI specs', () => {
  it('a spec’s fully qualified names, YAML or JSON', () => {
    expect(cdiNamesOfSpec('cdiVersion: 0.6.0\nkind: nvidia.com/gpu\ndevices:\n  - name: "0"\n  - name: GPU-1a\n    containerEdits: {}\n')).toEqual([
      'nvidia.com/gpu=0',
      'nvidia.com/gpu=GPU-1a',
    ]);
    expect(cdiNamesOfSpec(JSON.stringify({ kind: 'example.com/gpu', devices: [{ name: 'MIG-2b' }] }))).toEqual(['example.com/gpu=MIG-2b']);
    expect(() => cdiNamesOfSpec('kind: gpu\ndevices: []\n')).toThrow();
    expect(() => cdiNamesOfSpec('kind: nvidia.com/gpu\ndevices: [{ name: "a b" }]\n')).toThrow();
  });

  it('every spec file of the directories; a missing directory holds none; a broken, foreign or oversized file is left out', async () => {
    const a = path.join(dir, 'etc');
    fs.mkdirSync(a);
    fs.writeFileSync(path.join(a, 'nvidia.yaml'), 'kind: nvidia.com/gpu\ndevices: [{ name: GPU-1a }]\n');
    fs.writeFileSync(path.join(a, 'claim.json'), JSON.stringify({ kind: 'gpu.bettercompute.io/claim', devices: [{ name: 'uid-1' }] }));
    fs.writeFileSync(path.join(a, 'broken.yml'), 'kind: [\n');
    fs.writeFileSync(path.join(a, 'notes.txt'), 'kind: nvidia.com/gpu\ndevices: [{ name: GPU-txt }]\n');
    fs.mkdirSync(path.join(a, 'dir.yaml'));
    const big = path.join(a, 'big.json');
    fs.writeFileSync(big, '');
    fs.truncateSync(big, 4 * 1024 * 1024 + 1);
    const scan = await readCdiNames([a, path.join(dir, 'missing')]);
    expect([...scan.names].sort()).toEqual(['gpu.bettercompute.io/claim=uid-1', 'nvidia.com/gpu=GPU-1a']);
    expect(scan.skipped.map((s) => path.basename(s.file)).sort()).toEqual(['big.json', 'broken.yml']);
    expect(scan.skipped.find((s) => s.file === big)?.error).toMatch(/over 4194304/);
  });
});
