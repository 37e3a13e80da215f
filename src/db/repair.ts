// BookingRepair's I/O (ADR 0016, docs/repair.md): finds the live and future bookings of live reservations on atoms
// out of service (bc_lost_atoms), plans each reservation's repair with the pure core on fresh rows, and commits it in
// one transaction under the reservation's row lock: the cut (bc_repair_cut), the replacement (bc_place with repairOf,
// every guard applying) and the verdict (reservations.repair_*). A lost race rolls it all back; the next pass replans.
import type pg from 'pg';
import { cuttableNow, planRepair, type RepairAllocation, type RepairPlan } from '../core/repair.ts';
import type { DeviceClass } from '../core/types.ts';
import { newAllocationId } from '../ids.ts';
import { sqlState } from './errors.ts';
import { FencedError, toPlacementRequest, type Fence } from './ledger.ts';
import { withRetriedTransaction, type Db } from './pool.ts';
import { getPool, loadNodes } from './snapshot.ts';
import type { ReservationCreateInput } from '../core/schemas.ts';

export type LostReason = 'NodeGone' | 'Maintenance' | 'NodeNotReady' | 'DeviceGone' | 'DeviceUnhealthy';

export interface LostAtom {
  reservationId: string;
  allocationId: string;
  nodeId: string;
  deviceId: string;
  class: DeviceClass;
  reason: LostReason;
}

/** What one pass did to one reservation. */
export type RepairOutcome =
  | { reservationId: string; verdict: 'repaired'; atoms: number; reason: string }
  | { reservationId: string; verdict: 'degraded'; short: number; reason: string; message: string }
  | { reservationId: string; verdict: 'restored' }
  | { reservationId: string; verdict: 'contended' };

export interface RepairOptions {
  /** How long a node may be NotReady before its atoms count as lost. */
  graceSeconds: number;
  /** A leader's fence, checked in each repair's transaction. */
  fence?: () => Fence | undefined;
}

interface Queryable {
  query: pg.ClientBase['query'];
}

/**
 * The atoms out of service under live or future bookings of live reservations that repair may cut now: not those
 * that a running pod of the reservation may still hold (core/repair.ts cuttableNow; docs/repair.md).
 */
export async function lostAtoms(db: Queryable, graceSeconds: number, reservationId?: string): Promise<LostAtom[]> {
  const { rows } = await db.query<LostAtom>(
    `SELECT reservation_id AS "reservationId", allocation_id AS "allocationId", node_id AS "nodeId", device_id AS "deviceId",
            class, reason FROM bc_lost_atoms($1) WHERE $2::text IS NULL OR reservation_id = $2`,
    [graceSeconds, reservationId ?? null],
  );
  if (rows.length === 0) return rows;
  const { rows: pods } = await db.query<{ k: string }>(
    `SELECT DISTINCT reservation_id || ' ' || node_id AS k FROM reservation_pod_assignments
     WHERE released_at IS NULL AND reservation_id = ANY ($1)`,
    [[...new Set(rows.map((r) => r.reservationId))]],
  );
  return cuttableNow(rows, new Set(pods.map((p) => p.k)));
}

/**
 * One pass: every reservation with lost atoms is repaired (or marked Degraded with the atoms short), and every
 * reservation marked Degraded that has lost nothing any more (its node came back) is marked whole again. Returns what
 * changed, one outcome per reservation (unchanged Degraded ones are left out).
 */
export async function repairPass(db: Db, opts: RepairOptions): Promise<RepairOutcome[]> {
  const lost = await lostAtoms(db, opts.graceSeconds);
  const byReservation = new Map<string, LostAtom[]>();
  for (const l of lost) byReservation.set(l.reservationId, [...(byReservation.get(l.reservationId) ?? []), l]);
  const out: RepairOutcome[] = [];
  for (const [id, atoms] of byReservation) {
    const o = await repairReservation(db, opts, id, atoms);
    if (o) out.push(o);
  }
  const { rows } = await db.query<{ id: string }>(
    `SELECT id FROM reservations WHERE repair_short > 0 AND state IN ('held', 'confirmed') AND NOT (id = ANY ($1)) ORDER BY id`,
    [[...byReservation.keys()]],
  );
  for (const { id } of rows) {
    const restored = await tx(db, opts, async (c) => {
      const r = await c.query(
        `UPDATE reservations SET repair_short = 0, repaired_at = compute_now() WHERE id = $1 AND repair_short > 0
           AND NOT EXISTS (SELECT 1 FROM bc_lost_atoms($2) l WHERE l.reservation_id = $1)`,
        [id, opts.graceSeconds],
      );
      return (r.rowCount ?? 0) > 0;
    });
    if (restored) out.push({ reservationId: id, verdict: 'restored' });
  }
  return out;
}

interface Target {
  tenant_id: string;
  pool_id: string;
  request: ReservationCreateInput;
  start: number;
  end: number;
  now: number;
  repair_short: number;
  repair_reason: string | null;
  /** Set on a spot reservation under a preemption notice (ADR 0017). */
  preempt_at: Date | null;
}

/** A replacement bc_place refused (its code): the repair's transaction is rolled back. */
class NotPlaced extends Error {
  constructor(readonly refusal: string | undefined) {
    super('not placed');
  }
}

/** Repairs one reservation in one transaction; undefined when nothing changed (still Degraded by as much, or gone). */
async function repairReservation(db: Db, opts: RepairOptions, id: string, lost: LostAtom[]): Promise<RepairOutcome | undefined> {
  const reason = [...new Set(lost.map((l) => l.reason))].join(',');
  try {
    return await tx(db, opts, (c) => repairUnderLock(db, c, opts, id, reason));
  } catch (e) {
    if (!(e instanceof NotPlaced)) throw e;
    if (e.refusal !== 'quota') return { reservationId: id, verdict: 'contended' };
    return degradeOverQuota(db, opts, id, lost.length, reason);
  }
}

/** The repair under the reservation's row lock: the lost atoms read again, a plan, its cut and replacement, the verdict. */
async function repairUnderLock(db: Db, c: pg.PoolClient, opts: RepairOptions, id: string, reason: string): Promise<RepairOutcome | undefined> {
  const r = await lockTarget(c, id);
  if (!r) return undefined;
  // Read again under the lock: what another pass or a release did meanwhile counts.
  const current = await lostAtoms(c, opts.graceSeconds, id);
  if (current.length === 0) return undefined;
  // A spot reservation under a preemption notice ends at its deadline and its pods cannot move: it is reported short
  // by what it lost, not re-placed (ADR 0016).
  if (r.preempt_at !== null) return markShortUnderNotice(c, id, r, current.length, reason);
  const p = await planFor(db, c, id, r, current);
  if (!p) return undefined;
  if (p.placements.length > 0) await cutAndReplace(c, id, r, p);
  const message = p.short > 0 ? `${p.short} atoms short after losing ${current.length} (${reason}): ${p.reasons.join('; ')}` : '';
  if (p.placements.length === 0 && r.repair_short === p.short && r.repair_reason === reason) return undefined;
  await c.query(
    `UPDATE reservations SET repair_short = $2, repair_reason = $3,
            repaired_at = CASE WHEN $4 THEN compute_now() ELSE repaired_at END, repairs = repairs + CASE WHEN $4 THEN 1 ELSE 0 END
     WHERE id = $1`,
    [id, p.short, reason, p.placements.length > 0],
  );
  if (p.short > 0) return { reservationId: id, verdict: 'degraded', short: p.short, reason, message };
  return { reservationId: id, verdict: 'repaired', atoms: current.length, reason };
}

/** The live reservation, locked; undefined when it is gone or over. */
async function lockTarget(c: Queryable, id: string): Promise<Target | undefined> {
  const { rows } = await c.query<Target>(
    `SELECT tenant_id, pool_id, request, (extract(epoch FROM starts_at) * 1000)::float8 AS start,
            (extract(epoch FROM ends_at) * 1000)::float8 AS "end", (extract(epoch FROM compute_now()) * 1000)::float8 AS now,
            repair_short, repair_reason, preempt_at
     FROM reservations WHERE id = $1 AND state IN ('held', 'confirmed') FOR UPDATE`,
    [id],
  );
  return rows[0];
}

async function markShortUnderNotice(c: Queryable, id: string, r: Target, short: number, reason: string): Promise<RepairOutcome | undefined> {
  if (r.repair_short === short && r.repair_reason === reason) return undefined;
  await c.query('UPDATE reservations SET repair_short = $2, repair_reason = $3 WHERE id = $1', [id, short, reason]);
  const message = `${short} atoms short (${reason}): under a preemption notice, not re-placed before its deadline`;
  return { reservationId: id, verdict: 'degraded', short, reason, message };
}

/** The pure core's plan on fresh rows; undefined when the pool is gone. */
async function planFor(db: Db, c: Queryable, id: string, r: Target, current: LostAtom[]): Promise<RepairPlan | undefined> {
  const allocations = (await c.query<RepairAllocation>(
    `SELECT a.id, a.node_id AS "nodeId", array_agg(b.device_id ORDER BY b.device_id) AS atoms
     FROM allocations a JOIN device_bookings b ON b.allocation_id = a.id
     WHERE a.reservation_id = $1 AND a.released_at IS NULL AND NOT isempty(b.during) AND upper(b.during) > compute_now()
     GROUP BY a.id, a.node_id ORDER BY a.node_id`,
    [id],
  )).rows;
  // The snapshot is read outside the lock, like any placement's: bc_place's guards judge it at commit.
  const pool = await getPool(db, r.pool_id);
  if (!pool) return undefined;
  const nodes = await loadNodes(db, r.pool_id);
  const lostBy = new Map<string, string[]>();
  for (const l of current) lostBy.set(l.allocationId, [...(lostBy.get(l.allocationId) ?? []), l.deviceId]);
  const request = toPlacementRequest({ ...r.request, start: Math.max(r.now, r.start) }, r.now);
  return planRepair({
    pool: { id: pool.id, sharing: pool.sharing, topologyKey: pool.topologyKey, nodes },
    request: { ...request, window: { start: Math.max(r.now, r.start), end: r.end } },
    started: r.start <= r.now,
    allocations,
    lost: lostBy,
    classes: new Map(current.map((l) => [l.deviceId, l.class])),
  });
}

/** The cut (bc_repair_cut) and the replacement (bc_place with repairOf, every guard applying); NotPlaced when refused. */
async function cutAndReplace(c: Queryable, id: string, r: Target, p: RepairPlan): Promise<void> {
  await c.query('SELECT bc_repair_cut($1)', [JSON.stringify(p.cuts)]);
  const placed = await c.query<{ r: { ok: boolean; code?: string } }>('SELECT bc_place($1) AS r', [
    JSON.stringify({
      tenantId: r.tenant_id,
      poolId: r.pool_id,
      repairOf: id,
      reservation: null,
      podUid: null,
      allocations: p.placements.map((x) => ({ id: newAllocationId(), nodeId: x.nodeId, atoms: x.atoms, scalars: x.scalars })),
    }),
  ]);
  if (!placed.rows[0]!.r.ok) throw new NotPlaced(placed.rows[0]!.r.code);
}

/**
 * Quota refuses what the reservation itself would exceed (a limit lowered since it was booked): Degraded by all it
 * lost, in a transaction of its own (the repair's was rolled back).
 */
async function degradeOverQuota(db: Db, opts: RepairOptions, id: string, short: number, reason: string): Promise<RepairOutcome | undefined> {
  const changed = await tx(db, opts, async (c) =>
    (await c.query(
      `UPDATE reservations SET repair_short = $2, repair_reason = $3
       WHERE id = $1 AND state IN ('held', 'confirmed') AND (repair_short, repair_reason) IS DISTINCT FROM ($2, $3)`,
      [id, short, reason],
    )).rowCount,
  );
  if (!changed) return undefined;
  return { reservationId: id, verdict: 'degraded', short, reason, message: `${short} atoms short (${reason}): the replacement exceeds the tenant's quota` };
}

/** A transaction, fenced when a fence is given, run again on a deadlock. */
function tx<T>(db: Db, opts: RepairOptions, fn: (c: pg.PoolClient) => Promise<T>): Promise<T> {
  return withRetriedTransaction(db, async (c) => {
    const fence = opts.fence?.();
    if (fence) {
      try {
        await c.query('SELECT bc_check_fence($1, $2)', [fence.name, fence.epoch]);
      } catch (e) {
        if (sqlState(e) === 'BC009') throw new FencedError((e as Error).message);
        throw e;
      }
    }
    return fn(c);
  });
}
