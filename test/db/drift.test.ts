// The drift reconcile on the real ledger: objects deleted from the cluster while no leader ran (so no delete event
// reaches the next leader) are repaired by the drift run at the next leadership start — nodes leave their pools and
// their GPUs stop being bookable, pools are archived, bookings of deleted Reservations are released, a lost
// finalizer is restored — and counted in bettercompute_drift_total; a view that is not complete changes nothing.
import { randomUUID } from 'node:crypto';
import { Registry } from 'prom-client';
import { beforeAll, describe, expect, it } from 'vitest';
import { setQuota } from '../../src/db/inventory.ts';
import { FencedError, Ledger } from '../../src/db/ledger.ts';
import { DRIFT_SERIES, type ClusterView } from '../../src/controller/drift-plan.ts';
import { runDrift, startDriftReconcile, type DriftDeps } from '../../src/controller/drift.ts';
import { FenceHolder, LEASE_NAME } from '../../src/controller/fence.ts';
import { driftMetrics } from '../../src/controller/metrics.ts';
import { type Reservation } from '../../src/kube/types.ts';
import { silentLogger } from '../../src/log.ts';
import { makeNode, makePool, reservation } from '../support/builders.ts';
import { useTestDatabase } from '../support/db.ts';
import { RESERVATION_FINALIZER } from '../../src/core/names.ts';

const ctx = useTestDatabase();
const HOUR = 3_600_000;

/** The reservation CRs the fake cluster holds, by the uid their booking was made with. */
const crs = new Map<string, Reservation>();
let registry: Registry;
let metrics: ReturnType<typeof driftMetrics>;
/** The fence and ledger of the leader that took over (the one that booked is gone). */
let leader: FenceHolder;
let ledger: Ledger;

beforeAll(async () => {
  registry = new Registry();
  metrics = driftMetrics(registry, DRIFT_SERIES);
});

/** A fresh leader: a new fence epoch and a fenced ledger, as onStartedLeading takes them. */
async function takeOver(): Promise<void> {
  leader = new FenceHolder(LEASE_NAME);
  await leader.take(ctx.db, `leader-${randomUUID().slice(0, 8)}`);
  ledger = new Ledger(ctx.db, { fence: leader.fence });
}

/** The cluster as it agrees with the ledger: every ledger node with its NodeDevices, every live pool, every CR. */
async function agreeingCluster(): Promise<ClusterView> {
  const nodes = (await ctx.db.query<{ id: string; present: boolean }>(
    `SELECT n.id, EXISTS (SELECT 1 FROM devices d WHERE d.node_id = n.id AND d.present) AS present FROM nodes n`,
  )).rows;
  const pools = (await ctx.db.query<{ name: string }>('SELECT name FROM pools WHERE NOT archived')).rows;
  return {
    nodes: nodes.map((n) => ({ metadata: { name: n.id } })),
    nodeDevices: nodes.filter((n) => n.present).map((n) => ({ metadata: { name: n.id }, spec: { gpus: [] } })),
    pools: pools.map((p) => ({ metadata: { name: p.name }, spec: { nodeSelector: {}, ownerTenant: 'acme' } })),
    reservations: [...crs.values()],
  };
}

/** Books as the Reservation reconciler does (idempotency key = the CR's uid) and keeps the CR in the fake cluster. */
async function bookFromCr(poolId: string, name: string, gpus: number): Promise<{ id: string; uid: string; atoms: string[] }> {
  const uid = randomUUID();
  const out = await new Ledger(ctx.db).reserve(
    reservation(poolId, { devices: [{ class: 'gpu', count: gpus }], idempotencyKey: uid }),
    ctx.clock.now(),
  );
  if (!out.ok) throw new Error(`${out.code}: ${out.message}`);
  crs.set(uid, {
    metadata: { name, namespace: 'team-a', uid, resourceVersion: '7', finalizers: [RESERVATION_FINALIZER] },
    spec: { pool: 'unused', devices: [{ class: 'gpu', count: gpus }], duration: 3600 },
  });
  return { id: out.reservation.id, uid, atoms: out.reservation.allocations.flatMap((a) => a.atoms) };
}

const finalizerCalls: { namespace: string; name: string; finalizers: string[]; resourceVersion: string }[] = [];

function deps(cluster: DriftDeps['cluster'], more: Partial<DriftDeps> = {}): DriftDeps {
  return {
    db: ctx.db,
    ledger,
    fence: leader.fence,
    log: silentLogger,
    metrics,
    cluster,
    async setReservationFinalizers(namespace, name, finalizers, resourceVersion) {
      finalizerCalls.push({ namespace, name, finalizers, resourceVersion });
      // As the API server would: the CR has them from now on.
      for (const [uid, r] of crs) {
        if (r.metadata.namespace === namespace && r.metadata.name === name) crs.set(uid, { ...r, metadata: { ...r.metadata, finalizers } });
      }
      return {};
    },
    ...more,
  };
}

async function quotaDriftAtoms(resource: string): Promise<number> {
  const m = await registry.getSingleMetric('bettercompute_drift_quota_atoms_total')!.get();
  return m.values.find((v) => v.labels.resource === resource)?.value ?? 0;
}

async function driftCount(kind: string, action: string): Promise<number> {
  const m = await registry.getSingleMetric('bettercompute_drift_total')!.get();
  return m.values.find((v) => v.labels.kind === kind && v.labels.action === action)?.value ?? Number.NaN;
}
async function lastComplete(): Promise<number> {
  return (await registry.getSingleMetric('bettercompute_drift_last_complete_timestamp_seconds')!.get()).values[0]!.value;
}
async function nodeRow(id: string) {
  return (await ctx.db.query<{ pool_id: string | null; connectivity: string; schedulable: boolean; present: number; bookable: number }>(
    `SELECT n.pool_id, n.connectivity, n.schedulable,
            (SELECT count(*) FROM devices d WHERE d.node_id = n.id AND d.present)::int AS present,
            (SELECT count(*) FROM devices d WHERE d.node_id = n.id AND d.bookable)::int AS bookable
     FROM nodes n WHERE n.id = $1`,
    [id],
  )).rows[0]!;
}

describe('drift reconcile at leadership start', () => {
  it('the node deleted during failover: it leaves its pool, its GPUs are no longer bookable, and it counts as node drift', async () => {
    const poolId = await makePool('failover').create(ctx.db);
    await makeNode('failover-n1').gpus(2).create(ctx.db, poolId);
    await makeNode('failover-n2').gpus(2).create(ctx.db, poolId);
    // The old leader booked n2's GPUs for a Reservation; then, with no leader running, n1's Node and NodeDevices were
    // deleted (an autoscaler scale-down during a rollout).
    const held = await bookFromCr(poolId, 'train', 2);
    const gone = held.atoms[0]!.includes('failover-n1') ? 'failover-n2' : 'failover-n1';
    expect(held.atoms.every((a) => !a.includes(gone))).toBe(true);
    const cluster = await agreeingCluster();
    cluster.nodes = cluster.nodes.filter((n) => n.metadata.name !== gone);
    cluster.nodeDevices = cluster.nodeDevices.filter((n) => n.metadata.name !== gone);

    await takeOver();
    // The fault: the new leader's ledger still books the deleted node's GPUs.
    const before = await ledger.preview(reservation(poolId, { devices: [{ class: 'gpu', count: 2 }] }), ctx.clock.now());
    expect(before).toMatchObject({ ok: true });
    const nodeDrift = await driftCount('node', 'left-pool');
    const devicesDrift = await driftCount('nodedevices', 'devices-removed');

    // Leadership start: the drift reconcile runs at once (startDriftReconcile), on the synced view.
    const fixed: unknown[] = [];
    const started = Date.now() / 1000;
    const running = startDriftReconcile({ ...deps(() => cluster, { onFixed: (f) => fixed.push(f) }), everyMs: 3_600_000 });
    const first = await running.first;
    await running.stop();
    expect(first).toMatchObject({ complete: true, failed: 0 });

    expect(await nodeRow(gone)).toMatchObject({ pool_id: null, connectivity: 'unreachable', schedulable: false, present: 0, bookable: 0 });
    const after = await ledger.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 2 }] }), ctx.clock.now());
    expect(after).toMatchObject({ ok: false, code: 'NO_CAPACITY' });
    // The booking on the node that stayed is untouched.
    expect((await ledger.get(held.id))!.state).toBe('confirmed');
    expect(await driftCount('node', 'left-pool')).toBe(nodeDrift + 1);
    expect(await driftCount('nodedevices', 'devices-removed')).toBe(devicesDrift + 1);
    expect(fixed).toEqual([
      { kind: 'nodedevices', action: 'devices-removed', node: gone, poolId },
      { kind: 'node', action: 'left-pool', node: gone, poolId },
    ]);
    expect(await lastComplete()).toBeGreaterThanOrEqual(Math.floor(started));

    // Idempotent: the next run finds nothing.
    const again = await runDrift(deps(() => cluster));
    expect(again).toMatchObject({ complete: true, fixed: [], failed: 0 });
  });

  it('a Pool deleted while no leader ran is archived: it takes no new bookings, and counts as pool drift', async () => {
    const poolId = await makePool('deleted-pool').create(ctx.db);
    await makeNode('deleted-pool-n1').gpus(2).create(ctx.db, poolId);
    const cluster = await agreeingCluster();
    cluster.pools = cluster.pools.filter((p) => p.metadata.name !== 'deleted-pool');
    await takeOver();
    expect(await ledger.preview(reservation(poolId), ctx.clock.now())).toMatchObject({ ok: true });
    const count = await driftCount('pool', 'archived');

    const run = await runDrift(deps(() => cluster));

    expect(run).toMatchObject({ complete: true, failed: 0, fixed: [{ kind: 'pool', action: 'archived', pool: 'deleted-pool', poolId }] });
    expect((await ctx.db.query('SELECT archived FROM pools WHERE id = $1', [poolId])).rows[0]).toEqual({ archived: true });
    expect(await ledger.reserve(reservation(poolId), ctx.clock.now())).toMatchObject({ ok: false, code: 'POOL_ARCHIVED' });
    expect(await driftCount('pool', 'archived')).toBe(count + 1);
  });

  it('a Reservation deleted while no leader ran has its booking released; one that lost its finalizer gets it back', async () => {
    const poolId = await makePool('rsv-drift').create(ctx.db);
    await makeNode('rsv-drift-n1').gpus(4).create(ctx.db, poolId);
    const deleted = await bookFromCr(poolId, 'deleted', 1);
    const unfinalized = await bookFromCr(poolId, 'unfinalized', 1);
    const deleting = await bookFromCr(poolId, 'deleting', 1);
    // Booked by someone else than the Reservation reconciler (its key is no Kubernetes uid): not ours to judge.
    const other = await new Ledger(ctx.db).reserve(reservation(poolId, { idempotencyKey: 'api-key-1' }), ctx.clock.now());
    if (!other.ok) throw new Error(other.code);
    crs.delete(deleted.uid);
    const lost = crs.get(unfinalized.uid)!;
    crs.set(unfinalized.uid, { ...lost, metadata: { ...lost.metadata, finalizers: ['example.com/other'], resourceVersion: '42' } });
    const going = crs.get(deleting.uid)!;
    crs.set(deleting.uid, { ...going, metadata: { ...going.metadata, finalizers: ['example.com/other'], deletionTimestamp: new Date().toISOString() } });
    const cluster = await agreeingCluster();
    await takeOver();
    const released = await driftCount('reservation', 'released');
    const restored = await driftCount('reservation', 'finalizer-restored');
    finalizerCalls.length = 0;

    const run = await runDrift(deps(() => cluster));

    expect(run).toMatchObject({ complete: true, failed: 0 });
    expect((await ledger.get(deleted.id))!.state).toBe('released');
    expect((await ledger.get(deleting.id))!.state).toBe('released');
    expect((await ledger.get(unfinalized.id))!.state).toBe('confirmed');
    expect((await ledger.get(other.reservation.id))!.state).toBe('confirmed');
    expect(finalizerCalls).toEqual([
      { namespace: 'team-a', name: 'unfinalized', finalizers: ['example.com/other', RESERVATION_FINALIZER], resourceVersion: '42' },
    ]);
    expect(await driftCount('reservation', 'released')).toBe(released + 2);
    expect(await driftCount('reservation', 'finalizer-restored')).toBe(restored + 1);
    // The released atoms are bookable again: all four GPUs but the two still booked.
    expect(await ledger.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 2 }] }), ctx.clock.now())).toMatchObject({ ok: true });
  });

  it('a view that is not complete (an informer not synced, or no Nodes at all) changes nothing', async () => {
    const poolId = await makePool('unsynced').create(ctx.db);
    await makeNode('unsynced-n1').gpus(2).create(ctx.db, poolId);
    const cr = await bookFromCr(poolId, 'unsynced', 1);
    crs.delete(cr.uid);
    const cluster = await agreeingCluster();
    await takeOver();
    const snapshot = async () => (await ctx.db.query(
      `SELECT (SELECT json_agg(n ORDER BY id) FROM (SELECT id, pool_id, connectivity, converged FROM nodes) n) AS nodes,
              (SELECT json_agg(d ORDER BY id) FROM (SELECT id, present, bookable FROM devices) d) AS devices,
              (SELECT json_agg(p ORDER BY id) FROM (SELECT id, archived FROM pools) p) AS pools,
              (SELECT json_agg(r ORDER BY id) FROM (SELECT id, state FROM reservations) r) AS reservations`,
    )).rows[0];
    const before = await snapshot();
    const stamp = await lastComplete();
    let swept = 0;
    const sweepPods = async () => ++swept;

    // An informer that has not synced: the view is undefined.
    const unsynced = await runDrift(deps(() => undefined, { sweepPods }));
    // A LIST that came back empty (or a cache emptied by a failed start): no Node at all, no Pool, no Reservation.
    const empty = await runDrift(deps(() => ({ nodes: [], nodeDevices: [], pools: [], reservations: [] }), { sweepPods }));

    expect(unsynced).toMatchObject({ complete: false, fixed: [], skipped: expect.stringMatching(/not complete/) });
    expect(empty).toMatchObject({ complete: false, fixed: [], skipped: expect.stringMatching(/no Nodes/) });
    expect(await snapshot()).toEqual(before);
    expect(swept).toBe(0);
    expect(await lastComplete()).toBe(stamp);
    // The same deletion, seen in a complete view, is fixed.
    expect((await runDrift(deps(() => cluster))).fixed).toEqual([
      { kind: 'reservation', action: 'released', reservationId: cr.id, poolId, uid: cr.uid },
    ]);
  });

  it('counts the pods the orphan sweep released, and quota counters that drifted — not those of a normal calendar', async () => {
    const poolId = await makePool('quota-drift').offer('beta', { gpu: 4 }).create(ctx.db);
    await makeNode('quota-drift-n1').gpus(4).create(ctx.db, poolId);
    const book = new Ledger(ctx.db);
    // A calendar: 2 GPUs now and 2 from tomorrow; the counters are exact, time only moves them.
    for (const start of [undefined, ctx.clock.now() + 24 * HOUR]) {
      const r = await book.reserve(reservation(poolId, { tenantId: 'beta', devices: [{ class: 'gpu', count: 2 }], ...(start ? { start } : {}) }), ctx.clock.now());
      expect(r.ok).toBe(true);
    }
    const cluster = await agreeingCluster();
    await takeOver();
    const pods = await driftCount('pod', 'released');
    const quota = await driftCount('quota', 'corrected');

    const calm = await runDrift(deps(() => cluster, { sweepPods: async () => 3 }));
    expect(calm).toMatchObject({ complete: true, pods: 3, quota: 0 });
    expect(await driftCount('pod', 'released')).toBe(pods + 3);
    expect(await driftCount('quota', 'corrected')).toBe(quota);

    // A counter that lost a booking (a write behind the ledger's back): counted, and rebuilt.
    const atoms = await quotaDriftAtoms('gpu');
    await ctx.db.query(`UPDATE quotas SET used = 0 WHERE tenant_id = 'beta' AND pool_id = $1 AND resource = 'gpu'`, [poolId]);
    const fixed = await runDrift(deps(() => cluster));
    expect(fixed).toMatchObject({ complete: true, quota: 1, quotaAtoms: { gpu: 2 } });
    expect(await driftCount('quota', 'corrected')).toBe(quota + 1);
    expect(await quotaDriftAtoms('gpu')).toBe(atoms + 2);
    expect((await ctx.db.query(`SELECT used, reserved FROM quotas WHERE tenant_id = 'beta' AND pool_id = $1 AND resource = 'gpu'`, [poolId])).rows[0]).toEqual({ used: 2, reserved: 2 });
  });

  it('a key that becomes limited is counted at once: its stale counters are not quota drift', async () => {
    const poolId = await makePool('quota-newly-limited').offer('gamma').create(ctx.db);
    await makeNode('quota-newly-limited-n1').gpus(4).create(ctx.db, poolId);
    const r = await new Ledger(ctx.db).reserve(reservation(poolId, { tenantId: 'gamma', devices: [{ class: 'gpu', count: 3 }] }), ctx.clock.now());
    expect(r.ok).toBe(true);
    const cluster = await agreeingCluster();
    await takeOver();
    await runDrift(deps(() => cluster)); // the periodic rebuild counts the unlimited key
    // Its booking ends behind the counters' back (as time would), then the tenant gets a limit.
    await ctx.db.query(`UPDATE quotas SET used = 7 WHERE tenant_id = 'gamma' AND pool_id = $1 AND resource = 'gpu'`, [poolId]);
    await setQuota(ctx.db, 'gamma', poolId, 'gpu', 4);
    expect((await ctx.db.query(`SELECT used, max FROM quotas WHERE tenant_id = 'gamma' AND pool_id = $1 AND resource = 'gpu'`, [poolId])).rows[0]).toEqual({ used: 3, max: 4 });
    const quota = await driftCount('quota', 'corrected');
    const run = await runDrift(deps(() => cluster));
    expect(run).toMatchObject({ complete: true, quota: 0, quotaAtoms: {} });
    expect(await driftCount('quota', 'corrected')).toBe(quota);
  });

  it('a failed step leaves the run incomplete (last complete time unchanged); a deposed leader writes nothing', async () => {
    const cluster = await agreeingCluster();
    await takeOver();
    const stamp = await lastComplete();
    const failing = await runDrift(deps(() => cluster, { sweepPods: async () => Promise.reject(new Error('pods LIST failed')) }));
    expect(failing).toMatchObject({ complete: false, failed: 1 });
    expect(await lastComplete()).toBe(stamp);

    const poolId = await makePool('deposed').create(ctx.db);
    const deposed = leader;
    const deposedLedger = ledger;
    await takeOver(); // another replica took the fence
    await expect(
      runDrift({ ...deps(() => ({ ...cluster, pools: cluster.pools })), fence: deposed.fence, ledger: deposedLedger }),
    ).rejects.toBeInstanceOf(FencedError);
    expect((await ctx.db.query('SELECT archived FROM pools WHERE id = $1', [poolId])).rows[0]).toEqual({ archived: false });
  });
});
