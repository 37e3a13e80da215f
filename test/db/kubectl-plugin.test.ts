// The kubectl plugin: `kubectl bettercompute reservations list` through a real kubectl (the cluster tests' build in
// ~/.cache/better-compute/k8s-*/bin, if there is one; else the executable itself), found on PATH under the name npm
// installs it as (package.json "bin"), on a real database: YAML on stdout, progress on stderr only.
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import YAML from 'yaml';
import { Ledger } from '../../src/db/ledger.ts';
import { makeNode, makePool, reservation } from '../support/builders.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';

const ROOT = path.join(import.meta.dirname, '..', '..');
const run = promisify(execFile);

/** A kubectl binary from the cluster tests' cache, if this machine has built one. */
function cachedKubectl(): string | undefined {
  const cache = process.env.BC_CACHE ?? path.join(os.homedir(), '.cache', 'better-compute');
  if (!fs.existsSync(cache)) return undefined;
  for (const d of fs.readdirSync(cache).filter((n) => n.startsWith('k8s-')).sort().reverse()) {
    const k = path.join(cache, d, 'bin', 'kubectl');
    if (fs.existsSync(k)) return k;
  }
  return undefined;
}

const KUBECTL = cachedKubectl();
let t: TestDatabase;
let binDir: string;
let reservationId: string;

beforeAll(async () => {
  t = await createTestDatabase();
  const pool = await makePool('plugin-pool').owner('acme').create(t.db);
  await makeNode('plugin-n1').gpus(4).create(t.db, pool);
  const booked = await new Ledger(t.db).reserve(reservation(pool, { devices: [{ class: 'gpu', count: 2 }], duration: 3600 }), Date.now());
  if (!booked.ok) throw new Error(booked.message);
  reservationId = booked.reservation.id;
  // What `npm install` does for package.json's bin: a link named after the key, to the file.
  const pkg = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { bin: Record<string, string> };
  binDir = fs.mkdtempSync(path.join(os.tmpdir(), 'plugin-bin-'));
  fs.symlinkSync(path.join(ROOT, pkg.bin['kubectl-bettercompute']!), path.join(binDir, 'kubectl-bettercompute'));
});
afterAll(async () => {
  await t?.drop();
  if (binDir) fs.rmSync(binDir, { recursive: true, force: true });
});

/** `kubectl bettercompute ARGS` (or the plugin itself without a kubectl), with the plugin's directory first on PATH. */
async function plugin(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const env: NodeJS.ProcessEnv = { ...process.env, PATH: `${binDir}${path.delimiter}${process.env.PATH ?? ''}`, DATABASE_URL: t.url };
  delete env.KUBECONFIG; // no cluster to ask for names
  const [file, argv] = KUBECTL ? [KUBECTL, ['bettercompute', ...args]] : ['kubectl-bettercompute', args];
  try {
    const { stdout, stderr } = await run(file, argv, { env, timeout: 90_000 });
    return { code: 0, stdout, stderr };
  } catch (e) {
    const err = e as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof err.code === 'number' ? err.code : -1, stdout: err.stdout ?? '', stderr: err.stderr ?? '' };
  }
}

describe(`kubectl bettercompute (${KUBECTL ? `through ${KUBECTL}` : 'no kubectl here: the plugin executable directly'})`, () => {
  it.skipIf(!KUBECTL)('kubectl finds the plugin on PATH', async () => {
    const env = { ...process.env, PATH: `${binDir}${path.delimiter}${process.env.PATH ?? ''}` };
    const { stdout } = await run(KUBECTL!, ['plugin', 'list', '--name-only'], { env }).catch((e: { stdout?: string }) => ({ stdout: e.stdout ?? '' }));
    expect(stdout).toMatch(/^kubectl-bettercompute$/m);
  });

  it('reservations list -o yaml: the reservation as YAML on stdout, progress on stderr only', async () => {
    const r = await plugin(['reservations', 'list', '--tenant', 'acme', '-o', 'yaml', '--progress']);
    expect(r.stderr).toMatch(/^\[ +\d+\.\ds\] connecting to the database \(postgres:\/\/.*\)$/m);
    expect(r.stderr).toMatch(/^\[ +\d+\.\ds\] done$/m);
    expect(r.code).toBe(0);
    const out = YAML.parse(r.stdout) as { tenantId: string; reservations: { id: string; atoms: number; state: string }[] };
    expect(out.tenantId).toBe('acme');
    expect(out.reservations).toEqual([expect.objectContaining({ id: reservationId, atoms: 2 })]);
  }, 120_000);

  it('reservations list -o wide and the usage under its kubectl name', async () => {
    const wide = await plugin(['reservations', 'list', '--tenant', 'acme', '-o', 'wide']);
    expect(wide.code).toBe(0);
    expect(wide.stdout.split('\n')[2]).toMatch(/^ID +NAME +POOL +STATE +START +END +ATOMS +POOL ID +NODES +UID$/);
    expect(wide.stdout).toContain('plugin-n1');
    expect(wide.stderr).toBe(''); // not a terminal, no --progress: nothing
    const help = await plugin(['--help']);
    expect(help.stdout.split('\n')[0]).toBe('usage: kubectl bettercompute <command> [options]');
  }, 120_000);
});
