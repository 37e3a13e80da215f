// The claim allocator (ADR 0043: the ledger allocates, the scheduler follows), leader-only: one reconcile per
// ResourceClaim key. For an unallocated claim of our DeviceClasses it puts our finalizer on the claim, books in the
// ledger (on demand) or assigns the pod's Reservation's atoms (inside its window only), and only then writes
// status.allocation; kube-scheduler then places the pod on that node by itself. Write first, then hand over: a status
// write that fails leaves the ledger's rows, which the next reconcile hands over again (claimHolding), and a claim
// deleted meanwhile is released before our finalizer lets it go. An allocated claim that no pod reserves any more and
// whose booking is over (the Reservation's end, its pod released) is released and its allocation cleared.
// The scheduling gate (ADR 0049): a pod that admission gated (ALLOCATION_GATE) is let through to kube-scheduler only once
// every claim of ours it uses is allocated: after this claim's allocation is written, or when an allocated claim's
// event finds its pod still gated (a sibling claim allocated meanwhile, a lift that failed, a new leader).
import { z } from 'zod';
import type { BookingLookup } from '../../admission/bookings.ts';
import { allocationFor, claimPodRef, classifyClaim, decideAllocated, decideClaim, gateVerdict, isOurAllocation, ResourceClaimSchema, type ClaimDecision, type GatedPodView, type PodView, type ReservationWindow, type ResourceClaim } from '../../core/dra-allocate.ts';
import type { ClaimHolding } from '../../db/claims.ts';
import { isWaitingForPod, WAITING_FOR_POD } from '../../db/reads.ts';
import type { Ledger } from '../../db/ledger.ts';
import { statusOf, type EventInput } from '../../kube/client.ts';
import type { Informer } from '../../kube/informer.ts';
import type { ResourceClaimObject } from '../../kube/resource-claims.ts';
import { namespaceTenant, type KubeObject, type NamespaceCR, type Reservation } from '../../kube/types.ts';
import { errorFields, type Logger } from '../../log.ts';
import type { ReconcileResult } from '../queue.ts';
import { ALLOCATION_GATE, CLAIM_FINALIZER, RESERVATION_LABEL } from '../../core/names.ts';

export interface ClaimAllocatorDeps {
  claims: Pick<Informer<ResourceClaimObject>, 'get'>;
  /** The claims seen in `namespace` that the pod `podUid` owns (made from its templates); start.ts indexes them. */
  claimsOwnedBy: (namespace: string, podUid: string) => readonly ResourceClaimObject[];
  reservations: Pick<Informer<Reservation>, 'get'>;
  namespaces: Pick<Informer<NamespaceCR>, 'get'>;
  kube: {
    getPod(namespace: string, name: string): Promise<unknown>;
    replaceStatus(claim: ResourceClaimObject): Promise<ResourceClaimObject>;
    /**
     * Removes the scheduling gate at `index` of the pod's spec.schedulingGates, only if it is still `gate` there and the
     * pod is still `uid` (a JSON patch with tests: anything else changed is a 422 and a retry). 404: the pod is gone.
     */
    removeSchedulingGate(namespace: string, name: string, uid: string, index: number, gate: string): Promise<void>;
    setFinalizers(namespace: string, name: string, finalizers: string[], resourceVersion: string): Promise<ResourceClaimObject>;
    event(obj: KubeObject, kind: string, e: EventInput): Promise<void>;
  };
  ledger: Pick<Ledger, 'bookClaim' | 'assignClaim' | 'claimHolding' | 'releaseClaim'>;
  bookings: BookingLookup;
  /** Runs a Kubernetes write inside a transaction that checked the leader's fence (fence.ts fenced). */
  fenced: <T>(fn: () => Promise<T>) => Promise<T>;
  nowMs: () => number;
  tenancyByName: boolean;
  log: Logger;
}

const PodSchema = z.looseObject({
  metadata: z.looseObject({ name: z.string(), uid: z.string(), labels: z.record(z.string(), z.string()).optional(), deletionTimestamp: z.unknown().optional() }),
  spec: z
    .looseObject({
      nodeSelector: z.record(z.string(), z.string()).nullish(),
      activeDeadlineSeconds: z.number().nullish(),
      schedulingGates: z.array(z.looseObject({ name: z.string() })).nullish(),
      resourceClaims: z.array(z.looseObject({ name: z.string(), resourceClaimName: z.string().nullish(), resourceClaimTemplateName: z.string().nullish() })).nullish(),
    })
    .optional(),
  status: z.looseObject({ phase: z.string().optional() }).optional(),
});

/** How long a claim waits before it is looked at again when nothing it waits for wakes it. */
const WAIT_AGAIN_MS = 15_000;

export class ClaimAllocator {
  /** `${claim uid} ${reason}`: each wait is told once (on the pod, else the claim) per leader. */
  private readonly told = new Set<string>();
  /** Uids of allocated claims whose pod is not (or no longer) gated by us: their events need no read of the pod. */
  private readonly gateDone = new Set<string>();
  /**
   * What this leader wrote of each claim (by uid): `superseded`, the resourceVersions that its own writes replaced (the
   * one it put the finalizer on, the finalizer's own once the allocation is written): such a version's event, when it
   * comes late, is of a claim that has moved on, and the newer version's event follows; `allocated`, the allocation's
   * resourceVersion and the booking's end (epoch ms, null: open-ended): an event of that very version brings nothing
   * this leader did not know when it wrote it.
   */
  private readonly written = new Map<string, { superseded: Set<string>; allocated?: { rv: string; end: number | null } }>();

  constructor(private readonly d: ClaimAllocatorDeps) {}

  async reconcile(key: string): Promise<ReconcileResult> {
    const raw = this.d.claims.get(key);
    if (!raw) return;
    const parsed = ResourceClaimSchema.safeParse(raw);
    if (!parsed.success) return; // not a claim we can read: not one of ours to serve
    const claim = parsed.data;
    if (classifyClaim(claim).kind === 'foreign' && !claim.metadata.finalizers?.includes(CLAIM_FINALIZER)) return;
    const rv = claim.metadata.resourceVersion;
    if (rv !== undefined && this.written.get(claim.metadata.uid)?.superseded.has(rv)) return; // a later write of ours follows
    if (claim.metadata.deletionTimestamp) return this.letGo(claim);
    if (claim.status?.allocation) return this.allocated(claim);
    return this.unallocated(claim);
  }

  /** A deleted claim: released in the ledger, then our finalizer removed. */
  private async letGo(claim: ResourceClaim): Promise<ReconcileResult> {
    const finalizers = claim.metadata.finalizers ?? [];
    if (!finalizers.includes(CLAIM_FINALIZER)) return;
    const released = await this.d.ledger.releaseClaim(claim.metadata.uid);
    this.gateDone.delete(claim.metadata.uid);
    this.written.delete(claim.metadata.uid);
    await this.d.fenced(() =>
      this.d.kube.setFinalizers(claim.metadata.namespace, claim.metadata.name, finalizers.filter((f) => f !== CLAIM_FINALIZER), claim.metadata.resourceVersion ?? ''),
    );
    this.d.log.info('dra: claim deleted; released', { claim: nameOf(claim), released });
  }

  /** An allocated claim of ours: kept while reserved; cleared when nobody reserves it and its booking is over. */
  private async allocated(claim: ResourceClaim): Promise<ReconcileResult> {
    if (!isOurAllocation(claim)) return;
    // Nothing to read when the answer is known: the pod let through, and the claim either as this leader's allocation
    // left it or reserved by a pod (decideAllocated keeps a reserved claim whatever the ledger says); only the wake-up
    // at the booking's end is set again, the ledger read once that end has come.
    const uid = claim.metadata.uid;
    const mine = this.written.get(uid)?.allocated;
    const unchanged = mine?.rv === claim.metadata.resourceVersion || (claim.status?.reservedFor ?? []).length > 0;
    if (mine && unchanged && this.gateDone.has(uid) && (mine.end === null || mine.end > this.d.nowMs())) return this.untilEnd(mine.end);
    const holding = await this.d.ledger.claimHolding(claim.metadata.uid);
    const verdict = decideAllocated({ claim, holds: holding?.now === true });
    if (verdict === 'keep') {
      if (!this.gateDone.has(claim.metadata.uid) && holding?.now === true) {
        const ref = claimPodRef(claim);
        const pod = ref && (await this.readPod(claim.metadata.namespace, ref.name));
        if (!(await this.liftGate(claim, pod && pod.gated.uid === ref.uid ? pod : undefined))) return { backoff: true };
      }
      if (mine && holding) mine.end = holding.end;
      return this.untilEnd(holding?.end ?? null);
    }
    this.gateDone.delete(claim.metadata.uid);
    this.written.delete(claim.metadata.uid);
    await this.d.ledger.releaseClaim(claim.metadata.uid);
    const { allocation: _gone, ...status } = claim.status ?? {};
    await this.d.fenced(() => this.d.kube.replaceStatus({ ...(claim as ResourceClaimObject), status: { ...status, allocation: null } }));
    this.d.log.info('dra: claim deallocated (no pod reserves it, its booking is over)', { claim: nameOf(claim) });
  }

  private async unallocated(claim: ResourceClaim): Promise<ReconcileResult> {
    const ref = claimPodRef(claim);
    const read = ref && (await this.readPod(claim.metadata.namespace, ref.name));
    const pod = read?.view;
    const reservation = pod && (await this.reservationOf(claim.metadata.namespace, pod));
    const decision = decideClaim({ claim, pod, reservation, now: this.d.nowMs() });
    if (decision.do === 'ignore') return;
    if (decision.do === 'wait') return this.wait(claim, decision);
    if (!claim.metadata.finalizers?.includes(CLAIM_FINALIZER)) {
      // Our finalizer first: from now on the claim cannot go before the ledger released what it books.
      const finalizers = [...(claim.metadata.finalizers ?? []), CLAIM_FINALIZER];
      const updated = await this.d.fenced(() => this.d.kube.setFinalizers(claim.metadata.namespace, claim.metadata.name, finalizers, claim.metadata.resourceVersion ?? ''));
      this.supersede(claim, updated.metadata.resourceVersion);
      claim.metadata.resourceVersion = updated.metadata.resourceVersion;
      claim.metadata.finalizers = finalizers;
    }
    const booked = await this.book(claim, pod!, decision);
    if (!booked.ok) return this.wait(claim, { do: 'wait', reason: booked.reason, message: booked.message });
    return this.handOver(claim, booked.holding, read!);
  }

  /** The ledger's side: book on demand, or assign the Reservation's atoms. */
  private async book(claim: ResourceClaim, pod: PodView, decision: Extract<ClaimDecision, { do: 'book' | 'assign' }>): Promise<{ ok: true; holding: ClaimHolding } | { ok: false; reason: string; message: string }> {
    const id = { claimUid: claim.metadata.uid, namespace: claim.metadata.namespace, claimName: claim.metadata.name, podUid: pod.uid, podName: pod.name };
    const tenantId = this.tenantOf(claim.metadata.namespace);
    if (tenantId === undefined) return { ok: false, reason: 'NoTenant', message: `namespace ${claim.metadata.namespace} is no tenant` };
    if (decision.do === 'book') {
      const r = await this.d.ledger.bookClaim({ id, tenantId, requests: decision.requests, nodeSelector: decision.nodeSelector, durationSeconds: decision.durationSeconds }, this.d.nowMs());
      if (r.ok) return r;
      const reason = r.code === 'QUOTA_EXCEEDED' ? 'QuotaExceeded' : r.code === 'CLAIM_REFUSED' ? 'UnsupportedClaim' : 'NoCapacity';
      return { ok: false, reason: waitingFor(r.message) ?? reason, message: r.message };
    }
    const r = await this.d.ledger.assignClaim({ id, reservationId: decision.reservationId, tenantId, requests: decision.requests });
    return r.ok ? r : { ok: false, reason: waitingFor(r.reason) ?? 'ReservationRefused', message: r.reason };
  }

  /** Writes status.allocation from what the ledger holds; a claim gone meanwhile is released. */
  private async handOver(claim: ResourceClaim, holding: ClaimHolding, pod: ReadPod): Promise<ReconcileResult> {
    const a = allocationFor(claim, holding, this.d.nowMs());
    if (!a.ok) return this.wait(claim, { do: 'wait', reason: 'LedgerMismatch', message: a.message });
    let written: ResourceClaimObject;
    let lifted = true;
    try {
      // One fenced transaction for both writes. Written first; only then may kube-scheduler have the pod. A lift that
      // fails (it says so and is tried again on the claim's next reconcile, the allocated path) leaves the allocation.
      written = await this.d.fenced(async () => {
        const w = await this.d.kube.replaceStatus({ ...(claim as ResourceClaimObject), status: { ...(claim.status ?? {}), allocation: a.allocation } });
        lifted = await this.liftGate(claim, pod, true, (fn) => fn());
        return w;
      });
    } catch (e) {
      if (statusOf(e) === 404) {
        await this.d.ledger.releaseClaim(claim.metadata.uid);
        return;
      }
      // A 409 (the claim changed) or a failure: the rows stay, and the next reconcile hands them over again.
      this.d.log.warn('dra: writing the allocation failed; retried', { claim: nameOf(claim), ...errorFields(e) });
      return { backoff: true };
    }
    this.d.log.info('dra: claim allocated', { claim: nameOf(claim), node: holding.nodeId, atoms: holding.devices.map((x) => x.atomId), owner: holding.owner });
    const rv = written.metadata.resourceVersion;
    const mine = this.supersede(claim, rv);
    if (rv !== undefined) mine.allocated = { rv, end: holding.end };
    return lifted ? this.untilEnd(holding.end) : { backoff: true };
  }

  /** Notes that a write of ours replaced the claim's version `claim` was read at by version `now` (see `written`). */
  private supersede(claim: ResourceClaim, now: string | undefined): { superseded: Set<string>; allocated?: { rv: string; end: number | null } } {
    const mine = this.written.get(claim.metadata.uid) ?? { superseded: new Set<string>() };
    const was = claim.metadata.resourceVersion;
    if (was !== undefined && now !== undefined && was !== now) mine.superseded.add(was);
    this.written.set(claim.metadata.uid, mine);
    return mine;
  }

  /** Looked at again just after the booking's end (null: open-ended, no wake-up). */
  private untilEnd(end: number | null): ReconcileResult {
    return end !== null ? { requeueAfterMs: Math.max(1000, end - this.d.nowMs() + 1000) } : undefined;
  }

  /**
   * Lifts ALLOCATION_GATE from the claim's pod once every claim of ours it uses is allocated (gateVerdict); `justAllocated`:
   * this claim's allocation was just written (the informer may not show it yet); `write` runs the pod's patch (fenced,
   * unless the caller's transaction is). False when the write failed (retried).
   */
  private async liftGate(claim: ResourceClaim, pod: ReadPod | undefined, justAllocated = false, write: <T>(fn: () => Promise<T>) => Promise<T> = this.d.fenced): Promise<boolean> {
    const uid = claim.metadata.uid;
    if (!pod) {
      this.gateDone.add(uid); // no pod of this claim: nothing to let through
      return true;
    }
    const siblings = this.d
      .claimsOwnedBy(claim.metadata.namespace, pod.gated.uid)
      .map((c) => ResourceClaimSchema.safeParse(c))
      .flatMap((p) => (p.success ? [p.data] : []));
    const named = pod.gated.resourceClaims.flatMap((r) => {
      const c = r.resourceClaimName ? ResourceClaimSchema.safeParse(this.d.claims.get(`${claim.metadata.namespace}/${r.resourceClaimName}`)) : undefined;
      return c?.success ? [c.data] : [];
    });
    const verdict = gateVerdict(pod.gated, [claim, ...siblings.filter((c) => c.metadata.uid !== uid), ...named], justAllocated ? new Set([uid]) : new Set());
    if (!pod.gated.schedulingGates.includes(ALLOCATION_GATE)) {
      this.gateDone.add(uid);
      return true;
    }
    if (!verdict.lift) return true; // a claim of ours is still to come: its own allocation lifts the gate
    try {
      const index = pod.gated.schedulingGates.indexOf(ALLOCATION_GATE);
      await write(() => this.d.kube.removeSchedulingGate(claim.metadata.namespace, pod.view.name, pod.gated.uid, index, ALLOCATION_GATE));
    } catch (e) {
      if (statusOf(e) !== 404) {
        this.d.log.warn('dra: lifting the scheduling gate failed; retried', { claim: nameOf(claim), pod: pod.view.name, ...errorFields(e) });
        return false;
      }
    }
    this.gateDone.add(uid);
    this.d.log.info('dra: scheduling gate lifted', { claim: nameOf(claim), pod: pod.view.name });
    return true;
  }

  private async wait(claim: ResourceClaim, w: Extract<ClaimDecision, { do: 'wait' }>): Promise<ReconcileResult> {
    const key = `${claim.metadata.uid} ${w.reason}`;
    if (!this.told.has(key)) {
      this.told.add(key);
      // On the pod that owns the claim, where its user looks; on the claim itself when no pod owns it.
      const ref = claimPodRef(claim);
      const [about, kind] = ref
        ? [{ apiVersion: 'v1', kind: 'Pod', metadata: { name: ref.name, namespace: claim.metadata.namespace, uid: ref.uid } }, 'Pod']
        : [{ apiVersion: 'resource.k8s.io/v1', kind: 'ResourceClaim', metadata: { name: claim.metadata.name, namespace: claim.metadata.namespace, uid: claim.metadata.uid } }, 'ResourceClaim'];
      await this.d.kube.event(about, kind, { type: 'Normal', reason: w.reason, message: `claim ${claim.metadata.name}: ${w.message}` }).catch((e: unknown) =>
        this.d.log.warn('dra: writing an event failed', { claim: nameOf(claim), ...errorFields(e) }),
      );
    }
    if (w.retryAt !== undefined) return { requeueAfterMs: Math.max(0, w.retryAt - this.d.nowMs()) };
    // A pod gone, or one of an earlier booking about to be: looked at again soon.
    return { requeueAfterMs: w.reason === 'PodNotFound' || w.reason === WAITING_FOR_POD ? 2000 : WAIT_AGAIN_MS };
  }

  private async readPod(namespace: string, name: string): Promise<ReadPod | undefined> {
    const p = PodSchema.safeParse(await this.d.kube.getPod(namespace, name));
    if (!p.success) return undefined;
    const { metadata, spec, status } = p.data;
    return {
      view: {
        name: metadata.name,
        uid: metadata.uid,
        labels: metadata.labels ?? {},
        nodeSelector: spec?.nodeSelector ?? {},
        activeDeadlineSeconds: spec?.activeDeadlineSeconds ?? null,
        done: Boolean(metadata.deletionTimestamp) || status?.phase === 'Succeeded' || status?.phase === 'Failed',
      },
      gated: { uid: metadata.uid, schedulingGates: (spec?.schedulingGates ?? []).map((g) => g.name), resourceClaims: spec?.resourceClaims ?? [] },
    };
  }

  private tenantOf(namespace: string): string | undefined {
    return namespaceTenant(namespace, this.d.namespaces.get(namespace)?.metadata.labels, this.d.tenancyByName);
  }

  /** The pod's Reservation (its label) as the ledger has it: the booking its uid made, and its window. */
  private async reservationOf(namespace: string, pod: PodView): Promise<ReservationWindow | undefined> {
    const label = pod.labels[RESERVATION_LABEL];
    const cr = label ? this.d.reservations.get(`${namespace}/${label}`) : undefined;
    const tenant = this.tenantOf(namespace);
    if (!label || !cr?.metadata.uid || tenant === undefined) return undefined;
    const deleting = Boolean(cr.metadata.deletionTimestamp);
    const b = await this.d.bookings.byReservationUid(tenant, cr.metadata.uid);
    if (!b) return { name: label, ended: false, deleting };
    return { name: label, bookingId: b.id, ended: b.ended, deleting, start: b.start, end: b.end };
  }
}

/** The claim's pod as read once per reconcile: what the decisions read, and what the gate's lifting reads. */
interface ReadPod {
  view: PodView;
  gated: GatedPodView;
}

const nameOf = (c: ResourceClaim) => `${c.metadata.namespace}/${c.metadata.name}`;

/** WAITING_FOR_POD when the ledger's refusal is a wait for an earlier booking's pod (reads.waitsForMessage). */
const waitingFor = (message: string) => (isWaitingForPod(message) ? WAITING_FOR_POD : undefined);
