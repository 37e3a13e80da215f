// The Kueue AdmissionCheck `bettercompute.io/reservation` (docs/kueue.md, docs/adr/0041-kueue-admission-check.md):
// whether a Workload whose Job names a Reservation may start now. Pure: the controller passes the Workload as the API
// server has it, the Reservation's facts from its informer, the tenant of the Workload's namespace and now; this says
// the check's state, its message, when to look again and the pod-set updates that make the pods the Reservation's pods.
import { z } from 'zod';

/** The AdmissionCheck's spec.controllerName that this controller answers for. */
export const CHECK_CONTROLLER_NAME = 'bettercompute.io/reservation';
/** The label naming a Reservation of the Workload's namespace: on the Job (copied to the Workload) or its pod template. */
export const RESERVATION_LABEL = 'bettercompute.io/reservation';
/** How long a Workload waits for the Reservation it names to appear before the check rejects it. */
export const MISSING_RESERVATION_GRACE_MS = 60_000;
/** How soon a Pending check is looked at again when nothing else will wake it (a Reservation that does not exist yet). */
export const RECHECK_MISSING_MS = 5_000;

const GPU_RESOURCES: Readonly<Record<string, string>> = {
  'bettercompute.io/gpu': 'gpu',
  'bettercompute.io/gpu.mig': 'gpu.mig',
  'bettercompute.io/gpu.slot': 'gpu.slot',
};

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

/** What is read of a kueue.x-k8s.io/v1beta2 Workload (the rest is Kueue's). */
export const WorkloadSchema = z.looseObject({
  metadata: z.looseObject({
    name: z.string(),
    namespace: z.string(),
    uid: z.string().optional(),
    labels: z.record(z.string(), z.string()).nullish(),
    creationTimestamp: z.union([z.string(), z.date()]).nullish(),
    deletionTimestamp: z.union([z.string(), z.date()]).nullish(),
  }),
  spec: z.looseObject({ podSets: z.array(PodSet).min(1) }),
  status: z.looseObject({ admissionChecks: z.array(CheckState).nullish() }).nullish(),
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

type Demand = { ok: true; byClass: Map<string, number> } | { ok: false; message: string };

/** The devices all the Workload's pods ask for, by class: containers add up, an init container needs its own at most. */
export function podSetDemand(w: Workload): Demand {
  const byClass = new Map<string, number>();
  for (const ps of w.spec.podSets) {
    const perPod = new Map<string, number>();
    const of = (c: z.infer<typeof Container>): Map<string, number> | string => {
      const m = new Map<string, number>();
      for (const [res, cls] of Object.entries(GPU_RESOURCES)) {
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
    for (const [cls, n] of perPod) byClass.set(cls, (byClass.get(cls) ?? 0) + n * ps.count);
  }
  return { ok: true, byClass };
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
  /** The Reservation the Workload names, from the Workload's namespace; undefined when there is none. */
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

/** The Reservation as it stands for this Workload: Rejected, Pending until its window, or Ready with the pod-set updates. */
function onReservation(w: Workload, r: ReservationFacts, demand: Map<string, number>, input: CheckInput): CheckDecision {
  const key = `${r.namespace}/${r.name}`;
  if (r.tenant !== undefined && r.tenant !== input.namespaceTenant) {
    return rejected(`Reservation ${key} is of tenant ${r.tenant}; namespace ${w.metadata.namespace} is of tenant ${input.namespaceTenant}`);
  }
  const short = shortfall(demand, r);
  if (short) return rejected(short);
  if (r.deleting) return rejected(`Reservation ${key} is being deleted`);
  const win = currentWindow(r, input.nowMs);
  if (!win) return rejected(`Reservation ${key} has ended (${r.windows.map((x) => x.phase ?? 'unknown').join(', ') || 'no window'})`);
  if (win.phase !== 'Reserved' || win.startMs === undefined) {
    return { state: 'Pending', message: `waiting for Reservation ${key} to be booked (phase ${win.phase ?? 'none yet'})` };
  }
  if (win.startMs > input.nowMs) {
    // No countdown in the message: it is written only when it changes.
    return { state: 'Pending', message: `Reservation ${key} starts at ${iso(win.startMs)}: the Workload starts then`, recheckAtMs: win.startMs };
  }
  return {
    state: 'Ready',
    message: `Reservation ${key} is live${win.endMs !== undefined ? ` until ${iso(win.endMs)}` : ''}: the pods run on its devices`,
    podSetUpdates: w.spec.podSets.map((ps) => ({ name: ps.name, labels: { [RESERVATION_LABEL]: r.name } })),
  };
}

/**
 * The check's state for a Workload: Rejected when the name, the Reservation's tenant, its devices or its end forbid
 * it; Pending until its window has started (and while a named Reservation has not appeared, for a grace); Ready from
 * the window's start, with pod-set updates adding the Reservation's label to every pod set.
 */
export function decideReservationCheck(input: CheckInput): CheckDecision {
  const w = input.workload;
  const named = reservationNameOf(w);
  if (!named.ok) return rejected(named.message);
  if (!named.name) {
    return rejected(`the Workload names no Reservation: label its Job (or pod template) ${RESERVATION_LABEL}: <a Reservation of namespace ${w.metadata.namespace}>`);
  }
  const demand = podSetDemand(w);
  if (!demand.ok) return rejected(demand.message);
  const r = input.reservation;
  if (!r) {
    const created = w.metadata.creationTimestamp ? new Date(w.metadata.creationTimestamp).getTime() : input.nowMs;
    const giveUpAt = created + MISSING_RESERVATION_GRACE_MS;
    if (input.nowMs >= giveUpAt) return rejected(`no Reservation ${named.name} in namespace ${w.metadata.namespace} (a Workload uses its own namespace's)`);
    return { state: 'Pending', message: `waiting for Reservation ${w.metadata.namespace}/${named.name} to exist`, recheckAtMs: Math.min(giveUpAt, input.nowMs + RECHECK_MISSING_MS) };
  }
  return onReservation(w, r, demand.byClass, input);
}

/** The check's current state on the Workload, as Kueue lists it in status.admissionChecks. */
export function currentCheck(w: Workload, checkName: string): { state: string; message: string } | undefined {
  const c = w.status?.admissionChecks?.find((x) => x.name === checkName);
  return c ? { state: c.state, message: c.message ?? '' } : undefined;
}
