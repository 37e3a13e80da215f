// The node's atoms as ResourceSlices (not published yet): device names as the allocations name them, one pool per
// node, slices of at most 128 devices that count each other.
import { describe, expect, it } from 'vitest';
import { DRA_DRIVER } from './dra-allocate.ts';
import { draDeviceName } from './dra-names.ts';
import { MAX_DEVICES_PER_SLICE, resourceSlicesFor, type SliceAtom } from './dra-slices.ts';

const gpu = (i: number): SliceAtom => ({ id: `GPU-${String(i).padStart(3, '0')}`, class: 'gpu', gpu: `GPU-${String(i).padStart(3, '0')}`, visible: `GPU-${String(i).padStart(3, '0')}`, healthy: true, numaNode: 0 });

describe('resourceSlicesFor', () => {
  it('one slice: the pool is the node, each atom a device named as the allocator names it', () => {
    const mig: SliceAtom = { id: 'GPU-000/gi1/ci0', class: 'gpu.mig', gpu: 'GPU-000', visible: 'MIG-1', healthy: false };
    const [slice, ...rest] = resourceSlicesFor({ node: 'n1', nodeUid: 'uid-n1', atoms: [mig, gpu(1)], generation: 3 });
    expect(rest).toEqual([]);
    expect(slice).toEqual({
      apiVersion: 'resource.k8s.io/v1',
      kind: 'ResourceSlice',
      metadata: { name: `n1-${DRA_DRIVER}-0`, ownerReferences: [{ apiVersion: 'v1', kind: 'Node', name: 'n1', uid: 'uid-n1', controller: true }] },
      spec: {
        driver: DRA_DRIVER,
        nodeName: 'n1',
        pool: { name: 'n1', generation: 3, resourceSliceCount: 1 },
        devices: [
          { name: draDeviceName('GPU-000/gi1/ci0'), attributes: { class: { string: 'gpu.mig' }, healthy: { bool: false }, atomId: { string: 'GPU-000/gi1/ci0' }, gpu: { string: 'GPU-000' }, uuid: { string: 'MIG-1' } } },
          { name: draDeviceName('GPU-001'), attributes: { class: { string: 'gpu' }, healthy: { bool: true }, atomId: { string: 'GPU-001' }, gpu: { string: 'GPU-001' }, uuid: { string: 'GPU-001' }, numaNode: { int: 0 } } },
        ].sort((a, b) => (a.name < b.name ? -1 : 1)),
      },
    });
  });

  it('more than 128 atoms: several slices, each counting them all; none for no atoms', () => {
    const atoms = Array.from({ length: MAX_DEVICES_PER_SLICE + 2 }, (_, i) => gpu(i));
    const slices = resourceSlicesFor({ node: 'n1', atoms, generation: 1 });
    expect(slices.map((s) => [s.metadata.name, s.spec.devices.length, s.spec.pool.resourceSliceCount])).toEqual([
      [`n1-${DRA_DRIVER}-0`, MAX_DEVICES_PER_SLICE, 2],
      [`n1-${DRA_DRIVER}-1`, 2, 2],
    ]);
    expect(new Set(slices.flatMap((s) => s.spec.devices.map((d) => d.name))).size).toBe(atoms.length);
    expect(slices[0]!.metadata.ownerReferences).toBeUndefined();
    expect(resourceSlicesFor({ node: 'n1', atoms: [], generation: 1 })).toEqual([]);
  });

  it('a string too long for an attribute is left out; two atoms of one name are an error', () => {
    const long = 'GPU-' + 'a'.repeat(70);
    const [slice] = resourceSlicesFor({ node: 'n1', atoms: [{ ...gpu(1), id: long, gpu: long, visible: long }], generation: 1 });
    expect(Object.keys(slice!.spec.devices[0]!.attributes).sort()).toEqual(['class', 'healthy', 'numaNode']);
    expect(() => resourceSlicesFor({ node: 'n1', atoms: [gpu(1), gpu(1)], generation: 1 })).toThrow(/device name/);
  });
});
