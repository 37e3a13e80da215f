// A node's state as its agent needs it, read from the ledger: the node's bookable atoms, the reservations serving
// atoms there now, and its on-demand admission in flight. Used by the agent API's router and by in-process agents.
import type { Clock } from '../db/clock.ts';
import type { Db } from '../db/pool.ts';
import { dropAdmission } from '../db/handoff.ts';
import { activeReservationsOnNode, currentAdmission, nodeAtoms } from '../db/reads.ts';
import type { AgentBackend, NodeAtom, NodeState } from './wire.ts';
import { systemClock } from '../clock.ts';
import { RESOURCE_OF_CLASS, reservationResourceName } from '../core/names.ts';

const SERVED_CLASSES = Object.keys(RESOURCE_OF_CLASS);

type Inventory = Pick<NodeState, 'atoms' | 'reservations'>;

async function nodeInventory(db: Db, node: string, now: number): Promise<Inventory> {
  const [atoms, reservations] = await Promise.all([nodeAtoms(db, node, SERVED_CLASSES), activeReservationsOnNode(db, node, now)]);
  return {
    atoms: atoms as NodeAtom[],
    reservations: reservations.map((r) => ({ ...r, resourceName: reservationResourceName(r.reservationId) })),
  };
}

/**
 * Keeps each node's atoms and reservations for a short time (they change on inventory and reservation events, seconds
 * apart), one read in flight per node. The admission is never cached: the agent reads it when the kubelet allocates.
 */
export class NodeInventoryCache {
  private readonly entries = new Map<string, { at: number; value: Promise<Inventory> }>();
  constructor(
    private readonly ttlMs = 250,
    private readonly monotonicNow: () => number = () => systemClock.now(),
    private readonly maxEntries = 10_000,
  ) {}

  get(node: string, load: () => Promise<Inventory>): Promise<Inventory> {
    const t = this.monotonicNow();
    const e = this.entries.get(node);
    if (e && t - e.at < this.ttlMs) return e.value;
    if (this.entries.size >= this.maxEntries) this.entries.clear();
    const value = load();
    this.entries.set(node, { at: t, value });
    // A failed read is not kept: the next caller reads again.
    value.catch(() => {
      if (this.entries.get(node)?.value === value) this.entries.delete(node);
    });
    return value;
  }
}

/** The node's state from the ledger. With a cache, its atoms and reservations may be up to the cache's TTL old. */
export async function nodeState(db: Db, clock: Clock, node: string, cache?: NodeInventoryCache): Promise<NodeState> {
  const now = clock.now();
  const load = () => nodeInventory(db, node, now);
  const [inventory, admission] = await Promise.all([cache ? cache.get(node, load) : load(), currentAdmission(db, node)]);
  return {
    now,
    ...inventory,
    admission: admission ? { podUid: admission.podUid, namespace: admission.namespace, podName: admission.podName, atoms: admission.atoms } : null,
  };
}

/** Ends the node's admission of this pod, if it is the one in flight. Returns whether there was one. */
export function admissionDone(db: Db, node: string, podUid: string): Promise<boolean> {
  return dropAdmission(db, node, podUid);
}

/** An agent backend that reads the ledger directly, for agents run inside the controller's process (demo, tests). */
export function inProcessBackend(db: Db, clock: Clock, node: string): AgentBackend {
  return {
    state: () => nodeState(db, clock, node),
    admissionDone: async (podUid) => {
      await admissionDone(db, node, podUid);
    },
  };
}
