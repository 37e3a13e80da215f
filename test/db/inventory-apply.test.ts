// applyInventory's edge cases on a real ledger: a device has one owner node (a second node's report of it is refused,
// not moved, until the owner drops it or is gone), and a busy layout change on one GPU holds back that GPU alone.
import { describe, expect, it } from 'vitest';
import { applyInventory, setNodeState, upsertNode } from '../../src/db/inventory.ts';
import { Ledger } from '../../src/db/ledger.ts';
import { makeNode, makePool, reservation } from '../support/builders.ts';
import { useTestDatabase } from '../support/db.ts';

const t = useTestDatabase();

interface Row {
  id: string;
  node_id: string;
  present: boolean;
  bookable: boolean;
  healthy: boolean;
}

async function rows(where: string, params: unknown[]): Promise<Row[]> {
  const { rows } = await t.db.query<Row>(`SELECT id, node_id, present, bookable, healthy FROM devices WHERE ${where} ORDER BY id`, params);
  return rows;
}

const bookingsOf = async (device: string) =>
  (await t.db.query(`SELECT allocation_id, during::text FROM device_bookings WHERE device_id = $1 ORDER BY id`, [device])).rows;

describe('one owner per device', () => {
  it("node A's report of node B's booked GPU is refused: B's row, booking and health unchanged; once B drops it, A takes it", async () => {
    const poolId = await makePool('own').create(t.db);
    const b = makeNode('own-b').gpus(1);
    await b.create(t.db, poolId);
    const x = b.gpuUuid(0);
    const ledger = new Ledger(t.db);
    const r = await ledger.reserve(reservation(poolId), t.clock.now());
    if (!r.ok) throw new Error(r.message);
    expect(r.reservation.allocations[0]!.atoms).toEqual([x]);
    const before = { row: await rows('id = $1', [x]), bookings: await bookingsOf(x), view: await ledger.get(r.reservation.id) };

    // A lists X (unhealthy, even partitioned) next to its own GPU Y.
    await upsertNode(t.db, { id: 'own-a', poolId });
    const y = 'GPU-own-a-00';
    const result = await applyInventory(t.db, 'own-a', {
      gpus: [{ uuid: x, healthy: false, mig: [{ gi: 1, ci: 0 }] }, { uuid: y }],
    });
    expect(result).toEqual({ layoutChanged: [], layoutPending: [], refused: [{ gpu: x, owner: 'own-b' }] });
    expect(await rows('id = $1', [x])).toEqual(before.row);
    expect(before.row).toEqual([{ id: x, node_id: 'own-b', present: true, bookable: true, healthy: true }]);
    expect(await rows('parent_id = $1', [x])).toEqual([]); // no MIG child of X anywhere
    expect(await bookingsOf(x)).toEqual(before.bookings);
    expect(await ledger.get(r.reservation.id)).toEqual(before.view);
    // The rest of A's report is in the ledger.
    expect(await rows("node_id = 'own-a'", [])).toEqual([{ id: y, node_id: 'own-a', present: true, bookable: true, healthy: true }]);

    // B's report no longer lists X: the next report of A takes it (B's booking stays, as history and for repair).
    await applyInventory(t.db, 'own-b', { gpus: [] });
    expect(await applyInventory(t.db, 'own-a', { gpus: [{ uuid: x }, { uuid: y }] })).toEqual({ layoutChanged: [], layoutPending: [], refused: [] });
    expect(await rows('id = $1', [x])).toEqual([{ id: x, node_id: 'own-a', present: true, bookable: true, healthy: true }]);
  });

  it("a GPU of a node that is gone (out of every pool and unreachable) may be taken, with its children; an unreachable node's may not", async () => {
    const poolId = await makePool('gone').sharing('mig').create(t.db);
    const c = makeNode('gone-c').gpus(2).mig(2);
    await c.create(t.db, poolId);
    const [z, w] = [c.gpuUuid(0), c.gpuUuid(1)];
    await upsertNode(t.db, { id: 'gone-a', poolId });

    // Only unreachable (NotReady), still in its pool: C owns its GPUs.
    await setNodeState(t.db, 'gone-c', { connectivity: 'unreachable' });
    expect((await applyInventory(t.db, 'gone-a', { gpus: [{ uuid: z }] })).refused).toEqual([{ gpu: z, owner: 'gone-c' }]);

    // The Node deleted (what nodeGone writes): A takes Z, with one MIG instance of its own; C's old children of Z are
    // no longer present. C's other GPU is not A's business.
    await upsertNode(t.db, { id: 'gone-c', poolId: null });
    expect(await applyInventory(t.db, 'gone-a', { gpus: [{ uuid: z, mig: [{ gi: 1, ci: 0 }] }] })).toEqual({ layoutChanged: [], layoutPending: [], refused: [] });
    expect((await rows('id = $1 OR parent_id = $1', [z])).map((d) => [d.id, d.node_id, d.present])).toEqual([
      [z, 'gone-a', true],
      [`${z}/gi1/ci0`, 'gone-a', true],
      [`${z}/gi2/ci0`, 'gone-c', false],
    ]);
    expect((await rows('id = $1', [w]))[0]).toMatchObject({ node_id: 'gone-c', present: true });
  });
});

describe('a busy layout change holds back its GPU alone', () => {
  it("X's atom booked, X's layout changed and Y's health flipped: Y's health reaches the ledger, X keeps its layout until its booking ends", async () => {
    const poolId = await makePool('busy').sharing('mig').create(t.db);
    const node = makeNode('busy-n').gpus(2).mig(2);
    await node.create(t.db, poolId);
    const ledger = new Ledger(t.db);
    const r = await ledger.reserve(reservation(poolId, { devices: [{ class: 'gpu.mig', count: 1 }] }), t.clock.now());
    if (!r.ok) throw new Error(r.message);
    const x = r.reservation.allocations[0]!.atoms[0]!.split('/')[0]!;
    const y = [node.gpuUuid(0), node.gpuUuid(1)].find((g) => g !== x)!;
    const three = [1, 2, 3].map((gi) => ({ gi, ci: 0, profile: '1g.10gb', memoryGiB: 10 }));
    const two = three.slice(0, 2);

    // X: three instances instead of two, and unhealthy; Y: unhealthy, same layout.
    const result = await applyInventory(t.db, 'busy-n', { gpus: [{ uuid: x, healthy: false, mig: three }, { uuid: y, healthy: false, mig: two }] });
    expect(result).toEqual({ layoutChanged: [], layoutPending: [x], refused: [] });
    expect((await rows('id = $1 OR parent_id = $1', [y])).map((d) => [d.id, d.healthy])).toEqual([
      [y, false],
      [`${y}/gi1/ci0`, false],
      [`${y}/gi2/ci0`, false],
    ]);
    // X: the same rows (no gi3), no layout booking; its health follows the report.
    expect((await rows('id = $1 OR parent_id = $1', [x])).map((d) => [d.id, d.present, d.bookable, d.healthy])).toEqual([
      [x, true, false, false],
      [`${x}/gi1/ci0`, true, true, false],
      [`${x}/gi2/ci0`, true, true, false],
    ]);
    const layouts = async () => (await t.db.query(`SELECT count(*)::int AS n FROM allocations WHERE kind = 'layout' AND node_id = 'busy-n'`)).rows[0].n;
    expect(await layouts()).toBe(0);

    // The booking ends: the next report changes X's layout (a layout booking of every atom, old and new).
    expect(await ledger.release(r.reservation.id)).toBe(true);
    expect(await applyInventory(t.db, 'busy-n', { gpus: [{ uuid: x, mig: three }, { uuid: y, mig: two }] })).toEqual({
      layoutChanged: [x],
      layoutPending: [],
      refused: [],
    });
    expect((await rows('(id = $1 OR parent_id = $1) AND present', [x])).map((d) => [d.id, d.healthy])).toEqual([
      [x, true],
      [`${x}/gi1/ci0`, true],
      [`${x}/gi2/ci0`, true],
      [`${x}/gi3/ci0`, true],
    ]);
    expect(await layouts()).toBe(1);
  });
});
