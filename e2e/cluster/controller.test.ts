import fs from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import YAML from 'yaml';
import { poolCapacity } from '../../src/db/capacity.ts';
import { gpus } from './controller-support.ts';
import {
  type KubeEvent,
  type List,
  addSimulatedNodes,
  apply,
  kubectl,
  kubectlJson,
  kubectlResult,
  removeSimulatedNodes,
  restartComponent,
  uniqueName,
  waitFor,
} from './harness.ts';
import { startHostDatabase, type HostDatabase } from './host-database.ts';
import { installProduct, SYSTEM_NS, uninstallProduct, writeTestOverlay } from './install.ts';

// The controller on the real API server, installed as users install it: deploy/overlays/external (two replicas from
// the image) on a PostgreSQL of this host, Pools with simulated nodes whose inventory is applied as NodeDevices, and
// Reservations. The test reads the ledger only to check it.
const external = process.env.BC_EXTERNAL_CLUSTER === '1';
const tenantNs = uniqueName('team');
const simulated: string[] = [];
let hostDb: HostDatabase;

interface Rsv {
  metadata: { name: string; uid: string; finalizers?: string[] };
  status?: {
    phase?: string;
    reservationId?: string;
    allocations?: { node: string; atoms: string[] }[];
    conditions?: { type: string; status: string; reason?: string; message?: string }[];
    resourceName?: string;
  };
}

function reservation(name: string, pool: string, count = 1, extra: Record<string, unknown> = {}) {
  return {
    apiVersion: 'bettercompute.io/v1alpha1',
    kind: 'Reservation',
    metadata: { name, namespace: tenantNs },
    spec: { pool, devices: [{ class: 'gpu', count }], duration: '2h', ...extra },
  };
}

/** A Pool of n simulated nodes with `perNode` GPUs each, its inventory applied. Resolves with names and poolId. */
async function makePool(n: number, perNode: number, quota = 1000): Promise<{ pool: string; nodes: string[]; poolId: string }> {
  const pool = uniqueName('pool');
  const nodes = await addSimulatedNodes(n, { 'bc-test-pool': pool }, {}, { prefix: pool });
  simulated.push(...nodes);
  await apply([
    {
      apiVersion: 'bettercompute.io/v1alpha1',
      kind: 'Pool',
      metadata: { name: pool },
      spec: { nodeSelector: { 'bc-test-pool': pool }, ownerTenant: tenantNs, gpuModel: 'H100', offerings: [{ tenant: tenantNs, quota: { gpu: quota } }] },
    },
    ...nodes.map((node) => ({
      apiVersion: 'bettercompute.io/v1alpha1',
      kind: 'NodeDevices',
      metadata: { name: node },
      spec: { gpus: gpus(node, perNode), scalars: { vcpu: 64, memoryGiB: 512 } },
    })),
  ]);
  const poolId = await waitFor(`pool ${pool} with ${n * perNode} allocatable GPUs`, async () => {
    const p = await kubectlJson<{ status?: { poolId?: string; capacity?: { resource: string; allocatable: number }[] } }>(['get', 'pool', pool]);
    const gpu = p.status?.capacity?.find((r) => r.resource === 'gpu');
    return gpu?.allocatable === n * perNode && p.status?.poolId;
  });
  return { pool, nodes, poolId };
}

async function listReservations(): Promise<Rsv[]> {
  return (await kubectlJson<List<Rsv>>(['-n', tenantNs, 'get', 'reservations'])).items;
}

async function liveBookings(poolId: string) {
  const { rows } = await hostDb.db.query<{ reservation_id: string; idempotency_key: string; device_id: string }>(
    `SELECT r.id AS reservation_id, r.idempotency_key, b.device_id
     FROM reservations r JOIN allocations a ON a.reservation_id = r.id JOIN device_bookings b ON b.allocation_id = a.id
     WHERE r.pool_id = $1 AND r.state IN ('held', 'confirmed') AND a.released_at IS NULL AND upper(b.during) > compute_now()`,
    [poolId],
  );
  return rows;
}

/** The replica that holds the controller's Lease (its pod name). */
async function leaderPod(): Promise<string | undefined> {
  const lease = await kubectlJson<{ spec?: { holderIdentity?: string } }>(['-n', SYSTEM_NS, 'get', 'lease', 'better-compute-controller']);
  return lease.spec?.holderIdentity || undefined;
}

beforeAll(async () => {
  hostDb = await startHostDatabase();
  const installed = await installProduct({
    gpus: 8,
    databaseUrl: hostDb.podUrl,
    // Shorter periods than a production install, so that failover and status show within a test's patience.
    controllerEnv: {
      BETTER_COMPUTE_LEASE_DURATION: '6s',
      BETTER_COMPUTE_RENEW_DEADLINE: '4s',
      BETTER_COMPUTE_RETRY_PERIOD: '1s',
      BETTER_COMPUTE_CAPACITY_REFRESH: '1s',
      BETTER_COMPUTE_PENDING_MAX_BACKOFF: '5s',
    },
  });
  process.stderr.write(`[controller] deploy/overlays/external (2 replicas, host PostgreSQL) to Ready in ${installed.readySeconds.toFixed(1)}s\n`);
  await kubectl(['create', 'namespace', tenantNs]);
  // A tenant by its label: the installed product takes no namespace for a tenant by its name (ADR 0040).
  await kubectl(['label', 'namespace', tenantNs, `bettercompute.io/tenant=${tenantNs}`]);
  await waitFor('a controller leads', leaderPod, { timeoutMs: 60_000 });
}, 1_800_000);

afterAll(async () => {
  // Delete the Reservations while the controller still runs, so that their finalizers go.
  await kubectlResult(['-n', tenantNs, 'delete', 'reservations', '--all', '--wait=true', '--timeout=60s'], { timeoutMs: 70_000 });
  const pools = (await kubectlJson<List<{ metadata: { name: string }; spec: { ownerTenant: string } }>>(['get', 'pools']).catch(() => ({ items: [] }))).items;
  for (const p of pools.filter((x) => x.spec.ownerTenant === tenantNs)) await kubectl(['delete', 'pool', p.metadata.name, '--wait=false']).catch(() => undefined);
  if (simulated.length) {
    await kubectl(['delete', 'nodedevices', '--ignore-not-found', '--wait=false', ...simulated]).catch(() => undefined);
    await removeSimulatedNodes(simulated);
  }
  await kubectlResult(['delete', 'namespace', tenantNs, '--wait=false']);
  if (process.env.BC_KEEP_INSTALLED !== '1') await uninstallProduct();
  await hostDb?.stop();
}, 300_000);

describe('CRDs on the API server', () => {
  it('refuses invalid objects with a clear message', async () => {
    const bad = async (obj: object) => {
      const r = await kubectlResult(['apply', '-f', '-'], { input: JSON.stringify(obj) });
      expect(r.code).not.toBe(0);
      return r.stderr;
    };
    const base = reservation('bad', 'some-pool');
    expect(await bad({ ...base, spec: { ...base.spec, devices: [{ class: 'tpu', count: 1 }] } })).toMatch(/spec\.devices\[0\]\.class: Unsupported value: "tpu"/);
    expect(await bad({ ...base, spec: { ...base.spec, devices: [{ class: 'gpu', count: 65 }] } })).toMatch(/spec\.devices\[0\]\.count: Invalid value: 65: spec\.devices\[0\]\.count in body should be less than or equal to 64/);
    expect(await bad({ ...base, spec: { ...base.spec, devices: [] } })).toMatch(/spec\.devices: Invalid value: 0: spec\.devices in body should have at least 1 items/);
    expect(await bad({ ...base, spec: { ...base.spec, duration: 'soon' } })).toMatch(/duration must be whole seconds/);
    expect(await bad({ ...base, spec: { ...base.spec, leaseSeconds: 10 } })).toMatch(/spec\.leaseSeconds.*greater than or equal to 30/);
    expect(await bad({ ...base, spec: { ...base.spec, start: 'tomorrow' } })).toMatch(/spec\.start/);
    expect(await bad({ ...base, spec: { ...base.spec, gang: { size: 1 } } })).toMatch(/spec\.gang\.size/);
    expect(await bad({ ...base, spec: { devices: [{ class: 'gpu', count: 1 }], duration: 60 } })).toMatch(/spec\.pool: Required value/);
    const pool = { apiVersion: 'bettercompute.io/v1alpha1', kind: 'Pool', metadata: { name: 'bad-pool' } };
    expect(await bad({ ...pool, spec: { nodeSelector: { a: 'b' }, ownerTenant: 'has space' } })).toMatch(/spec\.ownerTenant/);
    expect(await bad({ ...pool, spec: { nodeSelector: { a: 'b' }, ownerTenant: 't', sharing: 'exclusive', slotsPerGpu: 4 } })).toMatch(/slotsPerGpu above 1 needs sharing timeslice or mps/);
    expect(await bad({ ...pool, spec: { nodeSelector: {}, ownerTenant: 't' } })).toMatch(/spec\.nodeSelector/);
    const nd = { apiVersion: 'bettercompute.io/v1alpha1', kind: 'NodeDevices', metadata: { name: 'bad-node' } };
    expect(await bad({ ...nd, spec: { gpus: [{ uuid: 'GPU/with/slash' }] } })).toMatch(/spec\.gpus\[0\]\.uuid/);
    // The spec of a Reservation cannot change once created.
    await apply(reservation('immutable', 'no-such-pool'));
    const r = await kubectlResult(['-n', tenantNs, 'patch', 'reservation', 'immutable', '--type=merge', '-p', '{"spec":{"duration":"3h"}}']);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/spec is immutable/);
    await kubectl(['-n', tenantNs, 'delete', 'reservation', 'immutable', '--wait=true', '--timeout=30s']);
  });
});

describe('controller', () => {
  it('books a Reservation: Reserved with exact atoms, the resource name, a condition and an Event', async () => {
    const { pool, nodes, poolId } = await makePool(2, 4);
    await apply(reservation('one', pool, 3));
    const r = await waitFor('reservation one Reserved', async () => {
      const x = await kubectlJson<Rsv>(['-n', tenantNs, 'get', 'reservation', 'one']);
      return x.status?.phase === 'Reserved' && x;
    });
    const allocs = r.status!.allocations!;
    expect(allocs).toHaveLength(1);
    expect(nodes).toContain(allocs[0]!.node);
    expect(allocs[0]!.atoms).toHaveLength(3);
    for (const a of allocs[0]!.atoms) expect(a).toMatch(new RegExp(`^GPU-${allocs[0]!.node}-\\d$`));
    expect(r.metadata.finalizers).toContain('bettercompute.io/release');
    expect(r.status!.resourceName).toBe(`reservations.bettercompute.io/${r.status!.reservationId!.replace(/_/g, '-')}`);
    expect(r.status!.conditions?.find((c) => c.type === 'Reserved')).toMatchObject({ status: 'True', reason: 'Reserved' });
    // Exactly these atoms are booked in the ledger, under the Reservation's uid.
    const booked = await liveBookings(poolId);
    expect(booked.map((b) => b.device_id).sort()).toEqual([...allocs[0]!.atoms].sort());
    expect(new Set(booked.map((b) => b.idempotency_key))).toEqual(new Set([r.metadata.uid]));
    const events = await kubectlJson<List<KubeEvent & { involvedObject: { name: string } }>>(['-n', tenantNs, 'get', 'events', '--field-selector', 'involvedObject.name=one']);
    expect(events.items.map((e) => e.reason)).toContain('Reserved');
    // Deleting it releases the booking, then the object goes.
    await kubectl(['-n', tenantNs, 'delete', 'reservation', 'one', '--wait=true', '--timeout=30s']);
    expect(await liveBookings(poolId)).toEqual([]);
  });

  it('a Reservation whose window ends becomes Released, and its atoms are free again', async () => {
    const { pool, poolId } = await makePool(1, 2);
    await apply(reservation('short', pool, 2, { duration: 6 }));
    await waitFor('reservation short Reserved', async () => {
      const x = await kubectlJson<Rsv>(['-n', tenantNs, 'get', 'reservation', 'short']);
      return x.status?.phase === 'Reserved' && x;
    });
    const ended = await waitFor(
      'reservation short Released after its window',
      async () => {
        const x = await kubectlJson<Rsv>(['-n', tenantNs, 'get', 'reservation', 'short']);
        return x.status?.phase === 'Released' && x;
      },
      { timeoutMs: 30_000 },
    );
    expect(ended.status!.conditions?.find((c) => c.type === 'Reserved')).toMatchObject({ status: 'False', reason: 'Released', message: expect.stringContaining('ended at') });
    expect(await liveBookings(poolId)).toEqual([]);
    await apply(reservation('after-short', pool, 2));
    await waitFor('the next one fits', async () => (await kubectlJson<Rsv>(['-n', tenantNs, 'get', 'reservation', 'after-short'])).status?.phase === 'Reserved');
    await kubectl(['-n', tenantNs, 'delete', 'reservation', 'short', 'after-short', '--wait=true', '--timeout=30s']);
  });

  it('20 Reservations for fewer GPUs: exactly as many Reserved as fit, the rest Pending with reason and Event; deletes let Pending ones in', async () => {
    const { pool, poolId } = await makePool(2, 3);
    const names = Array.from({ length: 20 }, (_, i) => `many-${String(i).padStart(2, '0')}`);
    await apply(names.map((n) => reservation(n, pool)));
    const settled = async () => {
      const items = (await listReservations()).filter((x) => x.metadata.name.startsWith('many-'));
      const reserved = items.filter((x) => x.status?.phase === 'Reserved');
      const pending = items.filter((x) => x.status?.phase === 'Pending');
      return reserved.length + pending.length === items.length && items.length > 0 ? { reserved, pending, items } : undefined;
    };
    let s = await waitFor('20 reservations settled with 6 Reserved', async () => {
      const x = await settled();
      return x && x.reserved.length === 6 && x.pending.length === 14 ? x : undefined;
    });
    for (const p of s.pending) {
      expect(p.status!.conditions!.find((c) => c.type === 'Reserved')).toMatchObject({ status: 'False', reason: 'Unschedulable' });
      expect(p.status!.conditions!.find((c) => c.type === 'Reserved')!.message).toMatch(/nodes fit/);
    }
    const events = await kubectlJson<List<KubeEvent & { involvedObject: { name: string } }>>(['-n', tenantNs, 'get', 'events']);
    const unschedulable = new Set(events.items.filter((e) => e.reason === 'Unschedulable').map((e) => e.involvedObject.name));
    for (const p of s.pending) expect(unschedulable).toContain(p.metadata.name);
    // Distinct atoms, and the ledger agrees.
    const atoms = s.reserved.flatMap((x) => x.status!.allocations!.flatMap((a) => a.atoms));
    expect(new Set(atoms).size).toBe(6);
    expect((await liveBookings(poolId)).map((b) => b.device_id).sort()).toEqual([...atoms].sort());

    // Deleting 3 Reserved ones lets 3 Pending ones proceed.
    const gone = s.reserved.slice(0, 3).map((x) => x.metadata.name);
    await kubectl(['-n', tenantNs, 'delete', 'reservation', ...gone, '--wait=true', '--timeout=60s']);
    s = await waitFor('3 Pending ones Reserved after deletes', async () => {
      const x = await settled();
      return x && x.items.length === 17 && x.reserved.length === 6 && x.pending.length === 11 ? x : undefined;
    }, { timeoutMs: 30_000 });
    expect((await liveBookings(poolId)).length).toBe(6);
    await kubectl(['-n', tenantNs, 'delete', 'reservation', ...s.items.map((x) => x.metadata.name), '--wait=true', '--timeout=60s']);
    expect(await liveBookings(poolId)).toEqual([]);
  });

  it('cordoning a node takes its atoms out of allocatable; uncordoning brings them back', async () => {
    const { pool, nodes, poolId } = await makePool(2, 4);
    await kubectl(['cordon', nodes[0]!]);
    await waitFor('gpu allocatable 4 after cordon', async () => {
      const gpu = (await poolCapacity(hostDb.db, poolId)).find((r) => r.resource === 'gpu');
      return gpu?.allocatable === 4 && gpu.maintenance === 4;
    });
    await waitFor('Pool status shows it', async () => {
      const p = await kubectlJson<{ status?: { capacity?: { resource: string; allocatable: number }[] } }>(['get', 'pool', pool]);
      return p.status?.capacity?.find((r) => r.resource === 'gpu')?.allocatable === 4;
    });
    // Nothing is placed on the cordoned node.
    await apply(reservation('after-cordon', pool, 4));
    const r = await waitFor('after-cordon Reserved', async () => {
      const x = await kubectlJson<Rsv>(['-n', tenantNs, 'get', 'reservation', 'after-cordon']);
      return x.status?.phase === 'Reserved' && x;
    });
    expect(r.status!.allocations![0]!.node).toBe(nodes[1]);
    await kubectl(['uncordon', nodes[0]!]);
    await waitFor('gpu allocatable 8 after uncordon', async () => {
      const gpu = (await poolCapacity(hostDb.db, poolId)).find((r) => r.resource === 'gpu');
      return gpu?.allocatable === 8;
    });
    await kubectl(['-n', tenantNs, 'delete', 'reservation', 'after-cordon', '--wait=true', '--timeout=30s']);
  });

  it.skipIf(external)('resyncs after the API server restarts and misses nothing', async () => {
    const { pool, poolId } = await makePool(1, 4);
    await apply(reservation('before-restart', pool));
    await waitFor('before-restart Reserved', async () => (await kubectlJson<Rsv>(['-n', tenantNs, 'get', 'reservation', 'before-restart'])).status?.phase === 'Reserved');
    await restartComponent('kube-apiserver');
    // Right after the restart, while the controller's watches reconnect.
    await waitFor('apply after restart', () => apply(reservation('after-restart', pool, 2)), { timeoutMs: 60_000 });
    await waitFor('after-restart Reserved', async () => (await kubectlJson<Rsv>(['-n', tenantNs, 'get', 'reservation', 'after-restart'])).status?.phase === 'Reserved', { timeoutMs: 60_000 });
    // And a deletion after the restart is seen too.
    await kubectl(['-n', tenantNs, 'delete', 'reservation', 'before-restart', '--wait=true', '--timeout=60s']);
    expect((await liveBookings(poolId)).length).toBe(2);
    await kubectl(['-n', tenantNs, 'delete', 'reservation', 'after-restart', '--wait=true', '--timeout=60s']);
    expect(await liveBookings(poolId)).toEqual([]);
  });

  it('the leader killed mid-reconcile: the other replica takes over; no booking lost or doubled', async () => {
    const { pool, poolId } = await makePool(2, 4);
    const leader = (await leaderPod())!;
    const { rows: before } = await hostDb.db.query<{ epoch: number }>(`SELECT epoch FROM leader_fences WHERE name = 'better-compute-controller'`);
    const names = Array.from({ length: 12 }, (_, i) => `failover-${String(i).padStart(2, '0')}`);
    await apply(names.map((n) => reservation(n, pool)));
    // Kill the leader's pod (no graceful stop, no Lease release) as soon as it has booked some.
    await waitFor('the leader booked some', async () => {
      const { rows } = await hostDb.db.query(`SELECT 1 FROM reservations WHERE pool_id = $1`, [poolId]);
      return rows.length > 0;
    }, { intervalMs: 20 });
    await kubectl(['-n', SYSTEM_NS, 'delete', 'pod', leader, '--grace-period=0', '--force', '--wait=false']);
    const next = await waitFor('another replica leads', async () => {
      const l = await leaderPod();
      return l && l !== leader ? l : undefined;
    }, { timeoutMs: 60_000 });
    const items = await waitFor('12 failover reservations settled: 8 Reserved, 4 Pending', async () => {
      const all = (await listReservations()).filter((x) => x.metadata.name.startsWith('failover-'));
      const reserved = all.filter((x) => x.status?.phase === 'Reserved');
      const pending = all.filter((x) => x.status?.phase === 'Pending');
      return all.length === 12 && reserved.length === 8 && pending.length === 4 ? all : undefined;
    }, { timeoutMs: 90_000 });
    // The ledger holds exactly one booking per Reserved one, with the atoms its status shows; none for Pending ones.
    const booked = await liveBookings(poolId);
    const byKey = new Map<string, string[]>();
    for (const row of booked) byKey.set(row.idempotency_key, [...(byKey.get(row.idempotency_key) ?? []), row.device_id]);
    const { rows: rsvRows } = await hostDb.db.query<{ n: number }>(`SELECT count(*)::int AS n FROM reservations WHERE pool_id = $1`, [poolId]);
    expect(rsvRows[0]!.n).toBe(8);
    for (const x of items) {
      if (x.status?.phase === 'Reserved') expect(byKey.get(x.metadata.uid)?.sort()).toEqual(x.status.allocations!.flatMap((al) => al.atoms).sort());
      else expect(byKey.has(x.metadata.uid)).toBe(false);
    }
    expect(new Set(booked.map((r) => r.device_id)).size).toBe(booked.length);
    const { rows: after } = await hostDb.db.query<{ epoch: number; holder: string }>(`SELECT epoch, holder FROM leader_fences WHERE name = 'better-compute-controller'`);
    expect(Number(after[0]!.epoch)).toBeGreaterThan(Number(before[0]!.epoch));
    expect(after[0]!.holder).toBe(next);
    await kubectl(['-n', tenantNs, 'delete', 'reservation', ...names, '--wait=true', '--timeout=60s']);
    expect(await liveBookings(poolId)).toEqual([]);
  }, 240_000);
});

describe('deploy/overlays/trial over this install', () => {
  // The suites install one overlay after another, in whatever order they run; so do teams moving from a trial to an
  // external database, or back. This install's Deployment rolls (RollingUpdate, which the API server filled in with a
  // rollingUpdate block); the trial's is Recreate, which may not carry one, so its overlay must remove it.
  it("the trial overlay's controller Deployment applies over the external one's, server side and client side (dry run)", async () => {
    const overlay = writeTestOverlay({});
    const rendered = await kubectl(['kustomize', overlay]);
    fs.rmSync(overlay, { recursive: true, force: true });
    const deployment = YAML.parseAllDocuments(rendered)
      .map((d) => d.toJSON() as { kind: string; metadata: { name: string } })
      .find((o) => o.kind === 'Deployment' && o.metadata.name === 'better-compute-controller');
    expect(deployment).toBeDefined();
    const live = await kubectlJson<{ spec: { strategy: { type: string; rollingUpdate?: object } } }>(['-n', SYSTEM_NS, 'get', 'deployment', 'better-compute-controller']);
    expect(live.spec.strategy.type).toBe('RollingUpdate');
    expect(live.spec.strategy.rollingUpdate).toBeDefined();
    for (const how of [['--server-side', '--force-conflicts'], []]) {
      const r = await kubectlResult(['apply', ...how, '--dry-run=server', '-o', 'json', '-f', '-'], { input: JSON.stringify(deployment) });
      expect(r.code, `kubectl apply ${how.join(' ')}: ${r.stderr}`).toBe(0);
      expect((JSON.parse(r.stdout) as typeof live).spec.strategy).toEqual({ type: 'Recreate' });
    }
  });
});
