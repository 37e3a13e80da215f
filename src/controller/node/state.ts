// Kubernetes Node → the ledger's schedulability fields. Pure (unit-tested in state.test.ts).
//   cordoned          spec.unschedulable
//   maintenance       label bettercompute.io/maintenance present (any value but "false"/"0")
//   connectivity      Ready condition True → connected; False, Unknown or missing → unreachable
//   noscheduleReason  the first NoSchedule/NoExecute taint that is not tolerated, as "taint key=value:Effect"
// Tolerated taints: the harness's bettercompute.io/simulated (it keeps stray pods off simulated nodes, not our
// bookings), node.kubernetes.io/unschedulable (that is the cordon, mapped above), node.kubernetes.io/not-ready and
// node.kubernetes.io/unreachable (the Ready condition, mapped above), plus whatever the caller adds.
import type { NodeSpec, NodeState } from '../../db/inventory.ts';
import { type NodeCR, type PoolCR } from '../../kube/types.ts';
import { MAINTENANCE_LABEL, OWNER_TENANT_LABEL, ROLE_LABEL, SIMULATED_TAINT, TRUST_LABEL } from '../../core/names.ts';

export const TOLERATED_TAINTS: readonly string[] = [
  SIMULATED_TAINT,
  'node.kubernetes.io/unschedulable',
  'node.kubernetes.io/not-ready',
  'node.kubernetes.io/unreachable',
];

export function nodeStateOf(node: NodeCR, tolerated: readonly string[] = TOLERATED_TAINTS): Required<Omit<NodeState, 'provisionState'>> {
  const labels = node.metadata.labels ?? {};
  const m = labels[MAINTENANCE_LABEL];
  const ready = node.status?.conditions?.find((c) => c.type === 'Ready');
  const taint = (node.spec?.taints ?? []).find(
    (t) => (t.effect === 'NoSchedule' || t.effect === 'NoExecute') && !tolerated.includes(t.key),
  );
  return {
    cordoned: node.spec?.unschedulable === true,
    maintenance: m !== undefined && m !== 'false' && m !== '0',
    connectivity: ready?.status === 'True' ? 'connected' : 'unreachable',
    noscheduleReason: taint ? `taint ${taint.key}${taint.value ? `=${taint.value}` : ''}:${taint.effect}` : null,
  };
}

/** The node's row fields other than state: labels, role and trust from labels. */
export function nodeRowOf(node: NodeCR, poolId: string | null): NodeSpec {
  const labels = node.metadata.labels ?? {};
  const trust = labels[TRUST_LABEL];
  return {
    id: node.metadata.name,
    poolId,
    labels,
    role: labels[ROLE_LABEL] ?? 'host',
    trust: trust === 'tenant-owned' || trust === 'tenant-controlled' ? trust : 'platform',
    ownerTenant: labels[OWNER_TENANT_LABEL] ?? null,
  };
}

/** The Pool whose nodeSelector matches the node's labels; the oldest (then by name) when several do. */
export function poolOfNode(node: NodeCR, pools: readonly PoolCR[]): PoolCR | undefined {
  const labels = node.metadata.labels ?? {};
  const matching = pools.filter((p) => {
    const sel = Object.entries(p.spec?.nodeSelector ?? {});
    return sel.length > 0 && sel.every(([k, v]) => labels[k] === v) && !p.metadata.deletionTimestamp;
  });
  matching.sort((a, b) => {
    const ta = String(a.metadata.creationTimestamp ?? '');
    const tb = String(b.metadata.creationTimestamp ?? '');
    return ta === tb ? (a.metadata.name < b.metadata.name ? -1 : 1) : ta < tb ? -1 : 1;
  });
  return matching[0];
}
