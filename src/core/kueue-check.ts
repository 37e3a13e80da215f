// The Kueue AdmissionCheck `bettercompute.io/reservation` (docs/kueue.md, docs/adr/0041-kueue-admission-check.md,
// docs/adr/0046-kueue-books-the-earliest-window.md): whether a Workload may start now, on the Reservation its Job names
// or on the one the check booked for it. Pure: the controller passes the Workload as the API server has it, the
// Reservation's facts from its informer, the tenant of the Workload's namespace and now; this says the check's state,
// its message, when to look again, the pod-set updates that make the pods the Reservation's pods, what to book for a
// Workload that names none, when its booking is to be released, and when a Ready check has to go back to Retry.
import { z } from 'zod';
import { GENERIC_RESOURCES, POOL_LABEL, RESERVATION_LABEL } from './names.ts';

/** How long a Workload waits for the Reservation it names to appear before the check rejects it. */
export const MISSING_RESERVATION_GRACE_MS = 60_000;
/** How soon a Pending check is looked at again when nothing else will wake it (a Reservation that does not exist yet). */
export const RECHECK_MISSING_MS = 5_000;

const Quantities = z.record(z.string(), z.union([z.string(), z.number()])).nullish();
const Container = z.looseObject({ resources: z.looseObject({ requests: Quantities, limits: Quantities }).nullish() });
const PodSet = z.looseObject({
  name: z.string().min(1),
  count: z.number().int().min(0).default(1),
  template: z.looseObject({
    metadata: z.looseObject({ labels: z.record(z.string(), z.string()).nullish() }).nullish(),
    spec: z.looseObject({ containers: z.array(Container).default([]), initContainers: z.array(Container).nullish() }),
  }),
});
const CheckState = z.looseObject({ name: z.string(), state: z.string(), message: z.string().nullish() });
const WorkloadCondition = z.looseObject({ type: z.string(), status: z.string(), reason: z.string().nullish() });
const OwnerReference = z.looseObject({ apiVersion: z.string(), kind: z.string(), name: z.string(), uid: z.string().optional() });

/** What is read of a kueue.x-k8s.io/v1beta2 Workload (the rest is Kueue's). */
export const WorkloadSchema = z.looseObject({
  metadata: z.looseObject({
    name: z.string(),
    namespace: z.string(),
    uid: z.string().optional(),
    labels: z.record(z.string(), z.string()).nullish(),
    creationTimestamp: z.union([z.string(), z.date()]).nullish(),
    deletionTimestamp: z.union([z.string(), z.date()]).nullish(),
    ownerReferences: z.array(OwnerReference).nullish(),
  }),
  spec: z.looseObject({
    podSets: z.array(PodSet).min(1),
    /** false: deactivated (by its owner or by Kueue). */
    active: z.boolean().nullish(),
    /** Kueue's limit on the Workload's run time (from the Job's label kueue.x-k8s.io/max-exec-time-seconds). */
    maximumExecutionTimeSeconds: z.number().int().nullish(),
  }),
  status: z.looseObject({ admissionChecks: z.array(CheckState).nullish(), conditions: z.array(WorkloadCondition).nullish() }).nullish(),
});
export type Workload = z.infer<typeof WorkloadSchema>;

/** One window of a Reservation: the single one, or each occurrence of a recurring one. Times in ms. */
export interface ReservationWindow {
  phase: string | undefined;
  startMs: number | undefined;
  endMs: number | undefined;
}

/** What the check reads of a Reservation (its spec and the controller's own status mirror). */
export interface ReservationFacts {
  namespace: string;
  name: string;
  /** status.tenant: the tenant the booking was made for. */
  tenant: string | undefined;
  deleting: boolean;
  devices: { class: string; count: number }[];
  windows: ReservationWindow[];
  /** Booked by this check for the Workload (labelled with its uid), not named by the Job. */
  booked?: boolean;
  /** A spot Reservation under a preemption notice: when its atoms go (status.preemptAt, ADR 0017). */
  preemptAtMs?: number;
  /** Atoms short after a repair (condition Degraded True, ADR 0016): its message. */
  degraded?: string;
}

export type CheckStateName = 'Pending' | 'Ready' | 'Retry' | 'Rejected';

export interface PodSetUpdate {
  name: string;
  labels: Record<string, string>;
}

export interface CheckDecision {
  state: CheckStateName;
  message: string;
  podSetUpdates?: PodSetUpdate[];
  /** Look again at this instant (ms) at the latest: a window's start, or a missing Reservation's grace. */
  recheckAtMs?: number;
  /** The Workload names no Reservation and has none booked: book one (bookingFor), then decide again. */
  needsBooking?: true;
}

export type NameResult = { ok: true; name: string | undefined } | { ok: false; message: string };

/** The Reservation a Workload names: its own label (Kueue's labelKeysToCopy from the Job), else its pod templates'. */
export function reservationNameOf(w: Workload): NameResult {
  const names = new Set<string>();
  const own = w.metadata.labels?.[RESERVATION_LABEL];
  if (own) names.add(own);
  for (const ps of w.spec.podSets) {
    const n = ps.template.metadata?.labels?.[RESERVATION_LABEL];
    if (n) names.add(n);
  }
  if (names.size > 1) return { ok: false, message: `the Workload names more than one Reservation (${[...names].sort().join(', ')}): a Workload runs on one` };
  return { ok: true, name: [...names][0] };
}

/** Whole devices of a quantity, or undefined when it is not a whole number. */
function whole(q: string | number): number | undefined {
  const n = typeof q === 'number' ? q : /^\d+$/.test(q.trim()) ? Number(q.trim()) : NaN;
  return Number.isInteger(n) && n >= 0 ? n : undefined;
}

type Demand = { ok: true; byClass: Map<string, number>; pods: PodDemand[] } | { ok: false; message: string };

/** What one pod set's pods ask for: `count` pods, each `perPod` devices by class (classes asked for 0 left out). */
export interface PodDemand {
  podSet: string;
  count: number;
  perPod: Map<string, number>;
}

/** The devices all the Workload's pods ask for, by class: containers add up, an init container needs its own at most. */
export function podSetDemand(w: Workload): Demand {
  const byClass = new Map<string, number>();
  const pods: PodDemand[] = [];
  for (const ps of w.spec.podSets) {
    const perPod = new Map<string, number>();
    const of = (c: z.infer<typeof Container>): Map<string, number> | string => {
      const m = new Map<string, number>();
      for (const [res, cls] of Object.entries(GENERIC_RESOURCES)) {
        const q = c.resources?.limits?.[res] ?? c.resources?.requests?.[res];
        if (q === undefined) continue;
        const n = whole(q);
        if (n === undefined) return `pod set ${ps.name} asks for ${String(q)} ${res}: only whole devices`;
        m.set(cls, n);
      }
      return m;
    };
    for (const c of ps.template.spec.containers) {
      const m = of(c);
      if (typeof m === 'string') return { ok: false, message: m };
      for (const [cls, n] of m) perPod.set(cls, (perPod.get(cls) ?? 0) + n);
    }
    for (const c of ps.template.spec.initContainers ?? []) {
      const m = of(c);
      if (typeof m === 'string') return { ok: false, message: m };
      for (const [cls, n] of m) perPod.set(cls, Math.max(perPod.get(cls) ?? 0, n));
    }
    for (const [cls, n] of perPod) if (n === 0) perPod.delete(cls);
    for (const [cls, n] of perPod) byClass.set(cls, (byClass.get(cls) ?? 0) + n * ps.count);
    pods.push({ podSet: ps.name, count: ps.count, perPod });
  }
  return { ok: true, byClass, pods };
}

/** Why the Reservation cannot hold the Workload's pods (count, class), or undefined when it can. */
function shortfall(demand: Map<string, number>, r: ReservationFacts): string | undefined {
  const held = new Map<string, number>();
  for (const d of r.devices) held.set(d.class, (held.get(d.class) ?? 0) + d.count);
  for (const [cls, n] of demand) {
    if (n === 0) continue;
    const has = held.get(cls) ?? 0;
    if (n > has) return `the Workload's pods ask for ${n} bettercompute.io/${cls} in all, Reservation ${r.namespace}/${r.name} holds ${has} of class ${cls}`;
  }
  return undefined;
}

const iso = (ms: number) => new Date(ms).toISOString().replace(/\.\d+Z$/, 'Z');
const ENDED = new Set(['Released', 'Expired', 'Failed']);

export interface CheckInput {
  workload: Workload;
  /**
   * The Reservation the Workload names, from the Workload's namespace; or, when it names none, the one this check
   * booked for it (`booked: true`); undefined when there is none.
   */
  reservation: ReservationFacts | undefined;
  /** The tenant of the Workload's namespace (its bettercompute.io/tenant label, else the namespace itself). */
  namespaceTenant: string;
  nowMs: number;
}

const rejected = (message: string): CheckDecision => ({ state: 'Rejected', message });

/** The window under way at `nowMs`, else the next one not ended, earliest first. */
function currentWindow(r: ReservationFacts, nowMs: number): ReservationWindow | undefined {
  const open = r.windows.filter((w) => !ENDED.has(w.phase ?? '') && (w.endMs === undefined || w.endMs > nowMs));
  open.sort((a, b) => (a.startMs ?? 0) - (b.startMs ?? 0));
  return open.find((w) => w.startMs !== undefined && w.startMs <= nowMs) ?? open[0];
}

const describe = (r: ReservationFacts) => `Reservation ${r.namespace}/${r.name}${r.booked ? ' (booked for this Workload)' : ''}`;

/** The Reservation as it stands for this Workload: Rejected, Pending until its window, or Ready with the pod-set updates. */
function onReservation(w: Workload, r: ReservationFacts, demand: Map<string, number>, input: CheckInput): CheckDecision {
  const key = describe(r);
  if (r.tenant !== undefined && r.tenant !== input.namespaceTenant) {
    return rejected(`${key} is of tenant ${r.tenant}; namespace ${w.metadata.namespace} is of tenant ${input.namespaceTenant}`);
  }
  const short = shortfall(demand, r);
  if (short) return rejected(short);
  if (r.deleting) return rejected(`${key} is being deleted`);
  if (r.preemptAtMs !== undefined) return rejected(`${key} is preempted: its atoms go at ${iso(r.preemptAtMs)} and it takes no new pods`);
  const win = currentWindow(r, input.nowMs);
  if (!win) return rejected(`${key} has ended (${r.windows.map((x) => x.phase ?? 'unknown').join(', ') || 'no window'})`);
  if (win.phase !== 'Reserved' || win.startMs === undefined) {
    return { state: 'Pending', message: `waiting for ${key} to be booked (phase ${win.phase ?? 'none yet'})` };
  }
  if (r.degraded !== undefined) return { state: 'Pending', message: `${key} is degraded (${r.degraded}): waiting for its repair` };
  if (win.startMs > input.nowMs) {
    // No countdown in the message: it is written only when it changes.
    return { state: 'Pending', message: `${key} starts at ${iso(win.startMs)}: the Workload starts then`, recheckAtMs: win.startMs };
  }
  return {
    state: 'Ready',
    message: `${key} is live${win.endMs !== undefined ? ` until ${iso(win.endMs)}` : ''}: the pods run on its devices`,
    podSetUpdates: w.spec.podSets.map((ps) => ({ name: ps.name, labels: { [RESERVATION_LABEL]: r.name } })),
  };
}

/**
 * The check's state for a Workload in Pending (or Retry): Rejected when the name, the Reservation's tenant, its devices
 * or its end forbid it; Pending until its window has started (and while a named Reservation has not appeared, for a
 * grace); Ready from the window's start, with pod-set updates adding the Reservation's label to every pod set. A
 * Workload that names none is decided on the Reservation booked for it, or told to book one (`needsBooking`).
 */
export function decideReservationCheck(input: CheckInput): CheckDecision {
  const w = input.workload;
  const named = reservationNameOf(w);
  if (!named.ok) return rejected(named.message);
  const demand = podSetDemand(w);
  if (!demand.ok) return rejected(demand.message);
  const r = input.reservation;
  if (!named.name) {
    if (!r?.booked) return { state: 'Pending', message: 'booking a Reservation for the Workload at the earliest window', needsBooking: true };
    return onReservation(w, r, demand.byClass, input);
  }
  if (!r) {
    const created = w.metadata.creationTimestamp ? new Date(w.metadata.creationTimestamp).getTime() : input.nowMs;
    const giveUpAt = created + MISSING_RESERVATION_GRACE_MS;
    if (input.nowMs >= giveUpAt) return rejected(`no Reservation ${named.name} in namespace ${w.metadata.namespace} (a Workload uses its own namespace's)`);
    return { state: 'Pending', message: `waiting for Reservation ${w.metadata.namespace}/${named.name} to exist`, recheckAtMs: Math.min(giveUpAt, input.nowMs + RECHECK_MISSING_MS) };
  }
  return onReservation(w, r, demand.byClass, input);
}

/**
 * A Ready check's Reservation, looked at again: Retry when it can no longer carry the Workload (deleted or being
 * deleted, its window ended or not booked, preempted, atoms short), so that Kueue evicts the Workload, gives back its
 * quota and queues it again (its checks reset to Pending: then it waits, or books anew); undefined keeps it Ready (a
 * repaired Reservation holds all its atoms again, and a later window of a recurring one is not this one's business).
 */
export function decideLiveCheck(r: ReservationFacts | undefined, reservationName: string | undefined, nowMs: number): CheckDecision | undefined {
  const retry = (message: string): CheckDecision => ({ state: 'Retry', message });
  if (!r) return retry(`Reservation ${reservationName ?? '(booked for this Workload)'} is gone: the Workload goes back to the queue`);
  const key = describe(r);
  if (r.deleting) return retry(`${key} is being deleted: the Workload goes back to the queue`);
  if (r.preemptAtMs !== undefined) return retry(`${key} is preempted (its atoms go at ${iso(r.preemptAtMs)}): the Workload goes back to the queue`);
  if (r.degraded !== undefined) return retry(`${key} is degraded (${r.degraded}): the Workload goes back to the queue`);
  const live = r.windows.find((x) => x.phase === 'Reserved' && x.startMs !== undefined && x.startMs <= nowMs && (x.endMs === undefined || x.endMs > nowMs));
  if (!live) return retry(`${key} is not live any more (${r.windows.map((x) => x.phase ?? 'unknown').join(', ') || 'no window'}): the Workload goes back to the queue`);
  return undefined;
}

/** The check's current state on the Workload, as Kueue lists it in status.admissionChecks. */
export function currentCheck(w: Workload, checkName: string): { state: string; message: string } | undefined {
  const c = w.status?.admissionChecks?.find((x) => x.name === checkName);
  return c ? { state: c.state, message: c.message ?? '' } : undefined;
}

// ----- A Workload that names no Reservation: the one the check books for it

/** A booking's length when neither Kueue, the Job nor the Pool gives one. */
export const DEFAULT_KUEUE_DURATION_SECONDS = 3600;
/** The longest booking (the Reservation CRD's duration limit: 366 days). */
export const MAX_DURATION_SECONDS = 31_622_400;
/** How far ahead the earliest window is looked for (the timeline's and the recurrence horizon's 7 days). */
export const KUEUE_BOOKING_HORIZON_MS = 7 * 86_400_000;
/** How soon a Workload for which no window fits in the horizon is looked at again. */
export const RECHECK_NO_WINDOW_MS = 30_000;
/** Per device entry and gang size: the Reservation CRD's limits. */
const MAX_COUNT = 64;
const MAX_GANG = 64;

export type Lifecycle = 'active' | 'finished' | 'deactivated' | 'evicted' | 'deleted';

/** Whether the Workload still wants what was booked for it: finished, deactivated, evicted or deleted ones release it. */
export function workloadLifecycle(w: Workload): Lifecycle {
  const cond = (type: string) => w.status?.conditions?.some((c) => c.type === type && c.status === 'True') ?? false;
  if (w.metadata.deletionTimestamp) return 'deleted';
  if (cond('Finished')) return 'finished';
  if (w.spec.active === false) return 'deactivated';
  if (cond('Evicted')) return 'evicted';
  return 'active';
}

/**
 * The name of the Reservation booked for a Workload: `kq-`, its name (lower-case letters, digits and '-', at most 44),
 * '-' and 8 hex digits of its uid; at most 63 characters, a valid label value (pods carry it in a label).
 */
export function bookedReservationName(w: { metadata: { name: string; uid?: string | undefined } }): string {
  const slug = w.metadata.name.toLowerCase().replace(/[^a-z0-9-]+/g, '-').slice(0, 44).replace(/^-+|-+$/g, '') || 'workload';
  const uid = (w.metadata.uid ?? '').replace(/[^a-f0-9]/gi, '').toLowerCase().slice(0, 8).padEnd(8, '0');
  return `kq-${slug}-${uid}`;
}

/** What the booking reads of a Pool. */
export interface PoolFacts {
  name: string;
  archived: boolean;
  ownerTenant: string;
  offeredTo: readonly string[];
  /** spec.kueueDefaultDurationSeconds. */
  defaultDurationSeconds?: number | undefined;
}

/** One way to place the Workload's pods: the devices of one node (all of them), or of each member of a gang. */
export interface BookingShape {
  devices: { class: string; count: number }[];
  gang?: { size: number };
}

export type BookingPlan =
  | {
      ok: true;
      pool: string;
      durationSeconds: number;
      /** Where the duration came from (the message says it). */
      durationFrom: string;
      /** In preference: one node first, then a gang of one pod per node in one placement domain. */
      shapes: BookingShape[];
    }
  | { ok: false; message: string }
  | { ok: true; nothing: true; message: string };

export interface BookingInput {
  workload: Workload;
  pools: readonly PoolFacts[];
  namespaceTenant: string;
  /** The owner Job's spec.activeDeadlineSeconds, when it is a batch/v1 Job that sets one. */
  jobActiveDeadlineSeconds?: number | undefined;
}

function poolNameOf(w: Workload): NameResult {
  const names = new Set<string>();
  const own = w.metadata.labels?.[POOL_LABEL];
  if (own) names.add(own);
  for (const ps of w.spec.podSets) {
    const n = ps.template.metadata?.labels?.[POOL_LABEL];
    if (n) names.add(n);
  }
  if (names.size > 1) return { ok: false, message: `the Workload names more than one Pool (${[...names].sort().join(', ')})` };
  return { ok: true, name: [...names][0] };
}

const mayBook = (p: PoolFacts, tenant: string) => p.ownerTenant === tenant || p.offeredTo.includes(tenant);
const sameDemand = (a: Map<string, number>, b: Map<string, number>) => a.size === b.size && [...a].every(([k, v]) => b.get(k) === v);
const asDevices = (m: Map<string, number>) => [...m].sort(([a], [b]) => (a < b ? -1 : 1)).map(([cls, count]) => ({ class: cls, count }));

/**
 * What to book for a Workload that names no Reservation: the Pool (its label, else the one Pool the tenant may book),
 * how long (Kueue's maximumExecutionTimeSeconds, else the Job's activeDeadlineSeconds, else the Pool's
 * kueueDefaultDurationSeconds, else an hour), and the shapes its pods' GPUs can take: all on one node, or, for pods
 * that each ask the same, a gang of one pod per node in one placement domain. `nothing`: its pods ask for no GPUs.
 */
export function bookingFor(input: BookingInput): BookingPlan {
  const w = input.workload;
  const demand = podSetDemand(w);
  if (!demand.ok) return { ok: false, message: demand.message };
  const gpuPods = demand.pods.filter((p) => p.perPod.size > 0 && p.count > 0);
  if (gpuPods.length === 0) return { ok: true, nothing: true, message: 'the Workload’s pods ask for no bettercompute.io GPUs: nothing to book' };
  const named = poolNameOf(w);
  if (!named.ok) return { ok: false, message: named.message };
  const tenant = input.namespaceTenant;
  let pool: PoolFacts | undefined;
  if (named.name) {
    pool = input.pools.find((p) => p.name === named.name);
    if (!pool || pool.archived || !mayBook(pool, tenant)) return { ok: false, message: `Pool ${named.name} is not offered to tenant ${tenant}` };
  } else {
    const open = input.pools.filter((p) => !p.archived && mayBook(p, tenant)).sort((a, b) => (a.name < b.name ? -1 : 1));
    if (open.length === 0) return { ok: false, message: `no Pool is offered to tenant ${tenant}: nothing to book the Workload in` };
    if (open.length > 1) {
      return { ok: false, message: `tenant ${tenant} may book ${open.length} Pools (${open.map((p) => p.name).join(', ')}): label the Job ${POOL_LABEL}: <one of them>` };
    }
    pool = open[0]!;
  }
  const [asked, from] =
    w.spec.maximumExecutionTimeSeconds && w.spec.maximumExecutionTimeSeconds > 0
      ? [w.spec.maximumExecutionTimeSeconds, 'the Workload’s maximumExecutionTimeSeconds']
      : input.jobActiveDeadlineSeconds && input.jobActiveDeadlineSeconds > 0
        ? [input.jobActiveDeadlineSeconds, 'the Job’s activeDeadlineSeconds']
        : pool.defaultDurationSeconds && pool.defaultDurationSeconds > 0
          ? [pool.defaultDurationSeconds, `Pool ${pool.name}’s kueueDefaultDurationSeconds`]
          : [DEFAULT_KUEUE_DURATION_SECONDS, 'the default'];
  const durationSeconds = Math.min(MAX_DURATION_SECONDS, Math.ceil(asked));
  const shapes: BookingShape[] = [];
  if ([...demand.byClass.values()].every((n) => n <= MAX_COUNT)) shapes.push({ devices: asDevices(demand.byClass) });
  const pods = gpuPods.reduce((n, p) => n + p.count, 0);
  const first = gpuPods[0]!.perPod;
  if (pods >= 2 && pods <= MAX_GANG && gpuPods.every((p) => sameDemand(p.perPod, first)) && [...first.values()].every((n) => n <= MAX_COUNT)) {
    shapes.push({ devices: asDevices(first), gang: { size: pods } });
  }
  if (shapes.length === 0) return { ok: false, message: `the Workload’s pods ask for more than ${MAX_COUNT} devices of a class on one node and cannot form a gang of at most ${MAX_GANG} alike pods` };
  return { ok: true, pool: pool.name, durationSeconds, durationFrom: from, shapes };
}

/** The check's message once a Reservation is booked for the Workload: when it starts, and for how long. */
export function bookedMessage(namespace: string, name: string, pool: string, startMs: number, durationSeconds: number, durationFrom: string, nowMs: number): string {
  const when = startMs <= nowMs ? 'now' : `at ${iso(startMs)}`;
  return `booked Reservation ${namespace}/${name} in Pool ${pool}, the earliest window: from ${when} for ${durationSeconds} s (${durationFrom}); the Workload starts then`;
}

/** The check's message when no window fits in the horizon. */
export function noWindowMessage(pool: string, horizonMs: number, reason: string): string {
  return `no window in Pool ${pool} within ${Math.round(horizonMs / 86_400_000)} days fits the Workload's pods (${reason}): looking again`;
}
