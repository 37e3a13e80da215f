import { describe, expect, it } from 'vitest';
import { nodeStateOf, poolOfNode } from './state.ts';
import type { NodeCR, PoolCR } from '../../kube/types.ts';

const node = (o: Partial<NodeCR> & { labels?: Record<string, string> } = {}): NodeCR => ({
  metadata: { name: 'n', labels: o.labels ?? {} },
  spec: o.spec ?? {},
  status: o.status ?? { conditions: [{ type: 'Ready', status: 'True' }] },
});

describe('nodeStateOf', () => {
  it('maps a Ready, untainted node to schedulable fields', () => {
    expect(nodeStateOf(node())).toEqual({ cordoned: false, maintenance: false, connectivity: 'connected', noscheduleReason: null });
  });
  it('maps cordon, the maintenance label and Ready', () => {
    expect(nodeStateOf(node({ spec: { unschedulable: true } })).cordoned).toBe(true);
    expect(nodeStateOf(node({ labels: { 'bettercompute.io/maintenance': 'true' } })).maintenance).toBe(true);
    expect(nodeStateOf(node({ labels: { 'bettercompute.io/maintenance': 'false' } })).maintenance).toBe(false);
    expect(nodeStateOf(node({ status: { conditions: [{ type: 'Ready', status: 'Unknown' }] } })).connectivity).toBe('unreachable');
    expect(nodeStateOf(node({ status: {} })).connectivity).toBe('unreachable');
  });
  it('takes NoSchedule/NoExecute taints that are not tolerated as the reason', () => {
    const taints = [
      { key: 'bettercompute.io/simulated', value: 'true', effect: 'NoSchedule' },
      { key: 'node.kubernetes.io/unschedulable', effect: 'NoSchedule' },
      { key: 'soft', effect: 'PreferNoSchedule' },
      { key: 'gpu-broken', value: 'xid79', effect: 'NoExecute' },
    ];
    expect(nodeStateOf(node({ spec: { taints } })).noscheduleReason).toBe('taint gpu-broken=xid79:NoExecute');
    expect(nodeStateOf(node({ spec: { taints: taints.slice(0, 3) } })).noscheduleReason).toBeNull();
  });
});

describe('poolOfNode', () => {
  const pool = (name: string, sel: Record<string, string>, created: string): PoolCR => ({
    metadata: { name, creationTimestamp: created },
    spec: { nodeSelector: sel, ownerTenant: 't' },
  });
  it('picks the oldest matching pool; an empty selector matches nothing', () => {
    const pools = [pool('b', { a: '1' }, '2026-01-02T00:00:00Z'), pool('a', { a: '1', b: '2' }, '2026-01-01T00:00:00Z'), pool('c', {}, '2025-01-01T00:00:00Z')];
    expect(poolOfNode(node({ labels: { a: '1', b: '2' } }), pools)?.metadata.name).toBe('a');
    expect(poolOfNode(node({ labels: { a: '1' } }), pools)?.metadata.name).toBe('b');
    expect(poolOfNode(node({ labels: {} }), pools)).toBeUndefined();
  });
});
