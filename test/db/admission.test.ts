// The pod admission webhook on a real ledger: the Reservation's booking is found by its uid (the reconciler's
// idempotency key) under its tenant, never by status; released, expired and over windows are refused.
import type { AddressInfo } from 'node:net';
import http from 'node:http';
import express from 'express';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ledgerBookings } from '../../src/admission/bookings.ts';
import { createPodAdmissionRouter, podAdmissionDeps } from '../../src/admission/pods.ts';
import type { NamespaceCR, Reservation } from '../../src/kube/types.ts';
import { advanceClock } from '../../src/db/clock.ts';
import { Ledger } from '../../src/db/ledger.ts';
import { silentLogger } from '../../src/log.ts';
import { makeNode, makePool, reservation } from '../support/builders.ts';
import { useTestDatabase } from '../support/db.ts';
import { reservationResourceName } from '../../src/core/names.ts';

const ctx = useTestDatabase();
const HOUR = 3_600_000;

const reservations: Reservation[] = [];
const namespaces: Record<string, NamespaceCR> = {
  'ml-train': { metadata: { name: 'ml-train', labels: { 'bettercompute.io/tenant': 'acme' } } },
  other: { metadata: { name: 'other', labels: { 'bettercompute.io/tenant': 'acme' } } },
};
const rsv = (namespace: string, name: string, uid: string, status?: Reservation['status']): Reservation => ({
  metadata: { namespace, name, uid },
  spec: { pool: 'p', devices: [{ class: 'gpu', count: 2 }], duration: '1h' },
  ...(status ? { status } : {}),
});

let server: http.Server;
let url: string;
let ledger: Ledger;
let poolId: string;

async function admit(namespace: string, labels: Record<string, string>, limits: Record<string, string>) {
  const r = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      apiVersion: 'admission.k8s.io/v1',
      kind: 'AdmissionReview',
      request: {
        uid: 'r1',
        kind: { group: '', version: 'v1', kind: 'Pod' },
        operation: 'CREATE',
        namespace,
        object: { metadata: { generateName: 'job-', labels }, spec: { containers: [{ name: 'main', resources: { limits } }], schedulerName: 'default-scheduler' } },
      },
    }),
  });
  const body = (await r.json()) as { response: { allowed: boolean; patch?: string; status?: { message: string } } };
  return {
    allowed: body.response.allowed,
    message: body.response.status?.message ?? '',
    patch: body.response.patch ? (JSON.parse(Buffer.from(body.response.patch, 'base64').toString('utf8')) as { path: string; value: unknown }[]) : [],
  };
}

beforeAll(async () => {
  poolId = await makePool('adm').offer('evil').create(ctx.db);
  for (let i = 0; i < 2; i++) await makeNode(`adm-n${i}`).scalars({ vcpu: 64, memoryGiB: 512 }).create(ctx.db, poolId);
  ledger = new Ledger(ctx.db);
  const app = express();
  app.use(
    '/admission',
    createPodAdmissionRouter(
      podAdmissionDeps({
        reservations: { get: (k) => reservations.find((r) => `${r.metadata.namespace}/${r.metadata.name}` === k), list: () => reservations },
        namespaces: { get: (n) => namespaces[n] },
        db: ctx.db,
        log: silentLogger,
        tenancyByName: true, // these namespaces are their tenants by name
      }),
    ),
  );
  server = http.createServer(app);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/admission/pods`;
});
afterAll(async () => new Promise<void>((r) => server.close(() => r())));

describe('pod admission on the ledger', () => {
  it('rewrites to the booking made with the Reservation’s uid; a lying status.reservationId changes nothing', async () => {
    const booked = await ledger.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 2 }], idempotencyKey: 'uid-train' }), ctx.clock.now());
    const decoy = await ledger.reserve(reservation(poolId, { idempotencyKey: 'uid-decoy' }), ctx.clock.now());
    if (!booked.ok || !decoy.ok) throw new Error('expected bookings');
    reservations.push(rsv('ml-train', 'train', 'uid-train', { phase: 'Reserved', reservationId: decoy.reservation.id, resourceName: reservationResourceName(decoy.reservation.id) }));
    const a = await admit('ml-train', { 'bettercompute.io/reservation': 'train' }, { 'bettercompute.io/gpu': '2' });
    expect(a.allowed, a.message).toBe(true);
    expect(a.patch).toEqual([
      { op: 'replace', path: '/spec/containers/0/resources/limits', value: { [reservationResourceName(booked.reservation.id)]: '2' } },
      { op: 'add', path: '/spec/schedulerName', value: 'better-compute-scheduler' },
    ]);
    // The decoy is a booking of no Reservation: naming it directly is refused.
    const d = await admit('ml-train', {}, { [reservationResourceName(decoy.reservation.id)]: '1' });
    expect(d.allowed).toBe(false);
    expect(d.message).toContain('which is not a Reservation of namespace ml-train');
    // Named directly by its own resource: admitted in its namespace, refused in another of the same tenant.
    expect((await admit('ml-train', {}, { [reservationResourceName(booked.reservation.id)]: '1' })).allowed).toBe(true);
    const elsewhere = await admit('other', {}, { [reservationResourceName(booked.reservation.id)]: '1' });
    expect([elsewhere.allowed, elsewhere.message]).toEqual([false, expect.stringContaining('not a Reservation of namespace other')]);
  });

  it('status.tenant is not an input: a booking under the tenant a forged status names is not this Reservation’s', async () => {
    // Another tenant booked through the capacity API with this Reservation's uid as its key, and status was written
    // to point at it.
    const forged = await ledger.reserve(reservation(poolId, { tenantId: 'evil', idempotencyKey: 'uid-forged' }), ctx.clock.now());
    if (!forged.ok) throw new Error('expected a booking');
    reservations.push(rsv('ml-train', 'forged', 'uid-forged', { tenant: 'evil' }));
    const a = await admit('ml-train', { 'bettercompute.io/reservation': 'forged' }, { 'bettercompute.io/gpu': '1' });
    expect([a.allowed, a.message]).toEqual([false, expect.stringContaining('is not booked yet')]);
  });

  it('not booked yet, released, and window over are refused', async () => {
    reservations.push(rsv('ml-train', 'later', 'uid-later'));
    expect((await admit('ml-train', { 'bettercompute.io/reservation': 'later' }, { 'bettercompute.io/gpu': '1' })).message).toContain('is not booked yet');

    const released = await ledger.reserve(reservation(poolId, { idempotencyKey: 'uid-released' }), ctx.clock.now());
    if (!released.ok) throw new Error('expected a booking');
    await ledger.release(released.reservation.id);
    reservations.push(rsv('ml-train', 'released', 'uid-released'));
    expect((await admit('ml-train', { 'bettercompute.io/reservation': 'released' }, { 'bettercompute.io/gpu': '1' })).message).toContain(
      'has no Reservation released that it may use now',
    );

    const short = await ledger.reserve(reservation(poolId, { idempotencyKey: 'uid-short', duration: 60 }), ctx.clock.now());
    if (!short.ok) throw new Error('expected a booking');
    reservations.push(rsv('ml-train', 'short', 'uid-short'));
    expect((await admit('ml-train', { 'bettercompute.io/reservation': 'short' }, { 'bettercompute.io/gpu': '1' })).allowed).toBe(true);
    await advanceClock(ctx.db, 2 * HOUR);
    const over = await admit('ml-train', { 'bettercompute.io/reservation': 'short' }, { 'bettercompute.io/gpu': '1' });
    expect([over.allowed, over.message]).toEqual([false, expect.stringContaining('that it may use now')]);
  });

  it('a recurring Reservation (windows keyed uid:start): the label takes the window under way, else the next; a window’s own resource is its', async () => {
    await ctx.clock.sync();
    const now = ctx.clock.now();
    const win = (start: number) => ledger.reserve(reservation(poolId, { idempotencyKey: `uid-weekly:${new Date(start).toISOString()}`, start, duration: 3600 }), now);
    const today = await win(now);
    const tomorrow = await win(now + 24 * HOUR);
    if (!today.ok || !tomorrow.ok) throw new Error('expected bookings');
    reservations.push({ metadata: { namespace: 'ml-train', name: 'weekly', uid: 'uid-weekly' }, spec: { pool: 'p', devices: [{ class: 'gpu', count: 1 }], recurrence: { days: ['Mon'], startTime: '09:00', endTime: '10:00', timeZone: 'UTC' } } });
    const label = { 'bettercompute.io/reservation': 'weekly' };
    const limits = (a: Awaited<ReturnType<typeof admit>>) => (a.patch[0]?.value ?? {}) as Record<string, string>;
    expect(limits(await admit('ml-train', label, { 'bettercompute.io/gpu': '1' }))).toEqual({ [reservationResourceName(today.reservation.id)]: '1' });
    expect((await admit('ml-train', {}, { [reservationResourceName(tomorrow.reservation.id)]: '1' })).allowed).toBe(true);
    expect((await admit('other', {}, { [reservationResourceName(tomorrow.reservation.id)]: '1' })).message).toContain('not a Reservation of namespace other');

    // Today's window is over: the label takes tomorrow's. Tomorrow's released too: the label is refused, naming it.
    await advanceClock(ctx.db, 2 * HOUR);
    expect(limits(await admit('ml-train', label, { 'bettercompute.io/gpu': '1' }))).toEqual({ [reservationResourceName(tomorrow.reservation.id)]: '1' });
    await ledger.release(tomorrow.reservation.id);
    expect((await admit('ml-train', label, { 'bettercompute.io/gpu': '1' })).message).toContain('that it may use now');
  });

  it('ledgerBookings reads id, tenant, key and state', async () => {
    const b = ledgerBookings(ctx.db);
    expect(await b.byId('rsv_01k2zzzzzzzzzzzzzzzzzzzzzz')).toBeUndefined();
    expect(await b.byReservationUid('acme', 'no-such-uid')).toBeUndefined();
    const found = await b.byReservationUid('acme', 'uid-train');
    expect(found).toMatchObject({ tenantId: 'acme', idempotencyKey: 'uid-train', state: 'confirmed' });
    expect(await b.byReservationUid('other-tenant', 'uid-train')).toBeUndefined();
    expect(await b.byId(found!.id)).toEqual(found);
  });
});
