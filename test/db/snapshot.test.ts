// loadNodes: the planner's view of a pool, read in one statement. Order, filters and the type of every value.
import { describe, expect, it } from 'vitest';
import { setDeviceHealth, setNodeState } from '../../src/db/inventory.ts';
import { Ledger } from '../../src/db/ledger.ts';
import { loadNodes } from '../../src/db/snapshot.ts';
import { makeNode, makePool, reservation } from '../support/builders.ts';
import { useTestDatabase } from '../support/db.ts';

const ctx = useTestDatabase();

async function placePod(poolId: string, nodeId: string, atom: string, durationSeconds: number | null): Promise<string> {
  const id = `alloc_snap_${atom.replace(/[^a-z0-9]/gi, '').toLowerCase()}_${durationSeconds ?? 'open'}`;
  const { rows } = await ctx.db.query('SELECT bc_place($1::jsonb) AS r', [
    JSON.stringify({ tenantId: 'acme', poolId, podUid: id, durationSeconds, allocations: [{ id, nodeId, atoms: [atom] }] }),
  ]);
  expect(rows[0].r).toMatchObject({ ok: true });
  return id;
}

describe('loadNodes', () => {
  it('reads nodes by id, their bookable atoms by id with live bookings, and scalar counters, each value typed', async () => {
    const poolId = await makePool('snap').overcommit({ vcpu: 1.5 }).create(ctx.db);
    await makeNode('snap-b').gpus(4).scalars({ vcpu: 64, memoryGiB: 512 }).create(ctx.db, poolId);
    await makeNode('snap-a').gpus(1).mig(2).create(ctx.db, poolId);
    await makeNode('snap-c').gpus(2).create(ctx.db, poolId);
    await placePod(poolId, 'snap-c', 'GPU-snap-c-00', null); // open-ended
    await setNodeState(ctx.db, 'snap-c', { cordoned: true });
    await setDeviceHealth(ctx.db, 'GPU-snap-c-01', false);
    const otherPool = await makePool('snap-other').create(ctx.db);
    await makeNode('snap-0').gpus(1).create(ctx.db, otherPool);

    const ledger = new Ledger(ctx.db);
    const regular = await ledger.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 2 }] }), ctx.clock.now());
    const spot = await ledger.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 1 }], spot: true }), ctx.clock.now());
    if (!regular.ok || !spot.ok) throw new Error('reservations did not fit');
    const released = await placePod(poolId, 'snap-a', 'GPU-snap-a-00/gi1/ci0', 600);
    await ctx.db.query('SELECT bc_release_allocations($1)', [[released]]);

    const nodes = await loadNodes(ctx.db, poolId);
    expect(nodes.map((n) => n.id)).toEqual(['snap-a', 'snap-b', 'snap-c']);
    for (const n of nodes) {
      const { rows } = await ctx.db.query('SELECT id FROM devices WHERE node_id = $1 AND bookable ORDER BY id', [n.id]);
      expect(n.atoms.map((a) => a.id)).toEqual(rows.map((r) => r.id));
      expect(n.atoms.every((a) => a.bookable && typeof a.healthy === 'boolean')).toBe(true);
    }
    const [a, b, c] = nodes as [(typeof nodes)[0], (typeof nodes)[0], (typeof nodes)[0]];
    expect(a.atoms.map((x) => [x.class, x.parentId])).toEqual([
      ['gpu.mig', 'GPU-snap-a-00'],
      ['gpu.mig', 'GPU-snap-a-00'],
    ]);
    expect(a.atoms.flatMap((x) => x.bookings)).toEqual([]); // released
    expect(b.scalars).toEqual({
      vcpu: { allocatable: 64, ratio: 1.5, allocated: 0 },
      memoryGiB: { allocatable: 512, ratio: 1, allocated: 0 },
    });
    expect([a.schedulable, b.schedulable, c.schedulable]).toEqual([true, true, false]);
    expect(c.atoms.map((x) => x.healthy)).toEqual([true, false]);
    expect(c.atoms[0]!.bookings).toEqual([{ start: expect.any(Number), end: Infinity }]);

    const bookingsOf = (alloc: { atoms: string[] }) =>
      nodes.flatMap((n) => n.atoms).filter((x) => alloc.atoms.includes(x.id)).flatMap((x) => x.bookings);
    const hour = (x: { start: number; end: number }) => x.end - x.start;
    const regularBookings = regular.reservation.allocations.flatMap(bookingsOf);
    expect(regularBookings).toHaveLength(2);
    for (const x of regularBookings) {
      expect(Object.keys(x).sort()).toEqual(['end', 'start']);
      expect(hour(x)).toBe(3_600_000);
    }
    const spotBookings = spot.reservation.allocations.flatMap(bookingsOf);
    expect(spotBookings).toEqual([{ start: expect.any(Number), end: expect.any(Number), spot: true, ref: spot.reservation.id }]);
    expect(hour(spotBookings[0]!)).toBe(3_600_000);
  });

  it('reads only the named nodes of the pool, in id order, as the whole pool has them', async () => {
    const poolId = await makePool('snap-part').create(ctx.db);
    for (const id of ['part-2', 'part-1', 'part-3']) await makeNode(id).gpus(2).scalars({ vcpu: 8 }).create(ctx.db, poolId);
    await placePod(poolId, 'part-3', 'GPU-part-3-01', 60);
    const all = await loadNodes(ctx.db, poolId);
    expect(all.map((n) => n.id)).toEqual(['part-1', 'part-2', 'part-3']);
    const some = await loadNodes(ctx.db, poolId, ['part-3', 'part-1', 'part-3', 'missing', 'snap-0']);
    expect(some).toEqual(all.filter((n) => n.id !== 'part-2'));
    expect(some[1]!.atoms[1]!.bookings).toEqual([{ start: expect.any(Number), end: expect.any(Number) }]);
    expect(await loadNodes(ctx.db, poolId, [])).toEqual([]);
    expect(await loadNodes(ctx.db, 'pool_missing')).toEqual([]);
  });
});
