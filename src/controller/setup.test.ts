import { describe, expect, it } from 'vitest';
import { reservationUpdateWakes } from './setup.ts';
import { type Reservation } from '../kube/types.ts';
import { CONFIRM_ANNOTATION } from '../core/names.ts';

const rsv = (over: Partial<Reservation['metadata']> = {}, status?: Reservation['status']): Reservation => ({
  metadata: { namespace: 'team-a', name: 'r', uid: 'u', generation: 1, resourceVersion: '1', ...over },
  spec: { pool: 'p', devices: [{ class: 'gpu', count: 1 }], duration: '1h', leaseSeconds: 60 },
  ...(status ? { status } : {}),
});

describe('reservationUpdateWakes', () => {
  it('the confirm annotation appearing wakes the Reservation; the generation does not change with it', () => {
    expect(reservationUpdateWakes(rsv(), rsv({ resourceVersion: '2', annotations: { [CONFIRM_ANNOTATION]: 'true' } }))).toBe(true);
  });

  it('a status-only write, another annotation, or the annotation staying or going, wakes nothing', () => {
    const confirmed = { [CONFIRM_ANNOTATION]: 'true' };
    expect(reservationUpdateWakes(rsv(), rsv({ resourceVersion: '2' }, { phase: 'Reserved', state: 'held' }))).toBe(false);
    expect(reservationUpdateWakes(rsv(), rsv({ resourceVersion: '2', annotations: { [CONFIRM_ANNOTATION]: 'no', other: 'x' } }))).toBe(false);
    expect(reservationUpdateWakes(rsv({ annotations: confirmed }), rsv({ resourceVersion: '2', annotations: confirmed }))).toBe(false);
    expect(reservationUpdateWakes(rsv({ annotations: confirmed }), rsv({ resourceVersion: '2' }))).toBe(false);
  });

  it('a new generation, a deletion or changed finalizers wake it as before', () => {
    expect(reservationUpdateWakes(rsv(), rsv({ generation: 2 }))).toBe(true);
    expect(reservationUpdateWakes(rsv(), rsv({ deletionTimestamp: '2026-01-01T00:00:00Z' }))).toBe(true);
    expect(reservationUpdateWakes(rsv(), rsv({ finalizers: ['bettercompute.io/release'] }))).toBe(true);
  });
});
