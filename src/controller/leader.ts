// Lease-based leader election (coordination.k8s.io/v1), after client-go's leaderelection: the holder renews the Lease
// every retry period; a candidate takes it once it has seen the same record unchanged for a lease duration (measured
// on its own monotonic clock, so clock skew between replicas does not matter); a leader that cannot renew within the
// renew deadline steps down before anyone else may take over. Leadership is advisory: the ledger's fence
// (bc_take_fence on winning) is what makes a deposed leader's writes fail (docs/adr/0004-leader-fencing.md).
import type { V1Lease } from '@kubernetes/client-node';
import { errorFields, type Logger } from '../log.ts';
import { statusOf, type KubeClient } from './kube.ts';

/** A MicroTime as the API server parses it (six fractional digits); the client would send a Date with three. */
function microTime(d: Date | string | undefined = new Date()): Date {
  const iso = typeof d === 'string' ? new Date(d).toISOString() : d.toISOString();
  return iso.replace(/\.(\d{3})Z$/, '.$1000Z') as unknown as Date;
}

export interface LeaderElectorOptions {
  client: KubeClient;
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
}

export class LeaderElector {
  private stopped = true;
  private timer: NodeJS.Timeout | undefined;
  private leading = false;
  private observed: { key: string; at: number } | undefined;
  private lastRenew = 0;
  private loop: Promise<void> = Promise.resolve();

  constructor(private readonly o: LeaderElectorOptions) {}

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
        this.timer = setTimeout(() => this.tick(), this.o.retryPeriodMs);
        this.timer.unref?.();
      }
    });
  }

  private async step(): Promise<void> {
    let ok = false;
    try {
      ok = await this.tryAcquireOrRenew();
    } catch (e) {
      this.o.log.warn('lease update failed', { lease: this.o.name, ...errorFields(e) });
    }
    const now = performance.now();
    if (ok) {
      this.lastRenew = now;
      if (!this.leading && !this.stopped) {
        this.o.log.info('became leader', { lease: this.o.name, identity: this.o.identity });
        this.leading = true;
        try {
          await this.o.onStartedLeading();
        } catch (e) {
          this.o.log.error('starting leader work failed; giving up leadership', errorFields(e));
          await this.stepDown('start failed');
          await this.release().catch(() => undefined);
        }
      }
    } else if (this.leading && now - this.lastRenew > this.o.renewDeadlineMs) {
      await this.stepDown('renew deadline passed');
    }
  }

  private async stepDown(why: string): Promise<void> {
    if (!this.leading) return;
    this.leading = false;
    this.o.log.warn('lost leadership', { lease: this.o.name, identity: this.o.identity, why });
    await this.o.onStoppedLeading();
  }

  private leaseBody(prev: V1Lease | undefined, transitions: number, acquire: boolean): V1Lease {
    // The times are for people reading the Lease; decisions use the local monotonic clock.
    const now = microTime();
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

  private async tryAcquireOrRenew(): Promise<boolean> {
    const c = this.o.client;
    const lease = await c.readLease(this.o.namespace, this.o.name);
    const now = performance.now();
    if (!lease) {
      try {
        await c.createLease(this.o.namespace, this.leaseBody(undefined, 0, true));
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
      return this.replace(lease, spec.leaseTransitions ?? 0, false);
    }
    if (this.leading) await this.stepDown(`the lease is held by ${holder || 'nobody'}`);
    const duration = (spec.leaseDurationSeconds ?? Math.ceil(this.o.leaseDurationMs / 1000)) * 1000;
    if (holder !== '' && now < this.observed.at + duration) return false;
    return this.replace(lease, (spec.leaseTransitions ?? 0) + 1, true);
  }

  private async replace(prev: V1Lease, transitions: number, acquire: boolean): Promise<boolean> {
    try {
      await this.o.client.replaceLease(this.o.namespace, this.o.name, this.leaseBody(prev, transitions, acquire));
      return true;
    } catch (e) {
      if (statusOf(e) === 409) return false;
      throw e;
    }
  }

  /** Gives the Lease up (holder cleared) so that another replica takes over without waiting for it to run out. */
  private async release(): Promise<void> {
    const lease = await this.o.client.readLease(this.o.namespace, this.o.name);
    if (!lease || lease.spec?.holderIdentity !== this.o.identity) return;
    await this.o.client.replaceLease(this.o.namespace, this.o.name, {
      ...lease,
      spec: {
        ...lease.spec,
        holderIdentity: '',
        leaseDurationSeconds: 1,
        renewTime: microTime(),
        ...(lease.spec?.acquireTime ? { acquireTime: microTime(lease.spec.acquireTime) } : {}),
      },
    });
  }

  /** Stops campaigning; when leading, stops the leader work and releases the Lease. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    await this.loop.catch(() => undefined);
    const was = this.leading;
    await this.stepDown('shutting down');
    if (was) await this.release().catch((e: unknown) => this.o.log.warn('releasing the lease failed', errorFields(e)));
  }
}
