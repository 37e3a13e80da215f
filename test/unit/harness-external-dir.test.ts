import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { CLUSTER_DIR, clusterInfo } from '../../e2e/cluster/harness.ts';

// The kind lane and the process cluster's suites run side by side in `npm test`: an external cluster's test state
// must not be the process cluster's state dir, or one run's uninstall deletes the other's product data (the
// hostPath volume of the trial install's embedded PostgreSQL under CLUSTER_DIR/volumes).
describe('clusterInfo of an external cluster', () => {
  afterEach(() => vi.unstubAllEnvs());

  it('keeps its state beside its kubeconfig, apart from the process cluster', () => {
    const home = fs.mkdtempSync(path.join(os.tmpdir(), 'bc-ext-'));
    const kubeconfig = path.join(home, 'bc-e2e.kubeconfig');
    vi.stubEnv('BC_EXTERNAL_CLUSTER', '1');
    vi.stubEnv('BC_KUBECONFIG', kubeconfig);
    const dir = clusterInfo().dir;
    expect(dir).not.toBe(CLUSTER_DIR);
    expect(path.relative(CLUSTER_DIR, dir).startsWith('..')).toBe(true);
    expect(path.dirname(dir)).toBe(home);
    expect(fs.statSync(dir).isDirectory()).toBe(true);
    fs.rmSync(home, { recursive: true, force: true });
  });
});
