import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { poolCapacity } from '../../src/db/capacity.ts';
import { checkInvariants, CLEAN } from '../../test/support/invariants.ts';
import { gpus } from './controller-support.ts';
import {
  addSimulatedNodes,
  apply,
  clusterInfo,
  kubectl,
  kubectlJson,
  kubectlResult,
  removeSimulatedNodes,
  setNodeReady,
  uniqueName,
  waitFor,
  waitForPodPhase,
  type KubeEvent,
  type List,
  type Pod as PodBase,
} from './harness.ts';
import { startHostDatabase, type HostDatabase } from './host-database.ts';
import { applyNodePool, installProduct, NODE_POOL_LABEL, removeNodePool, uninstallProduct } from './install.ts';

// The operational loops of issue 12 on the cluster, with the product installed as users install it
// (deploy/overlays/external on a PostgreSQL of this host): BookingRepair on simulated nodes (the rack-pulled scenario of
// docs/repair.md, a node failing before its reservation starts), and, with real pods on the real node, spot preemption
// and hold-and-confirm. The test reads the ledger only to check it.
const tenantNs = uniqueName('ops');
const simulated: string[] = [];
const pools: string[] = [];
let hostDb: HostDatabase;
let nodePool: string | undefined;

const SPOT_NOTICE_S = 40;
// The real node's pool stops pods this long (plus the 10 s slack) before their booking ends (docs/booking-end.md).
const STOP_GRACE_S = 5;
const REPAIR_GRACE_S = 5;

interface Condition {
  type: string;
  status: string;
  reason?: string;
  message?: string;
}
interface Rsv {
  metadata: { name: string; uid: string };
  status?: {
    phase?: string;
    state?: string;
    reservationId?: string;
    start?: string;
    end?: string;
    preemptAt?: string;
    confirmedBy?: string;
    allocations?: { node: string; atoms: string[] }[];
    conditions?: Condition[];
  };
}

type Pod = PodBase & { metadata: { deletionTimestamp?: string } };

const H = 3_600_000;
const wholeSecond = (ms: number) => new Date(Math.ceil(ms / 1000) * 1000).toISOString();

function reservation(name: string, pool: string, count: number, extra: Record<string, unknown> = {}) {
  return {
    apiVersion: 'bettercompute.io/v1alpha1',
    kind: 'Reservation',
    metadata: { name, namespace: tenantNs },
    spec: { pool, devices: [{ class: 'gpu', count }], duration: '2h', ...extra },
  };
}

const getRsv = (name: string) => kubectlJson<Rsv>(['-n', tenantNs, 'get', 'reservation', name]);
const condition = (r: Rsv, type: string) => r.status?.conditions?.find((c) => c.type === type);

/** Polls the Reservation until `ok` holds for it; resolves with it. */
async function waitRsv(name: string, what: string, ok: (r: Rsv) => boolean, timeoutMs = 60_000): Promise<Rsv> {
  return waitFor(`reservation ${name} ${what}`, async () => {
    const r = await getRsv(name);
    return ok(r) && r;
  }, { timeoutMs });
}

const waitReserved = (name: string) => waitRsv(name, 'Reserved', (r) => r.status?.phase === 'Reserved');

async function eventsOf(name: string): Promise<{ reason?: string; type: string; message: string }[]> {
  const list = await kubectlJson<List<KubeEvent & { involvedObject: { name: string }; type: string; message: string }>>([
    '-n', tenantNs, 'get', 'events', '--field-selector', `involvedObject.name=${name}`,
  ]);
  return list.items.map((e) => ({ reason: e.reason, type: e.type, message: e.message }));
}

/** Simulated nodes of `pool` with `perNode` GPUs each and their inventory, labelled (e.g. with a rack). */
async function addNodes(pool: string, n: number, perNode: number, prefix: string, labels: Record<string, string> = {}): Promise<string[]> {
  const nodes = await addSimulatedNodes(n, { 'bc-test-pool': pool, ...labels }, {}, { prefix });
  simulated.push(...nodes);
  await apply(
    nodes.map((node) => ({
      apiVersion: 'bettercompute.io/v1alpha1',
      kind: 'NodeDevices',
      metadata: { name: node },
      spec: { gpus: gpus(node, perNode), scalars: { vcpu: 64, memoryGiB: 512 } },
    })),
  );
  return nodes;
}

async function makePool(quota: number): Promise<string> {
  const pool = uniqueName('pool');
  pools.push(pool);
  await apply({
    apiVersion: 'bettercompute.io/v1alpha1',
    kind: 'Pool',
    metadata: { name: pool },
    spec: { nodeSelector: { 'bc-test-pool': pool }, ownerTenant: tenantNs, gpuModel: 'H100', offerings: [{ tenant: tenantNs, quota: { gpu: quota } }] },
  });
  return pool;
}

async function poolIdOf(pool: string, allocatable: number): Promise<string> {
  return waitFor(`pool ${pool} with ${allocatable} allocatable GPUs`, async () => {
    const p = await kubectlJson<{ status?: { poolId?: string; capacity?: { resource: string; allocatable: number }[] } }>(['get', 'pool', pool]);
    return p.status?.capacity?.find((r) => r.resource === 'gpu')?.allocatable === allocatable && p.status?.poolId;
  });
}

/** The GPU counters of the pool's rollup and of the tenant's quota key, as the ledger has them now. */
async function counters(poolId: string) {
  const gpu = (await poolCapacity(hostDb.db, poolId)).find((r) => r.resource === 'gpu')!;
  const { rows } = await hostDb.db.query<{ used: number; reserved: number }>(
    `SELECT used, reserved FROM quotas WHERE tenant_id = $1 AND pool_id = $2 AND resource = 'gpu'`,
    [tenantNs, poolId],
  );
  return {
    capacity: { allocatable: gpu.allocatable, allocated: gpu.allocated, reserved: gpu.reserved, maintenance: gpu.maintenance },
    quota: rows[0] ?? { used: 0, reserved: 0 },
  };
}

/** The node of each of a Reservation's atom bookings that have not ended (by its uid), from the ledger. */
async function bookedNodes(uid: string): Promise<string[]> {
  const { rows } = await hostDb.db.query<{ node_id: string }>(
    `SELECT a.node_id FROM reservations r JOIN allocations a ON a.reservation_id = r.id JOIN device_bookings b ON b.allocation_id = a.id
     WHERE r.idempotency_key = $1 AND a.released_at IS NULL AND upper(b.during) > compute_now()`,
    [uid],
  );
  return rows.map((r) => r.node_id).sort();
}

beforeAll(async () => {
  hostDb = await startHostDatabase();
  const installed = await installProduct({
    gpus: 8,
    databaseUrl: hostDb.podUrl,
    // Shorter periods than a production install, so that the loops show within a test's patience.
    controllerEnv: {
      BETTER_COMPUTE_CAPACITY_REFRESH: '1s',
      BETTER_COMPUTE_PENDING_MAX_BACKOFF: '5s',
      BETTER_COMPUTE_EXPIRE_EVERY: '1s',
      BETTER_COMPUTE_REPAIR_EVERY: '2s',
      BETTER_COMPUTE_REPAIR_GRACE: `${REPAIR_GRACE_S}s`,
      BETTER_COMPUTE_SPOT_NOTICE: `${SPOT_NOTICE_S}s`,
    },
  });
  process.stderr.write(`[operations] deploy/overlays/external to Ready in ${installed.readySeconds.toFixed(1)}s\n`);
  await kubectl(['create', 'namespace', tenantNs]);
  // A tenant by its label: the installed product takes no namespace for a tenant by its name (ADR 0040).
  await kubectl(['label', 'namespace', tenantNs, `bettercompute.io/tenant=${tenantNs}`]);
}, 1_800_000);

afterAll(async () => {
  await kubectlResult(['-n', tenantNs, 'delete', 'pods', '--all', '--grace-period=0', '--force', '--wait=false']);
  await kubectlResult(['-n', tenantNs, 'delete', 'reservations', '--all', '--wait=true', '--timeout=60s'], { timeoutMs: 70_000 });
  for (const p of pools) await kubectlResult(['delete', 'pool', p, '--wait=false']);
  if (nodePool) await removeNodePool(nodePool);
  if (simulated.length) {
    await kubectlResult(['delete', 'nodedevices', '--ignore-not-found', '--wait=false', ...simulated]);
    await removeSimulatedNodes(simulated);
  }
  await kubectlResult(['delete', 'namespace', tenantNs, '--wait=false']);
  if (process.env.BC_KEEP_INSTALLED !== '1') await uninstallProduct();
  await hostDb?.stop();
}, 300_000);

describe('BookingRepair on simulated nodes', () => {
  it('the rack-pulled scenario of docs/repair.md: the rollup moves first, quota never; the in-flight ones land off the rack; both confirmed ones are re-placed and say so', async () => {
    // Rack A: 2 nodes of 2 GPUs; rack B: 5 nodes of 2 GPUs (the Pool's placement domain is topology.kubernetes.io/zone).
    // Tenant quota 10 GPUs. Equal scores break ties by node name, and every rack-A name sorts first.
    const pool = await makePool(10);
    const base = uniqueName('rk');
    const rackA = await addNodes(pool, 2, 2, `${base}-a`, { 'topology.kubernetes.io/zone': 'rack-a' });
    const rackB = await addNodes(pool, 5, 2, `${base}-b`, { 'topology.kubernetes.io/zone': 'rack-b' });
    const poolId = await poolIdOf(pool, 14);
    const t0 = Date.now();

    // Two confirmed reservations hold the rack: R1 live from now for 2 h (on a1), R2 from +1 h for 2 h (on a2).
    await apply(reservation('r1', pool, 2));
    const r1 = await waitReserved('r1');
    await apply(reservation('r2', pool, 2, { start: wholeSecond(t0 + H) }));
    const r2 = await waitReserved('r2');
    expect([r1.status!.allocations![0]!.node, r2.status!.allocations![0]!.node]).toEqual(rackA);
    expect(await counters(poolId)).toEqual({ capacity: { allocatable: 14, allocated: 2, reserved: 2, maintenance: 0 }, quota: { used: 2, reserved: 2 } });

    // The repair pass takes each reservation's row lock; the test holds R1's and R2's (FOR SHARE) so that it can look
    // at the ledger between the pull and the pass. The pass waits on them (a wait, not a failure).
    const lock = await hostDb.db.connect();
    try {
      await lock.query('BEGIN');
      await lock.query('SELECT id FROM reservations WHERE idempotency_key = ANY ($1) FOR SHARE', [[r1.metadata.uid, r2.metadata.uid]]);

      // The pull: the operator labels rack A for maintenance while three 2-GPU reservations for [+1 h, +2 h) are
      // being placed. The rack's atoms are all booked in that window, so wherever they land it is rack B.
      await Promise.all([
        kubectl(['label', 'node', ...rackA, 'bettercompute.io/maintenance=true']),
        apply(['i1', 'i2', 'i3'].map((n) => reservation(n, pool, 2, { start: wholeSecond(t0 + H), duration: '1h' }))),
      ]);
      for (const n of ['i1', 'i2', 'i3']) {
        const r = await waitReserved(n);
        expect(rackB).toContain(r.status!.allocations![0]!.node);
        expect(condition(r, 'Degraded')).toBeUndefined();
      }
      // First the rollup, in the pull's own transaction: 4 GPUs from allocatable to maintenance, and the bookings on
      // them leave allocated (R1) and reserved (R2). Quota does not move: R1 and R2 are still charged.
      await waitFor('the pull counted', async () => (await counters(poolId)).capacity.maintenance === 4);
      expect(await counters(poolId)).toEqual({ capacity: { allocatable: 10, allocated: 0, reserved: 6, maintenance: 4 }, quota: { used: 2, reserved: 8 } });
      // The confirmed ones, before the pass: still on rack A, still Reserved, no Degraded condition.
      expect(await bookedNodes(r1.metadata.uid)).toEqual([rackA[0], rackA[0]]);
      expect(await bookedNodes(r2.metadata.uid)).toEqual([rackA[1], rackA[1]]);
      for (const n of ['r1', 'r2']) {
        const r = await getRsv(n);
        expect(r.status?.phase).toBe('Reserved');
        expect(condition(r, 'Degraded')).toBeUndefined();
      }
      await lock.query('COMMIT');
    } finally {
      await lock.query('ROLLBACK').catch(() => undefined);
      lock.release();
    }

    // The pass: both re-placed on rack B, same ids and windows, Degraded False with reason Repaired and an Event.
    for (const [name, before] of [['r1', r1], ['r2', r2]] as const) {
      const r = await waitRsv(name, `Repaired`, (r) => condition(r, 'Degraded')?.reason === 'Repaired', 60_000);
      expect(r.status!.phase).toBe('Reserved');
      expect(condition(r, 'Reserved')?.status).toBe('True');
      expect(condition(r, 'Degraded')).toMatchObject({ status: 'False', reason: 'Repaired', message: expect.stringContaining('Maintenance') });
      expect(rackB).toContain(r.status!.allocations![0]!.node);
      expect(r.status!.allocations!.flatMap((a) => a.atoms)).toHaveLength(2);
      expect({ id: r.status!.reservationId, start: r.status!.start, end: r.status!.end }).toEqual({
        id: before.status!.reservationId,
        start: before.status!.start,
        end: before.status!.end,
      });
      expect((await bookedNodes(r.metadata.uid)).every((n) => rackB.includes(n))).toBe(true);
      await waitFor(`Event Repaired on ${name}`, async () => (await eventsOf(name)).some((e) => e.reason === 'Repaired' && e.type === 'Normal'));
    }
    // R1 had started: its booking on a1 is cut at the pass, its history [start, cut) kept beside the replacement.
    const { rows: history } = await hostDb.db.query<{ node_id: string; released: boolean; lower_ms: number; upper_ms: number }>(
      `SELECT a.node_id, a.released_at IS NOT NULL AS released, extract(epoch FROM lower(b.during)) * 1000 AS lower_ms,
              extract(epoch FROM upper(b.during)) * 1000 AS upper_ms
       FROM reservations r JOIN allocations a ON a.reservation_id = r.id JOIN device_bookings b ON b.allocation_id = a.id
       WHERE r.idempotency_key = $1 ORDER BY lower(b.during), a.node_id`,
      [r1.metadata.uid],
    );
    const onA = history.filter((h) => h.node_id === rackA[0]);
    expect(onA).toHaveLength(2);
    expect(onA.every((h) => h.released && h.upper_ms > h.lower_ms && h.upper_ms <= Date.now())).toBe(true);
    expect(history.filter((h) => rackB.includes(h.node_id) && !h.released)).toHaveLength(2);

    // The rollup gets them back on rack B; quota as before; rack B is full in [+1 h, +2 h).
    expect(await counters(poolId)).toEqual({ capacity: { allocatable: 10, allocated: 2, reserved: 8, maintenance: 4 }, quota: { used: 2, reserved: 8 } });
    await apply(reservation('one-more', pool, 1, { start: wholeSecond(t0 + H), duration: 60 }));
    const refused = await waitRsv('one-more', 'Pending', (r) => r.status?.phase === 'Pending');
    expect(condition(refused, 'Reserved')).toMatchObject({ status: 'False', reason: 'Unschedulable' });
    expect(await checkInvariants(hostDb.db)).toEqual(CLEAN);
    await kubectl(['-n', tenantNs, 'delete', 'reservation', 'r1', 'r2', 'i1', 'i2', 'i3', 'one-more', '--wait=true', '--timeout=60s']);
  }, 300_000);

  it('a node failing between placement and start: re-placed before the start; with no room Degraded, with a reason and an Event; repaired when a node comes', async () => {
    const pool = await makePool(100);
    const [n0, n1] = await addNodes(pool, 2, 2, uniqueName('nf'));
    await poolIdOf(pool, 4);
    // Starts in an hour, on n0 (names break the tie).
    await apply(reservation('later', pool, 2, { start: wholeSecond(Date.now() + H), duration: '1h' }));
    const placed = await waitReserved('later');
    expect(placed.status!.allocations![0]!.node).toBe(n0);

    // n0 stops being Ready: past the grace, the reservation moves to n1, before its start.
    await setNodeReady(n0!, false);
    const moved = await waitRsv('later', 'Repaired onto n1', (r) => condition(r, 'Degraded')?.reason === 'Repaired' && r.status?.allocations?.[0]?.node === n1, 60_000);
    expect(condition(moved, 'Degraded')!.message).toContain('NodeNotReady');
    expect(await bookedNodes(moved.metadata.uid)).toEqual([n1, n1]);

    // n1 fails too: nowhere to go. Degraded True, the atoms short and why, a Warning Event; the bookings stay.
    await setNodeReady(n1!, false);
    const degraded = await waitRsv('later', 'Degraded', (r) => condition(r, 'Degraded')?.status === 'True', 60_000);
    expect(condition(degraded, 'Degraded')).toMatchObject({ reason: 'AtomsLost', message: expect.stringMatching(/^2 atoms short: lost to NodeNotReady/) });
    expect(degraded.status!.phase).toBe('Reserved');
    expect(degraded.status!.allocations![0]!.node).toBe(n1);
    await waitFor('a Warning Event Degraded', async () => (await eventsOf('later')).some((e) => e.reason === 'Degraded' && e.type === 'Warning'));

    // A node comes: repaired onto it.
    const [n2] = await addNodes(pool, 1, 2, uniqueName('nf-new'));
    const repaired = await waitRsv('later', 'Repaired onto the new node', (r) => condition(r, 'Degraded')?.status === 'False' && r.status?.allocations?.[0]?.node === n2, 90_000);
    expect(condition(repaired, 'Degraded')!.reason).toBe('Repaired');
    expect(await bookedNodes(repaired.metadata.uid)).toEqual([n2, n2]);
    expect(repaired.status!.reservationId).toBe(placed.status!.reservationId);
    expect(repaired.status!.start).toBe(placed.status!.start);
    expect(await checkInvariants(hostDb.db)).toEqual(CLEAN);
    await kubectl(['-n', tenantNs, 'delete', 'reservation', 'later', '--wait=true', '--timeout=60s']);
  }, 300_000);
});

describe('one owner per device', () => {
  it("node A's NodeDevices listing a GPU of node B: refused with a condition and an Event naming B; B's atoms and Reservation unchanged; taken once B drops it", async () => {
    const pool = await makePool(100);
    const [a, b] = await addNodes(pool, 2, 2, uniqueName('own'));
    await poolIdOf(pool, 4);
    await apply(reservation('owned', pool, 2, { duration: '1h' }));
    const onB = await waitReserved('owned');
    const bNode = onB.status!.allocations![0]!.node;
    const aNode = bNode === a ? b! : a!;
    const taken = `GPU-${bNode}-0`;
    expect(onB.status!.allocations![0]!.atoms).toContain(taken);

    // A's report lists its own GPUs and one of B's.
    await apply({
      apiVersion: 'bettercompute.io/v1alpha1',
      kind: 'NodeDevices',
      metadata: { name: aNode },
      spec: { gpus: [...gpus(aNode, 2), { ...gpus(bNode, 1)[0]! }], scalars: { vcpu: 64, memoryGiB: 512 } },
    });
    const refused = await waitFor(`NodeDevices ${aNode} DevicesAccepted False`, async () => {
      const nd = await kubectlJson<{ status?: { conditions?: Condition[] } }>(['get', 'nodedevices', aNode]);
      const c = nd.status?.conditions?.find((x) => x.type === 'DevicesAccepted');
      return c?.status === 'False' && c;
    });
    expect(refused).toMatchObject({ reason: 'DeviceOwnedByOtherNode', message: expect.stringContaining(taken) });
    expect(refused.message).toContain(bNode);
    await waitFor('a Warning Event naming the owner', async () => {
      const list = await kubectlJson<List<KubeEvent & { involvedObject: { name: string }; type: string; message: string }>>([
        'get', 'events', '-A', '--field-selector', `involvedObject.name=${aNode}`,
      ]);
      return list.items.some((e) => e.type === 'Warning' && e.message.includes(bNode));
    });
    // The ledger: the GPU is still B's, healthy, and its booking B's Reservation's; A's own GPUs are there.
    const { rows } = await hostDb.db.query<{ id: string; node_id: string; healthy: boolean }>(
      `SELECT id, node_id, healthy FROM devices WHERE id = $1 OR node_id = $2 AND present ORDER BY id`,
      [taken, aNode],
    );
    expect(rows).toEqual([
      { id: `GPU-${aNode}-0`, node_id: aNode, healthy: true },
      { id: `GPU-${aNode}-1`, node_id: aNode, healthy: true },
      { id: taken, node_id: bNode, healthy: true },
    ].sort((x, y) => (x.id < y.id ? -1 : 1)));
    expect(await bookedNodes(onB.metadata.uid)).toEqual([bNode, bNode]);
    const after = await getRsv('owned');
    expect(after.status!.allocations).toEqual(onB.status!.allocations);
    expect(condition(after, 'Degraded')?.status ?? 'False').toBe('False');

    // B's report drops the GPU: A's next report takes it.
    await apply({
      apiVersion: 'bettercompute.io/v1alpha1',
      kind: 'NodeDevices',
      metadata: { name: bNode },
      spec: { gpus: gpus(bNode, 2).slice(1), scalars: { vcpu: 64, memoryGiB: 512 } },
    });
    await waitFor(`${taken} on ${aNode}`, async () => {
      const { rows: r } = await hostDb.db.query<{ node_id: string }>(`SELECT node_id FROM devices WHERE id = $1 AND present`, [taken]);
      return r[0]?.node_id === aNode;
    }, { timeoutMs: 90_000 });
    await kubectl(['-n', tenantNs, 'delete', 'reservation', 'owned', '--wait=true', '--timeout=60s']);
  }, 300_000);
});

/** A pod of reservation `rsv` asking for `count` GPUs that prints the atoms it was handed and then sleeps. */
function reservationPod(name: string, rsv: string, count: number, graceSeconds = 2) {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: tenantNs, labels: { 'bettercompute.io/reservation': rsv } },
    spec: {
      restartPolicy: 'Never',
      terminationGracePeriodSeconds: graceSeconds,
      containers: [
        {
          name: 'main',
          image: clusterInfo().busyboxImage,
          command: ['sh', '-c', 'echo "ATOMS=$BETTERCOMPUTE_ATOMS"; sleep 3600'],
          resources: { limits: { 'bettercompute.io/gpu': String(count) } },
        },
      ],
    },
  };
}

async function atomsOfPod(name: string): Promise<string[]> {
  const logs = await waitFor(`pod ${name} logged its atoms`, async () => {
    const out = await kubectl(['-n', tenantNs, 'logs', name]);
    return /ATOMS=\S+/.test(out) && out;
  });
  return /ATOMS=(\S+)/.exec(logs)![1]!.split(',').sort();
}

describe('real pods on the real node', () => {
  beforeAll(async () => {
    nodePool = uniqueName('real');
    await applyNodePool(nodePool, [{ tenant: tenantNs, quota: { gpu: 8 } }], undefined, { stopGraceSeconds: STOP_GRACE_S });
    await poolIdOf(nodePool, 8);
  });

  it('a hold is confirmed by its first pod that binds, quota unchanged; an unconfirmed hold expires at its lease and its atoms are free again', async () => {
    const pool = nodePool!;
    const poolId = await poolIdOf(pool, 8);
    await apply([
      reservation('hold-used', pool, 1, { duration: '1h', leaseSeconds: 600 }),
      reservation('hold-idle', pool, 1, { duration: '1h', leaseSeconds: 30 }),
    ]);
    const used = await waitReserved('hold-used');
    const idle = await waitReserved('hold-idle');
    expect([used.status!.state, idle.status!.state]).toEqual(['held', 'held']);
    const before = await counters(poolId);
    expect(before.quota).toEqual({ used: 2, reserved: 0 });

    await apply(reservationPod('first-pod', 'hold-used', 1));
    await waitForPodPhase(tenantNs, 'first-pod', ['Running'], 120_000);
    expect(await atomsOfPod('first-pod')).toEqual(used.status!.allocations![0]!.atoms);
    const confirmed = await waitRsv('hold-used', 'confirmed', (r) => r.status?.state === 'confirmed');
    expect(confirmed.status!.confirmedBy).toContain('first-pod');
    expect((await counters(poolId)).quota).toEqual(before.quota);

    // The idle one: expired at its lease, its booking ended, its atom bookable again.
    const expired = await waitRsv('hold-idle', 'expired', (r) => r.status?.state === 'expired', 90_000);
    expect(expired.status!.phase).not.toBe('Reserved');
    expect(await bookedNodes(idle.metadata.uid)).toEqual([]);
    await apply(reservation('after-idle', pool, 7, { duration: '1h' }));
    const after = await waitReserved('after-idle');
    expect(after.status!.allocations!.flatMap((a) => a.atoms)).toContain(idle.status!.allocations![0]!.atoms[0]);

    await kubectl(['-n', tenantNs, 'delete', 'pod', 'first-pod', '--wait=true', '--timeout=60s']);
    await kubectl(['-n', tenantNs, 'delete', 'reservation', 'hold-used', 'hold-idle', 'after-idle', '--wait=true', '--timeout=60s']);
  }, 300_000);

  it('a regular reservation displaces two spot ones: notices with one deadline, their pods (one with a PDB and a 1-day grace) stopped ahead of it and gone by it, its own pods on exactly the freed atoms within 15 s of it', async () => {
    const pool = nodePool!;
    await poolIdOf(pool, 8);
    await apply([reservation('spot-a', pool, 4, { duration: '1h', spot: true }), reservation('spot-b', pool, 4, { duration: '1h', spot: true })]);
    const spots = [await waitReserved('spot-a'), await waitReserved('spot-b')];
    const freed = spots.flatMap((s) => s.status!.allocations!.flatMap((a) => a.atoms)).sort();
    expect(freed).toHaveLength(8);
    // spot-a's pod names a day of grace and a PodDisruptionBudget forbids its eviction: neither outranks the deadline.
    const guarded = reservationPod('spot-a-pod', 'spot-a', 4, 86_400);
    Object.assign(guarded.metadata.labels, { app: 'spot-a' });
    await apply([
      { apiVersion: 'policy/v1', kind: 'PodDisruptionBudget', metadata: { name: 'spot-a', namespace: tenantNs }, spec: { maxUnavailable: 0, selector: { matchLabels: { app: 'spot-a' } } } },
      guarded,
      reservationPod('spot-b-pod', 'spot-b', 4),
    ]);
    for (const p of ['spot-a-pod', 'spot-b-pod']) await waitForPodPhase(tenantNs, p, ['Running'], 120_000);

    // The regular one fits only by displacing both.
    const asked = Date.now();
    await apply(reservation('regular', pool, 8, { duration: '1h' }));
    const regular = await waitReserved('regular');
    const deadline = regular.status!.start!;
    const deadlineMs = Date.parse(deadline);
    expect(deadlineMs).toBeGreaterThanOrEqual(asked + (SPOT_NOTICE_S - 2) * 1000);
    expect(deadlineMs).toBeLessThanOrEqual(Date.now() + SPOT_NOTICE_S * 1000 + 1000);
    expect(regular.status!.allocations!.flatMap((a) => a.atoms).sort()).toEqual(freed);

    // Each victim: the notice with the deadline (condition, Warning Event, status.preemptAt, its pod annotated).
    for (const name of ['spot-a', 'spot-b']) {
      const v = await waitRsv(name, `noticed`, (r) => condition(r, 'PreemptionNotice')?.status === 'True');
      expect(Date.parse(v.status!.preemptAt!)).toBe(deadlineMs);
      expect(condition(v, 'PreemptionNotice')).toMatchObject({ reason: 'Preempted', message: expect.stringContaining(regular.status!.reservationId!) });
      await waitFor(`a Warning Event on ${name}`, async () => (await eventsOf(name)).some((e) => e.type === 'Warning' && e.reason === 'PreemptionNotice'));
      const pod = await waitFor(`${name}-pod annotated`, async () => {
        const p = await kubectlJson<Pod>(['-n', tenantNs, 'get', 'pod', `${name}-pod`]);
        return p.metadata.annotations?.['bettercompute.io/preempt-at'] ? p : undefined;
      });
      expect(Date.parse(pod.metadata.annotations!['bettercompute.io/preempt-at']!)).toBe(deadlineMs);
      // Still running during the notice.
      expect(pod.status?.phase).toBe('Running');
      expect(pod.metadata.deletionTimestamp).toBeUndefined();
    }

    // The regular reservation's pods, made now: Pending until the deadline (its resource appears on the node then).
    await apply([reservationPod('regular-0', 'regular', 4), reservationPod('regular-1', 'regular', 4)]);

    // The pool's stop grace plus the 10 s slack before the deadline, and not before: each victim's pod evicted (spot-a's
    // deleted: its PDB refuses the eviction), with its own grace (2 s) or the pool's cap (5 s, not a day); both gone
    // by the deadline.
    const leadMs = (STOP_GRACE_S + 10) * 1000;
    const evictedAt = new Map<string, number>();
    const goneAt = new Map<string, number>();
    await waitFor('both spot pods gone', async () => {
      for (const name of ['spot-a-pod', 'spot-b-pod']) {
        if (goneAt.has(name)) continue;
        const r = await kubectlResult(['-n', tenantNs, 'get', 'pod', name, '-o', 'json']);
        if (r.code !== 0) {
          goneAt.set(name, Date.now());
          if (!evictedAt.has(name)) evictedAt.set(name, Date.now()); // evicted and gone between two looks
          continue;
        }
        const p = JSON.parse(r.stdout) as Pod;
        const grace = name === 'spot-a-pod' ? STOP_GRACE_S * 1000 : 2000;
        if (p.metadata.deletionTimestamp && !evictedAt.has(name)) evictedAt.set(name, Date.parse(p.metadata.deletionTimestamp) - grace);
      }
      return goneAt.size === 2;
    }, { timeoutMs: (SPOT_NOTICE_S + 60) * 1000, intervalMs: 200 });
    // deletionTimestamp has whole seconds: the eviction was at or after the stop's start (less that rounding).
    for (const t of evictedAt.values()) expect(t).toBeGreaterThanOrEqual(deadlineMs - leadMs - 1000);
    for (const t of goneAt.values()) expect(t).toBeLessThanOrEqual(deadlineMs);
    const rel = (t: number) => `${t >= deadlineMs ? '+' : ''}${((t - deadlineMs) / 1000).toFixed(1)}s`;
    process.stderr.write(
      `[operations] spot: deadline ${((deadlineMs - asked) / 1000).toFixed(1)}s after the regular one was applied; pods evicted at deadline ${[...evictedAt.values()]
        .map(rel)
        .join(', ')}, gone at ${[...goneAt.values()].map(rel).join(', ')}\n`,
    );

    // The regular reservation's pods run on exactly the freed atoms, within 15 s of the deadline.
    const runningAt = new Map<string, number>();
    await waitFor('both regular pods Running', async () => {
      for (const name of ['regular-0', 'regular-1']) {
        if (runningAt.has(name)) continue;
        const p = await kubectlJson<Pod>(['-n', tenantNs, 'get', 'pod', name]);
        if (p.status?.phase === 'Running') runningAt.set(name, Date.now());
        if (p.status?.phase === 'Failed') throw new Error(`${name} failed: ${JSON.stringify(p.status)}`);
      }
      return runningAt.size === 2;
    }, { timeoutMs: 60_000, intervalMs: 250 });
    process.stderr.write(`[operations] spot: the regular pods Running at deadline ${[...runningAt.values()].map(rel).join(', ')}\n`);
    for (const t of runningAt.values()) expect(t).toBeLessThanOrEqual(deadlineMs + 15_000);
    for (const name of ['spot-a', 'spot-b']) {
      const v = await waitRsv(name, `Released, Preempted`, (r) => r.status?.phase === 'Released', 60_000);
      expect(condition(v, 'Reserved')).toMatchObject({ status: 'False', reason: 'Preempted' });
    }
    const got = [...(await atomsOfPod('regular-0')), ...(await atomsOfPod('regular-1'))].sort();
    expect(got).toEqual(freed);
    // The deadline passed by itself: the victims' bookings ended and the regular one started then. Only a rollup
    // rebuild counts that; the leader runs one when it ends the victims (the periodic one is 5 min away here).
    await waitFor('the rollup rebuilt past the deadline', async () => (await checkInvariants(hostDb.db)).rollupMismatches.length === 0, { timeoutMs: 30_000 });
    const report = await checkInvariants(hostDb.db);
    expect(report).toEqual(CLEAN);
    await kubectlResult(['-n', tenantNs, 'delete', 'pod', 'regular-0', 'regular-1', '--wait=true', '--timeout=60s'], { timeoutMs: 70_000 });
    await kubectl(['-n', tenantNs, 'delete', 'reservation', 'spot-a', 'spot-b', 'regular', '--wait=true', '--timeout=60s']);
    await kubectlResult(['-n', tenantNs, 'delete', 'pdb', 'spot-a', '--ignore-not-found']);
  }, 300_000);
  it('a started Reservation on the real node put in maintenance: its pod stopped with the capped grace, its atoms booked while it runs, re-placed once it is gone, free again after', async () => {
    const pool = nodePool!;
    const real = clusterInfo().nodeName;
    await apply(reservation('kept', pool, 8, { duration: '1h' }));
    const kept = await waitReserved('kept');
    expect(kept.status!.allocations!.map((a) => a.node)).toEqual([real]);
    // Its pod ignores SIGTERM for 20 s and names 30 s of grace: the pool's 5 s cap stops it.
    const p = reservationPod('kept-0', 'kept', 8, 30);
    p.spec.containers[0]!.command = ['sh', '-c', `trap 'sleep 20; exit 0' TERM; echo "ATOMS=$BETTERCOMPUTE_ATOMS"; while true; do sleep 1; done`];
    await apply(p);
    await waitForPodPhase(tenantNs, 'kept-0', ['Running'], 120_000);
    // Somewhere to go: a simulated node of 8 GPUs in the pool.
    const [spare] = await addNodes(pool, 1, 8, uniqueName('spare'), { [NODE_POOL_LABEL]: pool });
    await poolIdOf(pool, 16);

    const t0 = Date.now();
    await kubectl(['label', 'node', real, 'bettercompute.io/maintenance=true', '--overwrite']);
    try {
      // While the pod runs there: the bookings stay on the real node (nothing cut, nothing re-placed).
      await waitFor('kept-0 told to stop', async () => Boolean((await kubectlJson<Pod>(['-n', tenantNs, 'get', 'pod', 'kept-0'])).metadata.deletionTimestamp));
      const stillThere = await kubectlResult(['-n', tenantNs, 'get', 'pod', 'kept-0']);
      expect(stillThere.code).toBe(0);
      expect(await bookedNodes(kept.metadata.uid)).toEqual(Array(8).fill(real));
      const goneAt = await waitFor('kept-0 gone', async () => ((await kubectlResult(['-n', tenantNs, 'get', 'pod', 'kept-0'])).code !== 0 ? Date.now() : undefined), { timeoutMs: 60_000, intervalMs: 250 });
      // Capped at 5 s, not the 20 s the pod would take: gone well before that (the stop's pass and the kubelet's kill).
      expect(goneAt - t0).toBeLessThan(20_000);
      // Once it is gone: re-placed onto the spare node.
      const moved = await waitRsv('kept', 'Repaired onto the spare node', (r) => condition(r, 'Degraded')?.reason === 'Repaired' && r.status?.allocations?.[0]?.node === spare, 60_000);
      expect(moved.status!.allocations!.map((a) => a.node)).toEqual([spare]);
      expect(await bookedNodes(kept.metadata.uid)).toEqual(Array(8).fill(spare));
      process.stderr.write(`[operations] maintenance under a running pod: gone ${((goneAt - t0) / 1000).toFixed(1)}s after the label, then re-placed\n`);
    } finally {
      await kubectl(['label', 'node', real, 'bettercompute.io/maintenance-']);
    }
    // The real node's atoms are bookable again (the spare node gone, and the quota of 8 back).
    await kubectl(['-n', tenantNs, 'delete', 'reservation', 'kept', '--wait=true', '--timeout=60s']);
    await kubectlResult(['delete', 'nodedevices', spare!, '--ignore-not-found']);
    await removeSimulatedNodes([spare!]);
    simulated.splice(simulated.indexOf(spare!), 1);
    await poolIdOf(pool, 8);
    await apply(reservation('after-kept', pool, 8, { duration: '1h' }));
    const after = await waitReserved('after-kept');
    expect(after.status!.allocations!.map((a) => a.node)).toEqual([real]);
    await kubectl(['-n', tenantNs, 'delete', 'reservation', 'after-kept', '--wait=true', '--timeout=60s']);
  }, 300_000);
});
