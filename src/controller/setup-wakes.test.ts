// The wiring of the pending limit and the batched wakes in setupControllers, driven through the Reservation informer's
// events (no API server, no database): a wake queues at most the batch size, earliest created first, at most once per
// interval per Pool (a request inside it waits for its end); a pending Reservation that leaves wakes the earliest
// TooManyPending one of its tenant and Pool, and only that one.
import { KubeConfig } from '@kubernetes/client-node';
import { afterEach, describe, expect, it } from 'vitest';
import type { DbClock } from '../db/clock.ts';
import type { Ledger } from '../db/ledger.ts';
import type { Db } from '../db/pool.ts';
import { KubeClient } from '../kube/client.ts';
import type { Reservation } from '../kube/types.ts';
import { silentLogger } from '../log.ts';
import { noopControllerMetrics } from './metrics.ts';
import { setupControllers, type Controllers } from './setup.ts';

let controllers: Controllers | undefined;
afterEach(async () => {
  await controllers?.stop();
  controllers = undefined;
});

function setup(wakeIntervalMs: number, wakeBatchSize: number) {
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: 'c', server: 'http://127.0.0.1:9', skipTLSVerify: true }],
    users: [{ name: 'u', token: 't' }],
    contexts: [{ name: 'x', cluster: 'c', user: 'u' }],
    currentContext: 'x',
  });
  controllers = setupControllers({
    kc,
    kube: new KubeClient(kc),
    db: {} as Db,
    ledger: {} as Ledger,
    clock: {} as DbClock,
    log: silentLogger,
    fence: () => ({ name: 'f', epoch: 1 }),
    metrics: noopControllerMetrics,
    tuning: { capacityRefreshMs: 60_000, pendingMaxBackoffMs: 60_000, reservationWorkers: 1, recurrenceHorizonMs: 86_400_000, wakeIntervalMs, wakeBatchSize, tenancyByName: false },
    watchTimeoutSeconds: 60,
    watchLivenessMs: 90_000,
  });
  const done: string[] = [];
  controllers.ctx.queues.reservations.start(async (key) => void done.push(key));
  // The informer's own event path (what a LIST or a watch event does), without an API server.
  const inf = controllers.ctx.informers.reservations as unknown as { upsert(r: Reservation): void; remove(r: Reservation): void };
  let rv = 1;
  const put = (name: string, second: number, status?: Reservation['status'], namespace = 'team-a'): Reservation => {
    const r: Reservation = {
      metadata: { namespace, name, uid: name, generation: 1, resourceVersion: String(++rv), creationTimestamp: `2026-01-01T00:00:${String(second).padStart(2, '0')}Z` },
      spec: { pool: 'p', devices: [{ class: 'gpu', count: 1 }], duration: '1h' },
      ...(status ? { status } : {}),
    };
    inf.upsert(r);
    return r;
  };
  const settle = () => new Promise((r) => setTimeout(r, 30));
  return { ctx: controllers.ctx, done, put, remove: (r: Reservation) => inf.remove(r), settle };
}

const waiting = { phase: 'Pending' as const, conditions: [{ type: 'Reserved', status: 'False' as const, reason: 'TooManyPending', message: '' }] };

describe('batched wakes', () => {
  it('a wake queues at most the batch, earliest created first, once per interval per Pool', async () => {
    const { ctx, done, put, settle } = setup(300, 2);
    for (const [name, s] of [['c', 3], ['a', 1], ['e', 5], ['b', 2], ['d', 4]] as const) put(name, s, { phase: 'Pending' });
    put('booked', 0, { phase: 'Reserved' });
    await settle();
    done.length = 0; // the adds of the events themselves
    ctx.wakePending('p');
    await settle();
    expect(done).toEqual(['team-a/a', 'team-a/b']);
    ctx.wakePending('p');
    ctx.wakePending('p');
    await settle();
    expect(done).toHaveLength(2); // inside the interval: waits
    await new Promise((r) => setTimeout(r, 400));
    expect(done).toEqual(['team-a/a', 'team-a/b', 'team-a/a', 'team-a/b']); // one wake for both requests
  });
});

describe('the pending limit: a leave wakes the next one waiting', () => {
  it('the earliest TooManyPending one of the same tenant and Pool, and only it', async () => {
    const { done, put, remove, settle } = setup(1000, 256);
    put('first', 1, { phase: 'Pending' });
    put('third', 3, waiting);
    put('fourth', 4, waiting);
    put('other-tenant', 2, waiting, 'team-b');
    await settle();
    done.length = 0;
    // first is booked: its status leaves Pending.
    put('first', 1, { phase: 'Reserved' });
    await settle();
    expect(done).toEqual(['team-a/third']);
    // a deleted pending one frees a place too (and its delete wakes the Pool as well).
    done.length = 0;
    remove(put('second', 2, { phase: 'Pending' }));
    await settle();
    expect(done).toContain('team-a/third');
  });
});
