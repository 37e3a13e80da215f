// `better-compute capacity` against a served API: human tables and `-o json` for the summary, pool rows, preview and
// timeline; errors; --direct. And the real binary end to end: `serve` in a child process, the CLI in another, then a
// graceful SIGTERM.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CAPACITY_PATHS } from '../../src/api/app.ts';
import { capacityCommand } from '../../src/cli/capacity.ts';
import { loadConfig, type Config } from '../../src/config.ts';
import { Ledger } from '../../src/db/ledger.ts';
import { startTestApi, TOKENS, type TestApi } from '../support/api.ts';
import { makeNode, makePool, reservation } from '../support/builders.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { freePort } from '../../src/db/embedded.ts';
import { CLI, REPO_ROOT, startServeProcess, writeTokenFile } from '../support/serve-process.ts';

const HOUR = 3_600_000;
let t: TestDatabase;
let api: TestApi;
let config: Config;
let POOL: string;
let OTHER: string;
let SETUP_NOW: number;

beforeAll(async () => {
  t = await createTestDatabase();
  POOL = await makePool('cli-train').owner('acme').model('H100').create(t.db);
  await makeNode('cli-n1').gpus(8).domain('zone-a').scalars({ vcpu: 64 }).create(t.db, POOL);
  await makeNode('cli-n2').gpus(8).domain('zone-a').gpuModel('A100', 40).scalars({ vcpu: 64 }).create(t.db, POOL);
  OTHER = await makePool('cli-small').owner('ops').model(null).offer('acme').create(t.db);
  await makeNode('cli-s1').gpus(2).create(t.db, OTHER);
  api = await startTestApi(t.db);
  const now = api.clock.now();
  SETUP_NOW = now;
  const ledger = new Ledger(t.db);
  expect((await ledger.reserve(reservation(POOL, { devices: [{ class: 'gpu', count: 4 }], duration: 2 * 3600 }), now)).ok).toBe(true);
  const nextHour = Math.floor(now / HOUR) * HOUR + 3 * HOUR;
  expect((await ledger.reserve(reservation(POOL, { devices: [{ class: 'gpu', count: 8 }], start: nextHour, duration: 3600 }), now)).ok).toBe(true);
  config = loadConfig({ BETTER_COMPUTE_SERVER: api.url, BETTER_COMPUTE_TOKEN: TOKENS.acme, BETTER_COMPUTE_TENANT: 'acme' });
});
afterAll(async () => {
  await api?.close();
  await t?.drop();
});

async function cli(argv: string[], cfg: Config = config): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = '';
  let stderr = '';
  const code = await capacityCommand(argv, cfg, { stdout: (s) => (stdout += s), stderr: (s) => (stderr += s) });
  return { code, stdout, stderr };
}

/** The column start offsets of a table's header line: every data line must have its cells at those offsets. */
function expectAligned(lines: string[]): void {
  const header = lines[0]!;
  const starts = [...header.matchAll(/\S+(?: \S+)*/g)].map((m) => m.index!).slice(1);
  for (const line of lines.slice(1)) {
    // No cell runs into the two-space gap before a column (cells are left- or right-aligned within their column).
    for (const s of starts) expect(line.slice(s - 2, s), `line ${JSON.stringify(line)}, column at ${s}`).toBe('  ');
  }
}

describe('capacity --tenant (summary)', () => {
  it('prints every pool the tenant sees, one line per resource, then whole GPUs per model', async () => {
    const { code, stdout, stderr } = await cli(['--tenant', 'acme']);
    expect(stderr).toBe('');
    expect(code).toBe(0);
    const lines = stdout.split('\n');
    expect(lines[0]).toBe('Tenant acme: 2 pools');
    expect(lines[2]).toMatch(/^POOL\s+POOL ID\s+MODEL\s+RESOURCE\s+TOTAL\s+ALLOCATABLE\s+ALLOCATED\s+RESERVED\s+AVAILABLE\s+PROVISIONING\s+UNHEALTHY\s+MAINTENANCE\s+UNREACHABLE$/);
    const table = lines.slice(2, lines.indexOf('', 2));
    expectAligned(table);
    expect(table.slice(1).map((l) => l.split(/\s+/).slice(0, 9))).toEqual([
      ['cli-small', OTHER, '-', 'gpu', '2', '2', '0', '0', '2'],
      ['cli-train', POOL, 'H100', 'gpu', '16', '16', '4', '8', '4'],
      ['cli-train', POOL, 'H100', 'vcpu', '128', '128', '0', '0', '128'],
    ]);
    expect(stdout).toContain('Whole GPUs per model:\nGPU MODEL  TOTAL  ALLOCATABLE  ALLOCATED  RESERVED  AVAILABLE\nH100          16           16          4         8          4\nother          2            2          0         0          2\n');
  });

  it('-o json prints what the API answers', async () => {
    const { code, stdout } = await cli(['--tenant', 'acme', '-o', 'json']);
    expect(code).toBe(0);
    const direct = await api.client.post(CAPACITY_PATHS.summary, { tenantId: 'acme' });
    expect(JSON.parse(stdout)).toEqual(direct.json);
  });

  it('the tenant comes from BETTER_COMPUTE_TENANT when --tenant is not given', async () => {
    expect((await cli([])).stdout).toMatch(/^Tenant acme: 2 pools/);
  });
});

describe('capacity --pool', () => {
  it('prints the pool’s rows', async () => {
    const { code, stdout } = await cli(['--tenant', 'acme', '--pool', POOL]);
    expect(code).toBe(0);
    const lines = stdout.trimEnd().split('\n');
    expect(lines[0]).toBe(`Pool ${POOL}`);
    expectAligned(lines.slice(2));
    expect(lines.slice(3).map((l) => l.split(/\s+/).slice(0, 6))).toEqual([
      ['gpu', '16', '16', '4', '8', '4'],
      ['vcpu', '128', '128', '0', '0', '128'],
    ]);
    expect(lines[3]).toMatch(/\d{4}-\d{2}-\d{2} \d{2}:\d{2}Z$/);
  });

  it('-o json', async () => {
    const { stdout } = await cli(['--tenant', 'acme', '--pool', POOL, '-o', 'json']);
    expect(JSON.parse(stdout)).toMatchObject({ poolId: POOL, capacity: [{ resource: 'gpu', total: 16, allocated: 4, reserved: 8 }, { resource: 'vcpu' }] });
  });

  it('a pool the tenant cannot see: NOT_FOUND on stderr, exit 1 (and as JSON with -o json)', async () => {
    const r = await cli(['--tenant', 'ops', '--pool', POOL], { ...config, token: TOKENS.all });
    expect([r.code, r.stdout, r.stderr]).toEqual([1, '', `error NOT_FOUND: pool ${POOL} not found\n`]);
    const j = await cli(['--tenant', 'ops', '--pool', POOL, '-o', 'json'], { ...config, token: TOKENS.all });
    expect(JSON.parse(j.stderr)).toEqual({ error: { code: 'NOT_FOUND', message: `pool ${POOL} not found` } });
  });
});

describe('capacity --preview', () => {
  it('--gpus 8 --for 1d --selector "vramGiB >= 80": the H100 node, not the A100 one (its 4 free GPUs are too few anyway)', async () => {
    const { code, stdout, stderr } = await cli(['--tenant', 'acme', '--preview', '--pool', POOL, '--gpus', '4', '--for', '1d', '--selector', 'vramGiB >= 80']);
    expect(stderr).toBe('');
    expect(code).toBe(0);
    // cli-n1 has 4 free GPUs now but 8 are booked later today: a 1-day window does not fit there; cli-n2 has A100 40 GB.
    expect(stdout).toMatch(/^Fits: no — /);
  });

  it('fits: a table of candidates with their atoms', async () => {
    const { code, stdout } = await cli(['--tenant', 'acme', '--preview', '--pool', POOL, '--gpus', '2', '--for', '1h', '--selector', 'vramGiB >= 40 && gpuModel == "A100"']);
    expect(code).toBe(0);
    const lines = stdout.trimEnd().split('\n');
    expect(lines[0]).toBe('Fits: yes — 1 candidate');
    expect(lines[2]).toMatch(/^#\s+NODE\s+SCORE\s+ATOMS\s+ATOM IDS$/);
    expect(lines[3]).toMatch(/^1\s+cli-n2\s+\d+\s+2\s+GPU-cli-n2-\d\d,GPU-cli-n2-\d\d$/);
    expectAligned(lines.slice(2));
  });

  it('the spec’s example: --gpus 8 --for 1d --selector "vramGiB >= 80", as JSON', async () => {
    const { code, stdout } = await cli(['--tenant', 'acme', '--preview', '--pool', POOL, '--gpus', '8', '--for', '1d', '--selector', 'vramGiB >= 80', '-o', 'json']);
    expect(code).toBe(0);
    const body = JSON.parse(stdout) as { fits: boolean; candidates: unknown[]; reason?: string };
    expect(body.fits).toBe(false);
    expect(body.candidates).toEqual([]);
    expect(body.reason).toEqual(expect.any(String));
  });

  it('--start later: the 8 GPUs are free tomorrow', async () => {
    const tomorrow = new Date(api.clock.now() + 24 * HOUR).toISOString();
    const { stdout } = await cli(['--tenant', 'acme', '--preview', '--pool', POOL, '--gpus', '8', '--for', '2h', '--start', tomorrow, '--selector', 'vramGiB >= 80', '-o', 'json']);
    expect(JSON.parse(stdout)).toMatchObject({ fits: true, candidates: [{ nodeId: 'cli-n1' }] });
  });

  it('--gang and --binding node', async () => {
    const gang = JSON.parse((await cli(['--tenant', 'acme', '--preview', '--pool', OTHER, '--gpus', '1', '--gang', '2', '-o', 'json'])).stdout);
    expect(gang).toMatchObject({ fits: false });
    const node = JSON.parse((await cli(['--tenant', 'acme', '--preview', '--pool', OTHER, '--binding', 'node', '-o', 'json'])).stdout);
    expect(node).toMatchObject({ fits: true, candidates: [{ nodeId: 'cli-s1', atoms: ['GPU-cli-s1-00', 'GPU-cli-s1-01'] }] });
  });

  it('a selector that does not parse: exit 2, before anything is sent', async () => {
    const r = await cli(['--tenant', 'acme', '--preview', '--pool', POOL, '--selector', 'vramGiB >=']);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/^error USAGE: --selector: /);
  });

  it('a duration the API refuses: INVALID_INPUT from the server, exit 1', async () => {
    const r = await cli(['--tenant', 'acme', '--preview', '--pool', POOL, '--for', '400d']);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^error INVALID_INPUT: duration: /);
  });
});

describe('capacity --timeline', () => {
  it('draws booked (#) and free (.) GPUs per bucket', async () => {
    const { code, stdout } = await cli(['--tenant', 'acme', '--timeline', '--pool', POOL]);
    expect(code).toBe(0);
    const lines = stdout.trimEnd().split('\n');
    expect(lines[0]).toMatch(new RegExp(`^Pool ${POOL}: whole GPUs booked per 60-minute bucket, `));
    expect(lines[1]).toBe('Allocatable now: 16 GPUs   # booked   . free   ! booked beyond allocatable');
    const buckets = lines.slice(3);
    expect(buckets).toHaveLength(24);
    for (const b of buckets) expect(b).toMatch(/^\d{4}-\d{2}-\d{2} \d{2}:\d{2}Z  [#.]{16}   booked +\d+  free +\d+$/);
    // The current hour holds the 4 GPUs booked now; three hours on, the 8 booked for later.
    expect(buckets[0]).toMatch(/  ####............   booked 4  free 12$/);
    expect(buckets[3]).toMatch(/  ########........   booked 8  free  8$/);
  });

  it('--from, --to, --step and -o json', async () => {
    const from = Math.floor(SETUP_NOW / HOUR) * HOUR;
    const { stdout } = await cli(['--tenant', 'acme', '--timeline', '--pool', POOL, '--from', String(from), '--to', new Date(from + 2 * HOUR).toISOString(), '--step', '30', '-o', 'json']);
    const body = JSON.parse(stdout) as { from: number; to: number; stepMinutes: number; allocatable: number; buckets: { booked: number }[] };
    expect(body).toMatchObject({ poolId: POOL, from, to: from + 2 * HOUR, stepMinutes: 30, allocatable: 16 });
    // The 4 GPUs are booked from the moment of the test's setup (some time in the first hour) for two hours.
    const setup = Math.floor((SETUP_NOW - from) / (30 * 60_000));
    expect(body.buckets.map((b) => b.booked)).toEqual([0, 1, 2, 3].map((i) => (i >= setup ? 4 : 0)));
  });
});

describe('usage and transport errors', () => {
  it.each<[string[], RegExp]>([
    [['--pool', 'P', '--tenant', 'acme', '--gpus', '2'], /--gpus needs --preview/],
    [['--tenant', 'acme', '--preview'], /--preview needs --pool/],
    [['--tenant', 'acme', '--timeline', '--preview', '--pool', 'P'], /do not go together/],
    [['--tenant', 'acme', '-o', 'xml'], /-o: one of table, wide, json, yaml, not xml/],
    [['--tenant', 'acme', '--preview', '--pool', 'P', '--gpus', 'many'], /--gpus: not a whole number/],
    [['--tenant', 'acme', '--timeline', '--pool', 'P', '--from', 'tomorrow'], /--from: not a time/],
  ])('%j → exit 2', async (argv, message) => {
    const r = await cli(argv.map((a) => (a === 'P' ? POOL : a)));
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(message);
  });

  it('no tenant anywhere → exit 2', async () => {
    const r = await cli([], { ...config, tenant: undefined });
    expect([r.code, r.stderr]).toEqual([2, 'error USAGE: --tenant is required (or set BETTER_COMPUTE_TENANT)\n']);
  });

  it('an unknown flag → exit 2 with the usage', async () => {
    const r = await cli(['--tenant', 'acme', '--gpu', '1']);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/Unknown option '--gpu'[\s\S]*usage: better-compute capacity/);
  });

  it('a wrong token → UNAUTHENTICATED; a token for another tenant → FORBIDDEN', async () => {
    expect((await cli(['--tenant', 'acme', '--token', 'nope'])).stderr).toBe('error UNAUTHENTICATED: the bearer token is not valid\n');
    expect((await cli(['--tenant', 'ops', '--token', TOKENS.acme])).stderr).toBe('error FORBIDDEN: alice may not read the capacity of tenant ops\n');
  });

  it('no server → UNREACHABLE, exit 1', async () => {
    const port = await freePort();
    const r = await cli(['--tenant', 'acme', '--server', `http://127.0.0.1:${port}`]);
    expect(r.code).toBe(1);
    expect(r.stderr).toBe(`error UNREACHABLE: cannot reach http://127.0.0.1:${port}: ECONNREFUSED\n`);
  });

  it('--help', async () => {
    const r = await cli(['--help']);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^usage: better-compute capacity/);
  });
});

describe('capacity --direct', () => {
  it('reads the database itself, with the same answers and the same NOT_FOUND rules', async () => {
    const direct = { ...config, databaseUrl: t.url, serverUrl: 'http://127.0.0.1:1' };
    const viaApi = await cli(['--tenant', 'acme', '--pool', POOL, '-o', 'json']);
    const viaDb = await cli(['--tenant', 'acme', '--pool', POOL, '-o', 'json', '--direct'], direct);
    expect(viaDb.code).toBe(0);
    expect(JSON.parse(viaDb.stdout)).toEqual(JSON.parse(viaApi.stdout));
    expect((await cli(['--tenant', 'acme', '--timeline', '--pool', POOL, '--direct'], direct)).stdout).toMatch(/booked 4  free 12/);
    const hidden = await cli(['--tenant', 'nobody', '--pool', POOL, '--direct'], direct);
    expect([hidden.code, hidden.stderr]).toEqual([1, `error NOT_FOUND: pool ${POOL} not found\n`]);
    const invalid = await cli(['--tenant', 'acme', '--timeline', '--pool', POOL, '--step', '4', '--direct'], direct);
    expect([invalid.code, invalid.stderr]).toEqual([1, 'error INVALID_INPUT: stepMinutes: must be at least 5\n']);
  });
});

describe('the binaries: serve, and the CLI against it', () => {
  const exec = promisify(execFile);

  it('serve answers the CLI, logs one JSON line per request, and stops cleanly on SIGTERM', async () => {
    const tokens = await writeTokenFile([{ token: 'cli-e2e-token-012345', subject: 'e2e', tenants: ['acme'] }]);
    const serve = await startServeProcess({ databaseUrl: t.url, tokenFile: tokens.file });
    try {
      const env = { ...process.env, BETTER_COMPUTE_SERVER: serve.url, BETTER_COMPUTE_TOKEN: 'cli-e2e-token-012345' };
      const table = await exec(process.execPath, [CLI, 'capacity', '--tenant', 'acme'], { cwd: REPO_ROOT, env });
      expect(table.stdout).toMatch(/^Tenant acme: 2 pools\n\nPOOL +POOL ID/);
      const json = await exec(process.execPath, [CLI, 'capacity', '--tenant', 'acme', '--pool', POOL, '-o', 'json'], { cwd: REPO_ROOT, env });
      expect(JSON.parse(json.stdout)).toMatchObject({ poolId: POOL });
      const denied = await exec(process.execPath, [CLI, 'capacity', '--tenant', 'ops'], { cwd: REPO_ROOT, env }).catch((e: { code: number; stderr: string }) => e);
      expect(denied).toMatchObject({ code: 1, stderr: 'error FORBIDDEN: e2e may not read the capacity of tenant ops\n' });
      const metrics = await fetch(`${serve.url}/metrics`);
      expect(await metrics.text()).toContain('bettercompute_pool_allocatable{pool="cli-train"');
    } finally {
      expect(await serve.stop()).toBe(0);
      await tokens.remove();
    }
    const requests = serve.logs.filter((l) => l.msg === 'request');
    expect(requests.filter((r) => r.path !== '/healthz').map((r) => [r.method, r.path, r.status])).toEqual([
      ['POST', CAPACITY_PATHS.summary, 200],
      ['POST', CAPACITY_PATHS.byPool, 200],
      ['POST', CAPACITY_PATHS.summary, 403],
      ['GET', '/metrics', 200],
    ]);
    for (const r of requests) expect(r).toEqual({ time: expect.any(String), level: 'info', msg: 'request', method: r.method, path: r.path, status: r.status, ms: expect.any(Number) });
    const msgs = serve.logs.map((l) => l.msg);
    expect(msgs[0]).toBe('listening');
    expect(msgs.slice(-3)).toEqual(['signal', 'shutting down', 'stopped']);
    expect(serve.stderr.join('')).toBe('');
  }, 120_000);
});
