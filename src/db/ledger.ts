// The booking service: plans on a cached snapshot with the pure core, commits with bc_place() (group-committed:
// placements waiting at the same time go in one bc_place_batch() statement), and replans with fresh rows when the
// database says the snapshot was stale. PostgreSQL is the arbiter; the cache only saves reads, so a stale cache costs a
// replan, never a double booking.
import { createHash } from 'node:crypto';
import type { ReservationCreateInput } from '../core/schemas.ts';
import { earliestWindow, type WindowFound } from '../core/earliest-window.ts';
import { NodeGroups } from '../core/node-groups.ts';
import { plan, summarizeShared } from '../core/planner.ts';
import { choosePreemption } from '../core/preemption.ts';
import { selectorFromObject } from '../core/selector.ts';
import type { Candidate, NodeSnap, NodeSummary, PlacementRequest, PlanResult, PoolSnap } from '../core/types.ts';
import { quotaRefusalMessage, type QuotaRefusal } from '../core/quota.ts';
import { newAllocationId, newReservationId } from '../ids.ts';
import type pg from 'pg';
import { isRetryable, sqlState } from './errors.ts';
import { GroupCommit, type ItemOutcome } from './group-commit.ts';
import * as claims from './claims.ts';
import * as handoff from './handoff.ts';
import * as holds from './holds.ts';
import * as preemption from './preemption.ts';
import { withRetriedStatement, withRetriedTransaction, withTransaction, type Db } from './pool.ts';
import { getPool, isPoolVisible, loadNodes, type PoolInfo } from './snapshot.ts';
import { systemClock } from '../clock.ts';

export type ReservationState = 'held' | 'confirmed' | 'released' | 'expired';

export interface ReservationView {
  id: string;
  tenantId: string;
  poolId: string;
  state: ReservationState;
  spot: boolean;
  binding: string;
  start: number;
  end: number;
  leaseExpiresAt: number | null;
  allocations: { id: string; nodeId: string; atoms: string[] }[];
  /** Set by get(): whether it was booked with a hold (leaseSeconds), and when and by which pod the hold was confirmed. */
  hold?: { confirmedAt: number | null; confirmedByPod: string | null };
  /** Set by get(): when it was released or expired, and whether any pod was ever assigned to it. */
  endedAt?: number | null;
  everUsed?: boolean;
  /**
   * Set by get() once BookingRepair touched it (ADR 0016): atoms still short on out-of-service atoms (0: whole), why
   * they were lost, how many times it was re-placed, and when last.
   */
  repair?: { short: number; reason: string | null; repairs: number; repairedAt: number | null };
  /** Set by get() on a preempted spot reservation: its deadline, and the regular reservation that displaced it. */
  preemption?: { at: number; by: string };
}

export type ReserveFailure =
  | 'NOT_FOUND'
  | 'POOL_ARCHIVED'
  | 'NO_CAPACITY'
  | 'QUOTA_EXCEEDED'
  | 'IDEMPOTENCY_MISMATCH'
  | 'CONTENDED';

export type PreviewResult = PlanResult | (Extract<PlanResult, { ok: false }> & { preemptible: { count: number; start: number } });

/** The on-demand admission lease a pod's booking takes with it (handoff.takeAdmission). */
export interface PodAdmission {
  namespace: string;
  podName: string;
  ttlSeconds: number;
}

/** Ledger.bookPod's request: an on-demand pod's atoms on one node. */
export interface PodBookingRequest {
  tenantId: string;
  poolId: string;
  podUid: string;
  nodeId: string;
  devices: ReservationCreateInput['devices'];
  durationSeconds: number | null;
  admission?: PodAdmission;
  /**
   * The caller saw that the pod holds no booking (the extender's caught-up state): the look for one is skipped.
   * Were it wrong, the unique index of live pod allocations refuses the second, and the booking looks after all.
   */
  holdsNothing?: boolean;
}

/** A pod's booking that was not made because another pod's admission is in flight on the node (nothing written). */
interface AdmissionBusy {
  ok: false;
  code: 'ADMISSION_BUSY';
  message: string;
  replans: number;
}

/**
 * What a new pod booking wrote, for the extender's in-memory state to apply at once (ADR 0023): its atoms' booking from
 * `start` to `end` (Infinity: open-ended), written by transaction `tx`. Absent when the booking is the pod's existing
 * one, or was moved from another node, or claims scalar counters: then the state reloads what changed.
 */
export interface PodBookingWritten {
  readonly tx: string;
  readonly start: number;
  readonly end: number;
}

export type PodBookingOutcome =
  | { ok: true; allocationId: string; nodeId: string; atoms: string[]; existing: boolean; written?: PodBookingWritten }
  | { ok: false; code: ReserveFailure; message: string; details?: QuotaRefusal; replans: number }
  | AdmissionBusy;

export type ReserveOutcome =
  | { ok: true; reservation: ReservationView; existing: boolean; replans: number; tx?: string }
  | { ok: false; code: ReserveFailure; message: string; details?: QuotaRefusal; replans: number };

export interface LedgerMetrics {
  onPlacement?(seconds: number, outcome: string): void;
  onLostRace?(reason: string): void;
  onReplan?(): void;
}

export interface Fence {
  readonly name: string;
  readonly epoch: number;
}

export interface LedgerOptions {
  /** How many times one request replans after a lost race before it answers CONTENDED. */
  maxReplans?: number;
  metrics?: LedgerMetrics;
  /**
   * For a leader's ledger: every write first checks this fence (bc_check_fence) in its transaction, so a deposed
   * leader's writes fail with FencedError instead of committing. Read at each write (the epoch changes on election).
   */
  fence?: () => Fence | undefined;
  /** How long a spot reservation is warned before preemption (what preview's `preemptible.start` adds). Default 120 s. */
  spotNoticeSeconds?: number;
  /**
   * Group commit of placements: at most `maxBatch` (default and most 32: bc_place_batch.sql) per statement, at most
   * `maxInFlight` (default 3) statements at once; what waits is shared out over the free ones. Placements that arrive
   * while all of them run wait for the next batch.
   */
  groupCommit?: { maxBatch?: number; maxInFlight?: number };
}

export class FencedError extends Error {
  readonly code = 'FENCED';
  constructor(message: string) {
    super(message);
  }
}

/** An error that bc_place raised for one placement of a batch (its writes undone, the others' kept): SQLSTATE in `code`. */
export class PlacementError extends Error {
  constructor(
    message: string,
    readonly code: string,
    readonly constraint?: string,
  ) {
    super(message);
  }
}

/** The most items one bc_place_batch statement carries (two subtransactions each: functions/bc_place_batch.sql). */
const MAX_PLACE_BATCH = 32;
/**
 * How many bc_place_batch statements one process writes at once by default: while one commits, the next batch's
 * callers plan and the next statement runs (bench:placer at 10,000 nodes, 16 callers: 1 in flight 34–36% of the
 * floor, 3 in flight 55–72%; ADR 0021).
 */
const PLACE_BATCHES_IN_FLIGHT = 3;

interface CachedPool {
  info: PoolInfo;
  nodes: Map<string, NodeSnap>;
  snap: PoolSnap;
  /** The snapshot's nodes grouped by shared summary, kept current with their summaries (assume). */
  groups: NodeGroups;
  /** Summaries shared by nodes without bookings (summarizeShared): the planner screens each once per request. */
  summaries: Map<string, NodeSummary>;
}

/** bc_place's argument (migrations/functions/bc_place.sql), with the admission lease bc_place_batch takes for a pod. */
interface PlaceArg {
  tenantId: string;
  poolId: string;
  start: number | null;
  durationSeconds: number | null;
  reservation: Record<string, unknown> | null;
  podUid: string | null;
  allocations: { id: string; nodeId: string; atoms: readonly string[]; scalars: Candidate['scalars'] }[];
  admission?: PodAdmission & { nodeId: string; podUid: string };
}

function admissionBusy(nodeId: string, replans: number): AdmissionBusy {
  return { ok: false, code: 'ADMISSION_BUSY', message: `another on-demand admission is in flight on node ${nodeId}`, replans };
}

interface PlaceResult {
  ok: boolean;
  /** Set by bc_place_batch when bc_place raised for this item. */
  error?: { code: string; message: string; constraint: string | null };
  code?: string;
  nodeId?: string;
  existing?: boolean;
  reservationId?: string;
  state?: ReservationState;
  start?: number;
  end?: number | null;
  leaseExpiresAt?: number | null;
  /** A quota refusal's numbers. */
  details?: QuotaRefusal;
  /** The writing transaction's id (the extender's notifications carry it: functions/bc_extender_notify.sql). */
  tx?: string;
}

/** A pod's on-demand booking: on one node, maybe open-ended, maybe moving one from another node, maybe with its admission lease. */
interface PodPlacement {
  podUid: string;
  /** The node the pod's booking must be on; absent: any node of the pool that `nodeFilter` lets through (DRA). */
  nodeId?: string;
  nodeFilter?: (n: NodeSnap) => boolean;
  openEnded: boolean;
  replacing?: string;
  admission?: PodAdmission & { nodeId: string; podUid: string };
}

/** One request's reserveOnce, carried from pass to pass. */
interface Attempt {
  readonly input: ReservationCreateInput;
  readonly pod: PodPlacement | undefined;
  readonly req: PlacementRequest;
  /** The reservation row bc_place writes (null for a pod's booking). */
  readonly reservation: ReturnType<typeof newReservationRow> | null;
  readonly now: number;
  replans: number;
  refreshedAfterMiss: boolean;
}

/** Why a pass plans again. */
type ReplanWhy = 'preempt-stale' | 'retryable' | 'pool-unavailable' | 'lost-race';

/** What reserveOnce does after one pass of plan → place: answer, fail, or plan again (and how: REPLANS). */
type Step =
  | { do: 'answer'; outcome: ReserveOutcome | AdmissionBusy }
  | { do: 'throw'; error: unknown }
  /** "Does not fit" is said on fresh rows only: the pool is reloaded once, not counted as a replan. */
  | { do: 'refresh' }
  | { do: 'replan'; why: ReplanWhy; code?: string; nodes?: string[]; error?: unknown };

/**
 * The replans, one row each: whether a lost race is counted (always, or only when replans are left), the answer once
 * replans are spent, whether it counts as a replan in the metrics, and what is reloaded before the next pass.
 */
const REPLANS: Record<ReplanWhy, { lostRace?: 'always' | 'unless-spent'; spent: 'contended' | 'not-found' | 'throw'; countReplan: boolean; reload: 'pool' | 'nodes' | 'none' }> = {
  // A preemption whose victims changed, or whose placement lost a race: nothing written; plan on fresh rows.
  'preempt-stale': { spent: 'contended', countReplan: true, reload: 'pool' },
  // A serialization failure or deadlock of the placement: the same snapshot is planned again.
  retryable: { lostRace: 'unless-spent', spent: 'throw', countReplan: false, reload: 'none' },
  // The cached pool was stale (archived, or the offering withdrawn): look again with fresh rows.
  'pool-unavailable': { spent: 'not-found', countReplan: false, reload: 'pool' },
  // A lost race or a stale snapshot: reload what failed and plan again.
  'lost-race': { lostRace: 'always', spent: 'contended', countReplan: true, reload: 'nodes' },
};

function answer(outcome: ReserveOutcome | AdmissionBusy): Step {
  return { do: 'answer', outcome };
}

/** What bc_place's refusal means for the request (the table of its codes; any other is a lost race). */
function refusal(a: Attempt, r: PlaceResult, chosen: Candidate[]): Step {
  const { input, replans } = a;
  switch (r.code) {
    case 'admission_busy':
      return answer(admissionBusy(a.pod?.nodeId ?? '', replans));
    case 'pool_unavailable':
      return { do: 'replan', why: 'pool-unavailable' };
    case 'quota':
      return answer({
        ok: false,
        code: 'QUOTA_EXCEEDED',
        message: quotaRefusalMessage(input.tenantId, input.poolId, r.details),
        ...(r.details ? { details: r.details } : {}),
        replans,
      });
    case 'idempotency_mismatch':
      // Only reservations carry an idempotency key.
      return answer({
        ok: false,
        code: 'IDEMPOTENCY_MISMATCH',
        message: `idempotency key ${input.idempotencyKey} was used for a different request (${r.reservationId})`,
        replans,
      });
    default:
      return { do: 'replan', why: 'lost-race', code: r.code ?? 'unknown', nodes: r.nodeId ? [r.nodeId] : chosen.map((x) => x.nodeId) };
  }
}

/** A new booking's answer, from what bc_place wrote. */
function placedOutcome(a: Attempt, r: PlaceResult, chosen: Candidate[], allocations: PlaceArg['allocations'], window: { start: number; end: number }): ReserveOutcome {
  const atomsOnly = chosen.every((cand) => Object.keys(cand.scalars).length === 0);
  return {
    ok: true,
    existing: false,
    replans: a.replans,
    ...(a.pod && r.tx && atomsOnly ? { tx: r.tx } : {}),
    reservation: {
      id: r.reservationId!,
      tenantId: a.input.tenantId,
      poolId: a.input.poolId,
      state: r.state!,
      spot: a.reservation?.spot ?? false,
      binding: a.input.binding,
      start: window.start,
      end: window.end,
      leaseExpiresAt: r.leaseExpiresAt ?? null,
      allocations: allocations.map((x) => ({ id: x.id, nodeId: x.nodeId, atoms: [...x.atoms] })),
    },
  };
}

/** The reservation row a new reservation's bc_place writes. */
function newReservationRow(input: ReservationCreateInput) {
  return {
    id: newReservationId(),
    projectId: input.projectId ?? null,
    idempotencyKey: input.idempotencyKey,
    requestHash: requestHash(input),
    request: input,
    spot: input.spot ?? false,
    binding: input.binding,
    leaseSeconds: input.leaseSeconds ?? null,
  };
}

export class Ledger {
  private readonly pools = new Map<string, Promise<CachedPool>>();
  /** Per cached pool, nodes to read again before the snapshot's next use (invalidateNodes). */
  private readonly staleNodes = new Map<string, Set<string>>();
  private readonly maxReplans: number;
  private readonly spotNoticeMs: number;
  private readonly placements: GroupCommit<PlaceArg, PlaceResult>;

  constructor(
    readonly db: Db,
    private readonly opts: LedgerOptions = {},
  ) {
    this.maxReplans = opts.maxReplans ?? 16;
    this.spotNoticeMs = (opts.spotNoticeSeconds ?? 120) * 1000;
    this.placements = new GroupCommit((items) => this.placeBatch(items), {
      maxBatch: Math.min(MAX_PLACE_BATCH, opts.groupCommit?.maxBatch ?? MAX_PLACE_BATCH),
      maxInFlight: opts.groupCommit?.maxInFlight ?? PLACE_BATCHES_IN_FLIGHT,
    });
  }

  /** A transaction, fenced when this ledger belongs to a leader, run again when PostgreSQL aborts it for a deadlock. */
  private tx<T>(fn: (c: pg.PoolClient) => Promise<T>): Promise<T> {
    return withRetriedTransaction(this.db, async (c) => {
      await this.checkFence(c, this.opts.fence?.());
      return fn(c);
    });
  }

  /**
   * One statement: in a fenced transaction on a leader's ledger, else on its own (autocommit), which saves the BEGIN
   * and COMMIT round trips on the extender's hot path.
   */
  private statement<T>(fn: (c: Db | pg.PoolClient) => Promise<T>): Promise<T> {
    return this.opts.fence ? this.tx(fn) : withRetriedStatement(this.db, fn);
  }

  private async checkFence(c: pg.ClientBase, fence: Fence | undefined): Promise<void> {
    if (!fence) return;
    try {
      await c.query('SELECT bc_check_fence($1, $2)', [fence.name, fence.epoch]);
    } catch (e) {
      if (sqlState(e) === 'BC009') throw new FencedError((e as Error).message);
      throw e;
    }
  }

  /** Placements planned and waiting for the next group-commit batch (not yet being written). */
  get waitingPlacements(): number {
    return this.placements.waiting;
  }

  /** Drops every cached snapshot (e.g. after inventory or pool changes made elsewhere). */
  invalidate(poolId?: string): void {
    if (poolId) {
      this.pools.delete(poolId);
      this.staleNodes.delete(poolId);
    } else {
      this.pools.clear();
      this.staleNodes.clear();
    }
  }

  /**
   * Some nodes of a pool changed after a commit made elsewhere (a node's row, devices or counters, or its pool
   * membership: `poolId` is a pool the node is in now or was in): the cached snapshot, when there is one, reloads just
   * those nodes, once, before its next use. Changes that arrive meanwhile are reloaded together (one statement), so a
   * stream of inventory applies costs a node each rather than the whole pool each (docs/adr/0042). A node no longer in
   * the pool leaves the snapshot at that reload.
   */
  invalidateNodes(poolId: string, nodeIds: readonly string[]): void {
    if (!this.pools.has(poolId) || nodeIds.length === 0) return;
    const stale = this.staleNodes.get(poolId) ?? new Set<string>();
    for (const id of nodeIds) stale.add(id);
    this.staleNodes.set(poolId, stale);
  }

  private async load(poolId: string): Promise<CachedPool> {
    const info = await getPool(this.db, poolId);
    if (!info) throw new Error(`pool ${poolId} not found`);
    const summaries = new Map<string, NodeSummary>();
    const nodes = new Map(withSummaries(await loadNodes(this.db, poolId), summaries).map((n) => [n.id, n]));
    return { info, nodes, ...toSnap(info, nodes), summaries };
  }

  private cached(poolId: string, fresh = false): Promise<CachedPool> {
    let p = this.pools.get(poolId);
    const stale = this.staleNodes.get(poolId);
    this.staleNodes.delete(poolId);
    if (!p || fresh) p = this.load(poolId);
    // Read after the changes were committed (invalidateNodes is called after them), chained so that every later user
    // of the snapshot waits for it; a failure drops the whole snapshot, as a failed load does.
    else if (stale?.size) p = p.then(async (c) => (await this.reloadInto(c, poolId, [...stale]), c));
    else return p;
    p.catch(() => {
      if (this.pools.get(poolId) === p) this.pools.delete(poolId);
    });
    this.pools.set(poolId, p);
    return p;
  }

  private async reloadNodes(poolId: string, nodeIds: string[]): Promise<void> {
    await this.reloadInto(await this.cached(poolId), poolId, nodeIds);
  }

  /** Reads `nodeIds` of the pool again into the snapshot `c`; those no longer in the pool leave it. */
  private async reloadInto(c: CachedPool, poolId: string, nodeIds: string[]): Promise<void> {
    const fresh = withSummaries(await loadNodes(this.db, poolId, nodeIds), c.summaries);
    for (const id of nodeIds) c.nodes.delete(id);
    for (const n of fresh) c.nodes.set(n.id, n);
    ({ snap: c.snap, groups: c.groups } = toSnap(c.info, c.nodes));
  }

  /**
   * Runs the planner on fresh rows without writing and without quota (capacity.preview). When a regular request does
   * not fit, says how many spot reservations would get a notice for it to fit, and when it would then start (after the
   * notice period): a count only.
   */
  async preview(input: ReservationCreateInput, now: number): Promise<PreviewResult> {
    const c = await this.cached(input.poolId, true);
    return previewOn(c.snap, input, now, this.spotNoticeMs);
  }

  /**
   * The earliest start in [now, now + horizonMs] at which one of the inputs fits, on fresh rows, without writing and
   * without quota (core/earliest-window.ts): the inputs are alternatives of one pool, in preference; their starts are
   * ignored. Which input fitted is `shape`.
   */
  async earliestWindow(inputs: readonly ReservationCreateInput[], now: number, horizonMs: number): Promise<WindowFound> {
    const first = inputs[0];
    if (!first) return { ok: false, reason: 'nothing to place', tried: 0 };
    if (inputs.some((i) => i.poolId !== first.poolId)) throw new Error('earliestWindow: the inputs are of several pools');
    const c = await this.cached(first.poolId, true);
    return earliestWindow(c.snap, inputs.length, (shape, start) => toPlacementRequest({ ...inputs[shape]!, start }, now), now, now + horizonMs);
  }

  async reserve(input: ReservationCreateInput, now: number): Promise<ReserveOutcome> {
    const started = systemClock.now();
    const outcome = await this.reserveOnce(input, now);
    this.opts.metrics?.onPlacement?.((systemClock.now() - started) / 1000, outcome.ok ? 'reserved' : outcome.code);
    if (!outcome.ok && outcome.code === 'ADMISSION_BUSY') throw new Error('an admission lease outside a pod booking');
    return outcome;
  }

  /**
   * Books atoms on one node for an on-demand pod (no reservation), from now for `durationSeconds`, or open-ended when
   * null — open-ended only on atoms with no booking ahead, so it never overlaps a future booking. Quota and every guard
   * apply. Idempotent per pod: a pod that holds a live booking on this node gets it back. One on another node (left by a
   * bind that stopped before its Binding; the caller checked that the pod is not bound) is moved: released in the same
   * transaction that books the new one, and kept when the new one does not commit.
   * With `admission`, the node's admission lease for the pod is taken with the atoms in the same transaction as the
   * booking (or, for the pod's existing booking there, in one statement); while another pod's admission is in flight
   * there, nothing is written and the answer is ADMISSION_BUSY.
   */
  async bookPod(p: PodBookingRequest, now: number): Promise<PodBookingOutcome> {
    const admission = p.admission && { nodeId: p.nodeId, podUid: p.podUid, ...p.admission };
    const existing = p.holdsNothing ? undefined : await this.podBooking(p.podUid);
    if (existing?.nodeId === p.nodeId) {
      if (admission && !(await this.takeAdmission({ ...admission, atoms: existing.atoms }))) return admissionBusy(p.nodeId, 0);
      return { ok: true, ...existing, existing: true };
    }
    let outcome: Awaited<ReturnType<Ledger['reserveOnce']>>;
    try {
      outcome = await this.placePod(p, existing, admission, now);
    } catch (e) {
      if (p.holdsNothing && e instanceof PlacementError && e.constraint === 'unique$allocations$live_pod') return this.bookPod({ ...p, holdsNothing: false }, now);
      throw e;
    }
    if (existing && outcome.ok) await this.reloadMovedFrom(existing);
    return this.podOutcome(p, outcome, existing !== undefined);
  }

  /** The pod's booking through reserveOnce (on its node, moving `existing` when there is one), timed for the metrics. */
  private async placePod(
    p: PodBookingRequest,
    existing: { allocationId: string } | undefined,
    admission: PodPlacement['admission'],
    now: number,
  ): Promise<Awaited<ReturnType<Ledger['reserveOnce']>>> {
    const input: ReservationCreateInput = {
      tenantId: p.tenantId,
      poolId: p.poolId,
      devices: p.devices,
      duration: p.durationSeconds ?? 0,
      binding: 'hold',
      idempotencyKey: p.podUid,
    };
    const started = systemClock.now();
    const outcome = await this.reserveOnce(input, now, {
      podUid: p.podUid,
      nodeId: p.nodeId,
      openEnded: p.durationSeconds === null,
      ...(existing ? { replacing: existing.allocationId } : {}),
      ...(admission ? { admission } : {}),
    });
    this.opts.metrics?.onPlacement?.((systemClock.now() - started) / 1000, outcome.ok ? 'pod' : outcome.code);
    return outcome;
  }

  /** A booking moved from another node: that node's snapshot, when its pool is cached, loses it. */
  private async reloadMovedFrom(existing: { allocationId: string; nodeId: string }): Promise<void> {
    const pool = (await this.db.query<{ pool_id: string }>('SELECT pool_id FROM allocations WHERE id = $1', [existing.allocationId])).rows[0];
    if (pool && this.pools.has(pool.pool_id)) await this.reloadNodes(pool.pool_id, [existing.nodeId]);
  }

  /** reserveOnce's outcome as the pod's: a refusal may have lost to a concurrent bind of the same pod on this node. */
  private async podOutcome(p: PodBookingRequest, outcome: Awaited<ReturnType<Ledger['reserveOnce']>>, moved: boolean): Promise<PodBookingOutcome> {
    if (!outcome.ok && outcome.code === 'ADMISSION_BUSY') return outcome;
    if (!outcome.ok) {
      // A concurrent bind of the same pod on this node may have booked it meanwhile.
      const again = await this.podBooking(p.podUid);
      if (again?.nodeId === p.nodeId) return { ok: true, ...again, existing: true };
      return outcome;
    }
    const a = outcome.reservation.allocations[0]!;
    const { start, end } = outcome.reservation;
    return { ok: true, allocationId: a.id, nodeId: a.nodeId, atoms: a.atoms, existing: false, ...(outcome.tx && !moved ? { written: { tx: outcome.tx, start, end } } : {}) };
  }

  /** The live on-demand booking of a pod, if any. */
  async podBooking(podUid: string): Promise<{ allocationId: string; nodeId: string; atoms: string[] } | undefined> {
    const { rows } = await this.db.query(
      `SELECT a.id, a.node_id, coalesce(array_agg(b.device_id ORDER BY b.device_id) FILTER (WHERE b.id IS NOT NULL), '{}') AS atoms
       FROM allocations a LEFT JOIN device_bookings b ON b.allocation_id = a.id
       WHERE a.pod_uid = $1 AND a.kind = 'pod' AND a.released_at IS NULL GROUP BY a.id, a.node_id`,
      [podUid],
    );
    const r = rows[0];
    return r ? { allocationId: r.id, nodeId: r.node_id, atoms: r.atoms } : undefined;
  }

  /**
   * Gives back everything a pod holds, in one transaction: its reservation assignment freed, its on-demand booking
   * truncated (counters given back), its admission lease dropped. Idempotent. Returns whether it held an assignment or
   * a booking.
   */
  async releasePod(podUid: string): Promise<boolean> {
    return (await this.releasePodFreeing(podUid)).held;
  }

  /** releasePod, with the pools where bookings were given back (their pending Reservations may fit now). */
  async releasePodFreeing(podUid: string): Promise<{ held: boolean; pools: string[] }> {
    const r = await this.tx((c) => handoff.releasePodHoldings(c, podUid));
    for (const b of r.bookings) if (this.pools.has(b.pool_id)) await this.reloadNodes(b.pool_id, [b.node_id]);
    return { held: r.assignment || r.bookings.length > 0, pools: [...new Set(r.bookings.map((b) => b.pool_id))] };
  }

  /** Assigns a reservation's pod to atoms of its reservation on a node (handoff.assignPod), in one transaction. */
  assignPod(a: handoff.AssignmentRequest): Promise<handoff.AssignOutcome> {
    return this.tx((c) => handoff.assignPod(c, a));
  }

  /** Takes a node's on-demand admission lease for a pod, with its atoms; false while another pod's is in flight there. */
  takeAdmission(a: Parameters<typeof handoff.takeAdmission>[1]): Promise<boolean> {
    return this.statement((c) => handoff.takeAdmission(c, a));
  }

  /** Drops a pod's admission lease (on one node, or anywhere when null). */
  dropAdmission(nodeId: string | null, podUid: string): Promise<boolean> {
    return this.statement((c) => handoff.dropAdmission(c, nodeId, podUid));
  }

  /**
   * Books an on-demand ResourceClaim (DRA, ADR 0043): atoms for the claim's pod on the node the placer chooses, in the
   * first of the tenant's DRA pools where they fit (nodes whose labels match `nodeSelector`), then the claim's rows in
   * their own transaction. Idempotent per claim and per pod: a claim that holds atoms gets them back; a pod's live
   * booking (a crash between the booking and the rows, or the controller's restart) is handed to the claim, not booked
   * again.
   */
  async bookClaim(
    p: {
      id: claims.ClaimIdentity;
      tenantId: string;
      requests: readonly claims.ClaimRequest[];
      nodeSelector?: Readonly<Record<string, string>>;
      durationSeconds: number | null;
    },
    now: number,
  ): Promise<{ ok: true; holding: claims.ClaimHolding } | Extract<PodBookingOutcome, { ok: false }> | { ok: false; code: 'CLAIM_REFUSED'; message: string }> {
    const held = await claims.claimHolding(this.db, p.id.claimUid);
    if (held) return { ok: true, holding: held };
    const booking = (await this.podBooking(p.id.podUid)) ?? (await this.bookClaimPod(p, now));
    if ('ok' in booking) return booking;
    try {
      const holding = await this.tx((c) => claims.recordOnDemandClaim(c, p.id, p.requests, booking));
      return { ok: true, holding };
    } catch (e) {
      if (e instanceof claims.ClaimRefusal) return { ok: false, code: e.code, message: e.message };
      throw e;
    }
  }

  /** bookClaim's booking: the first DRA pool of the tenant's where the placer finds room. */
  private async bookClaimPod(
    p: Parameters<Ledger['bookClaim']>[0],
    now: number,
  ): Promise<{ allocationId: string; nodeId: string; atoms: string[] } | Extract<PodBookingOutcome, { ok: false }>> {
    const devices = p.requests.map((r) => ({ class: r.class === 'any' ? 'gpu' : r.class, count: r.count }) as const);
    const selector = Object.entries(p.nodeSelector ?? {});
    const nodeFilter = (n: NodeSnap) => selector.every(([k, v]) => n.labels[k] === v);
    const pools = await claims.draPoolsOf(this.db, p.tenantId);
    let last: Extract<PodBookingOutcome, { ok: false }> = { ok: false, code: 'NO_CAPACITY', message: `no pool in DRA mode is offered to tenant ${p.tenantId}`, replans: 0 };
    for (const poolId of pools) {
      const input: ReservationCreateInput = { tenantId: p.tenantId, poolId, devices, duration: p.durationSeconds ?? 0, binding: 'hold', idempotencyKey: p.id.podUid };
      const pod = { podUid: p.id.podUid, nodeFilter, openEnded: p.durationSeconds === null };
      const out = await this.reserveOnce(input, now, pod);
      if (out.ok) {
        const a = out.reservation.allocations[0]!;
        return { allocationId: a.id, nodeId: a.nodeId, atoms: a.atoms };
      }
      last = out;
      if (out.code === 'CONTENDED') break;
    }
    return last;
  }

  /** Assigns a Reservation's claim atoms of the Reservation on one node, while its window holds (claims.assignReservationClaim). */
  async assignClaim(a: Parameters<typeof claims.assignReservationClaim>[1]): Promise<claims.AssignClaimOutcome> {
    try {
      return await this.tx((c) => claims.assignReservationClaim(c, a));
    } catch (e) {
      if (e instanceof claims.ClaimRefusal) return { ok: false, reason: e.message };
      throw e;
    }
  }

  /** A claim's live holding (its atoms, node and owner), if any. */
  claimHolding(claimUid: string): Promise<claims.ClaimHolding | undefined> {
    return claims.claimHolding(this.db, claimUid);
  }

  /** Releases a claim and what stands behind it once the pod's other claims do not use it (claims.releaseClaim). */
  async releaseClaim(claimUid: string): Promise<boolean> {
    const r = await this.tx((c) => claims.releaseClaim(c, claimUid));
    for (const b of r.bookings) if (this.pools.has(b.pool_id)) await this.reloadNodes(b.pool_id, [b.node_id]);
    return r.released;
  }

  /** One request's plan → place → outcome, planned again (after what was stale is reloaded) until it answers. */
  private async reserveOnce(input: ReservationCreateInput, now: number, pod?: PodPlacement): Promise<ReserveOutcome | AdmissionBusy> {
    const notFound = { ok: false, code: 'NOT_FOUND', message: `pool ${input.poolId} not found`, replans: 0 } as const;
    if (!(await this.cached(input.poolId).catch(() => undefined))) return notFound;
    const a: Attempt = {
      input,
      pod,
      req: toPlacementRequest(input, now, pod?.openEnded),
      reservation: pod ? null : newReservationRow(input),
      now,
      replans: 0,
      refreshedAfterMiss: false,
    };
    for (;;) {
      const step = await this.planAndPlace(a);
      if (step.do === 'answer') return step.outcome;
      if (step.do === 'throw') throw step.error;
      if (step.do === 'refresh') {
        a.refreshedAfterMiss = true;
        await this.cached(input.poolId, true);
        continue;
      }
      const exhausted = await this.replan(a, step);
      if (exhausted) return exhausted;
    }
  }

  /** What a replan does (REPLANS): the metrics, the answer once replans are spent, what is reloaded. */
  private async replan(a: Attempt, step: Extract<Step, { do: 'replan' }>): Promise<ReserveOutcome | undefined> {
    const how = REPLANS[step.why];
    const metrics = this.opts.metrics;
    if (how.lostRace === 'always') metrics?.onLostRace?.(step.code ?? 'unknown');
    if (a.replans >= this.maxReplans) {
      if (how.spent === 'throw') throw step.error;
      if (how.spent === 'not-found') return { ok: false, code: 'NOT_FOUND', message: `pool ${a.input.poolId} not found`, replans: a.replans };
      return { ok: false, code: 'CONTENDED', message: `still contended after ${a.replans} replans; retry`, replans: a.replans };
    }
    if (how.lostRace === 'unless-spent') metrics?.onLostRace?.(step.code ?? 'unknown');
    a.replans++;
    if (how.countReplan) metrics?.onReplan?.();
    if (how.reload === 'pool') await this.cached(a.input.poolId, true);
    else if (how.reload === 'nodes') await this.reloadNodes(a.input.poolId, step.nodes ?? []);
    return undefined;
  }

  /** One pass: plan on the cached pool; place what fits, or say why nothing does. */
  private async planAndPlace(a: Attempt): Promise<Step> {
    const { input, pod, req, replans } = a;
    const c = await this.cached(input.poolId);
    if (!isPoolVisible(c.info, input.tenantId)) return answer({ ok: false, code: 'NOT_FOUND', message: `pool ${input.poolId} not found`, replans });
    if (c.info.archived) return answer({ ok: false, code: 'POOL_ARCHIVED', message: `pool ${c.info.id} is archived`, replans });
    const p = pod ? plan({ ...c.snap, nodes: podNodes(c, pod) }, req) : plan(c.snap, req, c.groups);
    if (!p.ok) return this.noFit(a, c, p.reason);
    return this.placeChosen(a, c, input.gang ? [...p.candidates] : [p.candidates[0]!]);
  }

  /** The plan found no room: an idempotent retry's booking, fresh rows once, preemption of spot bookings, or NO_CAPACITY. */
  private async noFit(a: Attempt, c: CachedPool, reason: string): Promise<Step> {
    const { input, reservation, replans } = a;
    // An idempotent retry of a reservation that already holds the capacity must find it, not "no capacity".
    const existing = reservation && (await this.findByIdempotencyKey(input.tenantId, input.idempotencyKey));
    if (existing) return answer(await this.existingOutcome(existing, reservation.requestHash, replans));
    // "Does not fit" is said on fresh rows only.
    if (!a.refreshedAfterMiss) return { do: 'refresh' };
    // A regular reservation that fits only by displacing spot ones takes their atoms from the notice's deadline.
    if (reservation && !reservation.spot) {
      const pre = choosePreemption(c.snap, preemptingRequest(a.req, a.now, this.spotNoticeMs));
      if (pre) {
        const out = await this.preemptAndPlace(input, reservation, pre.victims, pre.candidates);
        if (out !== 'stale') return answer({ ...out, replans } as ReserveOutcome);
        return { do: 'replan', why: 'preempt-stale' };
      }
    }
    return answer({ ok: false, code: 'NO_CAPACITY', message: reason, replans });
  }

  /** Writes the chosen candidates (bc_place, group-committed), assumed in the snapshot while the write is in flight. */
  private async placeChosen(a: Attempt, c: CachedPool, chosen: Candidate[]): Promise<Step> {
    const { input, pod } = a;
    const allocations = chosen
      .map((cand) => ({ id: newAllocationId(), nodeId: cand.nodeId, atoms: cand.atoms, scalars: cand.scalars }))
      .sort((x, y) => (x.nodeId < y.nodeId ? -1 : 1));
    // Assume the booking in the snapshot while it commits (as kube-scheduler assumes a pod), so that concurrent
    // requests of this process plan around it instead of racing for the same atoms. Undone if the commit fails.
    const undoAssume = assume(c, chosen, a.req.window);
    let r: PlaceResult;
    try {
      r = await this.place(
        {
          tenantId: input.tenantId,
          poolId: input.poolId,
          start: input.start ?? null,
          durationSeconds: pod?.openEnded ? null : input.duration,
          reservation: a.reservation,
          podUid: pod?.podUid ?? null,
          allocations,
          ...(pod?.admission ? { admission: pod.admission } : {}),
        },
        pod?.replacing,
      );
    } catch (e) {
      undoAssume();
      return isRetryable(e) ? { do: 'replan', why: 'retryable', code: 'retryable', error: e } : { do: 'throw', error: e };
    }
    undoAssume();
    if (!r.ok) return refusal(a, r, chosen);
    if (r.existing) return answer({ ok: true, reservation: (await this.get(r.reservationId!))!, existing: true, replans: a.replans });
    const window = { start: r.start!, end: r.end ?? Infinity };
    assume(c, chosen, window);
    return answer(placedOutcome(a, r, chosen, allocations, window));
  }

  /**
   * Preemption's one transaction: the victims locked and their bookings truncated at the deadline (compute_now() +
   * notice), then the regular reservation placed from the deadline (bc_place), so the freed atoms pass from one to the
   * other at one instant and nobody can take them in between. 'stale' (nothing written) when a victim changed or the
   * placement lost a race: the caller plans again on fresh rows.
   */
  private async preemptAndPlace(
    input: ReservationCreateInput,
    reservation: { id: string } & Record<string, unknown>,
    victims: readonly string[],
    chosen: readonly Candidate[],
  ): Promise<Omit<Extract<ReserveOutcome, { ok: true }>, 'replans'> | Omit<Extract<ReserveOutcome, { ok: false }>, 'replans'> | 'stale'> {
    const stale = new Error('stale');
    let result: PlaceResult | undefined;
    try {
      await this.tx(async (c) => {
        const deadline = await preemption.noticeDeadline(c, this.spotNoticeMs);
        if (!(await preemption.truncateVictims(c, victims, deadline, reservation.id))) throw stale;
        const arg = {
          tenantId: input.tenantId,
          poolId: input.poolId,
          start: Math.max(input.start ?? deadline, deadline),
          durationSeconds: input.duration,
          reservation,
          podUid: null,
          allocations: chosen
            .map((cand) => ({ id: newAllocationId(), nodeId: cand.nodeId, atoms: cand.atoms, scalars: cand.scalars }))
            .sort((a, b) => (a.nodeId < b.nodeId ? -1 : 1)),
        };
        result = (await c.query<{ r: PlaceResult }>('SELECT bc_place($1) AS r', [arg])).rows[0]!.r;
        if (!result.ok || result.existing) throw stale; // rolled back: the victims keep their bookings
      });
    } catch (e) {
      if (e !== stale) throw e;
      if (result?.code === 'quota') {
        return { ok: false, code: 'QUOTA_EXCEEDED', message: quotaRefusalMessage(input.tenantId, input.poolId, result.details), ...(result.details ? { details: result.details } : {}) };
      }
      return 'stale';
    } finally {
      this.invalidate(input.poolId);
    }
    return { ok: true, existing: false, reservation: (await this.get(result!.reservationId!))! };
  }

  /** Victims whose preemption notice is not delivered yet (the leader's preemption loop). */
  preemptionNotices(): Promise<preemption.PreemptionDue[]> {
    return preemption.noticesToDeliver(this.db);
  }

  markPreemptionNotified(reservationId: string): Promise<void> {
    return this.tx((c) => preemption.markNotified(c, reservationId));
  }

  /** Victims at or past their deadline whose pods are not evicted yet. */
  preemptionsDue(): Promise<preemption.PreemptionDue[]> {
    return preemption.evictionsDue(this.db);
  }

  /** Ends a victim whose pods were evicted (released at its deadline). */
  finishPreemption(reservationId: string): Promise<boolean> {
    return this.tx((c) => preemption.finishPreemption(c, reservationId));
  }

  /**
   * One batch of placements in one statement (fenced: in one transaction with the fence check). The items go in the
   * order of their first node, so that batches written at once take the nodes' row locks (scalar counters) in one
   * order and do not deadlock one another; the outcomes come back in the callers' order.
   */
  private async placeBatch(batch: PlaceArg[]): Promise<ItemOutcome<PlaceResult>[]> {
    const node = batch.map((a) => a.allocations[0]?.nodeId ?? '');
    const order = batch.map((_, i) => i).sort((a, b) => (node[a]! < node[b]! ? -1 : node[a]! > node[b]! ? 1 : a - b));
    const items = order.map((i) => batch[i]!);
    // Named: prepared once per connection, then only bound and executed.
    // The transaction's id too: the extender tells its own booking's notifications by it (migrations/functions/bc_extender_notify.sql).
    const query = { name: 'bc_place_batch', text: 'SELECT bc_place_batch($1) AS r, pg_current_xact_id()::text AS tx', values: [JSON.stringify(items)] };
    const fence = this.opts.fence?.();
    const { rows } = fence
      ? await withTransaction(this.db, async (c) => {
          await this.checkFence(c, fence);
          return c.query<{ r: PlaceResult[]; tx: string }>(query);
        })
      : await this.db.query<{ r: PlaceResult[]; tx: string }>(query);
    if (rows[0]!.r.length !== batch.length) throw new Error(`bc_place_batch answered ${rows[0]!.r.length} results for ${batch.length} items`);
    const outcomes = new Array<ItemOutcome<PlaceResult>>(batch.length);
    rows[0]!.r.forEach((r, k) => {
      outcomes[order[k]!] = r.error
        ? { ok: false, error: new PlacementError(r.error.message, r.error.code, r.error.constraint ?? undefined) }
        : { ok: true, value: { ...r, tx: rows[0]!.tx } };
    });
    return outcomes;
  }

  /**
   * bc_place, group-committed with the placements waiting at the same time; when `replacing` (a pod's allocation
   * elsewhere), alone, in one transaction that first releases that one.
   */
  private async place(arg: PlaceArg, replacing?: string): Promise<PlaceResult> {
    if (!replacing) return this.placements.submit(arg);
    const notPlaced = new Error('not placed');
    let result: PlaceResult | undefined;
    try {
      await withTransaction(this.db, async (c) => {
        await this.checkFence(c, this.opts.fence?.());
        const { rows } = await c.query<{ node_id: string; pod_uid: string }>(
          'SELECT node_id, pod_uid FROM allocations WHERE id = $1 AND released_at IS NULL',
          [replacing],
        );
        if (rows[0]) {
          await c.query('SELECT bc_release_allocations($1)', [[replacing]]);
          await handoff.dropAdmission(c, rows[0].node_id, rows[0].pod_uid);
        }
        const { admission, ...placement } = arg;
        result = (await c.query<{ r: PlaceResult }>('SELECT bc_place($1) AS r', [placement])).rows[0]!.r;
        if (!result.ok) throw notPlaced; // rolled back: the old booking stays
        if (admission && !(await handoff.takeAdmission(c, { ...admission, atoms: placement.allocations[0]?.atoms ?? [] }))) {
          result = { ok: false, code: 'admission_busy' };
          throw notPlaced;
        }
      });
    } catch (e) {
      if (e !== notPlaced) throw e;
    }
    return result!;
  }

  private async existingOutcome(
    existing: { id: string; request_hash: string },
    hash: string,
    replans: number,
  ): Promise<ReserveOutcome> {
    if (existing.request_hash !== hash) {
      return {
        ok: false,
        code: 'IDEMPOTENCY_MISMATCH',
        message: `idempotency key was used for a different request (${existing.id})`,
        replans,
      };
    }
    return { ok: true, reservation: (await this.get(existing.id))!, existing: true, replans };
  }

  /** The reservation a tenant's idempotency key booked, if any. */
  async findByIdempotencyKey(tenantId: string, key: string): Promise<{ id: string; request_hash: string } | undefined> {
    const { rows } = await this.db.query<{ id: string; request_hash: string }>(
      'SELECT id, request_hash FROM reservations WHERE tenant_id = $1 AND idempotency_key = $2',
      [tenantId, key],
    );
    return rows[0];
  }

  /**
   * The reservations booked with this idempotency key under any of these tenants (one indexed read): live ones first,
   * then the newest. For a Reservation CR the key is its metadata.uid, unique in the cluster, so whatever this finds is
   * that CR's own booking, whichever tenant it is asked under.
   */
  async findByIdempotencyKeyIn(tenantIds: readonly string[], key: string): Promise<{ id: string; tenantId: string; state: ReservationState }[]> {
    const { rows } = await this.db.query<{ id: string; tenantId: string; state: ReservationState }>(
      `SELECT id, tenant_id AS "tenantId", state FROM reservations WHERE tenant_id = ANY ($1) AND idempotency_key = $2
       ORDER BY (state IN ('held', 'confirmed')) DESC, created_at DESC, id DESC`,
      [[...new Set(tenantIds)], key],
    );
    return rows;
  }

  /**
   * The reservations booked under any of these tenants with an idempotency key that starts with `prefix`: the windows
   * of a recurring Reservation CR, each keyed `${metadata.uid}:${window start}`. Earliest window first.
   */
  async findByIdempotencyPrefixIn(
    tenantIds: readonly string[],
    prefix: string,
  ): Promise<{ id: string; tenantId: string; state: ReservationState; idempotencyKey: string }[]> {
    const { rows } = await this.db.query<{ id: string; tenantId: string; state: ReservationState; idempotencyKey: string }>(
      `SELECT id, tenant_id AS "tenantId", state, idempotency_key AS "idempotencyKey" FROM reservations
       WHERE tenant_id = ANY ($1) AND starts_with(idempotency_key, $2)
       ORDER BY idempotency_key, (state IN ('held', 'confirmed')) DESC, created_at DESC, id DESC`,
      [[...new Set(tenantIds)], prefix],
    );
    return rows;
  }

  async get(reservationId: string): Promise<ReservationView | undefined> {
    const { rows } = await this.db.query(
      `SELECT r.id, r.tenant_id, r.pool_id, r.state, r.spot, r.binding,
              (extract(epoch FROM r.starts_at) * 1000)::float8 AS start, (extract(epoch FROM r.ends_at) * 1000)::float8 AS "end",
              (extract(epoch FROM r.lease_expires_at) * 1000)::float8 AS lease,
              r.request ? 'leaseSeconds' AS was_held,
              (extract(epoch FROM r.ended_at) * 1000)::float8 AS ended_at,
              (extract(epoch FROM r.preempt_at) * 1000)::float8 AS preempt_at, r.preempted_by,
              EXISTS (SELECT 1 FROM reservation_pod_assignments p WHERE p.reservation_id = r.id) AS ever_used,
              CASE WHEN r.state = 'confirmed' AND r.request ? 'leaseSeconds' THEN (extract(epoch FROM r.updated_at) * 1000)::float8 END AS confirmed_at,
              -- A pod that confirmed the hold was assigned in the same transaction: at the same compute_now().
              (SELECT p.namespace || '/' || p.pod_name FROM reservation_pod_assignments p
               WHERE p.reservation_id = r.id AND p.created_at = r.updated_at AND r.state = 'confirmed' AND r.request ? 'leaseSeconds'
               ORDER BY p.namespace, p.pod_name LIMIT 1) AS confirmed_by_pod,
              coalesce((SELECT json_agg(json_build_object('id', a.id, 'nodeId', a.node_id, 'atoms',
                         (SELECT coalesce(json_agg(b.device_id ORDER BY b.device_id), '[]') FROM device_bookings b
                          WHERE b.allocation_id = a.id AND b.lost_at IS NULL))
                         ORDER BY a.node_id)
                        FROM allocations a WHERE a.reservation_id = r.id
                          -- An allocation that a repair moved whole (every booking cut: lost_at) is history, not shown.
                          AND NOT (EXISTS (SELECT 1 FROM device_bookings b WHERE b.allocation_id = a.id AND b.lost_at IS NOT NULL)
                                   AND NOT EXISTS (SELECT 1 FROM device_bookings b WHERE b.allocation_id = a.id AND b.lost_at IS NULL))),
                       '[]') AS allocations,
              r.repair_short, r.repair_reason, r.repairs, (extract(epoch FROM r.repaired_at) * 1000)::float8 AS repaired_at
       FROM reservations r WHERE r.id = $1`,
      [reservationId],
    );
    const r = rows[0];
    if (!r) return undefined;
    return {
      id: r.id,
      tenantId: r.tenant_id,
      poolId: r.pool_id,
      state: r.state,
      spot: r.spot,
      binding: r.binding,
      start: r.start,
      end: r.end,
      leaseExpiresAt: r.lease,
      allocations: r.allocations,
      ...(r.was_held ? { hold: { confirmedAt: r.confirmed_at, confirmedByPod: r.confirmed_by_pod } } : {}),
      endedAt: r.ended_at,
      everUsed: r.ever_used,
      ...(r.repair_reason !== null
        ? { repair: { short: r.repair_short, reason: r.repair_reason, repairs: r.repairs, repairedAt: r.repaired_at } }
        : {}),
      ...(r.preempt_at !== null ? { preemption: { at: r.preempt_at, by: r.preempted_by } } : {}),
    };
  }

  /** held → confirmed, while the lease has not run out (fenced for a leader's ledger). Confirmed already: answered as is. */
  async confirm(reservationId: string): Promise<ReservationView | { error: string }> {
    const confirmed = await this.tx((c) => holds.confirmHold(c, reservationId));
    const view = await this.get(reservationId);
    if (confirmed || view?.state === 'confirmed') return view!;
    return { error: await this.whyNot(reservationId, 'confirm') };
  }

  /** Of these reservation ids, those no longer held (confirmed, released or expired since they were seen held). */
  heldNoMore(reservationIds: readonly string[]): Promise<string[]> {
    return holds.heldNoMore(this.db, reservationIds);
  }

  /** Extends a held reservation's lease by `seconds` from now. */
  async renew(reservationId: string, seconds: number): Promise<ReservationView | { error: string }> {
    const { rowCount } = await this.db.query(
      `UPDATE reservations SET lease_expires_at = compute_now() + make_interval(secs => $2), updated_at = compute_now()
       WHERE id = $1 AND state = 'held' AND lease_expires_at > compute_now()`,
      [reservationId, seconds],
    );
    if (!rowCount) return { error: await this.whyNot(reservationId, 'renew') };
    return (await this.get(reservationId))!;
  }

  private async whyNot(reservationId: string, verb: string): Promise<string> {
    const r = await this.get(reservationId);
    if (!r) return `reservation ${reservationId} not found`;
    return `cannot ${verb} reservation ${reservationId} in state ${r.state}${r.state === 'held' ? ' (lease ran out)' : ''}`;
  }

  /**
   * Ends a reservation now: its bookings are truncated at compute_now(), its quota and scalars given back, except on
   * the nodes where its pods still hold atoms: there they stay booked until the last pod is gone (docs/booking-end.md).
   */
  async release(reservationId: string): Promise<boolean> {
    return this.end(reservationId, 'released');
  }

  /**
   * Releases a confirmed reservation that no pod has used (no assignment, ever) `seconds` after its start
   * (spec.releaseIfUnusedSeconds, ADR 0015). Checked under the reservation's row lock, which a pod's bind takes too,
   * so a bind and this release never both win. Returns whether it released it.
   */
  releaseIfUnused(reservationId: string, seconds: number): Promise<boolean> {
    return this.end(reservationId, 'released', false, (c) => holds.lockIfUnused(c, reservationId, seconds));
  }

  private async end(
    reservationId: string,
    state: 'released' | 'expired',
    onlyIfLeaseRanOut = false,
    onlyIf?: (c: pg.PoolClient) => Promise<boolean>,
  ): Promise<boolean> {
    const nodes = await withRetriedTransaction(this.db, async (c) => {
      await this.checkFence(c, this.opts.fence?.());
      if (onlyIf && !(await onlyIf(c))) return undefined;
      const { rows } = await c.query(
        `UPDATE reservations SET state = $2, ended_at = compute_now(), updated_at = compute_now(), lease_expires_at = NULL
         WHERE id = $1 AND state IN ('held', 'confirmed')
           ${onlyIfLeaseRanOut ? "AND state = 'held' AND lease_expires_at <= compute_now()" : ''}
         RETURNING id`,
        [reservationId, state],
      );
      if (rows.length === 0) return undefined;
      // Where its pods still run, the bookings stay until the last of them is gone (handoff.releaseAfterPod).
      return handoff.releaseIdleAllocations(c, reservationId);
    });
    if (!nodes) return false;
    const byPool = new Map<string, string[]>();
    for (const n of nodes) byPool.set(n.pool_id, [...(byPool.get(n.pool_id) ?? []), n.node_id]);
    for (const [poolId, ids] of byPool) if (this.pools.has(poolId)) await this.reloadNodes(poolId, ids);
    return true;
  }

  /** Expires held reservations whose lease ran out. Returns their ids. */
  async expireLeases(): Promise<string[]> {
    const { rows } = await this.db.query<{ id: string }>(
      `SELECT id FROM reservations WHERE state = 'held' AND lease_expires_at <= compute_now() ORDER BY lease_expires_at`,
    );
    const expired: string[] = [];
    for (const { id } of rows) if (await this.end(id, 'expired', true)) expired.push(id);
    return expired;
  }
}

/** The nodes a pod's booking may take: its one node, or those of the pool its filter lets through. */
function podNodes(c: CachedPool, pod: PodPlacement): NodeSnap[] {
  if (pod.nodeId !== undefined) {
    const n = c.nodes.get(pod.nodeId);
    return n ? [n] : [];
  }
  const keep = pod.nodeFilter;
  return keep ? c.snap.nodes.filter(keep) : [...c.snap.nodes];
}

function withSummaries(nodes: NodeSnap[], shared: Map<string, NodeSummary>): NodeSnap[] {
  for (const n of nodes) n.summary = summarizeShared(n, shared);
  return nodes;
}

function toSnap(info: PoolInfo, nodes: Map<string, NodeSnap>): { snap: PoolSnap; groups: NodeGroups } {
  const list = [...nodes.values()];
  return { snap: { id: info.id, sharing: info.sharing, topologyKey: info.topologyKey, nodes: list }, groups: new NodeGroups(list) };
}

/** Adds the candidates' bookings and scalar claims to the cached snapshot; returns the undo. */
function assume(c: CachedPool, chosen: readonly Candidate[], window: { start: number; end: number }): () => void {
  const interval = { ...window };
  const undo: (() => void)[] = [];
  for (const cand of chosen) {
    const node = c.nodes.get(cand.nodeId);
    if (!node) continue;
    const atoms = new Set(cand.atoms);
    for (const a of node.atoms) {
      if (!atoms.has(a.id)) continue;
      a.bookings.push(interval);
      undo.push(() => {
        const i = a.bookings.indexOf(interval);
        if (i >= 0) a.bookings.splice(i, 1);
      });
    }
    for (const [name, amount] of Object.entries(cand.scalars)) {
      const s = node.scalars[name as keyof typeof node.scalars];
      if (!s) continue;
      s.allocated += amount;
      undo.push(() => {
        s.allocated -= amount;
      });
    }
    node.summary = summarizeShared(node, c.summaries);
    c.groups.update(node);
    undo.push(() => {
      node.summary = summarizeShared(node, c.summaries);
      c.groups.update(node);
    });
  }
  let undone = false;
  return () => {
    if (undone) return;
    undone = true;
    for (const u of undo) u();
  };
}

/** Ledger.preview on a given snapshot (pure): the extender's in-memory state previews with it too. */
export function previewOn(snap: PoolSnap, input: ReservationCreateInput, now: number, spotNoticeMs: number): PreviewResult {
  const req = toPlacementRequest(input, now);
  const result = plan(snap, req);
  if (result.ok || input.spot) return result;
  const pre = choosePreemption(snap, preemptingRequest(req, now, spotNoticeMs));
  if (!pre) return result;
  return { ...result, preemptible: { count: pre.victims.length, start: Math.max(req.window.start, now + spotNoticeMs) } };
}

/** A regular request that preempts: its window starts no earlier than the notice's deadline. */
function preemptingRequest(req: PlacementRequest, now: number, noticeMs: number): PlacementRequest {
  const start = Math.max(req.window.start, now + noticeMs);
  return { ...req, window: { start, end: start + (req.window.end - req.window.start) } };
}

export function toPlacementRequest(input: ReservationCreateInput, now: number, openEnded = false): PlacementRequest {
  const start = Math.max(now, input.start ?? now);
  const end = openEnded ? Infinity : start + input.duration * 1000;
  return {
    devices: input.devices.map((d) => ({
      class: d.class,
      count: d.count,
      selector: d.selector ? selectorFromObject(d.selector) : [],
      ...(d.topology ? { topology: d.topology } : {}),
      ...(d.sharing ? { sharing: d.sharing } : {}),
    })),
    ...(input.topology ? { topology: input.topology } : {}),
    window: { start, end },
    binding: input.binding,
    ...(input.resources ? { resources: input.resources } : {}),
    ...(input.gang ? { gang: input.gang } : {}),
  };
}

/** The idempotency fingerprint: the request without the caller's wait preference, keys sorted. */
export function requestHash(input: ReservationCreateInput): string {
  const { wait: _wait, ...rest } = input;
  return createHash('sha256').update(canonicalJson(rest)).digest('hex');
}

function canonicalJson(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonicalJson).join(',')}]`;
  if (v && typeof v === 'object') {
    const entries = Object.entries(v as Record<string, unknown>)
      .filter(([, x]) => x !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : 1));
    return `{${entries.map(([k, x]) => `${JSON.stringify(k)}:${canonicalJson(x)}`).join(',')}}`;
  }
  return JSON.stringify(v);
}
