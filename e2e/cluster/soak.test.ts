import { expect, it } from 'vitest';
import { formatReport, runSoak } from '../soak/soak.ts';

// The soak of issue 11 for three minutes (`npm run soak -- --minutes 30` runs it longer): churn and faults, and at
// every checkpoint the invariants of e2e/soak/soak.ts.
it('three minutes of churn under faults: no overlap, no live GPU released, every container on its booking, no orphan after a reconcile', async () => {
  const report = await runSoak({ minutes: 3, checkpointEveryMs: 60_000 });
  process.stderr.write(`${formatReport(report)}\n`);
  expect(report.checkpoints.length).toBeGreaterThanOrEqual(2);
  // The faults and the churn happened (the soak did what it says).
  expect(Object.values(report.faults).reduce((a, b) => a + b, 0)).toBeGreaterThanOrEqual(5);
  expect(report.ops['pod-ondemand'] ?? 0).toBeGreaterThan(0);
  expect(report.checkpoints.some((c) => c.runningChecked > 0)).toBe(true);
  expect(report.violations).toEqual([]);
}, 900_000);
