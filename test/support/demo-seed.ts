// The demo's data (src/demo/demo.ts) in a test database, without Kubernetes: the Pools of examples/pools.yaml through
// the controller's own conversion (toPoolSpec), the demo's nodes (one "local" node and simulated ones, 8 GPUs each, as
// simulatedSpec reports them), the Reservations of examples/reservations.yaml (train-now from now for 2 h on
// demo-local, train-tomorrow tomorrow 09:00 UTC for 8 h on demo-sim) booked through toCreateInput as the reconciler
// books them, and the on-demand pod "notebook" (1 GPU). Besides the demo: the pools' owner (tenant platform) books 2
// GPUs on demo-local, so that team-a sees another tenant's booking.
import { simulatedSpec } from '../../src/agent/discovery.ts';
import { toPoolSpec } from '../../src/controller/pool/reconciler.ts';
import { toCreateInput } from '../../src/controller/reservation/reconciler.ts';
import { DEMO_NAMESPACE, DEMO_TENANT, exampleObjects } from '../../src/demo/demo.ts';
import { applyInventory, upsertNode, upsertPool } from '../../src/db/inventory.ts';
import { Ledger } from '../../src/db/ledger.ts';
import type { Db } from '../../src/db/pool.ts';
import type { PoolCR, Reservation } from '../../src/kube/types.ts';

export const DEMO_LOCAL_NODE = 'demo-local-node';
export const DEMO_SIM_NODES = ['demo-gpu-1', 'demo-gpu-2', 'demo-gpu-3'];
export const OTHER_TENANT = 'platform';

export interface DemoSeed {
  poolIds: Record<string, string>;
  /** The Reservation objects as the controller's informer would hold them (uid, name, namespace, conditions). */
  reservations: Reservation[];
  /** Ledger ids by Reservation name. */
  booked: Record<string, { id: string; start: number; end: number; nodes: Record<string, string[]> }>;
  podNode: string;
  podAtoms: string[];
  /** The other tenant's booking on demo-local. */
  other: { id: string; nodeId: string; start: number; end: number };
}

/** Tomorrow 09:00 UTC, as the demo fills ${TOMORROW_0900_UTC}. */
export const tomorrow0900 = (now: number) => `${new Date(now + 86_400_000).toISOString().slice(0, 10)}T09:00:00Z`;

export async function seedDemo(db: Db, now: number, gpus = 8): Promise<DemoSeed> {
  const poolIds: Record<string, string> = {};
  for (const p of exampleObjects('pools.yaml') as unknown as PoolCR[]) poolIds[p.metadata.name!] = await upsertPool(db, toPoolSpec(p));
  const nodes: [string, string][] = [[DEMO_LOCAL_NODE, 'demo-local'], ...DEMO_SIM_NODES.map((n): [string, string] => [n, 'demo-sim'])];
  for (const [id, pool] of nodes) {
    await upsertNode(db, { id, poolId: poolIds[pool]!, labels: { 'bettercompute.io/demo-pool': pool.replace('demo-', ''), 'topology.kubernetes.io/zone': pool === 'demo-local' ? 'local' : 'sim' } });
    await applyInventory(db, id, simulatedSpec(id, gpus));
  }
  const ledger = new Ledger(db);
  const reservations = (exampleObjects('reservations.yaml', { TOMORROW_0900_UTC: tomorrow0900(now) }) as unknown as Reservation[]).map((r, i) => ({
    ...r,
    metadata: { ...r.metadata, uid: `00000000-0000-4000-8000-00000000000${i + 1}`, namespace: DEMO_NAMESPACE },
  }));
  const booked: DemoSeed['booked'] = {};
  for (const r of reservations) {
    const out = await ledger.reserve(toCreateInput(r, DEMO_TENANT, poolIds[r.spec.pool]!), now);
    if (!out.ok) throw new Error(`${r.metadata.name}: ${out.code} ${out.message}`);
    const v = out.reservation;
    booked[r.metadata.name!] = { id: v.id, start: v.start, end: v.end, nodes: Object.fromEntries(v.allocations.map((a) => [a.nodeId, a.atoms])) };
    r.status = { phase: 'Reserved', reservationId: v.id, conditions: [{ type: 'Reserved', status: 'True', reason: 'Booked', message: `booked ${v.id}` }] };
  }
  const pod = await ledger.bookPod(
    { tenantId: DEMO_TENANT, poolId: poolIds['demo-local']!, podUid: 'pod-notebook', nodeId: DEMO_LOCAL_NODE, devices: [{ class: 'gpu', count: 1 }], durationSeconds: null },
    now,
  );
  if (!pod.ok || !('atoms' in pod)) throw new Error(`notebook: ${JSON.stringify(pod)}`);
  const other = await ledger.reserve(
    { tenantId: OTHER_TENANT, poolId: poolIds['demo-local']!, devices: [{ class: 'gpu', count: 2 }], duration: 4 * 3600, start: now + 3 * 3_600_000, binding: 'hold', idempotencyKey: 'platform-maintenance' },
    now,
  );
  if (!other.ok) throw new Error(`platform booking: ${other.code} ${other.message}`);
  const o = other.reservation;
  return { poolIds, reservations, booked, podNode: pod.nodeId, podAtoms: pod.atoms, other: { id: o.id, nodeId: o.allocations[0]!.nodeId, start: o.start, end: o.end } };
}
