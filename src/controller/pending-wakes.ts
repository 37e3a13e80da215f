// The controller's side of core/pending.ts (docs/adr/0042): an index of the pending Reservations per Pool, kept from
// the Reservation informer's events, so that a wake or the pending limit never walks every Reservation; the batched
// wakes (at most one per Pool per interval, the earliest created first, a bounded number each); and the wake of the
// next Reservation waiting behind its tenant's limit when a pending one of the same tenant and Pool leaves.
import { systemClock, type MonotonicClock } from '../clock.ts';
import { TOO_MANY_PENDING, WakeCoalescer, wakeBatch } from '../core/pending.ts';
import { findCondition, keyOf, type NamespaceCR, type Reservation } from '../kube/types.ts';
import { isPending, pendingEntry } from './context.ts';
import type { WorkQueue } from './queue.ts';
import { TENANT_LABEL } from '../core/names.ts';

export interface PendingWakes {
  /** Asks for a wake of the Pool's pending Reservations (batched). */
  wakePending(poolName: string): void;
  pendingInPool(poolName: string): Iterable<Reservation>;
  /** The Reservation informer's events. */
  added(r: Reservation): void;
  updated(a: Reservation, b: Reservation): void;
  deleted(r: Reservation): void;
  stop(): void;
}

export function createPendingWakes(o: {
  queue: WorkQueue;
  namespace: (name: string) => NamespaceCR | undefined;
  intervalMs: number;
  batchSize: number;
  clock?: MonotonicClock;
}): PendingWakes {
  const clock = o.clock ?? systemClock;
  const pending = new Map<string, Map<string, Reservation>>();
  const wakes = new WakeCoalescer(o.intervalMs);
  let cancel: (() => void) | undefined;
  const inPool = (pool: string | undefined) => [...((pool && pending.get(pool)?.values()) || [])];

  const flush = () => {
    for (const pool of wakes.due(clock.now())) {
      for (const e of wakeBatch(inPool(pool).map(pendingEntry), o.batchSize)) {
        o.queue.forget(e.key);
        o.queue.add(e.key);
      }
    }
    // Requests inside a Pool's interval: one timer, for when the first of them is due.
    const wait = wakes.nextDueIn(clock.now());
    if (wait === undefined || cancel) return;
    cancel = clock.after(wait, () => {
      cancel = undefined;
      flush();
    });
  };
  const tenantOf = (ns: string | undefined) => tenantOfNamespace(o.namespace, ns);
  /** One of the tenant's pending ones left: the earliest of those waiting behind the limit may try now. */
  const wakeNextWaiting = (left: Reservation) => {
    const tenant = tenantOf(left.metadata.namespace);
    const waiting = inPool(left.spec?.pool).filter(
      (r) => findCondition(r.status?.conditions, 'Reserved')?.reason === TOO_MANY_PENDING && tenantOf(r.metadata.namespace) === tenant,
    );
    const [next] = wakeBatch(waiting.map(pendingEntry), 1);
    if (next) o.queue.add(next.key);
  };
  const index = (r: Reservation, present: boolean) => indexPending(pending, r, present);

  return {
    wakePending(pool) {
      wakes.request(pool);
      flush();
    },
    pendingInPool: (pool) => pending.get(pool)?.values() ?? [],
    added: (r) => index(r, true),
    updated(a, b) {
      if (a.spec?.pool !== b.spec?.pool) index(a, false);
      index(b, true);
      if (isPending(a) && (!isPending(b) || a.spec?.pool !== b.spec?.pool)) wakeNextWaiting(a);
    },
    deleted(r) {
      index(r, false);
      if (isPending(r)) wakeNextWaiting(r);
    },
    stop: () => cancel?.(),
  };
}

/** The tenant of a namespace, as its label names it (else its name; a namespace not known: its name). */
function tenantOfNamespace(namespace: (name: string) => NamespaceCR | undefined, ns: string | undefined): string | undefined {
  const n = ns === undefined ? undefined : namespace(ns);
  return n ? n.metadata.labels?.[TENANT_LABEL] || n.metadata.name : ns;
}

/** Keeps the index of pending Reservations per Pool: `r` in it when present and pending, else out (an empty Pool dropped). */
function indexPending(pending: Map<string, Map<string, Reservation>>, r: Reservation, present: boolean): void {
  const pool = r.spec?.pool;
  if (!pool) return;
  let m = pending.get(pool);
  if (present && isPending(r)) {
    if (!m) pending.set(pool, (m = new Map()));
    m.set(keyOf(r), r);
  } else if (m?.delete(keyOf(r)) && m.size === 0) pending.delete(pool);
}
