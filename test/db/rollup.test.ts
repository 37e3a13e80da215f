import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { capacitySummary, foldRollup, gpuTimeline, poolCapacity, rebuildRollup } from '../../src/db/capacity.ts';
import { advanceClock, DbClock } from '../../src/db/clock.ts';
import { setDeviceHealth, setNodeState, upsertNode } from '../../src/db/inventory.ts';
import { Ledger } from '../../src/db/ledger.ts';
import { makeNode, makePool, reservation } from '../support/builders.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { ROLLUP_MISMATCHES } from '../support/invariants.ts';

let t: TestDatabase;
let clock: DbClock;
beforeAll(async () => {
  t = await createTestDatabase();
  clock = await DbClock.create(t.db);
});
afterAll(async () => t.drop());

const HOUR = 3_600_000;
const pick = (rows: Awaited<ReturnType<typeof poolCapacity>>, resource: string) => {
  const r = rows.find((x) => x.resource === resource);
  if (!r) throw new Error(`no ${resource} row`);
  const { updatedAt: _u, poolId: _p, ...numbers } = r;
  return numbers;
};

describe('capacity math', () => {
  it('puts every atom in allocatable or one bucket, and counts bookings now and later', async () => {
    const poolId = await makePool('math').overcommit({ vcpu: 2 }).create(t.db);
    for (const id of ['m-ok', 'm-cordon', 'm-gone', 'm-taint', 'm-maint']) {
      await makeNode(id).gpus(4).scalars({ vcpu: 16 }).create(t.db, poolId);
    }
    await upsertNode(t.db, { id: 'm-new', poolId }); // no inventory yet: provisioning, but it has no atoms
    await makeNode('m-foreign').gpus(4).create(t.db, poolId);
    await upsertNode(t.db, { id: 'm-foreign', poolId, trust: 'tenant-controlled' }); // excluded: not counted at all
    await setNodeState(t.db, 'm-cordon', { cordoned: true });
    await setNodeState(t.db, 'm-gone', { connectivity: 'unreachable' });
    await setNodeState(t.db, 'm-taint', { noscheduleReason: 'NoSchedule taint nvidia.com/xid' });
    await setNodeState(t.db, 'm-maint', { maintenance: true, provisionState: 'deprovisioning' });
    await setDeviceHealth(t.db, 'GPU-m-ok-03', false);
    const ledger = new Ledger(t.db);
    expect((await ledger.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 2 }], resources: { vcpu: 20 } }), clock.now())).ok).toBe(true);
    expect((await ledger.reserve(reservation(poolId, { start: clock.now() + HOUR }), clock.now())).ok).toBe(true);

    const rows = await poolCapacity(t.db, poolId);
    expect(rows.map((r) => r.resource)).toEqual(['gpu', 'vcpu']);
    expect(pick(rows, 'gpu')).toEqual({
      resource: 'gpu', total: 20, allocatable: 3, allocated: 2, reserved: 1, available: 0,
      provisioning: 4, unhealthy: 5, maintenance: 4, unreachable: 4,
    });
    expect(pick(rows, 'vcpu')).toEqual({
      resource: 'vcpu', total: 160, allocatable: 32, allocated: 20, reserved: 0, available: 12,
      provisioning: 32, unhealthy: 32, maintenance: 32, unreachable: 32,
    });
    expect((await t.db.query(ROLLUP_MISMATCHES)).rows).toEqual([]);
    // Folding and rebuilding change nothing that readers see.
    await foldRollup(t.db);
    expect(pick(await poolCapacity(t.db, poolId), 'gpu')).toEqual(pick(rows, 'gpu'));
    await rebuildRollup(t.db);
    expect(pick(await poolCapacity(t.db, poolId), 'gpu')).toEqual(pick(rows, 'gpu'));
  });

  it('a booking that starts later moves from reserved to allocated on the rebuild after its start', async () => {
    const poolId = await makePool('later').create(t.db);
    await makeNode('later-n').gpus(4).create(t.db, poolId);
    const ledger = new Ledger(t.db);
    const r = await ledger.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 3 }], start: clock.now() + HOUR }), clock.now());
    expect(r.ok).toBe(true);
    expect(pick(await poolCapacity(t.db, poolId), 'gpu')).toMatchObject({ allocated: 0, reserved: 3, available: 1 });
    await advanceClock(t.db, HOUR + 1000);
    // Between rebuilds the rollup lags: still reserved.
    expect(pick(await poolCapacity(t.db, poolId), 'gpu')).toMatchObject({ allocated: 0, reserved: 3 });
    await rebuildRollup(t.db);
    expect(pick(await poolCapacity(t.db, poolId), 'gpu')).toMatchObject({ allocated: 3, reserved: 0, available: 1 });
    await advanceClock(t.db, 2 * HOUR);
    await rebuildRollup(t.db);
    expect(pick(await poolCapacity(t.db, poolId), 'gpu')).toMatchObject({ allocated: 0, reserved: 0, available: 4 });
    await clock.sync();
  });
});

describe('summary and timeline', () => {
  it('lists owned and offered pools, hides archived pools from non-owners, and sums only gpu rows per model', async () => {
    const a = await makePool('sum-a').owner('team').model('H100').create(t.db);
    const b = await makePool('sum-b').owner('ops').model('H100').offer('team').create(t.db);
    const c = await makePool('sum-c').owner('ops').model(null).offer('team').sharing('mig').create(t.db);
    await makePool('sum-d').owner('ops').offer('team').archived().create(t.db);
    await makePool('sum-e').owner('ops').create(t.db);
    await makeNode('sum-a1').gpus(8).create(t.db, a);
    await makeNode('sum-b1').gpus(4).create(t.db, b);
    await makeNode('sum-c1').gpus(2).mig(3).create(t.db, c);
    const s = await capacitySummary(t.db, 'team');
    expect(s.pools.map((p) => p.name)).toEqual(['sum-a', 'sum-b', 'sum-c']);
    expect(s.byGpuModel).toEqual({
      H100: { total: 12, allocatable: 12, allocated: 0, reserved: 0, available: 12 },
      other: { total: 0, allocatable: 0, allocated: 0, reserved: 0, available: 0 },
    });
    expect(s.pools[2]!.capacity.map((r) => [r.resource, r.total])).toEqual([['gpu', 0], ['gpu.mig', 6]]);
  });

  it('counts whole GPUs booked per bucket, with free from the current allocatable', async () => {
    const poolId = await makePool('timeline').create(t.db);
    await makeNode('tl-n').gpus(4).create(t.db, poolId);
    const ledger = new Ledger(t.db);
    const now = clock.now();
    const from = now - (now % HOUR) + HOUR;
    await ledger.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 2 }], start: from + HOUR, duration: 2 * 3600 }), now);
    await ledger.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 1 }], start: from + 2 * HOUR, duration: 1800 }), now);
    const tl = await gpuTimeline(t.db, poolId, from, from + 4 * HOUR, HOUR);
    expect(tl.allocatable).toBe(4);
    expect(tl.buckets.map((b) => [b.booked, b.free])).toEqual([[0, 4], [2, 2], [3, 1], [0, 4]]);
    expect(tl.buckets[1]).toMatchObject({ start: from + HOUR, end: from + 2 * HOUR });
  });
});
