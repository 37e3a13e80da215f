import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { DemoHarness, DemoInstaller } from '../../src/demo/cluster.ts';
import * as harness from './harness.ts';
import { kubectlJson, kubectlResult, readSchedulerConfig, SIMULATED_LABEL, type List, type Node } from './harness.ts';
import * as installer from './install.ts';

// `npm run demo -- --once` end to end, as a child process: the image built (cached) and installed with deploy/, examples/
// applied, the Reservations table and the capacity summary (read with a tenant's token) printed, then everything it
// did undone. This run holds the cluster's turn already, so the
// demo is told not to take it (BC_DEMO_LOCK_HELD=1).
const external = process.env.BC_EXTERNAL_CLUSTER === '1';
// The demo loads the harness and the installer at run time through these types; keep them in step.
const _typed: DemoHarness = harness;
const _installer: DemoInstaller = installer;
const ROOT = path.resolve(import.meta.dirname, '..', '..');
const state = fs.mkdtempSync(path.join(os.tmpdir(), 'bc-demo-test-'));

afterAll(() => fs.rmSync(state, { recursive: true, force: true }));

function runDemo(args: string[], timeoutMs: number): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', 'src/demo/main.ts', ...args], {
      cwd: ROOT,
      env: { ...process.env, BC_DEMO_LOCK_HELD: '1' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (out += d));
    const timer = setTimeout(() => child.kill('SIGTERM'), timeoutMs);
    child.on('error', reject);
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, out });
    });
  });
}

describe.skipIf(external)('npm run demo -- --once', () => {
  it('brings everything up, prints the Reservations and the capacity summary, and cleans up', async () => {
    const t0 = performance.now();
    const { code, out } = await runDemo(['--once', '--nodes', '2', '--state', state], 420_000);
    process.stderr.write(`[demo] --once in ${((performance.now() - t0) / 1000).toFixed(1)}s\n${out}\n`);
    expect(code, out).toBe(0);
    // The printer columns of `kubectl get reservations`, both Reserved and confirmed (no lease: booked confirmed).
    const table = out.slice(out.indexOf('$ kubectl -n demo-team-a get reservations'));
    expect(table).toMatch(/NAME\s+PHASE\s+STATE\s+POOL\s+GPUS\s+NODES\s+START\s+END\s+AGE/);
    expect(table).toMatch(/train-now\s+Reserved\s+confirmed\s+demo-local\s+2\s+127\.0\.0\.1\s/);
    expect(table).toMatch(/train-tomorrow\s+Reserved\s+confirmed\s+demo-sim\s+4\s/);
    expect(out).toMatch(/trainer: BETTERCOMPUTE_ATOMS=GPU-\S+,GPU-\S+/);
    expect(out).toMatch(/notebook: BETTERCOMPUTE_ATOMS=GPU-\S+/);
    expect(out).toContain('Tenant team-a: 2 pools');
    // A step that takes over 30 s says so ("... still working") before its "ok".
    expect(out).toMatch(/Installing: kubectl apply --server-side -k deploy\/overlays\/trial[^\n]*\n(\s+\.\.\. still working[^\n]*\n)*\s+ok in/);
    expect(out).toMatch(/Cleaned up in/);

    // Nothing left: no demo namespace (or only terminating), no product namespace, no demo nodes; the cluster's own
    // scheduler untouched.
    const ns = await kubectlResult(['get', 'namespace', 'demo-team-a', '-o', 'jsonpath={.status.phase}']);
    expect(ns.code !== 0 || ns.stdout === 'Terminating').toBe(true);
    const nodes = await kubectlJson<List<Node>>(['get', 'nodes', '-l', `${SIMULATED_LABEL}=true,bettercompute.io/demo=true`]);
    expect(nodes.items).toHaveLength(0);
    expect(readSchedulerConfig()).not.toContain('extenders');
    expect((await kubectlResult(['get', 'namespace', installer.SYSTEM_NS])).code).not.toBe(0);
    expect((await kubectlResult(['get', 'validatingadmissionpolicy', 'bettercompute-scheduler-only'])).code).not.toBe(0);
  }, 480_000);
});
