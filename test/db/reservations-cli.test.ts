// `better-compute reservations` against a real ledger: list (live, --all), get, preview of a Reservation manifest
// (validated as the reconciler validates it), confirm of a hold; tables and `-o json`; another tenant's reservation is
// not found; usage errors.
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { reservationsCommand } from '../../src/cli/reservations.ts';
import { loadConfig } from '../../src/config.ts';
import { Ledger } from '../../src/db/ledger.ts';
import { makeNode, makePool, reservation } from '../support/builders.ts';
import { useTestDatabase } from '../support/db.ts';

const t = useTestDatabase();
const config = loadConfig({ BETTER_COMPUTE_TENANT: 'acme' });
let poolId: string;
let dir: string;
const ids: Record<string, string> = {};

beforeAll(async () => {
  poolId = await makePool('rc-pool').owner('acme').offer('beta').create(t.db);
  await makeNode('rc-n1').gpus(5).create(t.db, poolId);
  const ledger = new Ledger(t.db);
  const now = t.clock.now();
  const book = async (name: string, over: Parameters<typeof reservation>[1]) => {
    const out = await ledger.reserve(reservation(poolId, { idempotencyKey: `uid-${name}`, ...over }), now);
    if (!out.ok) throw new Error(out.message);
    ids[name] = out.reservation.id;
  };
  await book('train', { devices: [{ class: 'gpu', count: 2 }] });
  await book('hold', { devices: [{ class: 'gpu', count: 1 }], leaseSeconds: 600 });
  await book('gone', { devices: [{ class: 'gpu', count: 1 }] });
  await ledger.release(ids.gone!);
  await book('other', { tenantId: 'beta', devices: [{ class: 'gpu', count: 1 }] });
  dir = await fs.mkdtemp(path.join(os.tmpdir(), 'bc-rsv-cli-'));
});
afterAll(async () => {
  if (dir) await fs.rm(dir, { recursive: true, force: true });
});

async function cli(argv: string[]) {
  let stdout = '';
  let stderr = '';
  const code = await reservationsCommand(argv, config, {
    stdout: (s) => (stdout += s),
    stderr: (s) => (stderr += s),
    database: async () => ({ db: t.db, close: async () => undefined }),
    names: async (uids) => new Map(uids.filter((u) => u === 'uid-train').map((u) => [u, 'team-a/train'])),
  });
  return { code, stdout, stderr };
}

describe('reservations list', () => {
  it('a table of the tenant’s live reservations, by start; names from the cluster where known', async () => {
    const r = await cli(['list']);
    expect(r).toMatchObject({ code: 0, stderr: '' });
    const lines = r.stdout.trimEnd().split('\n');
    expect(lines[0]).toBe('Tenant acme: 2 live reservations');
    expect(lines[2]).toMatch(/^ID +NAME +POOL +STATE +START +END +ATOMS$/);
    const body = lines.slice(3).join('\n');
    expect(body).toMatch(new RegExp(`${ids.train} +team-a/train +rc-pool +confirmed +\\S+ \\S+ +\\S+ \\S+ +2`));
    expect(body).toMatch(new RegExp(`${ids.hold} +- +rc-pool +held until \\S+ \\S+ +\\S+ \\S+ +\\S+ \\S+ +1`));
    expect(body).not.toContain(ids.gone!);
    expect(body).not.toContain(ids.other!);
  });

  it('--all adds the ended ones; -o json has the rows', async () => {
    const r = await cli(['list', '--all', '-o', 'json']);
    expect(r.code).toBe(0);
    const json = JSON.parse(r.stdout) as { tenantId: string; reservations: { id: string; state: string; atoms: number; name: string | null; pool: string }[] };
    expect(json.tenantId).toBe('acme');
    expect(json.reservations.map((x) => [x.id, x.state, x.atoms, x.name, x.pool]).sort()).toEqual(
      [
        [ids.train, 'confirmed', 2, 'team-a/train', 'rc-pool'],
        [ids.hold, 'held', 1, null, 'rc-pool'],
        [ids.gone, 'released', 1, null, 'rc-pool'],
      ].sort(),
    );
  });
});

describe('reservations get and confirm', () => {
  it('get shows one reservation with its atoms per node', async () => {
    const r = await cli(['get', ids.train!]);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(`Reservation ${ids.train}\nName:    team-a/train\nPool:    rc-pool (${poolId})\nState:   confirmed\n`);
    expect(r.stdout).toMatch(/\nNODE +ATOMS +ATOM IDS\nrc-n1 +2 +\S+,\S+\n$/);
  });

  it('another tenant’s id is not found, and not confirmed', async () => {
    expect(await cli(['get', ids.other!])).toMatchObject({ code: 1, stderr: `error NOT_FOUND: reservation ${ids.other} not found for tenant acme\n` });
    expect(await cli(['confirm', ids.other!, '-o', 'json'])).toMatchObject({ code: 1, stderr: expect.stringContaining('"code":"NOT_FOUND"') });
  });

  it('confirm turns the hold into a confirmed reservation; again, it answers the same', async () => {
    const held = await cli(['get', ids.hold!]);
    expect(held.stdout).toContain(`Confirm:  its first pod that binds confirms it, or: better-compute reservations confirm ${ids.hold}`);
    const r = await cli(['confirm', ids.hold!, '-o', 'json']);
    expect(r.code).toBe(0);
    const json = JSON.parse(r.stdout) as { state: string; leaseExpiresAt: number | null; hold: { confirmedAt: number; confirmedByPod: string | null } };
    expect(json).toMatchObject({ state: 'confirmed', leaseExpiresAt: null, hold: { confirmedAt: expect.any(Number), confirmedByPod: null } });
    const again = await cli(['confirm', ids.hold!]);
    expect(again.code).toBe(0);
    expect(again.stdout).toContain('\nState:      confirmed\n');
  });

  it('a released reservation cannot be confirmed', async () => {
    expect(await cli(['confirm', ids.gone!])).toMatchObject({ code: 1, stderr: `error NOT_HELD: cannot confirm reservation ${ids.gone} in state released\n` });
  });
});

describe('reservations preview', () => {
  const manifest = (spec: string) => `# a Job's reservation
apiVersion: v1
kind: Namespace
metadata: { name: team-a }
---
apiVersion: bettercompute.io/v1alpha1
kind: Reservation
metadata:
  name: train-next
  namespace: team-a
spec:
  pool: rc-pool
${spec}`;
  const write = async (name: string, text: string) => {
    const file = path.join(dir, name);
    await fs.writeFile(file, text);
    return file;
  };

  it('what the capacity preview says of the manifest: fits, where; nothing is booked', async () => {
    const before = (await t.db.query('SELECT count(*)::int AS n FROM reservations')).rows[0].n as number;
    // By hand: 5 GPUs; acme's 2 + 1 and beta's 1 booked now (the released one freed), so 1 is free.
    const file = await write('fits.yaml', manifest('  devices: [{ class: gpu, count: 1 }]\n  duration: 2h\n  leaseSeconds: 300\n'));
    const r = await cli(['preview', '-f', file]);
    expect(r).toMatchObject({ code: 0, stderr: '' });
    expect(r.stdout).toMatch(new RegExp(`^Reservation team-a/train-next: pool rc-pool \\(${poolId}\\), tenant acme\nFits: yes — 1 candidate\n`));
    expect(r.stdout).toMatch(/\n {0,2}1 +rc-n1 +\S+ +1 +\S+\n$/);
    const json = JSON.parse((await cli(['preview', '-f', file, '-o', 'json'])).stdout) as { fits: boolean; candidates: { nodeId: string; atoms: string[] }[] };
    expect(json).toMatchObject({ fits: true, candidates: [{ nodeId: 'rc-n1', atoms: [expect.any(String)] }] });
    expect((await t.db.query('SELECT count(*)::int AS n FROM reservations')).rows[0].n).toBe(before);
  });

  it('does not fit: the planner’s reason', async () => {
    const file = await write('big.yaml', manifest('  devices: [{ class: gpu, count: 2 }]\n  duration: 1h\n'));
    const r = await cli(['preview', '-f', file]);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/\nFits: no — 0\/1 nodes fit/);
  });

  it('validated as the reconciler validates it: a bad duration, a bad start, no such pool, no Reservation', async () => {
    const bad = await write('bad.yaml', manifest('  devices: [{ class: gpu, count: 1 }]\n  duration: forever\n'));
    expect(await cli(['preview', '-f', bad])).toMatchObject({ code: 1, stderr: expect.stringMatching(/^error INVALID_INPUT: duration: /) });
    const start = await write('start.yaml', manifest('  devices: [{ class: gpu, count: 1 }]\n  duration: 1h\n  start: tomorrow\n'));
    expect(await cli(['preview', '-f', start])).toMatchObject({ code: 1, stderr: 'error INVALID_INPUT: spec.start: must be an RFC 3339 date-time\n' });
    const nopool = await write('nopool.yaml', manifest('  devices: [{ class: gpu, count: 1 }]\n  duration: 1h\n').replace('pool: rc-pool', 'pool: nowhere'));
    expect(await cli(['preview', '-f', nopool])).toMatchObject({ code: 1, stderr: 'error NOT_FOUND: no pool named nowhere\n' });
    const none = await write('none.yaml', 'apiVersion: v1\nkind: ConfigMap\nmetadata: { name: x }\n');
    expect(await cli(['preview', '-f', none])).toMatchObject({ code: 1, stderr: `error INVALID_INPUT: ${none} holds no Reservation\n` });
  });
});

describe('usage', () => {
  it('refuses what does not go together, with exit code 2', async () => {
    expect(await cli([])).toMatchObject({ code: 2, stderr: 'error USAGE: a command: list, get ID, preview -f FILE, confirm ID or wait ID\n' });
    expect(await cli(['get'])).toMatchObject({ code: 2, stderr: 'error USAGE: get takes one reservation id\n' });
    expect(await cli(['preview'])).toMatchObject({ code: 2, stderr: 'error USAGE: preview needs -f FILE\n' });
    expect(await cli(['get', 'x', '--all'])).toMatchObject({ code: 2, stderr: 'error USAGE: --all goes with list\n' });
    expect(await cli(['list', '-o', 'xml'])).toMatchObject({ code: 2, stderr: 'error USAGE: -o: one of table, wide, json, yaml, not xml\n' });
  });
});
