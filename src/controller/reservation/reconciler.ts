// Reservation → a booking in the ledger, idempotent on metadata.uid: a reconcile that runs again after a crash (or on
// another leader) gets the same booking back. Status, the Reserved condition and an Event for every transition and
// refusal; Pending ones retry with backoff and are woken when capacity changes; deletion releases the booking, then
// removes the finalizer. Status is a mirror, never an input: which booking is the CR's is asked of the ledger by its
// metadata.uid (the idempotency key it booked with), never read from status.reservationId, which anyone allowed to
// write reservations/status could point at another tenant's booking.
import { parseInput, ReservationCreateInput, ValidationError } from '../../core/schemas.ts';
import { expandRecurrence } from '../../core/recurrence.ts';
import type { ReservationView, ReserveOutcome } from '../../db/ledger.ts';
import type { ControllerContext } from '../context.ts';
import { pendingEntry, poolIdOf } from '../context.ts';
import { maxPendingOf, overPendingLimit, TOO_MANY_PENDING, type PendingEntry } from '../../core/pending.ts';
import { statusOf } from '../../kube/client.ts';
import { KUEUE_BOOKING_HORIZON_MS } from '../../core/kueue-check.ts';
import type { ReconcileResult } from '../queue.ts';
import { namespaceTenant, noTenantMessage, findCondition, splitKey, type Reservation, type OccurrenceStatus, type ReservationStatus } from '../../kube/types.ts';
import { MAX_WINDOWS_AHEAD, recurringVerdict, toRecurrence, windowInput, windowKey } from './recurring.ts';
import {
  bookedStatus,
  bookedVerdict,
  conditionsAfter,
  confirmRequested,
  degradedChanged,
  degradedVerdict,
  iso,
  isoEnd,
  PHASE_OF_STATE,
  PREEMPTION_NOTICE,
  releaseIfUnusedMs,
  statusChanged,
  unusedAfterMs,
  type Verdict,
} from './status.ts';
import { RESERVATION_FINALIZER, reservationResourceName } from '../../core/names.ts';

/** The Reservation's spec as the ledger's reservations.create input (validated exactly as the API validates it). */
export function toCreateInput(r: Reservation, tenantId: string, poolId: string): ReservationCreateInput {
  const s = r.spec;
  const start = s.start === undefined ? undefined : Date.parse(s.start);
  if (start !== undefined && Number.isNaN(start)) {
    throw new ValidationError([{ path: 'spec.start', message: 'must be an RFC 3339 date-time' }]);
  }
  const raw: Record<string, unknown> = {
    tenantId,
    poolId,
    devices: s.devices,
    topology: s.topology,
    start,
    duration: s.duration,
    binding: s.binding ?? 'hold',
    resources: s.resources,
    leaseSeconds: s.leaseSeconds,
    spot: s.spot,
    gang: s.gang,
    idempotencyKey: r.metadata.uid,
  };
  for (const k of Object.keys(raw)) if (raw[k] === undefined) delete raw[k];
  const input = parseInput(ReservationCreateInput, raw);
  releaseIfUnusedMs(r); // the controller's own field: checked here too, so an invalid one fails before booking
  return input;
}



/** One reconcile of a recurring Reservation's windows, carried from window to window. */
interface WindowsPass {
  readonly r: Reservation;
  readonly tenant: string;
  readonly uid: string;
  readonly now: number;
  readonly booked: Map<string, { id: string; tenantId: string }>;
  /** The status entries of the last pass, by start (an Event only when a window's reason changes). */
  readonly prev: Map<string, OccurrenceStatus>;
  readonly entries: OccurrenceStatus[];
  readonly wakes: number[];
  contended: boolean;
  poolId?: string;
  base?: ReservationCreateInput;
}

/** A refused window's reason, by the ledger's code. */
const WINDOW_REASONS: Record<Extract<ReserveOutcome, { ok: false }>['code'], string> = {
  NO_CAPACITY: 'Unschedulable',
  QUOTA_EXCEEDED: 'QuotaExceeded',
  NOT_FOUND: 'PoolNotOffered',
  POOL_ARCHIVED: 'PoolArchived',
  CONTENDED: 'Contended',
  IDEMPOTENCY_MISMATCH: 'IdempotencyMismatch',
};

/** How far ahead a waiting Reservation's earliest start is looked for (the Kueue check's horizon too). */
const ETA_HORIZON_MS = KUEUE_BOOKING_HORIZON_MS;

/** A one-shot Reservation's verdict when the ledger refuses its booking, by the ledger's code (the message is the ledger's). */
const REFUSALS: Record<Extract<ReserveOutcome, { ok: false }>['code'], Omit<Verdict, 'message'>> = {
  NO_CAPACITY: { phase: 'Pending', status: 'False', reason: 'Unschedulable', eventType: 'Warning' },
  QUOTA_EXCEEDED: { phase: 'Pending', status: 'False', reason: 'QuotaExceeded', eventType: 'Warning' },
  NOT_FOUND: { phase: 'Pending', status: 'False', reason: 'PoolNotOffered', eventType: 'Warning' },
  POOL_ARCHIVED: { phase: 'Pending', status: 'False', reason: 'PoolArchived', eventType: 'Warning' },
  CONTENDED: { phase: 'Pending', status: 'False', reason: 'Contended', eventType: 'Normal' },
  IDEMPOTENCY_MISMATCH: { phase: 'Failed', status: 'False', reason: 'IdempotencyMismatch', eventType: 'Warning' },
};

export class ReservationReconciler {
  /** `${uid}|${phase}|${reason}` of the last Event per Reservation key: the cache may lag our own status writes. */
  private readonly lastEvent = new Map<string, string>();

  constructor(private readonly ctx: ControllerContext) {}

  async reconcile(key: string): Promise<ReconcileResult> {
    const { namespace, name } = splitKey(key);
    const found = this.ctx.informers.reservations.get(key);
    if (!found || !namespace) return;
    if (found.metadata.deletionTimestamp) return this.finalize(found);
    const withFinalizer = await this.withFinalizer(found, namespace, name);
    if ('result' in withFinalizer) return withFinalizer.result;
    const r = withFinalizer.r;

    const known = this.namespaceTenant(namespace);
    const nsTenant = known ?? undefined;
    // A recurring Reservation in a namespace that is no tenant books no window (none it booked before is found by a
    // tenant it does not have; they end by their window).
    if (r.spec.recurrence !== undefined) return known === null ? this.refuseNoTenant(r, namespace) : this.reconcileRecurring(r, nsTenant);
    // Already booked: mirror the ledger's state (held → confirmed, expired, released elsewhere).
    const view = await this.bookingOf(r, nsTenant);
    if (view) return this.mirrorBooking(r, view);
    // A verdict on this very spec that cannot change by trying again (only this CR's own status can claim it).
    const st = r.status ?? {};
    if (st.phase === 'Failed' && st.observedGeneration === r.metadata.generation) return;

    // The tenant of a new booking: the namespace's now. Once booked, the ledger pins it (found by uid above), so a
    // relabelled namespace cannot book twice under two tenants.
    if (known === null) return this.refuseNoTenant(r, namespace);
    if (nsTenant === undefined) return { requeueAfterMs: 500 };
    return this.book(r, nsTenant);
  }

  /** The CR with this controller's finalizer (added when it lacks one), or what to do when adding it lost a race. */
  private async withFinalizer(r: Reservation, namespace: string, name: string): Promise<{ r: Reservation } | { result: ReconcileResult }> {
    const finalizers = r.metadata.finalizers ?? [];
    if (finalizers.includes(RESERVATION_FINALIZER)) return { r };
    try {
      const written = await this.ctx.kube.setReservationFinalizers(namespace, name, [...finalizers, RESERVATION_FINALIZER], r.metadata.resourceVersion ?? '');
      return { r: { ...r, ...written } };
    } catch (e) {
      if (statusOf(e) === 409 || statusOf(e) === 404) return { result: { requeueAfterMs: 200 } };
      throw e;
    }
  }

  /** A booked CR mirrors its booking: a window that is over ends in the ledger too; a hold asked to is confirmed. */
  private async mirrorBooking(r: Reservation, booked: ReservationView): Promise<ReconcileResult> {
    let view = booked;
    if ((view.state === 'held' || view.state === 'confirmed') && view.end <= this.ctx.clock.now()) {
      // The window is over: end it in the ledger too (scalar claims go back), so it shows as Released.
      await this.ctx.ledger.release(view.id);
      view = (await this.ctx.ledger.get(view.id)) ?? view;
    }
    view = await this.confirmIfAsked(r, view);
    view = await this.releaseIfUnused(r, view);
    await this.writeBooked(r, view, view.tenantId, false);
    return this.wakeAt(view, unusedAfterMs(r));
  }

  /** A new booking of a one-shot CR under its namespace's tenant; else the verdict on why not, and when to try again. */
  private async book(r: Reservation, tenant: string): Promise<ReconcileResult> {
    const poolId = await this.poolIdFor(r, tenant);
    if (typeof poolId !== 'string') return poolId;

    let input: ReservationCreateInput;
    try {
      input = toCreateInput(r, tenant, poolId);
    } catch (e) {
      if (!(e instanceof ValidationError)) throw e;
      await this.writeVerdict(r, tenant, poolId, { phase: 'Failed', status: 'False', reason: 'Invalid', message: e.message, eventType: 'Warning' });
      return;
    }
    // Behind the tenant's earlier pending ones: not retried until one of them leaves (setup.ts wakes the next).
    const waits = this.waitsBehindTenant(r, tenant);
    if (waits) return void (await this.writeVerdict(r, tenant, poolId, waits));

    const outcome: ReserveOutcome = await this.ctx.ledger.reserve(input, this.ctx.clock.now());
    if (!outcome.ok) return this.refused(r, tenant, poolId, outcome, input);
    const view = await this.confirmIfAsked(r, outcome.reservation);
    await this.writeBooked(r, view, tenant, true);
    return this.wakeAt(view, unusedAfterMs(r));
  }

  /**
   * The ledger refused a one-shot CR's booking: its verdict; Pending ones are tried again (a lost race at once). A CR
   * that starts as soon as it fits and found no capacity says when that is (status.earliestStart, ADR 0058), and is
   * tried again then.
   */
  private async refused(
    r: Reservation,
    tenant: string,
    poolId: string,
    outcome: Extract<ReserveOutcome, { ok: false }>,
    input: ReservationCreateInput,
  ): Promise<ReconcileResult> {
    const v = REFUSALS[outcome.code];
    const now = this.ctx.clock.now();
    const eta = outcome.code === 'NO_CAPACITY' && r.spec.start === undefined ? await this.earliestStart(input, now) : undefined;
    const refusal = outcome.code === 'NOT_FOUND' ? `pool ${r.spec.pool} is not offered to tenant ${tenant}` : outcome.message;
    const message = eta === undefined ? refusal : `${refusal}; it starts at ${iso(eta)} if nothing else changes`;
    await this.writeVerdict(r, tenant, poolId, { ...v, message }, eta === undefined ? {} : { earliestStart: iso(eta) });
    if (v.phase === 'Failed') return;
    if (outcome.code === 'CONTENDED') return { requeueAfterMs: 100 };
    // Tried again at its earliest start (or sooner, when capacity frees: the pool's pending are woken).
    if (eta !== undefined) return { requeueAfterMs: Math.min(this.ctx.tuning.pendingMaxBackoffMs, eta - now + 250) };
    return { backoff: true };
  }

  /**
   * When a booking of `input` that starts as soon as it fits would start, if nothing else changes: the placer's
   * earliest window over the pool's bookings (capacity only: quota is checked when it books). Undefined when it fits
   * nowhere within the horizon, or already now (the ledger's refusal then was not about time).
   */
  private async earliestStart(input: ReservationCreateInput, now: number): Promise<number | undefined> {
    const found = await this.ctx.ledger.earliestWindow([input], now, ETA_HORIZON_MS);
    return found.ok && found.start > now + 1000 ? found.start : undefined;
  }

  /** The ledger id of the CR's Pool, or what to do while there is none (its verdict is written). */
  private async poolIdFor(r: Reservation, tenant: string): Promise<string | ReconcileResult> {
    const ctx = this.ctx;
    const pool = ctx.informers.pools.get(r.spec.pool);
    const poolId = pool ? poolIdOf(ctx, r.spec.pool) : undefined;
    // The Pool exists but this leader's Pool reconcile has not put it in the ledger yet (never read from status.poolId,
    // a mirror): that wakes Pending reservations soon.
    if (pool && !poolId) return { requeueAfterMs: 500 };
    if (!poolId) {
      await this.writeVerdict(r, tenant, undefined, {
        phase: 'Pending',
        status: 'False',
        reason: 'PoolNotFound',
        message: pool ? `pool ${r.spec.pool} is not in the ledger yet` : `no Pool named ${r.spec.pool}`,
        eventType: 'Warning',
      });
      return { backoff: true };
    }
    return poolId;
  }

  /**
   * A recurring Reservation: every window that starts within the horizon is its own booking, keyed by the CR's uid and
   * the window's start (looked up in the ledger, never in status, so a restart books none twice); a window the ledger
   * refuses is reported in its own status entry and retried with backoff while the others stay booked; a window that
   * ended is released (scalar claims go back) and leaves status.
   */
  private async reconcileRecurring(r: Reservation, nsTenant: string | undefined): Promise<ReconcileResult> {
    const ctx = this.ctx;
    const st = r.status ?? {};
    if (st.phase === 'Failed' && st.observedGeneration === r.metadata.generation) return;
    const uid = r.metadata.uid;
    if (nsTenant === undefined || !uid) return { requeueAfterMs: 500 };
    const tenant = nsTenant;
    const now = ctx.clock.now();
    const horizon = ctx.tuning.recurrenceHorizonMs;
    let plan: ReturnType<typeof toRecurrence>;
    try {
      plan = toRecurrence(r, now);
    } catch (e) {
      if (!(e instanceof ValidationError)) throw e;
      await this.writeVerdict(r, tenant, undefined, { phase: 'Failed', status: 'False', reason: 'Invalid', message: e.message, eventType: 'Warning' });
      return;
    }
    const booked = await this.bookedWindows(r, nsTenant, uid, now);
    const windows = expandRecurrence(plan.recurrence, plan.anchor, now, now + horizon).slice(0, MAX_WINDOWS_AHEAD);
    // The first window beyond those listed (every week has one, unless the recurrence ends first).
    const after = Math.max(windows.length > 0 ? windows[windows.length - 1]!.start + 1 : now + horizon, plan.anchor);
    const next = expandRecurrence(plan.recurrence, plan.anchor, after, after + 8 * 86_400_000).find((o) => o.start >= after);
    const pass: WindowsPass = {
      r,
      tenant,
      uid,
      now,
      booked,
      prev: new Map((st.occurrences ?? []).map((o) => [o.start, o])),
      entries: [],
      contended: false,
      wakes: next ? [next.start - horizon] : [],
    };
    for (const o of windows) {
      const stop = await this.reconcileWindow(pass, o);
      if (stop) return stop.result;
    }
    await this.writeRecurringStatus(pass, recurringVerdict(pass.entries, next, horizon));
    if (pass.contended) return { requeueAfterMs: 100 };
    if (pass.entries.some((e) => e.phase === 'Pending')) return { backoff: true };
    const soonest = Math.min(...pass.wakes);
    if (!Number.isFinite(soonest)) return undefined;
    // At most an hour ahead, as wakeAt.
    return { requeueAfterMs: Math.min(3_600_000, Math.max(1000, soonest - now + 500)) };
  }

  /**
   * The windows the ledger holds for this CR, by key. Earlier windows may have been booked under another tenant (a
   * relabelled namespace): found by key all the same. A window that ended: its booking ended in the ledger too.
   */
  private async bookedWindows(r: Reservation, nsTenant: string, uid: string, now: number): Promise<Map<string, { id: string; tenantId: string }>> {
    const ctx = this.ctx;
    const booked = new Map<string, { id: string; tenantId: string }>();
    for (const b of await ctx.ledger.findByIdempotencyPrefixIn(this.tenantsToAsk(r, nsTenant), `${uid}:`)) {
      if (!booked.has(b.idempotencyKey)) booked.set(b.idempotencyKey, b);
      // A window that ended: end its booking in the ledger too, as a one-shot Reservation's.
      if ((b.state === 'held' || b.state === 'confirmed') && (await ctx.ledger.get(b.id))!.end <= now) {
        await ctx.ledger.release(b.id);
        ctx.wakePending(r.spec.pool);
      }
    }
    return booked;
  }

  /** One window: its booking as the ledger has it, else booked now, else why not; `result` when the pass stops. */
  private async reconcileWindow(pass: WindowsPass, o: { start: number; end: number }): Promise<{ result: ReconcileResult } | undefined> {
    const ctx = this.ctx;
    const { r, tenant, now } = pass;
    const key = windowKey(pass.uid, o);
    const span = { start: iso(o.start)!, end: isoEnd(o.end)! };
    const known = pass.booked.get(key);
    const view = known && (await ctx.ledger.get(known.id));
    if (view) {
      pass.entries.push(this.windowBooked(span, view));
      pass.wakes.push(...this.wakesOf(view));
      return;
    }
    if (pass.base === undefined) {
      const stop = await this.recurringBase(pass);
      if (stop) return stop;
    }
    const input = windowInput(pass.base!, key, o, now);
    if (!input) return;
    const outcome = await ctx.ledger.reserve(input, now);
    if (outcome.ok) {
      ctx.log.info('reservation window booked', { reservation: `${r.metadata.namespace}/${r.metadata.name}`, reservationId: outcome.reservation.id, start: span.start });
      pass.entries.push(this.windowBooked(span, outcome.reservation));
      pass.wakes.push(...this.wakesOf(outcome.reservation));
      return;
    }
    const reason = WINDOW_REASONS[outcome.code];
    const message = outcome.code === 'NOT_FOUND' ? `pool ${r.spec.pool} is not offered to tenant ${tenant}` : outcome.message;
    if (outcome.code === 'CONTENDED' || outcome.code === 'IDEMPOTENCY_MISMATCH') pass.contended = true; // raced: look again
    pass.entries.push({ ...span, phase: 'Pending', reason, message });
    if (pass.prev.get(span.start)?.reason !== reason) {
      await ctx.event(r, 'Reservation', { type: 'Warning', reason, message: `window ${span.start} to ${span.end}: ${message}` });
    }
    return;
  }

  /** The pool and the one-shot input every window's booking starts from (once per pass, at the first window to book). */
  private async recurringBase(pass: WindowsPass): Promise<{ result: ReconcileResult } | undefined> {
    const { r, tenant } = pass;
    const p = await this.poolIdFor(r, tenant);
    if (typeof p !== 'string') return { result: p };
    pass.poolId = p;
    try {
      // The one-shot input validates everything but the window; each window then gets its own start and length.
      pass.base = toCreateInput({ ...r, spec: { ...r.spec, start: undefined, duration: 1, recurrence: undefined } }, tenant, p);
      return undefined;
    } catch (e) {
      if (!(e instanceof ValidationError)) throw e;
      await this.writeVerdict(r, tenant, p, { phase: 'Failed', status: 'False', reason: 'Invalid', message: e.message, eventType: 'Warning' });
      return { result: undefined };
    }
  }

  /** The recurring CR's status: its windows, the columns showing the current or next one. */
  private async writeRecurringStatus(pass: WindowsPass, v: ReturnType<typeof recurringVerdict>): Promise<void> {
    const st = pass.r.status ?? {};
    const first = pass.entries[0];
    const poolId = pass.poolId ?? st.poolId;
    const status: ReservationStatus = {
      phase: v.phase,
      tenant: pass.tenant,
      ...(poolId ? { poolId } : {}),
      // The columns (Start, End, GPUs, Nodes) show the current or next window.
      ...(first ? { start: first.start, end: first.end } : {}),
      ...(first?.atoms !== undefined ? { atoms: first.atoms, nodes: first.nodes } : {}),
      occurrences: pass.entries,
    };
    // Status is merge-patched: a column field this status no longer has is cleared, not left showing an old window.
    const cleared = Object.fromEntries((['start', 'end', 'atoms', 'nodes'] as const).filter((k) => st[k] !== undefined && status[k] === undefined).map((k) => [k, null]));
    await this.writeStatus(pass.r, { ...status, ...cleared } as ReservationStatus, v);
  }

  /** A booked window's status entry: its reservation, as the ledger has it. */
  private windowBooked(span: { start: string; end: string }, view: ReservationView): OccurrenceStatus {
    const atoms = view.allocations.reduce((n, a) => n + a.atoms.length, 0);
    const phase = PHASE_OF_STATE[view.state];
    return {
      ...span,
      phase,
      reservationId: view.id,
      resourceName: reservationResourceName(view.id),
      atoms,
      nodes: view.allocations.map((a) => a.nodeId).join(','),
      ...(view.state === 'held' && iso(view.leaseExpiresAt) ? { leaseExpiresAt: iso(view.leaseExpiresAt) } : {}),
      ...(phase === 'Reserved' ? {} : { reason: phase }),
    };
  }

  /** When a live booking needs another look: its hold runs out, its window ends. */
  private wakesOf(view: ReservationView): number[] {
    if (view.state !== 'held' && view.state !== 'confirmed') return [];
    return [view.end, ...(view.state === 'held' && view.leaseExpiresAt ? [view.leaseExpiresAt] : [])];
  }

  private async finalize(r: Reservation): Promise<ReconcileResult> {
    const ctx = this.ctx;
    const { namespace, name } = { namespace: r.metadata.namespace!, name: r.metadata.name };
    if (!(r.metadata.finalizers ?? []).includes(RESERVATION_FINALIZER)) return;
    this.lastEvent.delete(`${namespace}/${name}`);
    // Every booking this CR made (by its uid), whatever its status says: another tenant's booking is never released here.
    const tenants = this.tenantsToAsk(r, this.namespaceTenant(namespace) ?? undefined);
    const uid = r.metadata.uid;
    // A recurring Reservation's windows are keyed `${uid}:${start}`: every one of them, past or ahead.
    const bookings = uid
      ? [
          ...(await ctx.ledger.findByIdempotencyKeyIn(tenants, uid)),
          ...(await ctx.ledger.findByIdempotencyPrefixIn(tenants, `${uid}:`)).filter((b) => b.state === 'held' || b.state === 'confirmed'),
        ]
      : [];
    for (const { id } of bookings) {
      const released = await ctx.ledger.release(id);
      if (released) {
        ctx.log.info('reservation released', { reservation: `${namespace}/${name}`, reservationId: id });
        await ctx.event(r, 'Reservation', { type: 'Normal', reason: 'Released', message: `released ${id}; its atoms are free from now` });
      }
      const view = await ctx.ledger.get(id);
      if (view) ctx.wakePending(ctx.poolNameOf(view.poolId));
    }
    try {
      await ctx.kube.setReservationFinalizers(
        namespace,
        name,
        (r.metadata.finalizers ?? []).filter((f) => f !== RESERVATION_FINALIZER),
        r.metadata.resourceVersion ?? '',
      );
    } catch (e) {
      if (statusOf(e) === 404) return;
      if (statusOf(e) === 409) return { requeueAfterMs: 200 };
      throw e;
    }
  }

  /**
   * The TooManyPending verdict when at least the Pool's spec.maxPendingPerTenant of the tenant's pending Reservations
   * in the Pool were created before this one (core/pending.ts); undefined when it may try to book.
   */
  private waitsBehindTenant(r: Reservation, tenant: string): Verdict | undefined {
    const limit = maxPendingOf(this.ctx.informers.pools.get(r.spec.pool)?.spec.maxPendingPerTenant);
    const same: PendingEntry[] = [];
    for (const o of this.ctx.pendingInPool(r.spec.pool)) {
      if (o.metadata.namespace && this.namespaceTenant(o.metadata.namespace) === tenant) same.push(pendingEntry(o));
    }
    const { over, earlier } = overPendingLimit(pendingEntry(r), same, limit);
    if (!over) return undefined;
    const message = `tenant ${tenant} has ${earlier} earlier pending Reservations in pool ${r.spec.pool} (at most ${limit}, the Pool's spec.maxPendingPerTenant): this one waits until one of them leaves`;
    return { phase: 'Pending', status: 'False', reason: TOO_MANY_PENDING, message, eventType: 'Normal' };
  }

  /**
   * A Reservation in a namespace that is no tenant (no tenant label, tenancy by name off): Pending, reason NoTenant,
   * tried again after the longest backoff (labelling the namespace makes it a tenant).
   */
  private async refuseNoTenant(r: Reservation, namespace: string): Promise<ReconcileResult> {
    const v: Verdict = { phase: 'Pending', status: 'False', reason: 'NoTenant', message: noTenantMessage(namespace), eventType: 'Warning' };
    await this.writeStatus(r, { phase: 'Pending' }, v);
    return { requeueAfterMs: this.ctx.tuning.pendingMaxBackoffMs };
  }

  /**
   * The tenant of the namespace now (its label; else its name, with tenancy by name on); null when the namespace is
   * known and is no tenant; undefined while the namespace is not known.
   */
  private namespaceTenant(namespace: string): string | null | undefined {
    const ns = this.ctx.informers.namespaces.get(namespace);
    if (!ns) return undefined;
    return namespaceTenant(namespace, ns.metadata.labels, this.ctx.tuning.tenancyByName) ?? null;
  }

  /**
   * The tenants under which this CR may have booked: its namespace's now, the namespace itself, and the one its status
   * mirrors (the namespace may have been relabelled since). Only a lookup hint: the key is the CR's own uid, so a
   * forged tenant can find nothing but this CR's own bookings.
   */
  private tenantsToAsk(r: Reservation, nsTenant: string | undefined): string[] {
    return [nsTenant, r.metadata.namespace, r.status?.tenant].filter((t): t is string => typeof t === 'string' && t !== '');
  }

  /** The CR's booking in the ledger, found by its uid (the live one, else the newest), or undefined. */
  private async bookingOf(r: Reservation, nsTenant: string | undefined): Promise<ReservationView | undefined> {
    if (!r.metadata.uid) return undefined;
    const [first] = await this.ctx.ledger.findByIdempotencyKeyIn(this.tenantsToAsk(r, nsTenant), r.metadata.uid);
    return first ? this.ctx.ledger.get(first.id) : undefined;
  }

  /**
   * A held booking of a Reservation annotated to confirm is confirmed in the ledger (the annotation is an input, like
   * the spec; status only mirrors what the ledger then says). A hold whose lease ran out stays unconfirmed: the leader's
   * expiry releases it, and the mirror shows Expired.
   */
  private async confirmIfAsked(r: Reservation, view: ReservationView): Promise<ReservationView> {
    if (view.state !== 'held' || !confirmRequested(r)) return view;
    const out = await this.ctx.ledger.confirm(view.id);
    const reservation = `${r.metadata.namespace}/${r.metadata.name}`;
    if ('error' in out) {
      this.ctx.log.info('confirm refused', { reservation, reservationId: view.id, reason: out.error });
      return (await this.ctx.ledger.get(view.id)) ?? view;
    }
    this.ctx.log.info('hold confirmed', { reservation, reservationId: view.id, by: 'annotation' });
    return out;
  }

  /**
   * A confirmed booking of a Reservation with spec.releaseIfUnusedSeconds that no pod has used by then is released,
   * under the row lock a pod's bind takes too (Ledger.releaseIfUnused); the mirror then says Released, reason Unused.
   */
  private async releaseIfUnused(r: Reservation, view: ReservationView): Promise<ReservationView> {
    const ms = unusedAfterMs(r);
    if (ms === undefined || view.state !== 'confirmed' || view.everUsed !== false) return view;
    if (this.ctx.clock.now() < view.start + ms) return view;
    const released = await this.ctx.ledger.releaseIfUnused(view.id, ms / 1000);
    if (released) {
      this.ctx.log.info('reservation released: unused', { reservation: `${r.metadata.namespace}/${r.metadata.name}`, reservationId: view.id });
      this.ctx.wakePending(this.ctx.poolNameOf(view.poolId));
    }
    return (await this.ctx.ledger.get(view.id)) ?? view;
  }

  /** A live booking comes back when its hold runs out, when it would be released unused, or when its window ends. */
  private wakeAt(view: ReservationView, unusedMs?: number): ReconcileResult {
    if (view.state !== 'held' && view.state !== 'confirmed') return undefined;
    const unusedAt = view.state === 'confirmed' && unusedMs !== undefined && view.everUsed !== true ? view.start + unusedMs : Infinity;
    const next = Math.min(view.state === 'held' && view.leaseExpiresAt ? view.leaseExpiresAt : Infinity, view.end, unusedAt, view.preemption?.at ?? Infinity);
    if (!Number.isFinite(next)) return undefined;
    // At most an hour ahead: timers have a 24-day ceiling, and the periodic resync looks again anyway.
    return { requeueAfterMs: Math.min(3_600_000, Math.max(1000, next - this.ctx.clock.now() + 500)) };
  }

  /** The status of a booked CR, from its booking as the ledger has it (status.ts), with the Degraded verdict while Reserved. */
  private async writeBooked(r: Reservation, view: ReservationView, tenant: string, fresh: boolean): Promise<void> {
    const v = bookedVerdict(r, view, this.ctx.clock.now());
    if (fresh) {
      const nodes = view.allocations.map((a) => a.nodeId);
      this.ctx.log.info('reservation booked', { reservation: `${r.metadata.namespace}/${r.metadata.name}`, reservationId: view.id, nodes });
    }
    await this.writeStatus(r, bookedStatus(r, view, tenant), v, v.phase === 'Reserved' ? degradedVerdict(view) : undefined);
  }

  private async writeVerdict(r: Reservation, tenant: string, poolId: string | undefined, v: Verdict, extra: Pick<ReservationStatus, 'earliestStart'> = {}): Promise<void> {
    await this.writeStatus(r, { phase: v.phase, tenant, ...(poolId ? { poolId } : {}), ...extra }, v);
  }

  /** Writes status and the Reserved condition when they changed; an Event when the phase or reason changed. */
  private async writeStatus(r: Reservation, status: ReservationStatus, v: Verdict, degraded?: Omit<Verdict, 'phase'>): Promise<void> {
    const prev = r.status ?? {};
    const generation = r.metadata.generation ?? 0;
    const conditions = conditionsAfter(prev.conditions, generation, v, degraded, this.ctx.nowIso());
    const next: ReservationStatus = { ...status, observedGeneration: generation, conditions };
    if (!statusChanged(prev, next, v, degraded)) return;
    await this.announce(r, prev, v, degraded);
    // A merge patch keeps what it does not name: a lease that a confirmation or an expiry ended, and an earliest start
    // that no longer stands (booked, or refused for another reason), are removed by name.
    const patch: Record<string, unknown> = { ...next };
    for (const k of ['leaseExpiresAt', 'earliestStart'] as const) if (prev[k] && !next[k]) patch[k] = null;
    try {
      await this.ctx.kube.patchReservationStatus(r.metadata.namespace!, r.metadata.name, patch);
    } catch (e) {
      if (statusOf(e) === 404) return;
      throw e;
    }
  }

  /**
   * The Events of a status change: the verdict's when its phase or reason changed, Degraded or Repaired when that
   * verdict changed, PreemptionNotice when it first appears; each once (this.lastEvent: the cache may lag our writes).
   */
  private async announce(r: Reservation, prev: ReservationStatus, v: Verdict, degraded: Omit<Verdict, 'phase'> | undefined): Promise<void> {
    const ctx = this.ctx;
    const prevCond = findCondition(prev.conditions, 'Reserved');
    const key = `${r.metadata.namespace}/${r.metadata.name}`;
    const stamp = `${r.metadata.uid}|${v.phase}|${v.reason}`;
    if ((prev.phase !== v.phase || prevCond?.reason !== v.reason) && this.lastEvent.get(key) !== stamp) {
      this.lastEvent.set(key, stamp);
      await ctx.event(r, 'Reservation', { type: v.eventType, reason: v.reason, message: v.message });
    }
    const degradedStamp = degraded && `${r.metadata.uid}|${degraded.status}|${degraded.reason}|${degraded.message}`;
    if (degraded && degradedChanged(prev, degraded) && this.lastEvent.get(`${key}|Degraded`) !== degradedStamp) {
      this.lastEvent.set(`${key}|Degraded`, degradedStamp!);
      await ctx.event(r, 'Reservation', {
        type: degraded.eventType,
        reason: degraded.status === 'True' ? 'Degraded' : 'Repaired',
        message: degraded.message,
      });
    }
    const noticeStamp = `${r.metadata.uid}|${PREEMPTION_NOTICE}`;
    if (v.notice && !findCondition(prev.conditions, PREEMPTION_NOTICE) && this.lastEvent.get(`${key}|${PREEMPTION_NOTICE}`) !== noticeStamp) {
      this.lastEvent.set(`${key}|${PREEMPTION_NOTICE}`, noticeStamp);
      await ctx.event(r, 'Reservation', { type: 'Warning', reason: PREEMPTION_NOTICE, message: v.notice.message });
    }
  }
}
