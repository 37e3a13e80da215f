// NodeDevices → applyInventory for the node (devices and scalars replaced in one transaction). The spec is input from
// the node: it is validated before any SQL (InventoryReportSchema: no GPU or MIG GI/CI twice, whole scalars), and a spec
// the ledger refuses for what it says (a data or constraint error) is refused too: Accepted=False with the reason in
// status and a Warning Event, not retried until the spec changes. Only transient errors are retried. The rest of a
// report is applied even when some GPUs are not: a GPU another node owns is left out (DevicesAccepted=False,
// DeviceOwnedByOtherNode, a Warning Event naming that node), and a GPU whose layout changed while its atoms are booked
// keeps its previous layout (LayoutBusy=True, WaitingForBookings); both are tried again later. Status: Accepted,
// Applied, DevicesAccepted and LayoutBusy conditions.
import { InventoryReportSchema, reportIssues } from '../../core/inventory.ts';
import { constraintName, sqlState } from '../../db/errors.ts';
import { applyInventory, LayoutBusyError, type InventoryReport, type InventoryResult, type RefusedDevice } from '../../db/inventory.ts';
import { FencedError } from '../../db/ledger.ts';
import { layoutWindowSeconds, type ControllerContext } from '../context.ts';
import { fenced } from '../fence.ts';
import { inventoryGone } from '../gone.ts';
import type { ReconcileResult } from '../queue.ts';
import { findCondition, sameJson, setCondition, type Condition, type NodeDevicesCR } from '../../kube/types.ts';

/** The spec as the ledger's report, or why it cannot be one. */
export function toReport(nd: NodeDevicesCR): { ok: true; report: InventoryReport } | { ok: false; message: string } {
  const parsed = InventoryReportSchema.safeParse(nd.spec ?? {});
  if (!parsed.success) return { ok: false, message: `spec refused: ${reportIssues(parsed.error)}` };
  return {
    ok: true,
    report: {
      gpus: parsed.data.gpus.map((g) => ({ ...g, mig: g.mig ?? [] })),
      scalars: { ...parsed.data.scalars },
    },
  };
}

/**
 * An error of the ledger caused by what the report says, the same on every try: cardinality (a row affected twice),
 * data exceptions (a number out of range) and constraint violations, except the ones that depend on bookings.
 */
function refusedForInput(e: unknown): boolean {
  const s = sqlState(e) ?? '';
  if (s === '23P01' || constraintName(e) === 'check$node_resources$allocated') return false;
  return /^2[123]/.test(s);
}

/** What DevicesAccepted=False and its Event say: the refused GPUs by the node that owns them; '' when none. */
export function ownedMessage(refused: readonly RefusedDevice[]): string {
  const byOwner = new Map<string, string[]>();
  for (const r of refused) byOwner.set(r.owner, [...(byOwner.get(r.owner) ?? []), r.gpu]);
  return [...byOwner]
    .sort(([a], [b]) => (a < b ? -1 : 1))
    .map(([owner, gpus]) => `GPU ${gpus.sort().join(', ')} ${gpus.length > 1 ? 'are' : 'is'} node ${owner}'s (present in its NodeDevices)`)
    .concat(refused.length ? ['each is left out of this node until its node no longer reports it or is gone'] : [])
    .join('; ');
}

export class NodeDevicesReconciler {
  /** NodeDevices name → `${generation}|${reason}|${message}` of the last refusal Event. */
  private readonly refused = new Map<string, string>();
  /** NodeDevices name → `${generation}|${message}` of the last DeviceOwnedByOtherNode Event. */
  private readonly ownedEvent = new Map<string, string>();

  constructor(
    private readonly ctx: ControllerContext,
    /** Makes sure the node's row exists and is current (the Node reconciler, run inline). */
    private readonly syncNode: (name: string) => Promise<ReconcileResult>,
  ) {}

  async reconcile(name: string): Promise<ReconcileResult> {
    const ctx = this.ctx;
    const nd = ctx.informers.nodeDevices.get(name);
    if (!nd) {
      // The report is gone: the node's devices are no longer present (rows stay for history). Whether or not the
      // Node went first (an autoscaler deletes both, in either order).
      if (ctx.inventoryApplied.has(name)) {
        await inventoryGone(ctx.db, ctx.fence(), name);
        const poolId = ctx.nodeWritten.get(name)?.poolId;
        if (poolId) ctx.ledger.invalidateNodes(poolId, [name]);
      }
      ctx.inventoryApplied.delete(name);
      this.refused.delete(name);
      this.ownedEvent.delete(name);
      return;
    }
    if (!ctx.informers.nodes.get(name)) {
      await this.writeStatus(nd, [{ type: 'Applied', status: 'False', reason: 'NodeNotFound', message: `no Node named ${name}` }]);
      return { requeueAfterMs: 5000 };
    }
    const r = await this.syncNode(name);
    const written = ctx.nodeWritten.get(name);
    if (!written) {
      await this.writeStatus(nd, [{ type: 'Applied', status: 'False', reason: 'WaitingForPool', message: 'the node is not in the ledger yet' }]);
      return r ?? { requeueAfterMs: 2000 };
    }
    const stamp = `${nd.metadata.generation ?? 0}|${written.poolId}`;
    if (ctx.inventoryApplied.get(name) === stamp && nd.status?.observedGeneration === nd.metadata.generation) return;
    const input = toReport(nd);
    if (!input.ok) return this.refuse(nd, 'InvalidSpec', input.message);
    try {
      const result = await fenced(ctx.db, ctx.fence(), (tx) => applyInventory(tx, name, input.report, layoutWindowSeconds(ctx.tuning)));
      // Done with this generation only when all of it is in the ledger; else the requeue applies it again.
      const whole = result.layoutPending.length === 0 && result.refused.length === 0;
      if (whole) ctx.inventoryApplied.set(name, stamp);
      else ctx.inventoryApplied.delete(name);
      this.refused.delete(name);
      if (written.poolId) ctx.ledger.invalidateNodes(written.poolId, [name]);
      await this.reportApplied(nd, input.report.gpus.length - result.refused.length, result);
      ctx.wakePending(ctx.poolNameOf(written.poolId));
      return whole ? undefined : { requeueAfterMs: 30_000 };
    } catch (e) {
      if (e instanceof FencedError) throw e;
      if (refusedForInput(e)) return this.refuse(nd, 'RefusedByLedger', `the ledger refused the spec: ${(e as Error).message}`);
      if (constraintName(e) === 'check$node_resources$allocated') {
        const message = `a scalar went below what is booked on the node now: ${(e as Error).message}`;
        await this.writeStatus(nd, [{ type: 'Applied', status: 'False', reason: 'ScalarsInUse', message }]);
        return { requeueAfterMs: 30_000 };
      }
      // A booking that landed on a layout change's atoms while it was being written (rare): nothing was written.
      if (!(e instanceof LayoutBusyError)) throw e;
      await this.writeStatus(nd, [
        { type: 'Applied', status: 'False', reason: 'LayoutBusy', message: e.message },
        { type: 'LayoutBusy', status: 'True', reason: 'WaitingForBookings', message: e.message },
      ]);
      return { requeueAfterMs: 30_000 };
    }
  }

  /**
   * Status and Events of an applied report: Applied=True, and what of it is not in the ledger yet. A GPU another node
   * owns: DevicesAccepted=False and one Warning Event per spec and message, naming the owner. A layout change held back
   * by bookings: LayoutBusy=True and one Warning Event when it starts waiting.
   */
  private async reportApplied(nd: NodeDevicesCR, gpus: number, result: InventoryResult): Promise<void> {
    const ctx = this.ctx;
    const name = nd.metadata.name;
    const { layoutChanged, layoutPending, refused } = result;
    ctx.log.info('inventory applied', { node: name, gpus, layoutChanged, layoutPending, refused });
    const applied = [
      `${gpus} GPUs in the ledger`,
      ...(layoutChanged.length ? [`layout changed: ${layoutChanged.join(', ')}`] : []),
      ...(layoutPending.length ? [`layout change waiting: ${layoutPending.join(', ')}`] : []),
      ...(refused.length ? [`refused (another node's): ${refused.map((r) => r.gpu).join(', ')}`] : []),
    ].join('; ');
    const owned = ownedMessage(refused);
    const stamp = `${nd.metadata.generation ?? 0}|${owned}`;
    if (!owned) this.ownedEvent.delete(name);
    else if (this.ownedEvent.get(name) !== stamp) {
      this.ownedEvent.set(name, stamp);
      await ctx.event(nd, 'NodeDevices', { type: 'Warning', reason: 'DeviceOwnedByOtherNode', message: owned });
    }
    const waiting = layoutPending.length
      ? `the layout change of GPU ${layoutPending.join(', ')} waits for the bookings of its atoms in the change window to end; until then it keeps its previous layout`
      : '';
    if (waiting && findCondition(nd.status?.conditions, 'LayoutBusy')?.status !== 'True') {
      await ctx.event(nd, 'NodeDevices', { type: 'Warning', reason: 'LayoutBusy', message: waiting });
    }
    await this.writeStatus(
      nd,
      [
        { type: 'Accepted', status: 'True', reason: 'Valid', message: '' },
        { type: 'Applied', status: 'True', reason: 'Applied', message: applied },
        owned
          ? { type: 'DevicesAccepted', status: 'False', reason: 'DeviceOwnedByOtherNode', message: owned }
          : { type: 'DevicesAccepted', status: 'True', reason: 'OwnDevices', message: '' },
        waiting
          ? { type: 'LayoutBusy', status: 'True', reason: 'WaitingForBookings', message: waiting }
          : { type: 'LayoutBusy', status: 'False', reason: 'Applied', message: '' },
      ],
      gpus,
    );
  }

  /**
   * A spec that cannot be applied as it is: the reason in status (Accepted=False) and one Warning Event per spec and
   * reason. No retry: the next generation (or the periodic resync) looks again; the ledger keeps the last good report.
   */
  private async refuse(nd: NodeDevicesCR, reason: string, message: string): Promise<ReconcileResult> {
    const ctx = this.ctx;
    const name = nd.metadata.name;
    const stamp = `${nd.metadata.generation ?? 0}|${reason}|${message}`;
    ctx.log.warn('NodeDevices refused', { node: name, generation: nd.metadata.generation, reason, message });
    if (this.refused.get(name) !== stamp) {
      this.refused.set(name, stamp);
      await ctx.event(nd, 'NodeDevices', { type: 'Warning', reason, message });
    }
    const accepted = findCondition(nd.status?.conditions, 'Accepted');
    const shown =
      nd.status?.observedGeneration === nd.metadata.generation && accepted?.status === 'False' && accepted.reason === reason && accepted.message === message;
    if (!shown) {
      await this.writeStatus(nd, [
        { type: 'Accepted', status: 'False', reason, message },
        { type: 'Applied', status: 'False', reason, message: 'the spec was refused; the ledger keeps the last accepted one' },
      ]);
    }
    return;
  }

  private async writeStatus(nd: NodeDevicesCR, conds: Condition[], gpus?: number): Promise<void> {
    const ctx = this.ctx;
    let conditions = nd.status?.conditions;
    for (const c of conds) conditions = setCondition(conditions, { ...c, observedGeneration: nd.metadata.generation ?? 0 }, ctx.nowIso());
    // A retry that finds the same (a GPU still another node's, a layout change still waiting) writes nothing.
    const unchanged =
      nd.status?.observedGeneration === (nd.metadata.generation ?? 0) &&
      sameJson(nd.status?.conditions, conditions) &&
      (gpus === undefined || nd.status?.gpus === gpus);
    if (unchanged) return;
    await ctx.kube.patchNodeDevicesStatus(nd.metadata.name, {
      observedGeneration: nd.metadata.generation ?? 0,
      conditions,
      ...(gpus !== undefined ? { gpus } : {}),
    });
  }
}
