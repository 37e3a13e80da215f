// Pools, nodes and their devices in the ledger. A node's reported devices replace its previous set atomically; a change
// of a GPU's layout (whole ↔ MIG ↔ slots, or another MIG set) books every atom of that GPU, parent included, for the
// change window (guard 2, the atom rule). A device has one owner node: another node's report of it is refused. The
// last report applied is kept per node (node_reports): a Pool's change of sharing or slotsPerGpu derives its nodes'
// atoms again from it, in the Pool's own transaction.
import {
  devicesFromReport,
  keptLayoutHealth,
  layoutAtoms,
  layoutChanges,
  ownedByOtherNode,
  type DeviceRow,
  type InventoryReport,
  type OtherNodesDevice,
} from '../core/inventory.ts';
import type { QuotaOverride, QuotaPeriod } from '../core/quota.ts';
import { DEFAULT_STOP_GRACE_SECONDS } from '../core/stop.ts';
import type { ScalarResource, Sharing } from '../core/types.ts';
import { newAllocationId, newPoolId } from '../ids.ts';
import { withTransaction, type Db } from './pool.ts';

/** How long a layout booking holds a GPU whose layout changed (guard 2, the change window), unless the caller says otherwise. */
export const DEFAULT_LAYOUT_WINDOW_SECONDS = 300;

export interface PoolSpec {
  id?: string;
  name: string;
  ownerTenant: string;
  gpuModel?: string | null;
  sharing?: Sharing;
  slotsPerGpu?: number;
  topologyKey?: string;
  nodeSelector?: Record<string, string>;
  overcommit?: Partial<Record<ScalarResource, number>>;
  archived?: boolean;
  /** The longest grace period a pod gets when its booking ends (docs/booking-end.md; default 30). */
  stopGraceSeconds?: number;
  /** How the pool's atoms reach pods (Pool spec.handoff, ADR 0043; default devicePlugin). */
  handoff?: 'devicePlugin' | 'dra';
  offerings?: {
    tenantId: string;
    quota?: Partial<Record<string, number | null>>;
    /**
     * GPU-hour limits (atom-hours per `hoursPeriod`, default a UTC month) per resource; when given, the offering's
     * limits are exactly these (a resource left out loses its limit).
     */
    hours?: Partial<Record<string, number | null>>;
    hoursPeriod?: QuotaPeriod;
    /** When given, replaces every override of the tenant's keys in the pool. */
    overrides?: QuotaOverride[];
  }[];
}

/** Creates or updates a pool by name (its id is kept), with its offerings and their quotas. Returns the id. */
export async function upsertPool(db: Db, spec: PoolSpec): Promise<string> {
  return (await syncPool(db, spec)).poolId;
}

/** What a node's last report gave when the Pool's sharing changed: its atoms derived again under the new setting. */
export interface NodeLayoutResult extends InventoryResult {
  node: string;
}

export interface PoolSyncResult {
  poolId: string;
  /**
   * The Pool's nodes whose atoms were derived again from their last report because its sharing or slotsPerGpu changed
   * (empty when neither did): each with the GPUs whose layout changed, and those that wait for their bookings to end.
   */
  layouts: NodeLayoutResult[];
}

/**
 * upsertPool, and what it did to the Pool's nodes: a change of `sharing` or `slotsPerGpu` applies each node's last
 * report again in the same transaction (applyInventory's rules: a GPU whose layout changes gets a layout booking, one
 * with an atom booked in the change window keeps its layout and is returned as pending, for the caller to try again).
 */
export async function syncPool(db: Db, spec: PoolSpec, layoutWindowSeconds = DEFAULT_LAYOUT_WINDOW_SECONDS): Promise<PoolSyncResult> {
  return withTransaction(db, async (c) => {
    const { poolId, archivedChanged, sharingChanged } = await writePoolRow(c, spec);
    // First, so that this transaction takes the nodes' locks before their counters (placements take them in that order).
    const layouts = sharingChanged ? await applyLastReports(c, poolId, layoutWindowSeconds) : [];
    // Every pool has a whole-GPU row, even one with only MIG or slot atoms (summaries sum it per GPU model).
    await c.query(`INSERT INTO pool_capacity_rollup (pool_id, resource) VALUES ($1, 'gpu') ON CONFLICT DO NOTHING`, [poolId]);
    // Ratios follow the pool onto its nodes' counters.
    await c.query(
      `UPDATE node_resources nr SET ratio = coalesce((p.overcommit ->> nr.resource)::numeric, 1)
       FROM nodes n, pools p WHERE n.id = nr.node_id AND p.id = n.pool_id AND p.id = $1`,
      [poolId],
    );
    if (spec.offerings) {
      const tenants = spec.offerings.map((o) => o.tenantId);
      await c.query('DELETE FROM pool_offerings WHERE pool_id = $1 AND NOT (tenant_id = ANY ($2))', [poolId, tenants]);
      for (const o of spec.offerings) await writeOffering(c, poolId, o);
    }
    // Archiving moves the pool's atoms between buckets: recount (rare, so the whole rebuild is fine).
    if (archivedChanged) await c.query('SELECT bc_rebuild_rollup()');
    return { poolId, layouts };
  });
}

/** Each node of the pool with a report kept, in id order (the lock order), its last report applied again. */
async function applyLastReports(c: Queryable, poolId: string, layoutWindowSeconds: number): Promise<NodeLayoutResult[]> {
  const { rows } = await c.query<{ node_id: string; report: InventoryReport }>(
    `SELECT r.node_id, r.report FROM node_reports r JOIN nodes n ON n.id = r.node_id WHERE n.pool_id = $1 ORDER BY r.node_id`,
    [poolId],
  );
  const out: NodeLayoutResult[] = [];
  for (const r of rows) out.push({ node: r.node_id, ...(await applyReport(c, r.node_id, r.report, layoutWindowSeconds)) });
  return out;
}

interface PoolRowWrite {
  poolId: string;
  archivedChanged: boolean;
  /** An existing pool's sharing or slotsPerGpu changed: its nodes' atoms are derived again. */
  sharingChanged: boolean;
}

/** The pool's row, by name; whether its archived flag, and its sharing, changed. */
async function writePoolRow(c: Queryable, spec: PoolSpec): Promise<PoolRowWrite> {
  const { rows } = await c.query<{ id: string; was_archived: boolean | null; was_sharing: Sharing | null; was_slots: number | null }>(
    `INSERT INTO pools (id, name, owner_tenant, gpu_model, sharing, slots_per_gpu, topology_key, node_selector, overcommit, archived,
                        stop_grace_seconds, handoff)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
     ON CONFLICT (name) DO UPDATE SET owner_tenant = EXCLUDED.owner_tenant, gpu_model = EXCLUDED.gpu_model,
       sharing = EXCLUDED.sharing, slots_per_gpu = EXCLUDED.slots_per_gpu, topology_key = EXCLUDED.topology_key,
       node_selector = EXCLUDED.node_selector, overcommit = EXCLUDED.overcommit, archived = EXCLUDED.archived,
       stop_grace_seconds = EXCLUDED.stop_grace_seconds, handoff = EXCLUDED.handoff, updated_at = compute_now()
     RETURNING id, (SELECT archived FROM pools WHERE name = $2) AS was_archived, (SELECT sharing FROM pools WHERE name = $2) AS was_sharing,
       (SELECT slots_per_gpu FROM pools WHERE name = $2) AS was_slots`,
    [
      spec.id ?? newPoolId(),
      spec.name,
      spec.ownerTenant,
      spec.gpuModel ?? null,
      spec.sharing ?? 'exclusive',
      spec.slotsPerGpu ?? 1,
      spec.topologyKey ?? 'topology.kubernetes.io/zone',
      spec.nodeSelector ?? {},
      spec.overcommit ?? {},
      spec.archived ?? false,
      spec.stopGraceSeconds ?? DEFAULT_STOP_GRACE_SECONDS,
      spec.handoff ?? 'devicePlugin',
    ],
  );
  const row = rows[0]!;
  const existed = row.was_archived !== null;
  return {
    poolId: row.id,
    archivedChanged: existed && row.was_archived !== (spec.archived ?? false),
    sharingChanged: existed && (row.was_sharing !== (spec.sharing ?? 'exclusive') || row.was_slots !== (spec.slotsPerGpu ?? 1)),
  };
}

/** One tenant's offering in the pool: its limits, hour budgets (exactly those given) and overrides (when given). */
async function writeOffering(c: Queryable, poolId: string, o: NonNullable<PoolSpec['offerings']>[number]): Promise<void> {
  await c.query('INSERT INTO pool_offerings (pool_id, tenant_id) VALUES ($1, $2) ON CONFLICT DO NOTHING', [poolId, o.tenantId]);
  for (const [resource, max] of Object.entries(o.quota ?? {})) {
    await setQuotaIn(c, o.tenantId, poolId, resource, max ?? null);
  }
  if (o.hours) {
    const limited = Object.entries(o.hours).filter(([, limit]) => limit !== null && limit !== undefined);
    await c.query(
      `UPDATE quotas SET hour_limit = NULL
       WHERE tenant_id = $1 AND pool_id = $2 AND hour_limit IS NOT NULL AND NOT (resource = ANY ($3))`,
      [o.tenantId, poolId, limited.map(([resource]) => resource)],
    );
    for (const [resource, limit] of limited) {
      await setQuotaHoursIn(c, o.tenantId, poolId, resource, limit ?? null, o.hoursPeriod ?? 'month');
    }
  }
  if (o.overrides) await replaceOverridesIn(c, o.tenantId, poolId, o.overrides);
}

interface Queryable {
  query: Db['query'];
}

async function setQuotaIn(c: Queryable, tenantId: string, poolId: string, resource: string, max: number | null) {
  // The limit changes; `used` never does. Lowering below use only blocks new bookings: the backstop trigger sets
  // `grace` from the key's charges and overrides at this change (ADR 0045), so check$quotas$used stays true.
  await c.query(
    'INSERT INTO quotas (tenant_id, pool_id, resource, max) VALUES ($1, $2, $3, NULL) ON CONFLICT DO NOTHING',
    [tenantId, poolId, resource],
  );
  const { rows } = await c.query<{ counted: boolean }>(
    'SELECT max IS NOT NULL AS counted FROM quotas WHERE tenant_id = $1 AND pool_id = $2 AND resource = $3 FOR UPDATE',
    [tenantId, poolId, resource],
  );
  // An unlimited key's counters are only kept by the periodic rebuild: a key that becomes limited is counted first, in
  // the same transaction, so that the CHECK meets true counters and the drift reconcile never mistakes stale ones for
  // drift.
  if (max !== null && !rows[0]!.counted) await c.query('SELECT bc_refresh_quota($1, $2, $3)', [tenantId, poolId, resource]);
  await c.query('UPDATE quotas SET max = $4 WHERE tenant_id = $1 AND pool_id = $2 AND resource = $3', [tenantId, poolId, resource, max]);
}

/** Sets a tenant's limit in a pool for one resource (`gpu`, `gpu.mig`, `gpu.slot`); null removes the limit. */
export async function setQuota(db: Db, tenantId: string, poolId: string, resource: string, max: number | null) {
  await withTransaction(db, (c) => setQuotaIn(c, tenantId, poolId, resource, max));
}

async function setQuotaHoursIn(c: Queryable, tenantId: string, poolId: string, resource: string, limit: number | null, period: QuotaPeriod) {
  // Like `max`: the UPDATE waits for bookings holding the row, and a lowered limit only blocks new bookings.
  await c.query(
    `INSERT INTO quotas (tenant_id, pool_id, resource, max, hour_limit, hour_period) VALUES ($1, $2, $3, NULL, $4, $5)
     ON CONFLICT (tenant_id, pool_id, resource) DO UPDATE SET hour_limit = EXCLUDED.hour_limit, hour_period = EXCLUDED.hour_period`,
    [tenantId, poolId, resource, limit, period],
  );
}

/**
 * Sets a tenant's GPU-hour limit in a pool for one resource: atom-hours per calendar period in UTC (default a month);
 * null removes it. Checked by every booking against the hours used and booked ahead in each period it touches.
 */
export async function setQuotaHours(db: Db, tenantId: string, poolId: string, resource: string, limit: number | null, period: QuotaPeriod = 'month') {
  await setQuotaHoursIn(db, tenantId, poolId, resource, limit, period);
}

const overrideRows = (overrides: readonly QuotaOverride[]) =>
  JSON.stringify(overrides.map((o) => ({ start: o.start, end: o.end, kind: o.kind, amount: o.amount })));

async function replaceOverridesIn(c: Queryable, tenantId: string, poolId: string, overrides: readonly QuotaOverride[]) {
  // The tenant's resources that have overrides now or will: each is replaced (emptied when absent from the list).
  const { rows } = await c.query<{ resource: string }>(
    `SELECT resource FROM quota_overrides WHERE tenant_id = $1 AND pool_id = $2
     UNION SELECT unnest($3::text[]) ORDER BY 1`,
    [tenantId, poolId, [...new Set(overrides.map((o) => o.resource))]],
  );
  for (const { resource } of rows) {
    await c.query('SELECT bc_set_quota_overrides($1, $2, $3, $4)', [
      tenantId,
      poolId,
      resource,
      overrideRows(overrides.filter((o) => o.resource === resource)),
    ]);
  }
}

/**
 * Replaces the time-bounded overrides of a tenant's instantaneous limit in a pool for one resource: in each window the
 * limit is `set` to a value or has `add` added (say +32 GPUs for a conference week). Windows must not overlap.
 */
export async function setQuotaOverrides(db: Db, tenantId: string, poolId: string, resource: string, overrides: readonly Omit<QuotaOverride, 'resource'>[]) {
  await db.query('SELECT bc_set_quota_overrides($1, $2, $3, $4)', [
    tenantId,
    poolId,
    resource,
    overrideRows(overrides.map((o) => ({ ...o, resource }))),
  ]);
}

export interface NodeSpec {
  id: string;
  poolId: string | null;
  labels?: Record<string, string>;
  role?: string;
  trust?: 'platform' | 'tenant-owned' | 'tenant-controlled';
  ownerTenant?: string | null;
}

export async function upsertNode(db: Db, spec: NodeSpec): Promise<void> {
  await db.query(
    `INSERT INTO nodes (id, pool_id, labels, role, trust, owner_tenant) VALUES ($1, $2, $3, $4, $5, $6)
     ON CONFLICT (id) DO UPDATE SET pool_id = EXCLUDED.pool_id, labels = EXCLUDED.labels, role = EXCLUDED.role,
       trust = EXCLUDED.trust, owner_tenant = EXCLUDED.owner_tenant, updated_at = compute_now()`,
    [spec.id, spec.poolId, spec.labels ?? {}, spec.role ?? 'host', spec.trust ?? 'platform', spec.ownerTenant ?? null],
  );
}

export interface NodeState {
  cordoned?: boolean;
  maintenance?: boolean;
  connectivity?: string;
  noscheduleReason?: string | null;
  provisionState?: string;
}

const STATE_COLUMNS: Record<keyof NodeState, string> = {
  cordoned: 'cordoned',
  maintenance: 'maintenance',
  connectivity: 'connectivity',
  noscheduleReason: 'noschedule_reason',
  provisionState: 'provision_state',
};

/** Updates the schedulability fields of a node. The row lock orders it against in-flight placements (guard 4). */
export async function setNodeState(db: Db, nodeId: string, state: NodeState): Promise<void> {
  const entries = Object.entries(state).filter(([, v]) => v !== undefined) as [keyof NodeState, unknown][];
  if (entries.length === 0) return;
  const sets = entries.map(([k], i) => `${STATE_COLUMNS[k]} = $${i + 2}`).join(', ');
  await db.query(`UPDATE nodes SET ${sets}, updated_at = compute_now() WHERE id = $1`, [
    nodeId,
    ...entries.map(([, v]) => v),
  ]);
}

export async function setDeviceHealth(db: Db, deviceId: string, healthy: boolean): Promise<void> {
  await db.query('UPDATE devices SET healthy = $2 WHERE id = $1', [deviceId, healthy]);
}

export type { DeviceRow, GpuReport, InventoryReport, MigInstanceReport } from '../core/inventory.ts';
/** The device rows a report stands for (pure: src/core/inventory.ts). */
export { devicesFromReport };

/**
 * A layout change found busy only while writing it: a booking landed on one of its atoms after the check (which the
 * node row lock should rule out). The whole report is rolled back and tried again.
 */
export class LayoutBusyError extends Error {
  readonly code = 'LAYOUT_BUSY';
  constructor(readonly gpu: string) {
    super(`the layout of GPU ${gpu} changed while some of its atoms are booked in the change window`);
  }
}

/** A reported GPU another node owns (present in its inventory): left out of this node's. */
export interface RefusedDevice {
  gpu: string;
  /** The node that owns it. */
  owner: string;
}

export interface InventoryResult {
  /** GPUs whose layout changed: a layout booking holds all their atoms for the change window. */
  layoutChanged: string[];
  /**
   * GPUs whose reported layout differs but an atom is booked in the change window: they keep their previous rows
   * (health updated) until a later report finds them free.
   */
  layoutPending: string[];
  /** Reported GPUs that another node owns, left out with all their MIG instances and slots. */
  refused: RefusedDevice[];
}

/**
 * Replaces a node's devices with the reported set in one transaction. Devices no longer reported stay as rows
 * (history), no longer present nor bookable. A GPU another node owns (ownedByOtherNode: present there, that node not
 * gone) is refused, not moved: left out, with its children, and returned in `refused`. A GPU whose layout changed gets
 * a layout booking of every atom, old and new, parent included, for `layoutWindowSeconds`; if any of them is booked
 * then, that GPU alone keeps its previous layout (its health follows the report) and is returned in `layoutPending`.
 * The rest of the report is applied either way. Marks the node converged.
 */
export async function applyInventory(
  db: Db,
  nodeId: string,
  report: InventoryReport,
  layoutWindowSeconds = DEFAULT_LAYOUT_WINDOW_SECONDS,
): Promise<InventoryResult> {
  return withTransaction(db, (c) => applyReport(c, nodeId, report, layoutWindowSeconds));
}

/** applyInventory inside a transaction; the report is kept as the node's last (node_reports). */
async function applyReport(c: Queryable, nodeId: string, report: InventoryReport, layoutWindowSeconds: number): Promise<InventoryResult> {
  const node = await lockNode(c, nodeId);
  const { refused, gpus } = await withoutOthersGpus(c, nodeId, report);
  const plan = await planLayouts(c, nodeId, node, gpus, layoutWindowSeconds);
  await writeDevices(c, nodeId, plan, gpus);
  for (const gpu of plan.layoutChanged) await bookLayoutChange(c, nodeId, gpu, plan.atomsOf.get(gpu)!, layoutWindowSeconds);
  await writeScalars(c, nodeId, report.scalars ?? {}, node.overcommit ?? {});
  await c.query('UPDATE nodes SET converged = true, updated_at = compute_now() WHERE id = $1', [nodeId]);
  await c.query(
    `INSERT INTO node_reports (node_id, report) VALUES ($1, $2)
     ON CONFLICT (node_id) DO UPDATE SET report = EXCLUDED.report, applied_at = compute_now()`,
    [nodeId, JSON.stringify(report)],
  );
  return { layoutChanged: plan.layoutChanged, layoutPending: plan.layoutPending, refused };
}

interface InventoryNode {
  sharing: Sharing | null;
  slots_per_gpu: number | null;
  overcommit: Partial<Record<ScalarResource, number>> | null;
}

/** The node row first: placements on the node lock it FOR SHARE (bc_place), so none is in flight from here on. */
async function lockNode(c: Queryable, nodeId: string): Promise<InventoryNode> {
  const { rows } = await c.query<InventoryNode>(
    `SELECT n.id, p.sharing, p.slots_per_gpu, p.overcommit FROM nodes n LEFT JOIN pools p ON p.id = n.pool_id
     WHERE n.id = $1 FOR UPDATE OF n`,
    [nodeId],
  );
  const node = rows[0];
  if (!node) throw new Error(`node ${nodeId} is not known`);
  return node;
}

/**
 * The reported GPUs this node may have: another node's (present there, that node not gone) are refused. Their rows are
 * locked, so that their owner's report cannot drop or take them meanwhile.
 */
async function withoutOthersGpus(c: Queryable, nodeId: string, report: InventoryReport) {
  const { rows: others } = await c.query<OtherNodesDevice>(
    `SELECT d.id, d.node_id AS "nodeId", d.present, n.pool_id AS "nodePoolId", n.connectivity AS "nodeConnectivity"
     FROM devices d JOIN nodes n ON n.id = d.node_id
     WHERE d.id = ANY ($1) AND d.node_id <> $2 ORDER BY d.id FOR UPDATE OF d`,
    [report.gpus.map((g) => g.uuid), nodeId],
  );
  const refused: RefusedDevice[] = others.filter(ownedByOtherNode).map((d) => ({ gpu: d.id, owner: d.nodeId }));
  const refusedIds = new Set(refused.map((r) => r.gpu));
  return { refused, gpus: report.gpus.filter((g) => !refusedIds.has(g.uuid)) };
}

interface LayoutPlan {
  /** The atoms, old and new, parent included, of each GPU whose layout changes. */
  atomsOf: Map<string, string[]>;
  layoutChanged: string[];
  layoutPending: string[];
  /** The device rows to write: the report's, less those of GPUs whose layout change waits. */
  desired: DeviceRow[];
  /** The rows a waiting GPU keeps, with the health the report gives them. */
  kept: { id: string; healthy: boolean }[];
  waiting: Set<string>;
}

/** Which GPUs change layout, and which of those wait: a change whose atoms are booked in its window; the rest go ahead. */
async function planLayouts(
  c: Queryable,
  nodeId: string,
  node: InventoryNode,
  gpus: InventoryReport['gpus'],
  layoutWindowSeconds: number,
): Promise<LayoutPlan> {
  const reported = devicesFromReport({ gpus }, node.sharing ?? 'exclusive', node.slots_per_gpu ?? 1);
  const { rows: current } = await c.query<{ id: string; parentId: string | null; bookable: boolean }>(
    `SELECT id, parent_id AS "parentId", bookable FROM devices WHERE node_id = $1 AND present ORDER BY id FOR UPDATE`,
    [nodeId],
  );
  const atomsOf = new Map(layoutChanges(current, reported, gpus.map((g) => g.uuid)).map((gpu) => [gpu, layoutAtoms(gpu, current, reported)]));
  // No layout change (the usual report): nothing to look up.
  const { rows: busyRows } = atomsOf.size
    ? await c.query<{ device_id: string }>(
        `SELECT DISTINCT device_id FROM device_bookings
         WHERE device_id = ANY ($1) AND during && tstzrange(compute_now(), compute_now() + make_interval(secs => $2))`,
        [[...atomsOf.values()].flat(), layoutWindowSeconds],
      )
    : { rows: [] };
  const booked = new Set(busyRows.map((r) => r.device_id));
  const layoutPending = [...atomsOf.keys()].filter((gpu) => atomsOf.get(gpu)!.some((a) => booked.has(a)));
  const layoutChanged = [...atomsOf.keys()].filter((gpu) => !layoutPending.includes(gpu));
  const waiting = new Set(layoutPending);
  const gpuOf = (r: { id: string; parentId: string | null }) => r.parentId ?? r.id;
  return {
    atomsOf,
    layoutChanged,
    layoutPending,
    desired: reported.filter((d) => !waiting.has(gpuOf(d))),
    kept: layoutPending.flatMap((gpu) => keptLayoutHealth(gpu, current, reported)),
    waiting,
  };
}

/** Writes the desired rows, the kept rows' health, and marks what is no longer reported absent. */
async function writeDevices(c: Queryable, nodeId: string, plan: LayoutPlan, gpus: InventoryReport['gpus']): Promise<void> {
  const { desired, kept, waiting } = plan;
  await c.query(
    `INSERT INTO devices (id, node_id, class, parent_id, attributes, healthy, bookable, present)
     SELECT x.id, $1, x.class, x.parent_id, x.attributes, x.healthy, x.bookable, true
     FROM jsonb_to_recordset($2) AS x(id text, class text, parent_id text, attributes jsonb, healthy boolean, bookable boolean)
     ORDER BY x.parent_id NULLS FIRST
     ON CONFLICT (id) DO UPDATE SET node_id = EXCLUDED.node_id, class = EXCLUDED.class, parent_id = EXCLUDED.parent_id,
       attributes = EXCLUDED.attributes, healthy = EXCLUDED.healthy, bookable = EXCLUDED.bookable, present = true`,
    [
      nodeId,
      JSON.stringify(
        desired.map((d) => ({
          id: d.id,
          class: d.class,
          parent_id: d.parentId,
          attributes: d.attributes,
          healthy: d.healthy,
          bookable: d.bookable,
        })),
      ),
    ],
  );
  if (kept.length) {
    await c.query(
      `UPDATE devices d SET healthy = x.healthy FROM jsonb_to_recordset($2) AS x(id text, healthy boolean)
       WHERE d.id = x.id AND d.node_id = $1 AND d.healthy IS DISTINCT FROM x.healthy`,
      [nodeId, JSON.stringify(kept)],
    );
  }
  // No longer reported: this node's rows, and children of a GPU taken from a gone node that the report lacks.
  await c.query(
    `UPDATE devices SET present = false, bookable = false
     WHERE present AND NOT (id = ANY ($2)) AND (node_id = $1 OR parent_id = ANY ($3))`,
    [nodeId, [...desired.map((d) => d.id), ...kept.map((k) => k.id)], gpus.filter((g) => !waiting.has(g.uuid)).map((g) => g.uuid)],
  );
}

/** The layout booking of one GPU whose layout changed: every atom, old and new, for the change window (guard 2). */
async function bookLayoutChange(c: Queryable, nodeId: string, gpu: string, atoms: string[], layoutWindowSeconds: number): Promise<void> {
  const allocationId = newAllocationId();
  await c.query(
    `INSERT INTO allocations (id, kind, node_id, during)
     VALUES ($1, 'layout', $2, tstzrange(compute_now(), compute_now() + make_interval(secs => $3)))`,
    [allocationId, nodeId, layoutWindowSeconds],
  );
  const { rowCount } = await c.query(
    `INSERT INTO device_bookings (device_id, allocation_id, during, planned)
     SELECT unnest($1::text[]), a.id, a.during, a.during FROM allocations a WHERE a.id = $2
     ON CONFLICT DO NOTHING`,
    [atoms, allocationId],
  );
  if (rowCount !== atoms.length) throw new LayoutBusyError(gpu);
}

/** The node's scalar resources (vCPU, memory, hugepages) as reported, with the pool's overcommit ratios. */
async function writeScalars(c: Queryable, nodeId: string, scalars: NonNullable<InventoryReport['scalars']>, overcommit: Partial<Record<ScalarResource, number>>): Promise<void> {
  const entries = Object.entries(scalars);
  if (entries.length === 0) return;
  // One statement for all of them (a round trip each was most of an apply's time on a busy database).
  await c.query(
    `INSERT INTO node_resources (node_id, resource, allocatable, ratio)
     SELECT $1, x.resource, x.allocatable, coalesce(($4::jsonb ->> x.resource)::numeric, 1)
     FROM unnest($2::text[], $3::integer[]) AS x(resource, allocatable)
     ON CONFLICT (node_id, resource) DO UPDATE SET allocatable = EXCLUDED.allocatable, ratio = EXCLUDED.ratio`,
    [nodeId, entries.map(([r]) => r), entries.map(([, a]) => a), overcommit],
  );
}
