// Pool → the ledger's pools row (upsertPool, id kept per name), status.poolId, and status.capacity (from the rollup)
// and status.quota (bc_quota_status) refreshed every capacityRefreshMs. A deleted Pool is archived in the ledger (its
// bookings and history stay).
import { DEFAULT_STOP_GRACE_SECONDS } from '../../core/stop.ts';
import { parseOfferingBudget } from '../../core/quota.ts';
import { poolCapacity } from '../../db/capacity.ts';
import { syncPool, type NodeLayoutResult, type PoolSpec } from '../../db/inventory.ts';
import { FencedError } from '../../db/ledger.ts';
import { quotaStatus, type QuotaStatus } from '../../db/quota.ts';
import { layoutWindowSeconds, type ControllerContext } from '../context.ts';
import { fenced } from '../fence.ts';
import { poolGone } from '../gone.ts';
import type { ReconcileResult } from '../queue.ts';
import { findCondition, sameJson, setCondition, type PoolCR } from '../../kube/types.ts';

/** A Pool whose spec the CRD schema let through but the controller cannot take (e.g. overlapping override windows). */
export class InvalidPoolSpecError extends Error {
  readonly code = 'INVALID_POOL_SPEC';
}

export function toPoolSpec(p: PoolCR): PoolSpec {
  const s = p.spec;
  const offerings = (s.offerings ?? []).map((o) => {
    // The budget fields are checked again here (zod): overlapping override windows are beyond the CRD schema.
    const budget = parseOfferingBudget({ gpuHours: o.gpuHours, gpuHoursPeriod: o.gpuHoursPeriod, quotaOverrides: o.quotaOverrides });
    if (!budget.ok) throw new InvalidPoolSpecError(`offering ${o.tenant}: ${budget.message}`);
    return {
      tenantId: o.tenant,
      quota: { ...(o.quota ?? {}) },
      hours: budget.value.hours,
      hoursPeriod: budget.value.hoursPeriod,
      overrides: budget.value.overrides,
    };
  });
  return {
    name: p.metadata.name,
    ownerTenant: s.ownerTenant,
    gpuModel: s.gpuModel ?? null,
    sharing: s.sharing ?? 'exclusive',
    slotsPerGpu: s.slotsPerGpu ?? 1,
    topologyKey: s.topologyKey ?? 'topology.kubernetes.io/zone',
    nodeSelector: s.nodeSelector ?? {},
    overcommit: s.overcommit ?? {},
    archived: s.archived ?? false,
    stopGraceSeconds: s.stopGraceSeconds ?? DEFAULT_STOP_GRACE_SECONDS,
    handoff: s.handoff ?? 'devicePlugin',
    offerings,
  };
}

export class PoolReconciler {
  /** `${generation}` last upserted per Pool name by this leader. */
  private readonly upserted = new Map<string, number>();

  constructor(private readonly ctx: ControllerContext) {}

  async reconcile(name: string): Promise<ReconcileResult> {
    const ctx = this.ctx;
    const pool = ctx.informers.pools.get(name);
    if (!pool) {
      // From the ledger row, not from memory: a Pool this leader never saw is archived the same way.
      const id = await poolGone(ctx.db, ctx.fence(), name);
      this.upserted.delete(name);
      ctx.poolIds.delete(name);
      if (id) {
        ctx.ledger.invalidate(id);
        ctx.log.info('pool deleted; archived in the ledger', { pool: name, poolId: id });
      }
      for (const n of ctx.informers.nodes.list()) ctx.queues.nodes.add(n.metadata.name);
      return;
    }
    const generation = pool.metadata.generation ?? 0;
    let poolId = ctx.poolIds.get(name);
    if (!poolId || this.upserted.get(name) !== generation) {
      try {
        const spec = toPoolSpec(pool);
        const synced = await fenced(ctx.db, ctx.fence(), (tx) => syncPool(tx, spec, layoutWindowSeconds(ctx.tuning)));
        poolId = synced.poolId;
        this.layoutsDerived(name, synced.layouts);
      } catch (e) {
        if (e instanceof FencedError) throw e;
        await this.writeStatus(pool, undefined, { status: 'False', reason: 'SyncFailed', message: (e as Error).message });
        throw e;
      }
      const moved = ctx.poolIds.get(name) !== poolId;
      ctx.poolIds.set(name, poolId);
      this.upserted.set(name, generation);
      ctx.ledger.invalidate(poolId);
      ctx.log.info('pool synced', { pool: name, poolId, generation });
      // Membership, sharing mode or offerings may have changed: nodes map again, Pending reservations try again.
      for (const n of ctx.informers.nodes.list()) ctx.queues.nodes.add(n.metadata.name);
      if (moved) for (const d of ctx.informers.nodeDevices.list()) ctx.queues.nodeDevices.add(d.metadata.name);
      ctx.wakePending(name);
    }
    await this.writeStatus(pool, poolId, { status: 'True', reason: 'Synced', message: `pool ${poolId} is in the ledger` });
    return { requeueAfterMs: ctx.tuning.capacityRefreshMs };
  }

  /**
   * The Pool's sharing changed and its nodes' atoms were derived again from their last reports (syncPool). Each node
   * whose layout changed or waits is reconciled again from its NodeDevices: its status says so (LayoutBusy while a GPU
   * waits for its bookings), and a waiting GPU is tried again every 30 s until it changes. A controller that stops
   * before this is no worse off: a new leader applies every NodeDevices at its start.
   */
  private layoutsDerived(pool: string, layouts: readonly NodeLayoutResult[]): void {
    const ctx = this.ctx;
    const touched = layouts.filter((l) => l.layoutChanged.length > 0 || l.layoutPending.length > 0);
    if (layouts.length) {
      ctx.log.info('pool sharing changed; atoms derived again from the last reports', {
        pool,
        nodes: layouts.length,
        layoutChanged: touched.flatMap((l) => l.layoutChanged),
        layoutPending: touched.flatMap((l) => l.layoutPending),
      });
    }
    for (const l of touched) {
      ctx.inventoryApplied.delete(l.node);
      ctx.queues.nodeDevices.add(l.node);
    }
  }

  private async writeStatus(
    pool: PoolCR,
    poolId: string | undefined,
    ready: { status: 'True' | 'False'; reason: string; message: string },
  ): Promise<void> {
    const ctx = this.ctx;
    const rows = poolId ? await poolCapacity(ctx.db, poolId) : [];
    const capacity = rows.map(({ poolId: _p, updatedAt: _u, ...r }) => r);
    const quota = poolId ? (await quotaStatus(ctx.db, { poolId })).map(quotaStatusEntry) : [];
    const prev = pool.status;
    const conditions = setCondition(prev?.conditions, { type: 'Ready', ...ready, observedGeneration: pool.metadata.generation ?? 0 }, ctx.nowIso());
    const same =
      prev?.poolId === poolId &&
      prev?.observedGeneration === pool.metadata.generation &&
      sameJson(prev?.capacity ?? [], capacity) &&
      sameJson(prev?.quota ?? [], quota) &&
      findCondition(prev?.conditions, 'Ready')?.reason === ready.reason;
    if (same) return;
    await ctx.kube.patchPoolStatus(pool.metadata.name, {
      ...(poolId ? { poolId } : {}),
      observedGeneration: pool.metadata.generation ?? 0,
      conditions,
      capacity,
      quota,
      updatedAt: ctx.nowIso(),
    });
  }
}

/** One key of status.quota (crds/pools.yaml): GPUs now and ahead, and the current period's GPU-hours. */
export function quotaStatusEntry(q: QuotaStatus): Record<string, unknown> {
  return {
    tenant: q.tenantId,
    resource: q.resource,
    limit: q.limit,
    used: q.used,
    reserved: q.reserved,
    gpuHours: {
      limit: q.hours.limit,
      period: q.hours.period,
      periodStart: new Date(q.hours.periodStart).toISOString(),
      periodEnd: new Date(q.hours.periodEnd).toISOString(),
      used: q.hours.used,
      reserved: q.hours.reserved,
    },
  };
}
