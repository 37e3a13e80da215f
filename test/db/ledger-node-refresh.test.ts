// Ledger.invalidateNodes: a node's sync or inventory apply makes the placer's cached pool read just that node again,
// once, before the snapshot's next use; changes that arrive meanwhile are read together (docs/adr/0042). Counted by the
// snapshot statements' names (src/db/snapshot.ts): bc_load_nodes_pool reads a whole pool, bc_load_nodes_some nodes.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { Ledger } from '../../src/db/ledger.ts';
import { makeNode, makePool, reservation } from '../support/builders.ts';
import { useTestDatabase } from '../support/db.ts';

const ctx = useTestDatabase();

describe('Ledger.invalidateNodes', () => {
  let ledger: Ledger;
  let loads: { name: string; values: unknown[] }[];
  let failSome = false;
  beforeEach(() => {
    ledger = new Ledger(ctx.db);
    loads = [];
    failSome = false;
    const query = ctx.db.query.bind(ctx.db) as (...a: unknown[]) => unknown;
    vi.spyOn(ctx.db, 'query').mockImplementation(((...args: unknown[]) => {
      const c = args[0] as { name?: string; values?: unknown[] };
      if (c?.name?.startsWith('bc_load_nodes_')) {
        loads.push({ name: c.name, values: c.values ?? [] });
        if (failSome && c.name === 'bc_load_nodes_some') return Promise.reject(new Error('reload failed'));
      }
      return query(...args);
    }) as never);
  });
  afterEach(() => {
    vi.restoreAllMocks();
  });
  const count = (name: string) => loads.filter((l) => l.name === `bc_load_nodes_${name}`).length;
  const book = async (poolId: string) => {
    const r = await ledger.reserve(reservation(poolId), ctx.clock.now());
    if (!r.ok) throw new Error(`${r.code}: ${r.message}`);
    return r.reservation.allocations[0]!.nodeId;
  };

  it('reads the changed nodes again in one statement, not the pool, and books on them', async () => {
    const poolId = await makePool('refresh-some').create(ctx.db);
    await makeNode('rs-a').gpus(1).create(ctx.db, poolId);
    expect(await book(poolId)).toBe('rs-a');
    expect(count('pool')).toBe(1);
    // Two nodes join after the snapshot was cached (what the Node and NodeDevices reconcilers report).
    await makeNode('rs-b').gpus(1).create(ctx.db, poolId);
    ledger.invalidateNodes(poolId, ['rs-b']);
    await makeNode('rs-c').gpus(1).create(ctx.db, poolId);
    ledger.invalidateNodes(poolId, ['rs-c']);
    const placed = [await book(poolId), await book(poolId)].sort();
    expect(placed).toEqual(['rs-b', 'rs-c']);
    expect(count('pool')).toBe(1);
    expect(count('some')).toBe(1);
    expect(loads.find((l) => l.name === 'bc_load_nodes_some')!.values[1]).toEqual(['rs-b', 'rs-c']);
  });

  it('drops a node that left the pool from the snapshot', async () => {
    const poolId = await makePool('refresh-left').create(ctx.db);
    await makeNode('rl-a').gpus(2).create(ctx.db, poolId);
    await makeNode('rl-b').gpus(2).create(ctx.db, poolId);
    const first = await book(poolId);
    const other = first === 'rl-a' ? 'rl-b' : 'rl-a';
    await ctx.db.query('UPDATE nodes SET pool_id = NULL WHERE id = $1', [first]);
    ledger.invalidateNodes(poolId, [first]);
    // The fuller node would be packed first again were it still in the snapshot.
    expect(await book(poolId)).toBe(other);
    expect(await book(poolId)).toBe(other);
    expect([count('pool'), count('some')]).toEqual([1, 1]);
  });

  it('does nothing for a pool not cached, and a failed reload drops the snapshot (the next use reads the pool)', async () => {
    const poolId = await makePool('refresh-fail').create(ctx.db);
    await makeNode('rf-a').gpus(2).create(ctx.db, poolId);
    ledger.invalidateNodes(poolId, ['rf-a']);
    expect(await book(poolId)).toBe('rf-a');
    expect([count('pool'), count('some')]).toEqual([1, 0]);
    failSome = true;
    ledger.invalidateNodes(poolId, ['rf-a']);
    expect((await ledger.reserve(reservation(poolId), ctx.clock.now())).ok).toBe(false);
    failSome = false;
    expect(await book(poolId)).toBe('rf-a');
    expect([count('pool'), count('some')]).toEqual([2, 1]);
  });
});
