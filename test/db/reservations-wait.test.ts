// `reservations wait ID`: waits on a real database until a held reservation is confirmed (by the ledger, as a pod's
// bind would), reporting on stderr while stdout gets only the reservation; and ends, times out or refuses as it says.
import { beforeAll, describe, expect, it } from 'vitest';
import YAML from 'yaml';
import { reservationsCommand } from '../../src/cli/reservations.ts';
import { loadConfig } from '../../src/config.ts';
import { Ledger } from '../../src/db/ledger.ts';
import { makeNode, makePool, reservation } from '../support/builders.ts';
import { useTestDatabase } from '../support/db.ts';

const t = useTestDatabase();
const config = loadConfig({ BETTER_COMPUTE_TENANT: 'acme' });
let ledger: Ledger;
let poolId: string;

beforeAll(async () => {
  poolId = await makePool('wait-pool').owner('acme').create(t.db);
  await makeNode('wait-n1').gpus(4).create(t.db, poolId);
  ledger = new Ledger(t.db);
});

async function held(): Promise<string> {
  const out = await ledger.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 1 }], leaseSeconds: 600 }), t.clock.now());
  if (!out.ok) throw new Error(out.message);
  expect(out.reservation.state).toBe('held');
  return out.reservation.id;
}

async function cli(argv: string[]) {
  let stdout = '';
  let stderr = '';
  const code = await reservationsCommand(argv, config, {
    stdout: (s) => (stdout += s),
    stderr: (s) => (stderr += s),
    database: async () => ({ db: t.db, close: async () => undefined }),
    names: async () => new Map(),
  });
  return { code, stdout, stderr };
}

describe('reservations wait', () => {
  it('waits until a held reservation is confirmed, progress on stderr, the reservation on stdout', async () => {
    const id = await held();
    const waiting = cli(['wait', id, '--progress', '--timeout', '60s', '-o', 'yaml']);
    await new Promise((r) => setTimeout(r, 1500));
    expect('error' in (await ledger.confirm(id))).toBe(false);
    const r = await waiting;
    expect(r.code).toBe(0);
    expect(r.stderr).toMatch(new RegExp(`^\\[ +\\d+\\.\\ds\\] reservation ${id} is held; waiting for confirmed$`, 'm'));
    expect(r.stderr).toMatch(/\] done\n$/);
    expect(YAML.parse(r.stdout)).toMatchObject({ id, state: 'confirmed', atoms: 1 });
  });

  it('a reservation already in the state: at once, nothing on stderr without --progress', async () => {
    const id = await held();
    const r = await cli(['wait', id, '--for', 'held']);
    expect(r).toMatchObject({ code: 0, stderr: '' });
    expect(r.stdout).toMatch(/^State: +held until /m);
  });

  it('released while waiting for confirmed: ENDED; still held at the deadline: TIMEOUT', async () => {
    const gone = await held();
    await ledger.release(gone);
    expect(await cli(['wait', gone])).toMatchObject({ code: 1, stderr: `error ENDED: reservation ${gone} is released: it will not become confirmed\n` });
    const id = await held();
    const r = await cli(['wait', id, '--timeout', '2s']);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(new RegExp(`^error TIMEOUT: reservation ${id} is still held after [23] s\\n$`));
  });

  it('usage: --for and --timeout are checked, and go with wait only', async () => {
    expect(await cli(['wait', 'x', '--for', 'active'])).toMatchObject({ code: 2, stderr: 'error USAGE: --for: states among held, confirmed, released, expired, not active\n' });
    expect((await cli(['wait', 'x', '--timeout', 'soon'])).stderr).toMatch(/^error USAGE: --timeout: /);
    expect(await cli(['list', '--for', 'held'])).toMatchObject({ code: 2, stderr: 'error USAGE: --for and --timeout go with wait\n' });
    expect(await cli(['wait', 'rsv_01jab0000000000000000000zz'])).toMatchObject({ code: 1, stderr: 'error NOT_FOUND: reservation rsv_01jab0000000000000000000zz not found\n' });
  });
});
