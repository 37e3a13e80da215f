import { describe, expect, it } from 'vitest';
import { capacitySummary, foldRollup, gpuTimeline, poolCapacity, rebuildRollup } from '../../src/db/capacity.ts';
import { advanceClock } from '../../src/db/clock.ts';
import { setDeviceHealth, setNodeState, upsertNode } from '../../src/db/inventory.ts';
import { Ledger } from '../../src/db/ledger.ts';
import { makeNode, makePool, reservation } from '../support/builders.ts';
import { useTestDatabase } from '../support/db.ts';
import { ROLLUP_MISMATCHES } from '../support/invariants.ts';

const ctx = useTestDatabase();

const HOUR = 3_600_000;
const pick = (rows: Awaited<ReturnType<typeof poolCapacity>>, resource: string) => {
  const r = rows.find((x) => x.resource === resource);
  if (!r) throw new Error(`no ${resource} row`);
  const { updatedAt: _u, poolId: _p, ...numbers } = r;
  return numbers;
};

describe('capacity math', () => {
  it('puts every atom in allocatable or one bucket, and counts bookings now and later', async () => {
    const poolId = await makePool('math').overcommit({ vcpu: 2 }).create(ctx.db);
    for (const id of ['m-ok', 'm-cordon', 'm-gone', 'm-taint', 'm-maint']) {
      await makeNode(id).gpus(4).scalars({ vcpu: 16 }).create(ctx.db, poolId);
    }
    await upsertNode(ctx.db, { id: 'm-new', poolId }); // no inventory yet: provisioning, but it has no atoms
    await makeNode('m-foreign').gpus(4).create(ctx.db, poolId);
    await upsertNode(ctx.db, { id: 'm-foreign', poolId, trust: 'tenant-controlled' }); // excluded: not counted at all
    await setNodeState(ctx.db, 'm-cordon', { cordoned: true });
    await setNodeState(ctx.db, 'm-gone', { connectivity: 'unreachable' });
    await setNodeState(ctx.db, 'm-taint', { noscheduleReason: 'NoSchedule taint nvidia.com/xid' });
    await setNodeState(ctx.db, 'm-maint', { maintenance: true, provisionState: 'deprovisioning' });
    await setDeviceHealth(ctx.db, 'GPU-m-ok-03', false);
    const ledger = new Ledger(ctx.db);
    expect((await ledger.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 2 }], resources: { vcpu: 20 } }), ctx.clock.now())).ok).toBe(true);
    expect((await ledger.reserve(reservation(poolId, { start: ctx.clock.now() + HOUR }), ctx.clock.now())).ok).toBe(true);

    const rows = await poolCapacity(ctx.db, poolId);
    expect(rows.map((r) => r.resource)).toEqual(['gpu', 'vcpu']);
    expect(pick(rows, 'gpu')).toEqual({
      resource: 'gpu', total: 20, allocatable: 3, allocated: 2, reserved: 1, available: 0,
      provisioning: 4, unhealthy: 5, maintenance: 4, unreachable: 4,
    });
    expect(pick(rows, 'vcpu')).toEqual({
      resource: 'vcpu', total: 160, allocatable: 32, allocated: 20, reserved: 0, available: 12,
      provisioning: 32, unhealthy: 32, maintenance: 32, unreachable: 32,
    });
    expect((await ctx.db.query(ROLLUP_MISMATCHES)).rows).toEqual([]);
    // Folding and rebuilding change nothing that readers see.
    await foldRollup(ctx.db);
    expect(pick(await poolCapacity(ctx.db, poolId), 'gpu')).toEqual(pick(rows, 'gpu'));
    await rebuildRollup(ctx.db);
    expect(pick(await poolCapacity(ctx.db, poolId), 'gpu')).toEqual(pick(rows, 'gpu'));
  });

  it('a booking that starts later moves from reserved to allocated on the rebuild after its start', async () => {
    const poolId = await makePool('later').create(ctx.db);
    await makeNode('later-n').gpus(4).create(ctx.db, poolId);
    const ledger = new Ledger(ctx.db);
    const r = await ledger.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 3 }], start: ctx.clock.now() + HOUR }), ctx.clock.now());
    expect(r.ok).toBe(true);
    expect(pick(await poolCapacity(ctx.db, poolId), 'gpu')).toMatchObject({ allocated: 0, reserved: 3, available: 1 });
    await advanceClock(ctx.db, HOUR + 1000);
    // Between rebuilds the rollup lags: still reserved.
    expect(pick(await poolCapacity(ctx.db, poolId), 'gpu')).toMatchObject({ allocated: 0, reserved: 3 });
    await rebuildRollup(ctx.db);
    expect(pick(await poolCapacity(ctx.db, poolId), 'gpu')).toMatchObject({ allocated: 3, reserved: 0, available: 1 });
    await advanceClock(ctx.db, 2 * HOUR);
    await rebuildRollup(ctx.db);
    expect(pick(await poolCapacity(ctx.db, poolId), 'gpu')).toMatchObject({ allocated: 0, reserved: 0, available: 4 });
    await ctx.clock.sync();
  });
});

describe('summary and timeline', () => {
  it('lists owned and offered pools, hides archived pools from non-owners, and sums only gpu rows per model', async () => {
    const a = await makePool('sum-a').owner('team').model('H100').create(ctx.db);
    const b = await makePool('sum-b').owner('ops').model('H100').offer('team').create(ctx.db);
    const c = await makePool('sum-c').owner('ops').model(null).offer('team').sharing('mig').create(ctx.db);
    await makePool('sum-d').owner('ops').offer('team').archived().create(ctx.db);
    await makePool('sum-e').owner('ops').create(ctx.db);
    await makeNode('sum-a1').gpus(8).create(ctx.db, a);
    await makeNode('sum-b1').gpus(4).create(ctx.db, b);
    await makeNode('sum-c1').gpus(2).mig(3).create(ctx.db, c);
    const s = await capacitySummary(ctx.db, 'team');
    expect(s.pools.map((p) => p.name)).toEqual(['sum-a', 'sum-b', 'sum-c']);
    expect(s.byGpuModel).toEqual({
      H100: { total: 12, allocatable: 12, allocated: 0, reserved: 0, available: 12 },
      other: { total: 0, allocatable: 0, allocated: 0, reserved: 0, available: 0 },
    });
    expect(s.pools[2]!.capacity.map((r) => [r.resource, r.total])).toEqual([['gpu', 0], ['gpu.mig', 6]]);
  });

  it('counts whole GPUs booked per bucket, with free from the current allocatable', async () => {
    const poolId = await makePool('timeline').create(ctx.db);
    await makeNode('tl-n').gpus(4).create(ctx.db, poolId);
    const ledger = new Ledger(ctx.db);
    const now = ctx.clock.now();
    const from = now - (now % HOUR) + HOUR;
    await ledger.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 2 }], start: from + HOUR, duration: 2 * 3600 }), now);
    await ledger.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 1 }], start: from + 2 * HOUR, duration: 1800 }), now);
    const tl = await gpuTimeline(ctx.db, poolId, from, from + 4 * HOUR, HOUR);
    expect(tl.allocatable).toBe(4);
    expect(tl.buckets.map((b) => [b.booked, b.free])).toEqual([[0, 4], [2, 2], [3, 1], [0, 4]]);
    expect(tl.buckets[1]).toMatchObject({ start: from + HOUR, end: from + 2 * HOUR });
  });
});

describe('archived pools', () => {
  it('count their atoms under maintenance, and back when unarchived', async () => {
    const poolId = await makePool('arch').create(ctx.db);
    await makeNode('arch-n').gpus(4).create(ctx.db, poolId);
    expect(pick(await poolCapacity(ctx.db, poolId), 'gpu')).toMatchObject({ allocatable: 4, maintenance: 0 });
    await makePool('arch').archived().create(ctx.db);
    expect(pick(await poolCapacity(ctx.db, poolId), 'gpu')).toMatchObject({ total: 4, allocatable: 0, maintenance: 4, available: 0 });
    await makePool('arch').archived(false).create(ctx.db);
    expect(pick(await poolCapacity(ctx.db, poolId), 'gpu')).toMatchObject({ allocatable: 4, maintenance: 0 });
    expect((await ctx.db.query(ROLLUP_MISMATCHES)).rows).toEqual([]);
  });
});
