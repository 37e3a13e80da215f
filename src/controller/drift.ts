// The drift reconcile: the leader compares the ledger with the cluster at leadership start (once the informers have
// synced) and every `driftEvery`, and repairs what deletions no leader saw left behind: ledger nodes whose Node or
// NodeDevices is gone, pools whose Pool is gone, bookings whose Reservation is gone, Reservations that lost our
// finalizer; then the pods' orphan sweep (when given) and the quota counter rebuild. It acts only on a complete view
// (every informer synced, or a fresh successful LIST), never on a failed or partial one. What to fix is decided by
// planDrift() (pure, drift-plan.ts); the reads and writes are here.
import { FencedError, type Fence, type Ledger } from '../db/ledger.ts';
import { withTransaction, type Db } from '../db/pool.ts';
import { errorFields, type Logger } from '../log.ts';
import { fenced } from './fence.ts';
import { inventoryGone, nodeGone, poolGone } from './gone.ts';
import { statusOf } from '../kube/client.ts';
import type { DriftMetrics } from './metrics.ts';
import { startPeriodicJob, type PeriodicJob } from './periodic.ts';
import { incompleteReason, planDrift, type ClusterView, type DriftFix, type LedgerView } from './drift-plan.ts';
import { systemClock } from '../clock.ts';

export type { ClusterView, DriftFix } from './drift-plan.ts';

export interface DriftDeps {
  db: Db;
  /** The leader's (fenced) ledger: releases go through it, and its snapshots are invalidated after a fix. */
  ledger: Ledger;
  fence: () => Fence;
  log: Logger;
  metrics?: DriftMetrics;
  /** The cluster as the informers see it, or undefined while it is not complete (an informer not synced yet). */
  cluster: () => ClusterView | undefined | Promise<ClusterView | undefined>;
  /** Sets a Reservation's finalizers, conditional on its resourceVersion (KubeClient.setReservationFinalizers). */
  setReservationFinalizers(namespace: string, name: string, finalizers: string[], resourceVersion: string): Promise<unknown>;
  /**
   * Hook for the pod releaser's orphan sweep (src/controller/releaser.ts): releases the bookings of pods proven gone and
   * returns how many it released (counted as kind="pod"). Not wired while the releaser has no such sweep.
   */
  sweepPods?: () => Promise<number>;
  /** After each fix: the controller forgets what it remembered of the object and looks at it again. */
  onFixed?: (fix: DriftFix) => void;
}

export interface DriftRun {
  /** False when the cluster view was not complete (nothing was changed) or some step failed. */
  complete: boolean;
  /** Why the run did not act, when it did not. */
  skipped?: string;
  fixed: DriftFix[];
  failed: number;
  pods: number;
  /** Quota keys whose counters had drifted (see QUOTA_DRIFT_SQL). */
  quota: number;
  /** By resource, how many atoms those counters were off by: the size of the quota drift. */
  quotaAtoms: Record<string, number>;
}

/** The ledger side, in one snapshot; read before the cluster view (see LedgerView). */
export async function readLedgerView(db: Db): Promise<LedgerView> {
  return withTransaction(db, async (c) => {
    await c.query('SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY');
    const nodes = await c.query<LedgerView['nodes'][number]>(
      `SELECT n.id, n.pool_id AS "poolId", n.connectivity,
              (SELECT count(*) FROM devices d WHERE d.node_id = n.id AND d.present)::int AS "presentDevices"
       FROM nodes n ORDER BY n.id`,
    );
    const pools = await c.query<LedgerView['pools'][number]>('SELECT id, name, archived FROM pools ORDER BY name');
    const reservations = await c.query<LedgerView['reservations'][number]>(
      `SELECT id, pool_id AS "poolId", idempotency_key AS "idempotencyKey"
       FROM reservations WHERE state IN ('held', 'confirmed') ORDER BY id`,
    );
    return { nodes: nodes.rows, pools: pools.rows, reservations: reservations.rows };
  });
}

// Limited quota keys whose counters no passage of time explains: a limited key is recomputed at each of its bookings
// and releases, and between those, time only moves charges from reserved to used or lets them end; so `used +
// reserved` lies between the charges not yet ended and all its charges. (An unlimited key is only counted by the
// rebuild, so it has no drift to speak of.)
const QUOTA_DRIFT_SQL = `
  SELECT resource, count(*)::int AS keys,
         sum(greatest(coalesce(c.live, 0) - (q.used + q.reserved), (q.used + q.reserved) - coalesce(c.ever, 0)))::int AS atoms
  FROM quotas q LEFT JOIN (
    SELECT tenant_id, pool_id, resource, sum(amount) FILTER (WHERE upper(during) > compute_now()) AS live, sum(amount) AS ever
    FROM quota_charges WHERE NOT isempty(during) GROUP BY 1, 2, 3
  ) c USING (tenant_id, pool_id, resource)
  WHERE q.max IS NOT NULL
    AND (q.used + q.reserved < coalesce(c.live, 0) OR q.used + q.reserved > coalesce(c.ever, 0))
  GROUP BY resource`;

export interface QuotaDrift {
  /** Keys whose counters had drifted. */
  keys: number;
  /** By resource, the atoms by which they lay outside what time explains. */
  atoms: Record<string, number>;
}

/** Measures the quota keys' drift, then rebuilds every key's counters; one fenced transaction. */
export async function rebuildQuotas(db: Db, fence: Fence): Promise<QuotaDrift> {
  return fenced(db, fence, async (tx) => {
    // The rebuild's locks, in its order, first: no booking changes a key between the count and the rebuild.
    await tx.query('SELECT 1 FROM quotas ORDER BY tenant_id, pool_id, resource FOR UPDATE');
    const { rows } = await tx.query<{ resource: string; keys: number; atoms: number }>(QUOTA_DRIFT_SQL);
    await tx.query('SELECT bc_rebuild_quotas()');
    const drift: QuotaDrift = { keys: 0, atoms: {} };
    for (const r of rows) {
      drift.keys += r.keys;
      drift.atoms[r.resource] = r.atoms;
    }
    return drift;
  });
}

function fields(fix: DriftFix): Record<string, unknown> {
  const { kind: _k, action: _a, ...rest } = fix;
  if ('finalizers' in rest) {
    const { finalizers: _f, resourceVersion: _rv, ...shown } = rest;
    return shown;
  }
  return rest;
}

/** Applies one fix. False when there was nothing left to do (someone else did it meanwhile). */
async function apply(d: DriftDeps, fix: DriftFix): Promise<boolean> {
  switch (fix.kind) {
    case 'nodedevices':
      await inventoryGone(d.db, d.fence(), fix.node);
      if (fix.poolId) d.ledger.invalidate(fix.poolId);
      return true;
    case 'node':
      await nodeGone(d.db, d.fence(), fix.node);
      if (fix.poolId) d.ledger.invalidate(fix.poolId);
      return true;
    case 'pool': {
      const id = await poolGone(d.db, d.fence(), fix.pool);
      if (id) d.ledger.invalidate(id);
      return id !== undefined;
    }
    case 'reservation':
      if (fix.action === 'released') return d.ledger.release(fix.reservationId);
      try {
        await d.setReservationFinalizers(fix.namespace, fix.name, fix.finalizers, fix.resourceVersion);
        return true;
      } catch (e) {
        // Changed or deleted since the view: the next run (or the reconciler) looks at it again.
        if (statusOf(e) === 409 || statusOf(e) === 404) return false;
        throw e;
      }
  }
}

/** Applies the planned fixes, each on its own: a failure is counted and logged, and the next is tried. */
async function applyFixes(d: DriftDeps, run: DriftRun, fixes: Iterable<DriftFix>): Promise<void> {
  for (const fix of fixes) {
    try {
      if (!(await apply(d, fix))) continue;
    } catch (e) {
      if (e instanceof FencedError) throw e;
      run.failed++;
      d.log.warn('drift fix failed', { kind: fix.kind, action: fix.action, ...fields(fix), ...errorFields(e) });
      continue;
    }
    run.fixed.push(fix);
    d.metrics?.found(fix.kind, fix.action);
    d.log.info('drift fixed', { kind: fix.kind, action: fix.action, ...fields(fix) });
    d.onFixed?.(fix);
  }
}

/** The pods' sweep (when given) and the quota counters rebuilt: each a step whose failure is counted, not thrown. */
async function sweepAndRebuild(d: DriftDeps, run: DriftRun): Promise<void> {
  const step = async (what: string, fn: () => Promise<void>) => {
    try {
      await fn();
    } catch (e) {
      if (e instanceof FencedError) throw e;
      run.failed++;
      d.log.warn('drift step failed', { step: what, ...errorFields(e) });
    }
  };
  if (d.sweepPods) {
    const sweep = d.sweepPods;
    await step('pods', async () => {
      run.pods = await sweep();
      if (run.pods > 0) d.metrics?.found('pod', 'released', run.pods);
    });
  }
  await step('quota', async () => {
    const drift = await rebuildQuotas(d.db, d.fence());
    run.quota = drift.keys;
    run.quotaAtoms = drift.atoms;
    if (run.quota > 0) {
      d.metrics?.found('quota', 'corrected', run.quota);
      for (const [resource, atoms] of Object.entries(drift.atoms)) d.metrics?.quotaDrift(resource, atoms);
      d.log.info('drift fixed', { kind: 'quota', action: 'corrected', keys: run.quota, atoms: drift.atoms });
    }
  });
}

/** One drift reconcile. Throws FencedError when another replica leads; any other failure is counted and logged. */
export async function runDrift(d: DriftDeps): Promise<DriftRun> {
  const started = systemClock.now();
  const run: DriftRun = { complete: false, fixed: [], failed: 0, pods: 0, quota: 0, quotaAtoms: {} };
  // The ledger first: a row the cluster view then lacks was made from an object the caches held earlier, so the
  // object was deleted since (not created after the view was taken).
  const ledger = await readLedgerView(d.db);
  const cluster = await d.cluster();
  run.skipped = cluster ? incompleteReason(ledger, cluster) : 'the cluster view is not complete (an informer has not synced)';
  if (!cluster || run.skipped) {
    d.log.warn('drift reconcile skipped: nothing changed', { reason: run.skipped });
    return run;
  }

  await applyFixes(d, run, planDrift(ledger, cluster));
  await sweepAndRebuild(d, run);

  run.complete = run.failed === 0;
  if (run.complete) d.metrics?.completed(systemClock.wallNow().getTime() / 1000);
  const byKind: Record<string, number> = {};
  for (const f of run.fixed) byKind[`${f.kind}/${f.action}`] = (byKind[`${f.kind}/${f.action}`] ?? 0) + 1;
  d.log.info('drift reconcile done', {
    complete: run.complete,
    fixed: run.fixed.length,
    byKind,
    pods: run.pods,
    quota: run.quota,
    failed: run.failed,
    ms: Math.round(systemClock.now() - started),
  });
  return run;
}

export type DriftReconcile = PeriodicJob<DriftRun>;

/** The leader's periodic drift reconcile: once at once, then every `everyMs`, never two at a time. */
export function startDriftReconcile(d: DriftDeps & { everyMs: number }): DriftReconcile {
  return startPeriodicJob('drift reconcile', d.everyMs, d.log, () => runDrift(d));
}
