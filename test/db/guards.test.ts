// One test per guard of the capacity guide, each attacking it directly: behind the placer's back, or in the middle of
// a placement.
import { describe, expect, it } from 'vitest';
import { applyInventory, setNodeState, setQuota, upsertNode } from '../../src/db/inventory.ts';
import { Ledger } from '../../src/db/ledger.ts';
import { createPool } from '../../src/db/pool.ts';
import { makeNode, makePool, reservation } from '../support/builders.ts';
import { useTestDatabase } from '../support/db.ts';

const ctx = useTestDatabase();

async function sqlError(p: Promise<unknown>): Promise<{ code?: string; constraint?: string }> {
  try {
    await p;
  } catch (e) {
    return e as { code?: string; constraint?: string };
  }
  throw new Error('expected the statement to be refused');
}

/** Waits until a statement of another session waits on a lock (so the attack lands mid-placement). */
async function untilLockWait(pattern: string): Promise<void> {
  for (let i = 0; i < 200; i++) {
    const { rows } = await ctx.db.query(
      `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE $1`,
      [pattern],
    );
    if (rows[0].n > 0) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(`no session waited on a lock for ${pattern}`);
}

describe('guard 1: device-time exclusivity', () => {
  it('refuses an overlapping booking inserted behind the placer', async () => {
    const poolId = await makePool('g1').create(ctx.db);
    await makeNode('g1-n').gpus(1).create(ctx.db, poolId);
    const r = await new Ledger(ctx.db).reserve(reservation(poolId), ctx.clock.now());
    if (!r.ok) throw new Error(r.message);
    const atom = r.reservation.allocations[0]!.atoms[0]!;
    await ctx.db.query(`INSERT INTO allocations (id, kind, pod_uid, node_id, during) VALUES ('alloc_rogue', 'pod', 'rogue', 'g1-n', tstzrange(compute_now(), 'infinity'))`);
    const e = await sqlError(
      ctx.db.query(`INSERT INTO device_bookings (device_id, allocation_id, during, planned)
                  VALUES ($1, 'alloc_rogue', tstzrange(compute_now() + interval '30 minutes', compute_now() + interval '2 hours'),
                                             tstzrange(compute_now() + interval '30 minutes', compute_now() + interval '2 hours'))`, [atom]),
    );
    expect(e).toMatchObject({ code: '23P01', constraint: 'exclude$device_bookings$device_during' });
    // The same insert the placer uses skips the row instead of raising.
    const skipped = await ctx.db.query(
      `INSERT INTO device_bookings (device_id, allocation_id, during, planned)
       VALUES ($1, 'alloc_rogue', tstzrange(compute_now(), compute_now() + interval '1 hour'), tstzrange(compute_now(), compute_now() + interval '1 hour'))
       ON CONFLICT DO NOTHING`, [atom]);
    expect(skipped.rowCount).toBe(0);
    // Right after the booking ends, the atom is free: ranges are half-open.
    const after = await ctx.db.query(
      `INSERT INTO device_bookings (device_id, allocation_id, during, planned)
       SELECT $1, 'alloc_rogue', tstzrange(upper(during), upper(during) + interval '1 hour'), tstzrange(upper(during), upper(during) + interval '1 hour')
       FROM device_bookings WHERE device_id = $1 RETURNING id`, [atom]);
    expect(after.rowCount).toBe(1);
  });
});

describe('guard 2: the atom rule', () => {
  it('a layout change books every atom, parent included, so no MIG child can be booked in its window', async () => {
    const poolId = await makePool('g2').sharing('mig').create(ctx.db);
    const node = makeNode('g2-n').gpus(1).mig(2);
    await node.create(ctx.db, poolId);
    const gpu = node.gpuUuid(0);
    // The operator re-partitions the GPU: 2 instances become 3.
    const changed = await applyInventory(ctx.db, 'g2-n', {
      gpus: [{ uuid: gpu, model: 'H100', mig: [1, 2, 3].map((gi) => ({ gi, ci: 0, profile: '2g.20gb', memoryGiB: 20 })) }],
    });
    expect(changed).toEqual({ layoutChanged: [gpu], layoutPending: [], refused: [] });
    const { rows: held } = await ctx.db.query(
      `SELECT b.device_id FROM device_bookings b JOIN allocations a ON a.id = b.allocation_id
       WHERE a.kind = 'layout' AND b.during @> compute_now() ORDER BY 1`);
    expect(held.map((r) => r.device_id)).toEqual([gpu, `${gpu}/gi1/ci0`, `${gpu}/gi2/ci0`, `${gpu}/gi3/ci0`]);

    // The placer finds nothing; a child booked behind its back collides with the layout booking.
    const ledger = new Ledger(ctx.db);
    expect(await ledger.reserve(reservation(poolId, { devices: [{ class: 'gpu.mig', count: 1 }] }), ctx.clock.now())).toMatchObject({ code: 'NO_CAPACITY' });
    await ctx.db.query(`INSERT INTO allocations (id, kind, pod_uid, node_id, during) VALUES ('alloc_g2', 'pod', 'x', 'g2-n', tstzrange(compute_now(), 'infinity'))`);
    const child = await sqlError(ctx.db.query(
      `INSERT INTO device_bookings (device_id, allocation_id, during, planned)
       VALUES ($1, 'alloc_g2', tstzrange(compute_now(), compute_now() + interval '1 minute'), tstzrange(compute_now(), compute_now() + interval '1 minute'))`,
      [`${gpu}/gi3/ci0`]));
    expect(child.code).toBe('23P01');
    // A partitioned GPU's parent is not an atom: booking it later than the window is refused too.
    const parent = await sqlError(ctx.db.query(
      `INSERT INTO device_bookings (device_id, allocation_id, during, planned)
       VALUES ($1, 'alloc_g2', tstzrange(compute_now() + interval '1 day', compute_now() + interval '2 days'), tstzrange(compute_now() + interval '1 day', compute_now() + interval '2 days'))`,
      [gpu]));
    expect(parent).toMatchObject({ code: '23514', constraint: 'check$device_bookings$bookable' });
  });

  it('holds back a layout change while an atom of the GPU is booked in the window: the GPU keeps its layout', async () => {
    const poolId = await makePool('g2b').sharing('mig').create(ctx.db);
    const node = makeNode('g2b-n').gpus(1).mig(2);
    await node.create(ctx.db, poolId);
    const r = await new Ledger(ctx.db).reserve(reservation(poolId, { devices: [{ class: 'gpu.mig', count: 1 }] }), ctx.clock.now());
    expect(r.ok).toBe(true);
    expect(await applyInventory(ctx.db, 'g2b-n', { gpus: [{ uuid: node.gpuUuid(0) }] })).toEqual({ layoutChanged: [], layoutPending: [node.gpuUuid(0)], refused: [] });
    const { rows } = await ctx.db.query(`SELECT id, bookable, present FROM devices WHERE node_id = 'g2b-n' ORDER BY id`);
    expect(rows.map((d) => [d.bookable, d.present])).toEqual([[false, true], [true, true], [true, true]]);
    const { rows: layout } = await ctx.db.query(`SELECT count(*)::int AS n FROM allocations WHERE kind = 'layout' AND node_id = 'g2b-n'`);
    expect(layout[0].n).toBe(0);
  });
});

describe('guard 3: guarded scalar counters', () => {
  it('refuses an overdrawn counter behind the placer, and the placer never overdraws under concurrency', async () => {
    const poolId = await makePool('g3').overcommit({ vcpu: 1.5 }).create(ctx.db);
    await makeNode('g3-n').gpus(8).scalars({ vcpu: 10 }).create(ctx.db, poolId);
    const e = await sqlError(ctx.db.query(`UPDATE node_resources SET allocated = 16 WHERE node_id = 'g3-n' AND resource = 'vcpu'`));
    expect(e).toMatchObject({ code: '23514', constraint: 'check$node_resources$allocated' });
    // 8 requests of 4 vCPUs for floor(10 × 1.5) = 15: exactly 3 fit, whatever the interleaving.
    const ledgers = [new Ledger(ctx.db), new Ledger(ctx.db)];
    const results = await Promise.all(
      Array.from({ length: 8 }, (_, i) => ledgers[i % 2]!.reserve(reservation(poolId, { resources: { vcpu: 4 } }), ctx.clock.now())),
    );
    expect(results.filter((r) => r.ok)).toHaveLength(3);
    expect(results.filter((r) => !r.ok).map((r) => !r.ok && r.code)).toEqual(Array(5).fill('NO_CAPACITY'));
    const { rows } = await ctx.db.query(`SELECT allocated FROM node_resources WHERE node_id = 'g3-n'`);
    expect(rows[0].allocated).toBe(12);
  });
});

describe('guard 4: linearizable eligibility', () => {
  it('a node cordoned while a placement is in flight gets no booking', async () => {
    const poolId = await makePool('g4').create(ctx.db);
    await makeNode('g4-n').gpus(2).create(ctx.db, poolId);
    const ledger = new Ledger(ctx.db);
    await ledger.preview(reservation(poolId), ctx.clock.now()); // warm the snapshot: the node looks schedulable
    const admin = await ctx.db.connect();
    try {
      await admin.query('BEGIN');
      await admin.query(`UPDATE nodes SET cordoned = true WHERE id = 'g4-n'`);
      const inFlight = ledger.reserve(reservation(poolId), ctx.clock.now());
      await untilLockWait('SELECT bc_place%');
      await admin.query('COMMIT');
      expect(await inFlight).toMatchObject({ ok: false, code: 'NO_CAPACITY' });
    } finally {
      admin.release();
    }
    const { rows } = await ctx.db.query(`SELECT count(*)::int AS n FROM allocations WHERE node_id = 'g4-n'`);
    expect(rows[0].n).toBe(0);
  });

  it('an atom marked unhealthy while a placement is in flight is not booked', async () => {
    const poolId = await makePool('g4b').create(ctx.db);
    const node = makeNode('g4b-n').gpus(1);
    await node.create(ctx.db, poolId);
    const ledger = new Ledger(ctx.db);
    await ledger.preview(reservation(poolId), ctx.clock.now());
    const admin = await ctx.db.connect();
    try {
      await admin.query('BEGIN');
      await admin.query(`UPDATE devices SET healthy = false WHERE id = $1`, [node.gpuUuid(0)]);
      const inFlight = ledger.reserve(reservation(poolId), ctx.clock.now());
      await untilLockWait('SELECT bc_place%');
      await admin.query('COMMIT');
      expect(await inFlight).toMatchObject({ ok: false, code: 'NO_CAPACITY' });
    } finally {
      admin.release();
    }
  });

  it('a cordon that waits for an in-flight placement lands after it: the booking stands, the next one is refused', async () => {
    const poolId = await makePool('g4c').create(ctx.db);
    await makeNode('g4c-n').gpus(2).create(ctx.db, poolId);
    const ledger = new Ledger(ctx.db);
    expect((await ledger.reserve(reservation(poolId), ctx.clock.now())).ok).toBe(true);
    await setNodeState(ctx.db, 'g4c-n', { noscheduleReason: 'NoSchedule taint gpu-fault' });
    expect(await ledger.reserve(reservation(poolId), ctx.clock.now())).toMatchObject({ code: 'NO_CAPACITY' });
  });
});

describe('guard 5: quota', () => {
  it('refuses an overdrawn quota counter behind the placer, and 20 concurrent requests take exactly the limit', async () => {
    const poolId = await makePool('g5').owner('ops').offer('acme', { gpu: 5 }).create(ctx.db);
    await makeNode('g5-a').create(ctx.db, poolId);
    await makeNode('g5-b').create(ctx.db, poolId);
    const e = await sqlError(ctx.db.query(`UPDATE quotas SET used = 6 WHERE tenant_id = 'acme' AND pool_id = $1`, [poolId]));
    expect(e).toMatchObject({ code: '23514', constraint: 'check$quotas$used' });
    const pools = [createPool(ctx.url, 10), createPool(ctx.url, 10)];
    try {
      const ledgers = pools.map((p) => new Ledger(p));
      const results = await Promise.all(
        Array.from({ length: 20 }, (_, i) => ledgers[i % 2]!.reserve(reservation(poolId), ctx.clock.now())),
      );
      expect(results.filter((r) => r.ok)).toHaveLength(5);
      expect(results.filter((r) => !r.ok).map((r) => !r.ok && r.code)).toEqual(Array(15).fill('QUOTA_EXCEEDED'));
    } finally {
      await Promise.all(pools.map((p) => p.end()));
    }
    const { rows } = await ctx.db.query(`SELECT max, used FROM quotas WHERE tenant_id = 'acme' AND pool_id = $1`, [poolId]);
    expect(rows[0]).toEqual({ max: 5, used: 5 });
  });

  it('refuses a charge past max + grace that skipped the peak check (a bug in bc_place): the charging path cannot raise grace', async () => {
    const poolId = await makePool('g5-backstop').owner('ops').offer('acme', { gpu: 2 }).create(ctx.db);
    await makeNode('g5-backstop-n').gpus(4).create(ctx.db, poolId);
    const ledger = new Ledger(ctx.db);
    const r = await ledger.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 2 }] }), ctx.clock.now());
    if (!r.ok) throw new Error(r.message);
    const key = [poolId, r.reservation.allocations[0]!.id];
    const quota = async () =>
      (await ctx.db.query(`SELECT max, used, grace FROM quotas WHERE tenant_id = 'acme' AND pool_id = $1 AND resource = 'gpu'`, [poolId])).rows[0];

    // What bc_place writes after its peak check, without the check: one GPU more than the limit, from now, then the
    // counters' refresh, as bc_place runs it.
    const overCharge = async () => {
      const c = await ctx.db.connect();
      try {
        await c.query('BEGIN');
        await c.query(
          `INSERT INTO quota_charges (tenant_id, pool_id, resource, allocation_id, amount, during)
           VALUES ('acme', $1, 'gpu', $2, 1, tstzrange(compute_now(), compute_now() + interval '1 hour'))`,
          key,
        );
        return await sqlError(c.query(`SELECT bc_refresh_quota('acme', $1, 'gpu')`, [poolId]));
      } finally {
        await c.query('ROLLBACK');
        c.release();
      }
    };
    expect(await overCharge()).toMatchObject({ code: '23514', constraint: 'check$quotas$used' });
    // Raising the ceiling by hand is refused too, alone or with the counter.
    for (const set of ['grace = grace + 1', 'used = used + 1, grace = grace + 1']) {
      const e = await sqlError(ctx.db.query(`UPDATE quotas SET ${set} WHERE tenant_id = 'acme' AND pool_id = $1 AND resource = 'gpu'`, [poolId]));
      expect(e, set).toMatchObject({ code: '23514', constraint: 'trigger$quotas$backstop' });
    }
    expect(await quota()).toEqual({ max: 2, used: 2, grace: 0 });

    // The admin path may raise it: a limit lowered below use keeps the live booking (grace 1) and blocks new ones.
    await setQuota(ctx.db, 'acme', poolId, 'gpu', 1);
    expect(await quota()).toEqual({ max: 1, used: 2, grace: 1 });
    expect(await ledger.reserve(reservation(poolId), ctx.clock.now())).toMatchObject({ ok: false, code: 'QUOTA_EXCEEDED' });
    expect(await overCharge()).toMatchObject({ code: '23514', constraint: 'check$quotas$used' });
    // A writer cannot fake a limit change either: grace is set from the charges at a change of max, whatever it wrote.
    await ctx.db.query(`UPDATE quotas SET max = 0, grace = 100 WHERE tenant_id = 'acme' AND pool_id = $1 AND resource = 'gpu'`, [poolId]);
    expect(await quota()).toEqual({ max: 0, used: 2, grace: 2 });
  });
});

it('a node that is not converged (no inventory yet) is not schedulable', async () => {
  const poolId = await makePool('unconverged').create(ctx.db);
  await upsertNode(ctx.db, { id: 'fresh-node', poolId });
  const { rows } = await ctx.db.query(`SELECT schedulable FROM nodes WHERE id = 'fresh-node'`);
  expect(rows[0].schedulable).toBe(false);
});

describe('leader fencing', () => {
  it("a deposed leader's booking fails, and a new leader's goes through", async () => {
    const { Ledger: L, FencedError } = await import('../../src/db/ledger.ts');
    const poolId = await makePool('fenced').create(ctx.db);
    await makeNode('fenced-n').gpus(2).create(ctx.db, poolId);
    const take = async (holder: string) => {
      const { rows } = await ctx.db.query(`SELECT bc_take_fence('controller', $1) AS epoch`, [holder]);
      return Number(rows[0].epoch);
    };
    const oldEpoch = await take('replica-a');
    const oldLeader = new L(ctx.db, { fence: () => ({ name: 'controller', epoch: oldEpoch }) });
    expect((await oldLeader.reserve(reservation(poolId), ctx.clock.now())).ok).toBe(true);
    const newEpoch = await take('replica-b');
    await expect(oldLeader.reserve(reservation(poolId), ctx.clock.now())).rejects.toBeInstanceOf(FencedError);
    const newLeader = new L(ctx.db, { fence: () => ({ name: 'controller', epoch: newEpoch }) });
    expect((await newLeader.reserve(reservation(poolId), ctx.clock.now())).ok).toBe(true);
    const { rows } = await ctx.db.query(`SELECT count(*)::int AS n FROM allocations WHERE node_id = 'fenced-n'`);
    expect(rows[0].n).toBe(2);
  });

  it('the quota counters count as used a charge committed by a transaction that began after the refreshing one', async () => {
    // Placements written at once wait for one another on the quota row; the last to refresh the counters may have begun
    // before the others' charges started. Split at the transaction's start, those were "reserved" until the next rebuild.
    const poolId = await makePool('g5-refresh').owner('ops').offer('acme', { gpu: 5 }).create(ctx.db);
    await makeNode('g5-refresh-a').create(ctx.db, poolId);
    const early = await ctx.db.connect();
    try {
      await early.query('BEGIN');
      await early.query('SELECT compute_now()'); // this transaction's now() is fixed here
      await new Promise((r) => setTimeout(r, 50));
      const r = await new Ledger(ctx.db).reserve(reservation(poolId), ctx.clock.now());
      expect(r.ok).toBe(true);
      await early.query(`SELECT bc_refresh_quota('acme', $1, 'gpu')`, [poolId]);
      await early.query('COMMIT');
    } finally {
      early.release();
    }
    const { rows } = await ctx.db.query(`SELECT used, reserved FROM quotas WHERE tenant_id = 'acme' AND pool_id = $1 AND resource = 'gpu'`, [poolId]);
    expect(rows[0]).toEqual({ used: 1, reserved: 0 });
  });
});
