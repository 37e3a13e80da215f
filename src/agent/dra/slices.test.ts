// The agent's slice publisher over an API that keeps slices in memory with the API server's preconditions (a write at
// a stale resourceVersion is a conflict): what it writes, in which order, that it coalesces syncs asked for while one
// runs, keeps its generation above any it wrote after everything was deleted, and survives a failed call.
import { describe, expect, it } from 'vitest';
import { draDeviceName } from '../../core/dra-names.ts';
import { ResourceSliceSchema, type ExistingSlice, type ResourceSliceObject, type SliceAtom } from '../../core/dra-slices.ts';
import { silentLogger } from '../../log.ts';
import { SlicePublisher, type SliceApi } from './slices.ts';
import { DRA_DRIVER } from '../../core/names.ts';

class MemorySlices implements SliceApi {
  readonly store = new Map<string, ExistingSlice>();
  readonly calls: string[] = [];
  private rv = 0;
  failNext?: string;
  /** Set to hold the next list until released (to ask for syncs while one runs). */
  hold?: Promise<void>;

  private check(op: string): void {
    this.calls.push(op);
    if (this.failNext && op.startsWith(this.failNext)) {
      this.failNext = undefined;
      throw new Error(`${op}: the API server did not answer`);
    }
  }

  private put(s: ResourceSliceObject): void {
    this.store.set(s.metadata.name, ResourceSliceSchema.parse({ ...structuredClone(s), metadata: { ...s.metadata, resourceVersion: String(++this.rv) } }));
  }

  async listOfNode(node: string): Promise<ExistingSlice[]> {
    this.check('list');
    await this.hold;
    return [...this.store.values()].filter((s) => s.spec.nodeName === node && s.spec.driver === DRA_DRIVER).map((s) => structuredClone(s));
  }

  async create(s: ResourceSliceObject): Promise<void> {
    this.check(`create ${s.metadata.name}`);
    if (this.store.has(s.metadata.name)) throw new Error('409 AlreadyExists');
    this.put(s);
  }

  async replace(s: ResourceSliceObject, resourceVersion: string): Promise<void> {
    this.check(`replace ${s.metadata.name}`);
    if (this.store.get(s.metadata.name)?.metadata.resourceVersion !== resourceVersion) throw new Error('409 Conflict');
    this.put(s);
  }

  async delete(name: string, resourceVersion: string): Promise<void> {
    this.check(`delete ${name}`);
    if (this.store.get(name)?.metadata.resourceVersion !== resourceVersion) throw new Error('409 Conflict');
    this.store.delete(name);
  }

  async nodeUid(node: string): Promise<string> {
    this.check('node');
    return `uid-${node}`;
  }
}

const gpu = (i: number, healthy = true): SliceAtom => ({ id: `GPU-${i}`, class: 'gpu', gpu: `GPU-${i}`, visible: `GPU-${i}`, healthy });
const name = (k: number) => `n1-${DRA_DRIVER}-${k}`;

function publisher(api: MemorySlices, atoms: { now: SliceAtom[] }): SlicePublisher {
  return new SlicePublisher({ nodeName: 'n1', api, atoms: () => atoms.now, log: silentLogger, resyncMs: 3_600_000 });
}

describe('SlicePublisher', () => {
  it('publishes the atoms, rewrites on a change, writes nothing when nothing changed', async () => {
    const api = new MemorySlices();
    const atoms = { now: [gpu(0), gpu(1)] };
    const p = publisher(api, atoms);
    await p.sync();
    expect(api.calls).toEqual(['node', 'list', `create ${name(0)}`]);
    expect(api.store.get(name(0))!.spec.pool).toEqual({ name: 'n1', generation: 1, resourceSliceCount: 1 });
    expect(api.store.get(name(0))!.metadata.ownerReferences).toEqual([{ apiVersion: 'v1', kind: 'Node', name: 'n1', uid: 'uid-n1', controller: true }]);

    api.calls.length = 0;
    await p.sync();
    expect(api.calls).toEqual(['list']);
    expect(p.last).toEqual({ generation: 1, created: 0, updated: 0, deleted: 0 });

    atoms.now = [gpu(0), gpu(1, false)];
    await p.sync();
    expect(api.store.get(name(0))!.spec.devices!.map((d) => d.name)).toEqual([draDeviceName('GPU-0')]);
    expect(api.store.get(name(0))!.spec.pool.generation).toBe(2);
  });

  it('creates and replacements before deletions; every slice gone (a kubelet that started): made again above the last generation', async () => {
    const api = new MemorySlices();
    const atoms = { now: Array.from({ length: 130 }, (_, i) => gpu(i)) };
    const p = publisher(api, atoms);
    await p.sync();
    expect([...api.store.keys()].sort()).toEqual([name(0), name(1)]);
    atoms.now = atoms.now.slice(0, 3);
    api.calls.length = 0;
    await p.sync();
    expect(api.calls).toEqual(['list', `replace ${name(0)}`, `delete ${name(1)}`]);
    expect(api.store.get(name(0))!.spec.pool).toEqual({ name: 'n1', generation: 2, resourceSliceCount: 1 });

    api.store.clear();
    await p.sync();
    expect(api.store.get(name(0))!.spec.pool.generation).toBe(3);
  });

  it('syncs asked for while one runs: one more after it, not one each', async () => {
    const api = new MemorySlices();
    const p = publisher(api, { now: [gpu(0)] });
    let release!: () => void;
    api.hold = new Promise((r) => (release = r));
    const first = p.sync();
    const asked = [p.sync(), p.sync(), p.sync()];
    api.hold = undefined;
    release();
    await Promise.all([first, ...asked]);
    expect(api.calls.filter((c) => c === 'list')).toHaveLength(2);
    expect(api.calls.filter((c) => c.startsWith('create'))).toHaveLength(1);
  });

  it('a failed call is logged and the next sync finishes the work; stopped, it syncs no more', async () => {
    const api = new MemorySlices();
    const p = publisher(api, { now: [gpu(0)] });
    api.failNext = 'create';
    await p.sync();
    expect(api.store.size).toBe(0);
    await p.sync();
    expect(api.store.size).toBe(1);
    await p.stop();
    api.store.clear();
    await p.sync();
    expect(api.store.size).toBe(0);
  });
});
