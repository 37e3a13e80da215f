// A node's served reservations (what the agent registers as device-plugin endpoints): a reservation released, or
// whose window ended, while a pod of it is still assigned on the node stays served there until that pod is gone. The
// kubelet may admit such a pod late (a stalled API server, a slow watch): it then gets its atoms, which stay its own
// until it is gone (bc_atoms_held), and is stopped; with the endpoint gone, the kubelet failed it at admission (the
// soak's UnexpectedAdmissionError on a reservation's socket closed under an Allocate).
import { beforeAll, describe, expect, it } from 'vitest';
import { activeReservationsOnNode, DRAINING_SERVE_MS } from '../../src/db/reads.ts';
import { Ledger } from '../../src/db/ledger.ts';
import { makeNode, makePool, reservation } from '../support/builders.ts';
import { useTestDatabase } from '../support/db.ts';

const ctx = useTestDatabase();
const NODE = 'drain-n1';

describe('served reservations: a released one stays served while a pod of it remains on the node', () => {
  let ledger: Ledger;
  let poolId: string;

  beforeAll(async () => {
    poolId = await makePool('drain').owner('acme').create(ctx.db);
    await makeNode(NODE).gpus(2).create(ctx.db, poolId);
    ledger = new Ledger(ctx.db);
  });

  const book = async () => {
    const r = await ledger.reserve(reservation(poolId, { tenantId: 'acme', devices: [{ class: 'gpu', count: 1 }] }), ctx.clock.now());
    if (!r.ok) throw new Error(r.message);
    return r.reservation;
  };
  const served = async () => activeReservationsOnNode(ctx.db, NODE, ctx.clock.now());

  it('released with a pod assigned: served, its end a lease ahead of now; the pod gone: not served', async () => {
    const r = await book();
    const assigned = await ledger.assignPod({ podUid: 'drain-pod-1', reservationId: r.id, tenantId: 'acme', nodeId: NODE, namespace: 'ns', podName: 'p1', count: 1 });
    expect(assigned.ok).toBe(true);
    expect((await served()).map((x) => x.reservationId)).toEqual([r.id]);
    expect(await ledger.release(r.id)).toBe(true);
    const now = ctx.clock.now();
    const after = await served();
    expect(after.map((x) => x.reservationId)).toEqual([r.id]);
    expect(after[0]!.atoms).toEqual([...r.allocations[0]!.atoms]);
    expect(after[0]!.end).toBeGreaterThanOrEqual(now + DRAINING_SERVE_MS - 1000);
    await ledger.releasePod('drain-pod-1');
    expect(await served()).toEqual([]);
  });

  it('released with no pod of it: not served', async () => {
    const r = await book();
    expect(await ledger.release(r.id)).toBe(true);
    expect(await served()).toEqual([]);
  });
});
