// The node's atoms as ResourceSlices: device names as the allocations name them, one pool per node, slices of at most
// 128 devices that count each other; and the agent's sync decisions (what to create, replace and delete).
import { describe, expect, it } from 'vitest';
import { draDeviceName } from './dra-names.ts';
import { MAX_DEVICES_PER_SLICE, mebibytesQuantity, planSliceSync, resourceSlicesFor, ResourceSliceSchema, sliceAtomsOf, type ExistingSlice, type ResourceSliceObject, type SliceAtom } from './dra-slices.ts';
import { DRA_DRIVER } from './names.ts';

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

  it('typed attributes of a whole GPU, a MIG instance and a slot; the device\'s own memory as the capacity `memory`', () => {
    const gpuOf = { product: 'NVIDIA H200', model: 'H200', numaNode: 1, nvlinkDomain: '3e7ef3a4-2d1f-4e5b-9c67-13c24b3e9e2a.5', healthy: true };
    const atoms: SliceAtom[] = [
      { id: 'GPU-a', class: 'gpu', gpu: 'GPU-a', visible: 'GPU-a', ...gpuOf, vramGiB: 140, memoryMiB: 143771 },
      // MIG: its own memory; an NVLink domain given for it is not published (MIG has no NVLink).
      { id: 'GPU-m/gi1/ci0', class: 'gpu.mig', gpu: 'GPU-m', visible: 'MIG-1', ...gpuOf, vramGiB: 9.75, memoryMiB: 9984, migProfile: '1g.10gb+me' },
      // A slot: its GPU's vramGiB, no memory of its own even if given.
      { id: 'GPU-s/s1', class: 'gpu.slot', gpu: 'GPU-s', visible: 'GPU-s', ...gpuOf, vramGiB: 80, memoryMiB: 81920 },
    ];
    const byName = Object.fromEntries(resourceSlicesFor({ node: 'n1', atoms, generation: 1 })[0]!.spec.devices.map((d) => [d.name, d]));
    expect(byName[draDeviceName('GPU-a')]).toEqual({
      name: draDeviceName('GPU-a'),
      attributes: {
        class: { string: 'gpu' },
        healthy: { bool: true },
        atomId: { string: 'GPU-a' },
        gpu: { string: 'GPU-a' },
        uuid: { string: 'GPU-a' },
        product: { string: 'NVIDIA H200' },
        model: { string: 'H200' },
        vramGiB: { int: 140 },
        numaNode: { int: 1 },
        nvlinkDomain: { string: '3e7ef3a4-2d1f-4e5b-9c67-13c24b3e9e2a.5' },
      },
      capacity: { memory: { value: '143771Mi' } },
    });
    expect(byName[draDeviceName('GPU-m/gi1/ci0')]).toEqual({
      name: draDeviceName('GPU-m/gi1/ci0'),
      attributes: {
        class: { string: 'gpu.mig' },
        healthy: { bool: true },
        atomId: { string: 'GPU-m/gi1/ci0' },
        gpu: { string: 'GPU-m' },
        uuid: { string: 'MIG-1' },
        product: { string: 'NVIDIA H200' },
        model: { string: 'H200' },
        vramGiB: { int: 10 },
        numaNode: { int: 1 },
        migProfile: { string: '1g.10gb+me' },
      },
      capacity: { memory: { value: '9984Mi' } },
    });
    const slot = byName[draDeviceName('GPU-s/s1')]!;
    expect(slot.capacity).toBeUndefined();
    expect(slot.attributes).toMatchObject({ class: { string: 'gpu.slot' }, uuid: { string: 'GPU-s' }, vramGiB: { int: 80 }, nvlinkDomain: { string: gpuOf.nvlinkDomain } });
    // Typed as the API takes them: a string, an int or a bool each, strings within 64 bytes, at most 32 per device.
    for (const d of Object.values(byName)) {
      expect(Object.keys(d.attributes).length + Object.keys(d.capacity ?? {}).length).toBeLessThanOrEqual(32);
      for (const [k, v] of Object.entries(d.attributes)) {
        expect(Object.keys(v), k).toHaveLength(1);
        expect(typeof Object.values(v)[0], k).toBe(k === 'healthy' ? 'boolean' : ['vramGiB', 'numaNode'].includes(k) ? 'number' : 'string');
        if ('int' in v) expect(Number.isInteger(v.int), k).toBe(true);
        expect(k).toMatch(/^[A-Za-z][A-Za-z0-9_]{0,31}$/);
      }
    }
  });

  it('what nvidia-smi (or a devices file) said that does not pass its check is left out, never published', () => {
    const bad: SliceAtom = {
      ...gpu(1),
      product: 'NVIDIA H200\nhealthy: true',
      model: ' ',
      numaNode: -1,
      vramGiB: Number.NaN,
      memoryMiB: 81559.5,
      nvlinkDomain: 'domain with spaces',
      migProfile: 'x'.repeat(65),
    };
    const [slice] = resourceSlicesFor({ node: 'n1', atoms: [bad], generation: 1 });
    expect(slice!.spec.devices[0]).toEqual({ name: draDeviceName(bad.id), attributes: { class: { string: 'gpu' }, healthy: { bool: true }, atomId: { string: bad.id }, gpu: { string: bad.gpu }, uuid: { string: bad.visible } } });
    const more = (a: Partial<SliceAtom>) => resourceSlicesFor({ node: 'n1', atoms: [{ ...gpu(1), ...a }], generation: 1 })[0]!.spec.devices[0]!;
    expect(more({ numaNode: 0.5, vramGiB: -1, memoryMiB: 0 })).not.toHaveProperty('capacity');
    expect(Object.keys(more({ numaNode: 0.5, vramGiB: -1, memoryMiB: 0 }).attributes)).not.toEqual(expect.arrayContaining(['numaNode']));
    expect(Object.keys(more({ vramGiB: Number.POSITIVE_INFINITY }).attributes)).not.toContain('vramGiB');
    expect(Object.keys(more({ product: 'NVIDIA H200 \u00e9' }).attributes)).not.toContain('product');
    expect(Object.keys(more({ visible: 'GPU-1\u0000' }).attributes)).not.toContain('uuid');
    expect(more({ memoryMiB: 1 << 31 }).capacity).toBeUndefined();
  });

  it('memory quantities as the API server writes them back: the largest binary suffix that keeps the number whole', () => {
    expect([143771, 81920, 4864, 1024, 1536, 1 << 20, 3 << 20].map(mebibytesQuantity)).toEqual(['143771Mi', '80Gi', '4864Mi', '1Gi', '1536Mi', '1Ti', '3Ti']);
  });

  it('a string too long for an attribute is left out; two atoms of one name are an error', () => {
    const long = 'GPU-' + 'a'.repeat(70);
    const [slice] = resourceSlicesFor({ node: 'n1', atoms: [{ ...gpu(1), id: long, gpu: long, visible: long }], generation: 1 });
    expect(Object.keys(slice!.spec.devices[0]!.attributes).sort()).toEqual(['class', 'healthy', 'numaNode']);
    expect(() => resourceSlicesFor({ node: 'n1', atoms: [gpu(1), gpu(1)], generation: 1 })).toThrow(/device name/);
  });
});

/** A slice as the API server would list it: ours, with a resourceVersion (and, optionally, its keys reordered). */
function listed(s: ResourceSliceObject, rv: string, reorder = false): ExistingSlice {
  const o = { ...s, metadata: { ...s.metadata, resourceVersion: rv, uid: `uid-${s.metadata.name}` } };
  const text = reorder
    ? JSON.stringify(o, (_k, v: unknown) => (v && typeof v === 'object' && !Array.isArray(v) ? Object.fromEntries(Object.entries(v as object).reverse()) : v))
    : JSON.stringify(o);
  return ResourceSliceSchema.parse(JSON.parse(text));
}

const published = (atoms: SliceAtom[], generation: number, node = 'n1') => resourceSlicesFor({ node, nodeUid: `uid-${node}`, atoms, generation }).map((s, k) => listed(s, `${generation}${k}`));
const plan = (atoms: SliceAtom[], existing: ExistingSlice[], lastGeneration = 0) => planSliceSync({ node: 'n1', nodeUid: 'uid-n1', atoms, existing, lastGeneration });
const names = (xs: { metadata: { name: string } }[]) => xs.map((x) => x.metadata.name);
const summary = (p: ReturnType<typeof planSliceSync>) => ({
  generation: p.generation,
  create: names(p.create),
  update: p.update.map((u) => [u.slice.metadata.name, u.resourceVersion]),
  delete: p.delete.map((d) => [d.name, d.resourceVersion]),
});
const slice = (k: number) => `n1-${DRA_DRIVER}-${k}`;

describe('planSliceSync: the node\'s slices made equal to its healthy atoms', () => {
  const four = [gpu(0), gpu(1), gpu(2), gpu(3)];

  it('none yet: the healthy atoms created at the generation after the last one, owned by the Node; an unhealthy atom is no device', () => {
    const p = plan([...four, { ...gpu(4), healthy: false }], []);
    expect(summary(p)).toEqual({ generation: 1, create: [slice(0)], update: [], delete: [] });
    expect(p.create[0]!.spec.devices.map((d) => d.name)).toEqual(four.map((a) => draDeviceName(a.id)));
    expect(p.create[0]!.spec.pool).toEqual({ name: 'n1', generation: 1, resourceSliceCount: 1 });
    expect(p.create[0]!.metadata.ownerReferences).toEqual([{ apiVersion: 'v1', kind: 'Node', name: 'n1', uid: 'uid-n1', controller: true }]);
    // After a kubelet deleted them all: above the generation the agent last wrote, never back to 1.
    expect(plan(four, [], 7).generation).toBe(8);
  });

  it('as published (the API server\'s key order aside): nothing to write, the generation kept', () => {
    const existing = resourceSlicesFor({ node: 'n1', nodeUid: 'uid-n1', atoms: four, generation: 5 }).map((s) => listed(s, '55', true));
    expect(summary(plan(four, existing, 5))).toEqual({ generation: 5, create: [], update: [], delete: [] });
    // Without atoms and without slices: nothing either.
    expect(summary(plan([], []))).toEqual({ generation: 0, create: [], update: [], delete: [] });
  });

  it('an atom turned unhealthy: the slice replaced at the next generation, at the resourceVersion read', () => {
    const p = plan([{ ...gpu(0), healthy: false }, gpu(1), gpu(2), gpu(3)], published(four, 5));
    expect(summary(p)).toEqual({ generation: 6, create: [], update: [[slice(0), '50']], delete: [] });
    expect(p.update[0]!.slice.spec.devices).toHaveLength(3);
  });

  it('a device whose attributes changed, or that someone added, or a new owner: written again', () => {
    const [s0] = published(four, 2);
    const edited = structuredClone(s0!);
    edited.spec.devices![0]!.attributes!.class = { string: 'gpu.slot' };
    expect(summary(plan(four, [edited]))).toMatchObject({ generation: 3, update: [[slice(0), '20']] });
    const extra = structuredClone(s0!);
    extra.spec.devices!.push({ name: 'not-an-atom', attributes: {} });
    expect(summary(plan(four, [extra]))).toMatchObject({ generation: 3, update: [[slice(0), '20']] });
    const capacity = structuredClone(s0!);
    (capacity.spec.devices![0] as Record<string, unknown>).capacity = { memory: { value: '80Gi' } };
    expect(summary(plan(four, [capacity]))).toMatchObject({ generation: 3, update: [[slice(0), '20']] });
    const unowned = listed(resourceSlicesFor({ node: 'n1', atoms: four, generation: 2 })[0]!, '20');
    expect(summary(plan(four, [unowned]))).toMatchObject({ generation: 3, update: [[slice(0), '20']] });
  });

  it('one of two slices deleted by someone: made again, and the other rewritten at the new generation', () => {
    const many = Array.from({ length: MAX_DEVICES_PER_SLICE + 2 }, (_, i) => gpu(i));
    const [first] = published(many, 4);
    const p = plan(many, [first!], 4);
    expect(summary(p)).toEqual({ generation: 5, create: [slice(1)], update: [[slice(0), '40']], delete: [] });
    expect([...p.create, ...p.update.map((u) => u.slice)].map((s) => [s.spec.pool.generation, s.spec.pool.resourceSliceCount])).toEqual([[5, 2], [5, 2]]);
  });

  it('fewer atoms: the slices left over deleted at the resourceVersion read, the rest counting only themselves', () => {
    const many = Array.from({ length: MAX_DEVICES_PER_SLICE + 2 }, (_, i) => gpu(i));
    const p = plan(many.slice(0, 10), published(many, 4));
    expect(summary(p)).toEqual({ generation: 5, create: [], update: [[slice(0), '40']], delete: [[slice(1), '41']] });
    expect(p.update[0]!.slice.spec.pool.resourceSliceCount).toBe(1);
  });

  it('no healthy atom left: every slice deleted', () => {
    expect(summary(plan([{ ...gpu(0), healthy: false }], published(four, 3)))).toEqual({ generation: 0, create: [], update: [], delete: [[slice(0), '30']] });
  });

  it('slices of one content at two generations (a write cut short): all rewritten at a generation above both', () => {
    const many = Array.from({ length: MAX_DEVICES_PER_SLICE + 2 }, (_, i) => gpu(i));
    const [a] = published(many, 4);
    const [, b] = published(many, 3);
    expect(summary(plan(many, [a!, b!]))).toEqual({ generation: 5, create: [], update: [[slice(0), '40'], [slice(1), '31']], delete: [] });
  });

  it('a slice of our driver in the node\'s pool by another name is deleted; another node\'s or driver\'s is never touched', () => {
    const [ours] = published(four, 2);
    const stray = listed({ ...resourceSlicesFor({ node: 'n1', nodeUid: 'uid-n1', atoms: [gpu(9)], generation: 2 })[0]!, metadata: { name: 'someone-elses-name' } }, '77');
    const [otherNode] = published(four, 9, 'n2');
    const otherDriver = listed({ ...resourceSlicesFor({ node: 'n1', atoms: [gpu(8)], generation: 9 })[0]!, metadata: { name: 'n1-gpu.example.com-0' }, spec: { ...resourceSlicesFor({ node: 'n1', atoms: [gpu(8)], generation: 9 })[0]!.spec, driver: 'gpu.example.com' } }, '88');
    const p = plan(four, [ours!, stray, otherNode!, otherDriver]);
    // Its generation is above the pool's (2): another node's or driver's (9) counts for nothing.
    expect(summary(p)).toEqual({ generation: 3, create: [], update: [[slice(0), '20']], delete: [['someone-elses-name', '77']] });
  });

  it('the atoms of the GPU classes only', () => {
    const atoms = [gpu(0), { ...gpu(1), class: 'nic.vf' }, { ...gpu(2), id: 'GPU-002/s0', class: 'gpu.slot' }];
    expect(sliceAtomsOf(atoms).map((a) => a.id)).toEqual(['GPU-000', 'GPU-002/s0']);
  });
});
