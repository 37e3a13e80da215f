import pg from 'pg';
import { describe, expect, it, onTestFinished, vi } from 'vitest';
import { setQuota } from '../../src/db/inventory.ts';
import { Ledger } from '../../src/db/ledger.ts';
import { makeNode, makePool, reservation } from '../support/builders.ts';
import { useTestDatabase } from '../support/db.ts';

const ctx = useTestDatabase();

/** A transaction that holds the pool's row, so that every batch placing in it waits at its first lock. */
async function lockPool(poolId: string): Promise<pg.Client> {
  const blocker = new pg.Client({ connectionString: ctx.url });
  await blocker.connect();
  onTestFinished(() => blocker.end().catch(() => undefined)); // a failed wait must not leave the pool row locked
  await blocker.query('BEGIN');
  await blocker.query('SELECT 1 FROM pools WHERE id = $1 FOR UPDATE', [poolId]);
  return blocker;
}

async function batchesWaitingOnLocks(): Promise<number> {
  const { rows } = await ctx.db.query(
    `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%bc_place_batch%'`,
  );
  return rows[0].n;
}

describe('group commit', () => {
  it('bc_place_batch keeps generic plans for what it runs (migration 0017; a CREATE OR REPLACE would drop the setting)', async () => {
    const { rows } = await ctx.db.query<{ config: string[] | null }>(
      `SELECT proconfig AS config FROM pg_proc WHERE proname = 'bc_place_batch'`,
    );
    expect(rows).toEqual([{ config: ['plan_cache_mode=force_generic_plan'] }]);
  });

  it('one batch: a quota refusal, a lost race and a raised error each reach only their own caller', async () => {
    const poolId = await makePool('batch').offer('beta').create(ctx.db);
    for (const n of ['batch-n0', 'batch-n1']) await makeNode(n).create(ctx.db, poolId);
    await setQuota(ctx.db, 'acme', poolId, 'gpu', 4);
    // A second pool of one node with 2 GPUs, where another ledger takes the atom this ledger's snapshot thinks free.
    const racePool = await makePool('batch-race').offer('beta').create(ctx.db);
    await makeNode('batch-race-n0').gpus(2).create(ctx.db, racePool);

    const ledger = new Ledger(ctx.db, { groupCommit: { maxInFlight: 1 } }); // one batch: the five behind the first
    await ledger.preview(reservation(racePool), ctx.clock.now()); // caches the race pool's snapshot
    const other = await new Ledger(ctx.db).reserve(reservation(racePool, { tenantId: 'beta' }), ctx.clock.now());
    if (!other.ok) throw new Error(other.message);

    // Holds the first batch at its first foreign-key check on the pool row, so the next requests queue behind it.
    const blocker = await lockPool(poolId);
    const now = ctx.clock.now();
    const first = ledger.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 1 }] }), now);
    await vi.waitFor(async () => expect(await batchesWaitingOnLocks()).toBe(1));

    const fits = ledger.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 2 }] }), now);
    const overQuota = ledger.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 4 }] }), now);
    const pod = (nodeId: string) =>
      ledger.bookPod({ tenantId: 'beta', poolId, podUid: 'batch-pod', nodeId, devices: [{ class: 'gpu', count: 1 }], durationSeconds: 600 }, now);
    // One pod booked on two nodes at once: the second booking breaks the one-live-booking-per-pod index and raises.
    const pods = [pod('batch-n0'), pod('batch-n1')].map((p) => p.then((v) => ({ v }), (e: unknown) => ({ e })));
    const raced = ledger.reserve(reservation(racePool, { tenantId: 'beta' }), now);
    await vi.waitFor(() => expect(ledger.waitingPlacements).toBe(5));
    await blocker.query('COMMIT');

    expect((await first).ok).toBe(true);
    const a = await fits;
    if (!a.ok) throw new Error(a.message);
    expect(a.reservation.allocations[0]!.atoms).toHaveLength(2);
    expect(await ledger.get(a.reservation.id)).toMatchObject({ state: 'confirmed', allocations: a.reservation.allocations });
    expect(await overQuota).toMatchObject({ ok: false, code: 'QUOTA_EXCEEDED' });

    const podOutcomes = await Promise.all(pods);
    const booked = podOutcomes.filter((p) => 'v' in p);
    const raised = podOutcomes.filter((p) => 'e' in p);
    expect(booked).toHaveLength(1);
    expect(raised).toHaveLength(1);
    expect(raised[0]).toMatchObject({ e: { code: '23505', constraint: 'unique$allocations$live_pod' } });
    const held = await ledger.podBooking('batch-pod');
    expect(held).toMatchObject({ nodeId: (booked[0] as { v: { nodeId: string } }).v.nodeId });

    const r = await raced;
    if (!r.ok) throw new Error(r.message);
    expect(r.replans).toBe(1);
    expect(r.reservation.allocations[0]!.atoms).not.toEqual(other.reservation.allocations[0]!.atoms);

    // What committed: the two reservations that fit, within the quota, and nothing of the refused one.
    const { rows } = await ctx.db.query(
      `SELECT coalesce(sum(amount), 0)::int AS charged FROM quota_charges WHERE tenant_id = 'acme' AND pool_id = $1`,
      [poolId],
    );
    expect(rows[0].charged).toBe(3);
  });

  it('by default three batches at once, the waiting shared out over them; items in node order, each outcome to its caller', async () => {
    const poolId = await makePool('inflight').offer('beta').create(ctx.db);
    const nodes = ['inflight-n0', 'inflight-n1', 'inflight-n2'];
    for (const n of nodes) await makeNode(n).gpus(2).create(ctx.db, poolId);
    const ledger = new Ledger(ctx.db);
    // Another pod's admission is in flight on n1: a booking there that takes the admission raises inside its item.
    await ledger.takeAdmission({ nodeId: nodes[1]!, podUid: 'inflight-other', namespace: 'ns', podName: 'other', ttlSeconds: 60, atoms: [] });
    const blocker = await lockPool(poolId);
    const now = ctx.clock.now();
    // Six pods in one turn: three batches of two, (n2, n1), (n0, n2), (n1, n0), each written in node order.
    const order = [2, 1, 0, 2, 1, 0];
    const pods = order.map((n, i) =>
      ledger.bookPod(
        {
          tenantId: 'beta',
          poolId,
          podUid: `inflight-pod-${i}`,
          nodeId: nodes[n]!,
          devices: [{ class: 'gpu', count: 1 }],
          durationSeconds: 600,
          holdsNothing: true, // straight to the placement: all six are submitted in the same turn
          ...(n === 1 ? { admission: { namespace: 'ns', podName: `pod-${i}`, ttlSeconds: 60 } } : {}),
        },
        now,
      ),
    );
    await vi.waitFor(async () => expect(await batchesWaitingOnLocks()).toBe(3));
    expect(ledger.waitingPlacements).toBe(0);
    await blocker.query('COMMIT');
    const outcomes = await Promise.all(pods);
    outcomes.forEach((o, i) =>
      expect(o, `pod ${i} on ${nodes[order[i]!]}`).toMatchObject(order[i] === 1 ? { ok: false, code: 'ADMISSION_BUSY' } : { ok: true, nodeId: nodes[order[i]!] }),
    );
    for (const [i, n] of order.entries()) {
      expect(await ledger.podBooking(`inflight-pod-${i}`)).toEqual(n === 1 ? undefined : expect.objectContaining({ nodeId: nodes[n] }));
    }
  });
});
