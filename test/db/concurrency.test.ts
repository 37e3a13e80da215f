// Many writers at once: the last free GPUs under contention, and the torture run of the capacity guide.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DbClock } from '../../src/db/clock.ts';
import { setDeviceHealth, setNodeState } from '../../src/db/inventory.ts';
import { Ledger, type ReserveOutcome } from '../../src/db/ledger.ts';
import { createPool, type Db } from '../../src/db/pool.ts';
import { makeNode, makePool, reservation } from '../support/builders.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { checkInvariants, CLEAN, rng } from '../support/invariants.ts';

let t: TestDatabase;
let clock: DbClock;
let replicas: Db[];
beforeAll(async () => {
  t = await createTestDatabase();
  // Time stands still in this file, so the incrementally kept rollup can be compared with a rebuild at one instant.
  await t.db.query('UPDATE clock SET frozen_at = now()');
  clock = await DbClock.create(t.db);
  // Three "controller replicas", each with its own connections and its own snapshot cache.
  replicas = [createPool(t.url, 16), createPool(t.url, 16), createPool(t.url, 16)];
});
afterAll(async () => {
  await Promise.all(replicas.map((p) => p.end()));
  await t.drop();
});

describe('contention', () => {
  it('64 concurrent requests for the last 8 free GPUs: exactly 8 succeed, 56 are told it does not fit', async () => {
    const poolId = await makePool('last8').create(t.db);
    await makeNode('last8-a').create(t.db, poolId);
    await makeNode('last8-b').create(t.db, poolId);
    const warm = new Ledger(t.db);
    expect((await warm.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 8 }] }), clock.now())).ok).toBe(true);
    const ledgers = replicas.map((db) => new Ledger(db));
    for (const l of ledgers) await l.preview(reservation(poolId), clock.now()); // every replica believes 8 are free
    const results = await Promise.all(
      Array.from({ length: 64 }, (_, i) => ledgers[i % ledgers.length]!.reserve(reservation(poolId), clock.now())),
    );
    const ok = results.filter((r): r is Extract<ReserveOutcome, { ok: true }> => r.ok);
    expect(ok).toHaveLength(8);
    const atoms = ok.flatMap((r) => r.reservation.allocations.flatMap((a) => a.atoms));
    expect(new Set(atoms).size).toBe(8);
    const refused = results.filter((r) => !r.ok);
    expect(refused).toHaveLength(56);
    for (const r of refused) expect(r).toMatchObject({ code: 'NO_CAPACITY', message: expect.stringMatching(/^0\/2 nodes fit/) });
    expect(results.reduce((n, r) => n + r.replans, 0)).toBeGreaterThan(0); // the races really happened
    expect(await checkInvariants(t.db)).toEqual(CLEAN);
  });
});

describe('torture', () => {
  const TENANTS = ['acme', 'beta', 'gamma'];
  let poolId: string;
  const nodes = Array.from({ length: 6 }, (_, i) => `tort-${i}`);
  const live: string[] = [];

  beforeAll(async () => {
    poolId = await makePool('torture').owner('acme').offer('beta', { gpu: 12 }).offer('gamma', { gpu: 6 })
      .overcommit({ vcpu: 2 }).create(t.db);
    for (const [i, id] of nodes.entries()) {
      await makeNode(id).domain(i < 3 ? 'zone-a' : 'zone-b').scalars({ vcpu: 32, memoryGiB: 256 }).create(t.db, poolId);
    }
  });

  async function randomOp(rand: () => number, ledger: Ledger): Promise<string> {
    const pick = <T,>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;
    const x = rand();
    if (x < 0.5) {
      const gang = rand() < 0.1;
      const r = await ledger.reserve(
        reservation(poolId, {
          tenantId: pick(TENANTS),
          devices: [{ class: 'gpu', count: 1 + Math.floor(rand() * (gang ? 2 : 4)) }],
          duration: 600 + Math.floor(rand() * 7200),
          ...(rand() < 0.3 ? { start: clock.now() + Math.floor(rand() * 4 * 3_600_000) } : {}),
          ...(rand() < 0.4 ? { resources: { vcpu: 1 + Math.floor(rand() * 16) } } : {}),
          ...(gang ? { gang: { size: 2 } } : {}),
        }),
        clock.now(),
      );
      if (r.ok) live.push(r.reservation.id);
      return r.ok ? 'reserved' : r.code;
    }
    if (x < 0.75) {
      const id = live.splice(Math.floor(rand() * live.length), 1)[0];
      if (!id) return 'nothing-to-release';
      await ledger.release(id);
      return 'released';
    }
    const node = pick(nodes);
    if (x < 0.85) await setNodeState(ledger.db, node, { cordoned: rand() < 0.3 });
    else if (x < 0.93) await setNodeState(ledger.db, node, { noscheduleReason: rand() < 0.3 ? 'NoSchedule taint' : null });
    else await setDeviceHealth(ledger.db, `GPU-${node}-0${Math.floor(rand() * 8)}`, rand() < 0.7);
    return 'node-change';
  }

  function tally(outcomes: string[]): Record<string, number> {
    const counts: Record<string, number> = {};
    for (const o of outcomes) counts[o] = (counts[o] ?? 0) + 1;
    return counts;
  }

  it('1,000 interleaved operations keep every invariant', async () => {
    const rand = rng(20261129);
    const ledgers = replicas.map((db) => new Ledger(db));
    const outcomes: string[] = [];
    for (let i = 0; i < 1000; i++) outcomes.push(await randomOp(rand, ledgers[Math.floor(rand() * ledgers.length)]!));
    const counts = tally(outcomes);
    expect(Object.keys(counts).sort()).toEqual(
      expect.arrayContaining(['reserved', 'released', 'node-change', 'NO_CAPACITY']),
    );
    for (const k of Object.keys(counts)) expect(['reserved', 'released', 'node-change', 'nothing-to-release', 'NO_CAPACITY', 'QUOTA_EXCEEDED']).toContain(k);
    expect(await checkInvariants(t.db)).toEqual(CLEAN);
  });

  it('1,000 concurrent operations from three replicas keep every invariant, and no lost race reaches a caller', async () => {
    // A request that loses a race replans; after maxReplans (16 by default) it answers CONTENDED for its caller to retry.
    // 24 streams on 2 cores under CI load once lost 16 races in a row (a CONTENDED in a green-elsewhere run), so the
    // bound here is 64: what this test shows is that lost races are replanned, not surfaced, whatever the load.
    const ledgers = replicas.map((db) => new Ledger(db, { maxReplans: 64 }));
    const outcomes: string[] = [];
    let next = 0;
    // 24 workers, each a stream of random operations, 1,000 in all.
    await Promise.all(
      Array.from({ length: 24 }, async (_, w) => {
        const rand = rng(7000 + w);
        while (next < 1000) {
          next++;
          outcomes.push(await randomOp(rand, ledgers[w % ledgers.length]!));
        }
      }),
    );
    expect(outcomes).toHaveLength(1000);
    const counts = tally(outcomes);
    for (const k of Object.keys(counts)) expect(['reserved', 'released', 'node-change', 'nothing-to-release', 'NO_CAPACITY', 'QUOTA_EXCEEDED']).toContain(k);
    expect(counts.reserved).toBeGreaterThan(50);
    expect(await checkInvariants(t.db)).toEqual(CLEAN);
  });
});
