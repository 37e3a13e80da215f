// Lease-based leader election (coordination.k8s.io/v1), after client-go's leaderelection: the holder renews the Lease
// every retry period; a candidate takes it once it has seen the same record unchanged for a lease duration (measured
// on its own monotonic clock, so clock skew between replicas does not matter); a leader that cannot renew within the
// renew deadline steps down before anyone else may take over — at the deadline, even while a Lease call still hangs
// (that call is aborted and its outcome ignored). A blocked replica (blocker: its database does not answer) neither
// takes nor keeps the Lease. Leadership is advisory: the ledger's fence
// (bc_take_fence on winning) is what makes a deposed leader's writes fail (docs/adr/0004-leader-fencing.md).
import type { V1Lease } from '@kubernetes/client-node';
import { systemClock, type MonotonicClock } from '../clock.ts';
import { errorFields, type Logger } from '../log.ts';
import { statusOf, type LeaseClient } from '../kube/client.ts';

/** A MicroTime as the API server parses it (six fractional digits); the client would send a Date with three. */
function microTime(d: Date | string): Date {
  const iso = typeof d === 'string' ? new Date(d).toISOString() : d.toISOString();
  return iso.replace(/\.(\d{3})Z$/, '.$1000Z') as unknown as Date;
}

export interface LeaderElectorOptions {
  client: LeaseClient;
  namespace: string;
  name: string;
  identity: string;
  leaseDurationMs: number;
  renewDeadlineMs: number;
  retryPeriodMs: number;
  log: Logger;
  /** Called on winning; leadership counts only once it resolves. A throw gives the lease up again. */
  onStartedLeading: () => Promise<void>;
  /** Called at once on losing (or giving up) leadership; must stop all leader work. */
  onStoppedLeading: () => Promise<void>;
  /**
   * Why this replica must not lead now (its database does not answer, say), or undefined. While it says so, the
   * replica neither takes nor renews the Lease, and a leader steps down and gives the Lease up for another replica.
   */
  blocker?: () => string | undefined;
  /** Decisions and timers (the lease duration, the renew deadline, the retry period); the Lease's times from wallNow. */
  clock?: MonotonicClock;
}

export class LeaderElector {
  private stopped = true;
  private cancelTick: (() => void) | undefined;
  private leading = false;
  private observed: { key: string; at: number } | undefined;
  private lastRenew = 0;
  private loop: Promise<void> = Promise.resolve();
  /** The Lease call in flight; aborted (and its outcome ignored) at the renew deadline or on stop. */
  private attempt: AbortController | undefined;
  /** Steps the leader down once renewDeadlineMs have passed since its last successful renew. */
  private cancelDeadline: (() => void) | undefined;
  /** onStartedLeading in progress (settled, never rejects); onStoppedLeading waits for it. */
  private starting: Promise<void> = Promise.resolve();
  /** onStoppedLeading in progress; no new attempt begins before it is done. */
  private down: Promise<void> = Promise.resolve();

  private readonly clock: MonotonicClock;

  constructor(private readonly o: LeaderElectorOptions) {
    this.clock = o.clock ?? systemClock;
  }

  get isLeader(): boolean {
    return this.leading;
  }

  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    this.tick();
  }

  private tick(): void {
    if (this.stopped) return;
    this.loop = this.step().finally(() => {
      if (!this.stopped) {
        this.cancelTick = this.clock.after(this.o.retryPeriodMs, () => this.tick());
      }
    });
  }

  private async step(): Promise<void> {
    await this.down;
    if (this.stopped) return;
    const blocked = this.o.blocker?.();
    if (blocked) {
      if (this.leading) {
        await this.stepDown(blocked);
        await this.release().catch((e: unknown) => this.o.log.warn('releasing the lease failed', errorFields(e)));
      }
      return;
    }
    const attempt = new AbortController();
    this.attempt = attempt;
    // A leader's call is aborted by its deadline timer (expire); a candidate's gets one renew deadline.
    const cancelLimit = this.leading ? undefined : this.clock.after(this.o.renewDeadlineMs, () => attempt.abort(new Error('the lease call took longer than the renew deadline')));
    const abandoned = new Promise<'abandoned'>((resolve) => attempt.signal.addEventListener('abort', () => resolve('abandoned'), { once: true }));
    const began = this.clock.now();
    let ok = false;
    try {
      ok = (await Promise.race([this.tryAcquireOrRenew(attempt.signal), abandoned])) === true;
    } catch (e) {
      this.o.log.warn('lease update failed', { lease: this.o.name, ...errorFields(e) });
    } finally {
      cancelLimit?.();
      if (this.attempt === attempt) this.attempt = undefined;
    }
    // A call given up on counts for nothing, whatever it does later: leading again takes a fresh acquire.
    if (attempt.signal.aborted) return;
    if (ok) {
      // Counted from the call's start: the API server may have applied it at any moment since.
      this.lastRenew = began;
      if (this.leading) this.armDeadline();
      else if (!this.stopped) this.becomeLeader();
    } else if (this.leading && this.clock.now() - this.lastRenew > this.o.renewDeadlineMs) {
      await this.stepDown('renew deadline passed');
    }
  }

  private becomeLeader(): void {
    this.o.log.info('became leader', { lease: this.o.name, identity: this.o.identity });
    this.leading = true;
    this.armDeadline();
    // The Lease is renewed while the leader work starts.
    const started = this.o.onStartedLeading();
    this.starting = started.then(
      () => undefined,
      () => undefined,
    );
    started.catch((e: unknown) => {
      this.o.log.error('starting leader work failed; giving up leadership', errorFields(e));
      // The next attempt waits for the Lease to be given up.
      this.down = this.stepDown('start failed').then(() => this.release().catch(() => undefined));
    });
  }

  private armDeadline(): void {
    this.cancelDeadline?.();
    this.cancelDeadline = this.clock.after(Math.max(0, this.lastRenew + this.o.renewDeadlineMs - this.clock.now()), () => void this.expire());
  }

  /** The renew deadline passed without a renew (the call in flight hangs, or they all failed): step down now. */
  private async expire(): Promise<void> {
    if (!this.leading) return;
    // A timer may fire a fraction of a millisecond early.
    if (this.clock.now() - this.lastRenew < this.o.renewDeadlineMs) return this.armDeadline();
    this.attempt?.abort(new Error('renew deadline passed'));
    await this.stepDown('renew deadline passed');
  }

  private stepDown(why: string): Promise<void> {
    if (!this.leading) return this.down;
    this.leading = false;
    this.cancelDeadline?.();
    this.o.log.warn('lost leadership', { lease: this.o.name, identity: this.o.identity, why });
    const starting = this.starting;
    this.down = (async () => {
      await starting;
      await this.o.onStoppedLeading();
    })().catch((e: unknown) => this.o.log.error('stopping leader work failed', errorFields(e)));
    return this.down;
  }

  private leaseBody(prev: V1Lease | undefined, transitions: number, acquire: boolean): V1Lease {
    // The times are for people reading the Lease; decisions use the local monotonic clock.
    const now = microTime(this.clock.wallNow());
    return {
      apiVersion: 'coordination.k8s.io/v1',
      kind: 'Lease',
      metadata: {
        name: this.o.name,
        namespace: this.o.namespace,
        ...(prev?.metadata?.resourceVersion ? { resourceVersion: prev.metadata.resourceVersion } : {}),
      },
      spec: {
        holderIdentity: this.o.identity,
        leaseDurationSeconds: Math.max(1, Math.ceil(this.o.leaseDurationMs / 1000)),
        acquireTime: acquire || !prev?.spec?.acquireTime ? now : microTime(prev.spec.acquireTime),
        renewTime: now,
        leaseTransitions: transitions,
      },
    };
  }

  private async tryAcquireOrRenew(signal: AbortSignal): Promise<boolean> {
    const c = this.o.client;
    const lease = await c.readLease(this.o.namespace, this.o.name, signal);
    signal.throwIfAborted();
    const now = this.clock.now();
    if (!lease) {
      try {
        await c.createLease(this.o.namespace, this.leaseBody(undefined, 0, true), signal);
        return true;
      } catch (e) {
        if (statusOf(e) === 409) return false;
        throw e;
      }
    }
    const spec = lease.spec ?? {};
    const holder = spec.holderIdentity ?? '';
    const key = `${holder}|${String(spec.renewTime)}|${lease.metadata?.resourceVersion}`;
    if (!this.observed || this.observed.key !== key) this.observed = { key, at: now };
    if (holder === this.o.identity) {
      // Still ours from a term this replica gave up (a renew deadline passed): taking it again is a new term.
      const renew = this.leading;
      return this.replace(lease, (spec.leaseTransitions ?? 0) + (renew ? 0 : 1), !renew, signal);
    }
    if (this.leading) await this.stepDown(`the lease is held by ${holder || 'nobody'}`);
    const duration = (spec.leaseDurationSeconds ?? Math.ceil(this.o.leaseDurationMs / 1000)) * 1000;
    if (holder !== '' && now < this.observed.at + duration) return false;
    return this.replace(lease, (spec.leaseTransitions ?? 0) + 1, true, signal);
  }

  private async replace(prev: V1Lease, transitions: number, acquire: boolean, signal: AbortSignal): Promise<boolean> {
    signal.throwIfAborted();
    try {
      await this.o.client.replaceLease(this.o.namespace, this.o.name, this.leaseBody(prev, transitions, acquire), signal);
      return true;
    } catch (e) {
      if (statusOf(e) === 409) return false;
      throw e;
    }
  }

  /** Gives the Lease up (holder cleared) so that another replica takes over without waiting for it to run out. */
  private async release(): Promise<void> {
    // Within a renew deadline: a shutdown must not wait out a hung API server.
    const signal = AbortSignal.timeout(this.o.renewDeadlineMs);
    const lease = await this.o.client.readLease(this.o.namespace, this.o.name, signal);
    if (!lease || lease.spec?.holderIdentity !== this.o.identity) return;
    await this.o.client.replaceLease(this.o.namespace, this.o.name, {
      ...lease,
      spec: {
        ...lease.spec,
        holderIdentity: '',
        leaseDurationSeconds: 1,
        renewTime: microTime(this.clock.wallNow()),
        ...(lease.spec?.acquireTime ? { acquireTime: microTime(lease.spec.acquireTime) } : {}),
      },
    }, signal);
  }

  /** Stops campaigning; when leading, stops the leader work and releases the Lease. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.cancelTick?.();
    this.attempt?.abort(new Error('shutting down'));
    await this.loop.catch(() => undefined);
    const was = this.leading;
    await this.stepDown('shutting down');
    if (was) await this.release().catch((e: unknown) => this.o.log.warn('releasing the lease failed', errorFields(e)));
  }
}
