// Leader election against an in-memory Lease whose calls can be made to hang: the renew deadline is enforced while a
// call hangs (the leader steps down at once, the call is aborted), a late success of the abandoned call does not make
// it leader again, and a blocked replica (its database unreachable) gives the Lease up.
import { EventEmitter, once } from 'node:events';
import type { V1Lease } from '@kubernetes/client-node';
import { afterEach, describe, expect, it } from 'vitest';
import { silentLogger } from '../log.ts';
import type { LeaseClient } from '../kube/client.ts';
import { LeaderElector, type LeaderElectorOptions } from './leader.ts';

const NS = 'ns';
const NAME = 'lease';
const RENEW_DEADLINE = 500;
const SLACK = 1_500;

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
  const bus = new EventEmitter();
  const started = once(bus, 'started');
  const stopped = once(bus, 'stopped');
  const e = new LeaderElector({
    client,
    namespace: NS,
    name: NAME,
    identity: 'replica-a',
    leaseDurationMs: 1_000,
    renewDeadlineMs: RENEW_DEADLINE,
    retryPeriodMs: 50,
    log: silentLogger,
    async onStartedLeading() {
      events.push('started');
      bus.emit('started');
    },
    async onStoppedLeading() {
      events.push('stopped');
      bus.emit('stopped');
    },
    ...over,
  });
  electors.push(e);
  return { e, events, bus, started, stopped };
}

/** Resolves once `n` more Lease calls were made (the elector went on campaigning). */
async function calls(fake: FakeLeases, n: number): Promise<void> {
  const target = fake.calls + n;
  while (fake.calls < target) await new Promise((r) => setTimeout(r, 10));
}

describe('the renew deadline while a Lease call hangs', () => {
  it('the leader steps down within the renew deadline and the hung call is aborted', async () => {
    const fake = new FakeLeases();
    const { e, started, stopped } = elector(fake);
    e.start();
    await started;
    expect(e.isLeader).toBe(true);

    fake.hang = true;
    const hungAt = performance.now();
    await stopped;
    expect(performance.now() - hungAt).toBeLessThan(RENEW_DEADLINE + SLACK);
    expect(e.isLeader).toBe(false);
    expect(fake.pending.length).toBeGreaterThan(0);
    expect(fake.signals.at(-1)?.aborted).toBe(true);
  });

  it('a late success of the abandoned call does not make it leader again', async () => {
    const fake = new FakeLeases();
    const { e, events, bus, started, stopped } = elector(fake);
    e.start();
    await started;
    fake.hang = true;
    await stopped;

    // The hung calls now complete (the renew lands on the server), while every new call fails: no fresh acquire.
    fake.hang = false;
    fake.fail = true;
    for (const p of fake.pending.splice(0)) p.resolve();
    await calls(fake, 3);
    expect(e.isLeader).toBe(false);
    expect(events).toEqual(['started', 'stopped']);

    // A fresh acquire (the record is still its own) is a new term.
    const transitions = fake.lease?.spec?.leaseTransitions ?? 0;
    const again = once(bus, 'started');
    fake.fail = false;
    await again;
    expect(e.isLeader).toBe(true);
    expect(events).toEqual(['started', 'stopped', 'started']);
    expect(fake.lease?.spec?.leaseTransitions).toBe(transitions + 1);
  });

  it('a candidate whose call hangs is not stuck: the call is abandoned and it campaigns again', async () => {
    const fake = new FakeLeases();
    fake.hang = true;
    const { e } = elector(fake);
    e.start();
    await calls(fake, 2);
    expect(fake.signals[0]?.aborted).toBe(true);
    expect(e.isLeader).toBe(false);
  });
});

describe('a blocked replica', () => {
  it('steps down and gives the Lease up, and does not take it while blocked', async () => {
    const fake = new FakeLeases();
    const state: { blocked?: string } = {};
    const { e, started, stopped } = elector(fake, { blocker: () => state.blocked });
    e.start();
    await started;
    const before = fake.calls;
    state.blocked = 'the database does not answer';
    await stopped;
    expect(e.isLeader).toBe(false);
    // It gives the Lease up (a read and a replace) and then makes no call at all while blocked: a few retry periods.
    await calls(fake, 2);
    await new Promise((r) => setTimeout(r, 300));
    expect(fake.lease?.spec?.holderIdentity).toBe('');
    expect(fake.calls).toBeLessThanOrEqual(before + 4);
    expect(e.isLeader).toBe(false);
  });
});

describe('leader work that fails to start', () => {
  it('gives the Lease up before campaigning again, then leads with a fresh start', async () => {
    const fake = new FakeLeases();
    const bus = new EventEmitter();
    const events: string[] = [];
    const { e } = elector(fake, {
      async onStartedLeading() {
        events.push('started');
        if (events.length === 1) throw new Error('the fence could not be taken');
        bus.emit('led');
      },
      async onStoppedLeading() {
        events.push('stopped');
      },
    });
    const led = once(bus, 'led');
    e.start();
    await led;
    expect(events).toEqual(['started', 'stopped', 'started']);
    expect(e.isLeader).toBe(true);
    // Given up in between: the second term began from an empty holder, as a new transition.
    expect(fake.lease?.spec?.leaseTransitions).toBe(1);
  });
});
