// Leader election against an in-memory Lease whose calls can be made to hang: the renew deadline is enforced while a
// call hangs (the leader steps down at once, the call is aborted), a late success of the abandoned call does not make
// it leader again, and a blocked replica (its database unreachable) gives the Lease up. On a FakeClock: the elector's
// timers (retry period, renew deadline) fire as the test moves it, so the deadlines are checked to the millisecond.
import type { V1Lease } from '@kubernetes/client-node';
import { afterEach, describe, expect, it } from 'vitest';
import { FakeClock } from '../clock.ts';
import { silentLogger } from '../log.ts';
import type { LeaseClient } from '../kube/client.ts';
import { LeaderElector, type LeaderElectorOptions } from './leader.ts';

const NS = 'ns';
const NAME = 'lease';
const RENEW_DEADLINE = 500;
const RETRY_PERIOD = 50;
/** The fake clock's step while a test waits for the elector, and the most fake time a wait may take. */
const STEP = 5;
const WAIT = 10_000;

/** The Lease in memory; `hang` makes every call pending until `release` (never, unless the test does). */
class FakeLeases implements LeaseClient {
  lease: V1Lease | undefined;
  hang = false;
  fail = false;
  readonly signals: AbortSignal[] = [];
  readonly pending: { resolve: () => void }[] = [];
  calls = 0;
  private rv = 0;

  private async call<T>(signal: AbortSignal | undefined, fn: () => T): Promise<T> {
    this.calls++;
    if (signal) this.signals.push(signal);
    if (this.fail) throw new Error('API server unavailable');
    // A hung call ignores its signal, as a stuck connection would until torn down; when let go, it does its work.
    if (this.hang) await new Promise<void>((resolve) => this.pending.push({ resolve }));
    return fn();
  }

  readLease(_ns: string, _name: string, signal?: AbortSignal) {
    return this.call(signal, () => structuredClone(this.lease));
  }

  createLease(_ns: string, lease: V1Lease, signal?: AbortSignal) {
    return this.call(signal, () => this.store(lease));
  }

  replaceLease(_ns: string, _name: string, lease: V1Lease, signal?: AbortSignal) {
    return this.call(signal, () => {
      if (lease.metadata?.resourceVersion !== this.lease?.metadata?.resourceVersion) throw Object.assign(new Error('conflict'), { code: 409 });
      return this.store(lease);
    });
  }

  private store(lease: V1Lease): V1Lease {
    this.lease = { ...structuredClone(lease), metadata: { ...lease.metadata, resourceVersion: String(++this.rv) } };
    return structuredClone(this.lease);
  }
}

const electors: LeaderElector[] = [];
const fakes: FakeLeases[] = [];
afterEach(async () => {
  // Stopping releases the Lease: let the calls through.
  for (const f of fakes.splice(0)) {
    f.hang = false;
    for (const p of f.pending.splice(0)) p.resolve();
  }
  for (const e of electors.splice(0)) await e.stop();
});

function elector(client: FakeLeases, over: Partial<LeaderElectorOptions> = {}) {
  fakes.push(client);
  const events: string[] = [];
  const clock = new FakeClock();
  const e = new LeaderElector({
    client,
    namespace: NS,
    name: NAME,
    identity: 'replica-a',
    leaseDurationMs: 1_000,
    renewDeadlineMs: RENEW_DEADLINE,
    retryPeriodMs: RETRY_PERIOD,
    log: silentLogger,
    clock,
    async onStartedLeading() {
      events.push('started');
    },
    async onStoppedLeading() {
      events.push('stopped');
    },
    ...over,
  });
  electors.push(e);
  /** Moves the clock until `done` holds. */
  const until = (done: () => boolean) => clock.advanceUntil(done, STEP, WAIT);
  /** Moves the clock until the n-th `what` event. */
  const nth = (what: string, n = 1) => until(() => events.filter((x) => x === what).length >= n);
  return { e, events, clock, until, nth };
}

/** Moves the clock until `n` more Lease calls were made (the elector went on campaigning). */
async function calls(fake: FakeLeases, until: (done: () => boolean) => Promise<void>, n: number): Promise<void> {
  const target = fake.calls + n;
  await until(() => fake.calls >= target);
}

describe('the renew deadline while a Lease call hangs', () => {
  it('the leader steps down at the renew deadline and the hung call is aborted', async () => {
    const fake = new FakeLeases();
    const { e, clock, nth } = elector(fake);
    e.start();
    await nth('started');
    expect(e.isLeader).toBe(true);

    fake.hang = true;
    const hungAt = clock.now();
    await nth('stopped');
    // Counted from the start of the last renew that succeeded: at most a retry period before the calls hung.
    expect(clock.now() - hungAt).toBeGreaterThanOrEqual(RENEW_DEADLINE - RETRY_PERIOD - STEP);
    expect(clock.now() - hungAt).toBeLessThanOrEqual(RENEW_DEADLINE + STEP);
    expect(e.isLeader).toBe(false);
    expect(fake.pending.length).toBeGreaterThan(0);
    expect(fake.signals.at(-1)?.aborted).toBe(true);
  });

  it('a late success of the abandoned call does not make it leader again', async () => {
    const fake = new FakeLeases();
    const { e, events, until, nth } = elector(fake);
    e.start();
    await nth('started');
    fake.hang = true;
    await nth('stopped');

    // The hung calls now complete (the renew lands on the server), while every new call fails: no fresh acquire.
    fake.hang = false;
    fake.fail = true;
    for (const p of fake.pending.splice(0)) p.resolve();
    await calls(fake, until, 3);
    expect(e.isLeader).toBe(false);
    expect(events).toEqual(['started', 'stopped']);

    // A fresh acquire (the record is still its own) is a new term.
    const transitions = fake.lease?.spec?.leaseTransitions ?? 0;
    fake.fail = false;
    await nth('started', 2);
    expect(e.isLeader).toBe(true);
    expect(events).toEqual(['started', 'stopped', 'started']);
    expect(fake.lease?.spec?.leaseTransitions).toBe(transitions + 1);
  });

  it('a candidate whose call hangs is not stuck: the call is abandoned at the renew deadline and it campaigns again', async () => {
    const fake = new FakeLeases();
    fake.hang = true;
    const { e, clock, until } = elector(fake);
    const began = clock.now();
    e.start();
    await calls(fake, until, 2);
    expect(fake.signals[0]?.aborted).toBe(true);
    // The first call is given one renew deadline, then the next waits a retry period.
    expect(clock.now() - began).toBeGreaterThanOrEqual(RENEW_DEADLINE + RETRY_PERIOD);
    expect(e.isLeader).toBe(false);
  });
});

describe('a blocked replica', () => {
  it('steps down and gives the Lease up, and does not take it while blocked', async () => {
    const fake = new FakeLeases();
    const state: { blocked?: string } = {};
    const { e, clock, until, nth } = elector(fake, { blocker: () => state.blocked });
    e.start();
    await nth('started');
    const before = fake.calls;
    state.blocked = 'the database does not answer';
    await nth('stopped');
    expect(e.isLeader).toBe(false);
    // It gives the Lease up (a read and a replace) and then makes no call at all while blocked: six retry periods.
    await until(() => fake.lease?.spec?.holderIdentity === '');
    const released = fake.calls;
    expect(released).toBeLessThanOrEqual(before + 4);
    await clock.advance(6 * RETRY_PERIOD);
    expect(fake.calls).toBe(released);
    expect(e.isLeader).toBe(false);
  });
});

describe('leader work that fails to start', () => {
  it('gives the Lease up before campaigning again, then leads with a fresh start', async () => {
    const fake = new FakeLeases();
    const events: string[] = [];
    const { e, until } = elector(fake, {
      async onStartedLeading() {
        events.push('started');
        if (events.length === 1) throw new Error('the fence could not be taken');
      },
      async onStoppedLeading() {
        events.push('stopped');
      },
    });
    e.start();
    await until(() => events.length >= 3 && e.isLeader);
    expect(events).toEqual(['started', 'stopped', 'started']);
    expect(e.isLeader).toBe(true);
    // Given up in between: the second term began from an empty holder, as a new transition.
    expect(fake.lease?.spec?.leaseTransitions).toBe(1);
  });
});
