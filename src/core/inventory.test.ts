import { describe, expect, it } from 'vitest';
import {
  devicesFromReport,
  InventoryReportSchema,
  keptLayoutHealth,
  layoutAtoms,
  layoutChanges,
  ownedByOtherNode,
  type InventoryReport,
} from './inventory.ts';

const G = 'GPU-0';
const shape = (report: InventoryReport, sharing: 'exclusive' | 'mig' | 'timeslice' = 'exclusive', slots = 2) =>
  devicesFromReport(report, sharing, slots).map((r) => [r.id, r.class, r.parentId, r.bookable]);

describe('devicesFromReport', () => {
  it('a whole GPU, MIG instances under an unbookable parent, slots in a timeslice pool', () => {
    expect(shape({ gpus: [{ uuid: G }] })).toEqual([[G, 'gpu', null, true]]);
    expect(shape({ gpus: [{ uuid: G, mig: [{ gi: 1, ci: 0 }] }] })).toEqual([
      [G, 'gpu', null, false],
      [`${G}/gi1/ci0`, 'gpu.mig', G, true],
    ]);
    expect(shape({ gpus: [{ uuid: G }] }, 'timeslice')).toEqual([
      [G, 'gpu', null, false],
      [`${G}/s0`, 'gpu.slot', G, true],
      [`${G}/s1`, 'gpu.slot', G, true],
    ]);
  });

  it('MIG mode on with no instance: an unbookable parent with no children, in any pool', () => {
    for (const sharing of ['exclusive', 'mig', 'timeslice'] as const) {
      expect(shape({ gpus: [{ uuid: G, migEnabled: true }] }, sharing), sharing).toEqual([[G, 'gpu', null, false]]);
      expect(shape({ gpus: [{ uuid: G, migEnabled: true, mig: [] }] }, sharing), sharing).toEqual([[G, 'gpu', null, false]]);
    }
    // Off (or unsaid) with no instance: a whole GPU, as before.
    expect(shape({ gpus: [{ uuid: G, migEnabled: false, mig: [] }] })).toEqual([[G, 'gpu', null, true]]);
  });

  it('the schema takes migEnabled as a boolean only', () => {
    expect(InventoryReportSchema.parse({ gpus: [{ uuid: G, migEnabled: true }] }).gpus[0]).toMatchObject({ migEnabled: true });
    expect(InventoryReportSchema.safeParse({ gpus: [{ uuid: G, migEnabled: 'Enabled' }] }).success).toBe(false);
  });
});

describe('layout changes', () => {
  const whole = devicesFromReport({ gpus: [{ uuid: G }, { uuid: 'GPU-1' }] }, 'exclusive', 1);
  const migOn = devicesFromReport({ gpus: [{ uuid: G, migEnabled: true }, { uuid: 'GPU-1' }] }, 'exclusive', 1);
  const twoMig = devicesFromReport({ gpus: [{ uuid: G, mig: [{ gi: 1, ci: 0 }, { gi: 2, ci: 0 }] }] }, 'mig', 1);
  const threeMig = devicesFromReport({ gpus: [{ uuid: G, healthy: false, mig: [{ gi: 1, ci: 0 }, { gi: 2, ci: 0, healthy: false }, { gi: 3, ci: 0 }] }] }, 'mig', 1);

  it('whole → MIG mode without instances is a change of that GPU; a GPU new to the node is none', () => {
    expect(layoutChanges(whole, migOn, [G, 'GPU-1'])).toEqual([G]);
    expect(layoutChanges([], whole, [G])).toEqual([]);
    expect(layoutChanges(twoMig, threeMig, [G])).toEqual([G]);
    expect(layoutChanges(twoMig, twoMig, [G])).toEqual([]);
  });

  it('a layout booking holds every atom old and new, parent included', () => {
    expect(layoutAtoms(G, twoMig, threeMig)).toEqual([G, `${G}/gi1/ci0`, `${G}/gi2/ci0`, `${G}/gi3/ci0`]);
    expect(layoutAtoms(G, whole, migOn)).toEqual([G]);
  });

  it('a held-back GPU keeps its rows; their health follows the report', () => {
    expect(keptLayoutHealth(G, twoMig, threeMig)).toEqual([
      { id: G, healthy: false },
      { id: `${G}/gi1/ci0`, healthy: false },
      { id: `${G}/gi2/ci0`, healthy: false },
    ]);
    const healthyParent = devicesFromReport({ gpus: [{ uuid: G, mig: [{ gi: 2, ci: 0, healthy: false }] }] }, 'mig', 1);
    expect(keptLayoutHealth(G, twoMig, healthyParent)).toEqual([
      { id: G, healthy: true },
      { id: `${G}/gi1/ci0`, healthy: true },
      { id: `${G}/gi2/ci0`, healthy: false },
    ]);
  });
});

describe('ownedByOtherNode', () => {
  const d = { id: G, nodeId: 'b', present: true, nodePoolId: 'pool_1', nodeConnectivity: 'connected' };
  it("present on a node that is not gone: that node's; dropped, or its node gone (no pool and unreachable): takeable", () => {
    expect(ownedByOtherNode(d)).toBe(true);
    expect(ownedByOtherNode({ ...d, nodeConnectivity: 'unreachable' })).toBe(true);
    expect(ownedByOtherNode({ ...d, nodePoolId: null })).toBe(true);
    expect(ownedByOtherNode({ ...d, present: false })).toBe(false);
    expect(ownedByOtherNode({ ...d, nodePoolId: null, nodeConnectivity: 'unreachable' })).toBe(false);
  });
});
