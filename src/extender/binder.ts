// The extender's bind: writes first (a reservation's assignment, or an on-demand booking with the node's admission
// lease, through the ledger gateway), then creates the Binding, and undoes its writes if that was refused (one that may
// have landed, a timeout, keeps them: bindingMayHaveLanded). A bind that stopped
// between its booking and its Binding leaves the pod holding atoms: bind recognises them by the pod's uid and honours
// them. Its cache: the pods filter was last asked about, taken at bind instead of a read from the API server.
import type { DeviceClass } from '../core/types.ts';
import type { PodBookingOutcome } from '../db/ledger.ts';
import { atomsHeld, nodePools, podHolding, waitsForMessage } from '../db/reads.ts';
import { errorFields } from '../log.ts';
import { httpStatus } from './kube.ts';
import type { AdmittingTracker } from './admitting.ts';
import { tenantOf } from './judge.ts';
import { type PodDemand } from './resources.ts';
import { BindError, type ExtenderDeps } from './deps.ts';
import { PodSchema, type ExtenderBindingArgs, type Pod } from './wire.ts';
import { ALLOCATION_ANNOTATION, ATOMS_ANNOTATION } from '../core/names.ts';

export { BindError } from './deps.ts';

/** Errors of a Binding that was never sent: nothing can have landed. */
const NOT_SENT = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH']);

/**
 * Whether a failed Binding may still have landed: no answer (a timeout, a dropped connection) or an answer that says
 * the server may have written it (500, 504). Such a pod keeps what it holds: if it was bound, its atoms are its own;
 * if not, its next bind is honoured there (filter passes only that node), and the releaser frees them when it goes.
 */
export function bindingMayHaveLanded(e: unknown): boolean {
  if (e instanceof BindError) return false;
  const status = httpStatus(e);
  if (status !== undefined) return status === 500 || status === 504;
  return !NOT_SENT.has(String((e as { code?: unknown }).code ?? (e as { cause?: { code?: unknown } }).cause?.code ?? ''));
}

/** How many pods filter remembers for their bind, and for how long (see recent). */
const RECENT_PODS = 1024;
const RECENT_POD_MS = 60_000;

export interface BinderOptions {
  ttlSeconds: number;
  waitMs: number;
  undoRetryMs: number;
  admitting: AdmittingTracker;
  /** The node-to-pool map, cached by the judge. */
  nodePools(): Promise<Map<string, string | null>>;
  /** Drops the judge's cached reads of a pool after a write of ours. */
  invalidate(poolId: string): void;
  now: () => number;
  sleep: (ms: number) => Promise<void>;
}

export class ExtenderBinder {
  /**
   * The pods filter was last asked about, by uid (oldest first), each until it expires: kube-scheduler binds a pod right
   * after filtering it, and bind takes the pod from here instead of reading it from the API server.
   */
  private readonly recent = new Map<string, { pod: Pod; until: number }>();

  constructor(
    private readonly d: ExtenderDeps,
    private readonly o: BinderOptions,
  ) {}

  /** Filter saw this pod at `now`: its bind may take it from here. */
  rememberPod(pod: Pod, now: number): void {
    this.recent.delete(pod.metadata.uid);
    this.recent.set(pod.metadata.uid, { pod, until: now + RECENT_POD_MS });
    for (const [uid, p] of this.recent) {
      if (this.recent.size <= RECENT_PODS && p.until > now) break;
      this.recent.delete(uid);
    }
  }

  /**
   * The pod to bind: as filter last saw it (the scheduler's copy, just before this bind), unless it holds atoms already
   * (a bind that stopped, or whose answer the scheduler never got, may have bound it since); else, and then, as the
   * API server has it now. The Binding itself is refused by the API server for a pod that is gone or bound.
   * `holdsNothing`: the pod was seen to hold no atoms (the booking then skips its own look).
   */
  async podToBind(args: ExtenderBindingArgs): Promise<{ pod: Pod; holdsNothing: boolean }> {
    const seen = this.recent.get(args.PodUID);
    this.recent.delete(args.PodUID);
    if (seen && seen.until > this.o.now() && seen.pod.metadata.namespace === args.PodNamespace && seen.pod.metadata.name === args.PodName && !seen.pod.spec.nodeName) {
      const mem = this.d.memory?.fresh() ? this.d.memory.state : undefined;
      const holding = mem ? mem.podHolding(args.PodUID) : await podHolding(this.d.db, args.PodUID);
      if (!holding) return { pod: seen.pod, holdsNothing: true };
    }
    const raw = await this.d.kube.getPod(args.PodNamespace, args.PodName);
    if (!raw) throw new BindError(`pod ${args.PodNamespace}/${args.PodName} not found`);
    const pod = PodSchema.parse(raw);
    if (pod.metadata.uid !== args.PodUID) throw new BindError(`pod ${args.PodNamespace}/${args.PodName} has another UID`);
    if (pod.spec.nodeName) throw new BindError(`pod ${args.PodNamespace}/${args.PodName} is bound to ${pod.spec.nodeName} already`);
    return { pod, holdsNothing: false };
  }

  async bindReservation(pod: Pod, want: NonNullable<PodDemand['reservation']>, node: string): Promise<void> {
    const { namespace, name, uid } = pod.metadata;
    // Filter checked tenant and window already; bind checks both again, in the same transaction as the assignment.
    const tenantId = await tenantOf(this.d, namespace);
    const assigned = await this.d.ledger.assignPod({
      podUid: uid,
      reservationId: want.id,
      tenantId,
      nodeId: node,
      namespace,
      podName: name,
      count: want.count,
    });
    if (!assigned.ok) throw new BindError(assigned.reason);
    if (assigned.movedFrom) this.d.log.info('moved a pod’s assignment left by a bind that stopped', { pod: `${namespace}/${name}`, uid, from: assigned.movedFrom, to: node });
    try {
      await this.d.kube.bindPod(namespace, name, uid, node);
    } catch (e) {
      if (bindingMayHaveLanded(e)) this.keptAfterUnknownBinding(pod, node, e);
      else if (!assigned.existing) await this.undo(pod, node, () => this.d.ledger.releasePod(uid));
      throw e;
    }
  }

  private keptAfterUnknownBinding(pod: Pod, node: string, e: unknown): void {
    const { namespace, name, uid } = pod.metadata;
    this.d.log.warn('the Binding may have landed: the pod keeps what it holds (its next bind is honoured there; the releaser frees it when the pod goes)', {
      pod: `${namespace}/${name}`,
      uid,
      node,
      ...errorFields(e),
    });
  }

  /**
   * Undoes a failed bind's writes (a release), retried with backoff while this call lasts: the scheduler binds this
   * pod again only after we answer, so no later bind can be honouring what is undone. Every failure is an error in the
   * log. Should it still fail, what the pod holds stays the pod's: filter and bind honour it, and the releaser frees it
   * when the pod goes; retrying after we answered could free atoms a new bind of the pod has just been handed.
   */
  private async undo(pod: Pod, node: string, fn: () => Promise<unknown>): Promise<void> {
    const { namespace, name, uid } = pod.metadata;
    const deadline = this.o.now() + this.o.undoRetryMs;
    for (let delay = 50, attempt = 1; ; delay = Math.min(delay * 2, 1000), attempt++) {
      try {
        await fn();
        if (attempt > 1) this.d.log.info('undo of a failed bind committed', { pod: `${namespace}/${name}`, uid, node, attempt });
        return;
      } catch (e) {
        const giveUp = this.o.now() + delay > deadline;
        this.d.log.error(giveUp ? 'undo of a failed bind failed; the pod keeps what it holds (its next bind honours it, the releaser frees it when the pod goes)' : 'undo of a failed bind failed; retrying', {
          pod: `${namespace}/${name}`,
          uid,
          node,
          attempt,
          ...errorFields(e),
        });
        if (giveUp) return;
        await this.o.sleep(delay);
      }
    }
  }

  /** Returns whether the in-memory state holds the booking already (applied here); false: it learns it by notification. */
  async bindOnDemand(pod: Pod, devices: { class: DeviceClass; count: number }[], node: string, holdsNothing: boolean): Promise<boolean> {
    // The node's pool from the state while it is fresh (no read); else from the cached map. Unknown there: read now.
    const known = this.d.memory?.fresh() ? this.d.memory.state.poolOfNode(node) : (await this.o.nodePools()).get(node);
    const poolId = known ?? (await nodePools(this.d.db)).get(node);
    if (!poolId) throw new BindError(`node ${node} is not a GPU node of any pool in the ledger`);
    const tenant = await tenantOf(this.d, pod.metadata.namespace);
    let booked: Extract<PodBookingOutcome, { ok: true }>;
    try {
      booked = await this.bookWhenAdmitted(pod, devices, node, { poolId, tenant, holdsNothing });
    } catch (e) {
      // Nothing of this bind committed, unless the ledger failed after its write: the lease is dropped if it is ours.
      if (!(e instanceof BindError)) await this.undo(pod, node, () => this.d.ledger.dropAdmission(node, pod.metadata.uid));
      this.o.invalidate(poolId);
      throw e;
    }
    return this.bindBooked(pod, node, poolId, booked);
  }

  /**
   * The booking and the node's admission lease (with the atoms, for the agent) are one write; while another pod's
   * admission is in flight on the node, nothing is written, and the bind waits for it (one per node, ADR 0003).
   */
  private async bookWhenAdmitted(pod: Pod, devices: { class: DeviceClass; count: number }[], node: string, at: { poolId: string; tenant: string; holdsNothing: boolean }) {
    const { namespace, name, uid } = pod.metadata;
    const { poolId, tenant, holdsNothing } = at;
    const deadline = pod.spec.activeDeadlineSeconds ?? null;
    const waitUntil = this.o.now() + this.o.waitMs;
    for (let delay = 20; ; delay = Math.min(delay * 2, 250)) {
      const out = await this.d.ledger.bookPod(
        {
          tenantId: tenant,
          poolId,
          podUid: uid,
          nodeId: node,
          devices,
          durationSeconds: deadline,
          admission: { namespace, podName: name, ttlSeconds: this.o.ttlSeconds },
          holdsNothing,
        },
        this.d.clock.now(),
      );
      if (out.ok) return out;
      if (out.code !== 'ADMISSION_BUSY') throw new BindError(out.code === 'QUOTA_EXCEEDED' ? `QuotaExceeded: ${out.message}` : `${out.code}: ${out.message}`);
      if (this.o.now() > waitUntil) throw new BindError(`another on-demand admission is in flight on node ${node}; retry`);
      await this.o.sleep(delay);
    }
  }

  /** The Binding for a booked pod, its atoms on it; a failure gives a new booking back (an existing one stays the pod's). */
  private async bindBooked(pod: Pod, node: string, poolId: string, booked: Extract<PodBookingOutcome, { ok: true }>): Promise<boolean> {
    const { namespace, name, uid } = pod.metadata;
    let applied = false;
    let sent = false;
    try {
      if (booked.nodeId !== node) throw new BindError(`pod already holds a booking on ${booked.nodeId}`);
      // Atoms free in the ledger whose earlier holder's container may still run (its booking ended): the pod waits.
      // Asked of the ledger when memory cannot rule it out (memory knows reservations' pods, not on-demand ones' atoms).
      const mem = this.d.memory?.fresh() ? this.d.memory.state : undefined;
      const ask = booked.written && (!mem || mem.othersAssignedOn(node, booked.atoms, null));
      const held = ask ? await atomsHeld(this.d.db, node, booked.atoms, uid, null) : [];
      if (held.length) throw new BindError(waitsForMessage(held));
      // The next filter sees the booking at once: the state applies it, not a reload of what its notifications name.
      if (booked.written) applied = this.d.memory?.applyPodBooking({ podUid: uid, nodeId: node, atoms: booked.atoms, ...booked.written }) ?? false;
      // The atoms on the pod for people and tools, in the Binding's own write (one API call, not two).
      sent = true;
      await this.d.kube.bindPod(namespace, name, uid, node, {
        [ATOMS_ANNOTATION]: booked.atoms.join(','),
        [ALLOCATION_ANNOTATION]: booked.allocationId,
      });
      this.o.admitting.mark(node, uid);
      this.o.invalidate(poolId);
      this.d.log.info('bound on-demand pod', { pod: `${namespace}/${name}`, uid, node, atoms: booked.atoms, allocation: booked.allocationId });
      return applied;
    } catch (e) {
      // A Binding that may have landed keeps the booking and the admission lease: the kubelet may be admitting the pod.
      if (sent && bindingMayHaveLanded(e)) {
        this.keptAfterUnknownBinding(pod, node, e);
        this.o.invalidate(poolId);
        throw e;
      }
      // A new booking is released with the admission (one transaction); an existing one stays the pod's.
      if (!booked.existing) await this.undo(pod, node, () => this.d.ledger.releasePod(uid));
      else await this.undo(pod, node, () => this.d.ledger.dropAdmission(node, uid));
      this.o.admitting.unmark(node, uid);
      this.o.invalidate(poolId);
      throw e;
    }
  }
}
