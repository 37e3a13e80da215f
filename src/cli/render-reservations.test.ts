import { describe, expect, it } from 'vitest';
import { renderReservation, renderReservationList, type ReservationDetails } from './render-reservations.ts';

const T0 = Date.UTC(2026, 0, 15, 10, 0, 0, 0);
const HOUR = 3_600_000;
const ID_A = 'rsv_01jab0000000000000000000aa';
const ID_B = 'rsv_01jab0000000000000000000bb';
const row = (over: Partial<ReservationDetails> = {}): ReservationDetails => ({
  id: ID_A,
  idempotencyKey: 'uid-a',
  name: 'team-a/train',
  poolId: 'pool_01jab00000000000000000000p',
  pool: 'h100',
  state: 'confirmed',
  spot: false,
  start: T0,
  end: T0 + 2 * HOUR,
  leaseExpiresAt: null,
  atoms: 4,
  nodes: ['n1', 'n2'],
  ...over,
});

describe('renderReservationList', () => {
  it('one line per reservation: id, name, pool, state (a hold with its lease, spot marked), start, end, atoms', () => {
    const out = renderReservationList(
      'acme',
      [row(), row({ id: ID_B, name: null, state: 'held', leaseExpiresAt: T0 + 5 * 60_000, spot: true, start: T0 + HOUR, atoms: 12 })],
      false,
    );
    expect(out).toBe(
      [
        'Tenant acme: 2 live reservations',
        '',
        'ID                              NAME          POOL  STATE                               START              END                ATOMS',
        `${ID_A}  team-a/train  h100  confirmed                           2026-01-15 10:00Z  2026-01-15 12:00Z      4`,
        `${ID_B}  -             h100  held until 2026-01-15 10:05Z, spot  2026-01-15 11:00Z  2026-01-15 12:00Z     12`,
        '',
      ].join('\n'),
    );
  });

  it('says so when there are none; one is singular; --all says reservations', () => {
    expect(renderReservationList('acme', [], false)).toBe('Tenant acme: no live reservations\n');
    expect(renderReservationList('acme', [], true)).toBe('Tenant acme: no reservations\n');
    expect(renderReservationList('acme', [row({ state: 'expired' })], true).split('\n')[0]).toBe('Tenant acme: 1 reservation');
  });
});

describe('renderReservation', () => {
  it('a held one: its lease, how to confirm it, its atoms per node', () => {
    const out = renderReservation(
      row({
        state: 'held',
        leaseExpiresAt: T0 + 5 * 60_000,
        atoms: 3,
        nodes: ['n1', 'n2'],
        allocations: [
          { id: 'alc_1', nodeId: 'n1', atoms: ['GPU-a', 'GPU-b'] },
          { id: 'alc_2', nodeId: 'n2', atoms: ['GPU-c'] },
        ],
        hold: { confirmedAt: null, confirmedByPod: null },
      }),
    );
    expect(out).toBe(
      [
        `Reservation ${ID_A}`,
        'Name:     team-a/train',
        'Pool:     h100 (pool_01jab00000000000000000000p)',
        'State:    held until 2026-01-15 10:05Z',
        'Window:   2026-01-15 10:00Z to 2026-01-15 12:00Z',
        `Confirm:  its first pod that binds confirms it, or: better-compute reservations confirm ${ID_A}`,
        'Atoms:    3 on 2 nodes',
        '',
        'NODE  ATOMS  ATOM IDS',
        'n1        2  GPU-a,GPU-b',
        'n2        1  GPU-c',
        '',
      ].join('\n'),
    );
  });

  it('a confirmed hold: when and by which pod; no allocations, no table', () => {
    const out = renderReservation(row({ atoms: 1, nodes: ['n1'], hold: { confirmedAt: T0 + 60_000, confirmedByPod: 'team-a/job-0' } }));
    expect(out).toContain('\nState:      confirmed\n');
    expect(out).toContain('\nConfirmed:  2026-01-15 10:01Z by pod team-a/job-0\n');
    expect(out).toContain('\nAtoms:      1 on 1 node\n');
    expect(out).not.toContain('Confirm:');
    expect(out).not.toContain('NODE');
  });
});
