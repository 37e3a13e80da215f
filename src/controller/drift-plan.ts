// The drift reconcile's decision, pure: given what the ledger holds and a complete view of the cluster, which ledger
// rows lost their Kubernetes object while no leader watched (so no delete event will ever come), and what to do about
// each. The I/O (reading both views, applying the fixes, metrics) is in drift.ts.
import { type NodeCR, type NodeDevicesCR, type PoolCR, type Reservation } from '../kube/types.ts';
import { RESERVATION_FINALIZER } from '../core/names.ts';

/** What the ledger holds, read before the cluster view (so a row the view lacks was made from an object seen earlier). */
export interface LedgerView {
  nodes: { id: string; poolId: string | null; connectivity: string; presentDevices: number }[];
  pools: { id: string; name: string; archived: boolean }[];
  /** Live (held or confirmed) reservations. */
  reservations: { id: string; poolId: string; idempotencyKey: string }[];
}

/** A complete view of the cluster: every informer synced, or a fresh successful LIST of each kind. */
export interface ClusterView {
  nodes: NodeCR[];
  nodeDevices: NodeDevicesCR[];
  pools: PoolCR[];
  reservations: Reservation[];
}

export type DriftFix =
  /** The Node is gone: out of its pool and unreachable, as the Node reconciler's delete path does. */
  | { kind: 'node'; action: 'left-pool'; node: string; poolId: string | null }
  /** The NodeDevices is gone: the node's devices are no longer present nor bookable, as its reconciler's delete path does. */
  | { kind: 'nodedevices'; action: 'devices-removed'; node: string; poolId: string | null }
  /** The Pool is gone: archived in the ledger (no new bookings; history stays), as the Pool reconciler's delete path does. */
  | { kind: 'pool'; action: 'archived'; pool: string; poolId: string }
  /** The Reservation that booked it is gone (or going without our finalizer): the booking is released. */
  | { kind: 'reservation'; action: 'released'; reservationId: string; poolId: string; uid: string }
  /** The Reservation lives but lost our finalizer: put it back, so that its deletion releases the booking. */
  | {
      kind: 'reservation';
      action: 'finalizer-restored';
      reservationId: string;
      namespace: string;
      name: string;
      finalizers: string[];
      resourceVersion: string;
    };

export type DriftKind = DriftFix['kind'] | 'pod' | 'quota';

/** Every (kind, action) the drift reconcile counts, so that each series exists from the start (at 0). */
export const DRIFT_SERIES: readonly { kind: DriftKind; action: string }[] = [
  { kind: 'node', action: 'left-pool' },
  { kind: 'nodedevices', action: 'devices-removed' },
  { kind: 'pool', action: 'archived' },
  { kind: 'reservation', action: 'released' },
  { kind: 'reservation', action: 'finalizer-restored' },
  { kind: 'pod', action: 'released' },
  { kind: 'quota', action: 'corrected' },
];

// The Reservation reconciler books with the Reservation's metadata.uid as the idempotency key (a recurring one's
// windows with `${uid}:${window start}`); only such bookings belong to a Reservation (a key of another form was booked
// by someone else, and is not ours to judge).
const RESERVATION_KEY = /^([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})(?::.+)?$/;

/** Why a view must not be acted on, or undefined when it may. */
export function incompleteReason(ledger: LedgerView, cluster: ClusterView): string | undefined {
  // This controller runs on a node of the cluster it watches: a view without any Node is a failed or partial read,
  // never the truth (acting on it would take every node out of its pool).
  if (cluster.nodes.length === 0 && ledger.nodes.some((n) => n.poolId !== null)) return 'the view has no Nodes';
  return undefined;
}

export function planDrift(ledger: LedgerView, cluster: ClusterView): DriftFix[] {
  const fixes: DriftFix[] = [];
  const nodes = new Set(cluster.nodes.map((n) => n.metadata.name));
  const nodeDevices = new Set(cluster.nodeDevices.map((d) => d.metadata.name));
  const pools = new Set(cluster.pools.map((p) => p.metadata.name));

  for (const n of [...ledger.nodes].sort((a, b) => (a.id < b.id ? -1 : 1))) {
    // Devices first: their delete path reads the node's pool (sharing mode) before the node leaves it.
    if (!nodeDevices.has(n.id) && n.presentDevices > 0) {
      fixes.push({ kind: 'nodedevices', action: 'devices-removed', node: n.id, poolId: n.poolId });
    }
    if (!nodes.has(n.id) && (n.poolId !== null || n.connectivity !== 'unreachable')) {
      fixes.push({ kind: 'node', action: 'left-pool', node: n.id, poolId: n.poolId });
    }
  }

  for (const p of ledger.pools) {
    if (!p.archived && !pools.has(p.name)) fixes.push({ kind: 'pool', action: 'archived', pool: p.name, poolId: p.id });
  }

  const byUid = new Map<string, Reservation>();
  for (const r of cluster.reservations) if (r.metadata.uid) byUid.set(r.metadata.uid, r);
  const restored = new Set<string>();
  for (const b of ledger.reservations) {
    const uid = RESERVATION_KEY.exec(b.idempotencyKey)?.[1];
    if (uid === undefined) continue;
    const r = byUid.get(uid);
    const ours = (r?.metadata.finalizers ?? []).includes(RESERVATION_FINALIZER);
    if (!r || (r.metadata.deletionTimestamp && !ours)) {
      // Gone, or going without our finalizer (a deleting object takes no new finalizers): nobody else will release it.
      fixes.push({ kind: 'reservation', action: 'released', reservationId: b.id, poolId: b.poolId, uid });
    } else if (!ours && !restored.has(uid)) {
      restored.add(uid); // once per Reservation, however many windows it booked
      fixes.push({
        kind: 'reservation',
        action: 'finalizer-restored',
        reservationId: b.id,
        namespace: r.metadata.namespace ?? '',
        name: r.metadata.name,
        finalizers: [...(r.metadata.finalizers ?? []), RESERVATION_FINALIZER],
        resourceVersion: r.metadata.resourceVersion ?? '',
      });
    }
  }
  return fixes;
}
