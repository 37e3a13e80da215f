// The leader's work, started when this replica takes the Lease and stopped when it loses it (run.ts wires it): the
// capacity jobs (rollup fold and rebuild), the periodic passes (lease expiry, spot preemption, resync, booking repair),
// the usage windows, the Kueue AdmissionCheck once Kueue is installed, the DRA claim allocator once ResourceClaims
// are served, the pod releaser and the drift reconcile.
import type { KubeConfig } from '@kubernetes/client-node';
import type { Config } from '../config.ts';
import type { DbClock } from '../db/clock.ts';
import type { Ledger } from '../db/ledger.ts';
import type { Db } from '../db/pool.ts';
import { repairPass } from '../db/repair.ts';
import { ClientNodeExtenderKube } from '../extender/kube.ts';
import { startCapacityJobs, type Jobs } from '../jobs/capacity.ts';
import type { KubeClient } from '../kube/client.ts';
import { errorFields, type Logger } from '../log.ts';
import type { FenceHolder } from './fence.ts';
import type { driftMetrics, usageMetrics } from './metrics.ts';
import { preemptionPass } from './preemption.ts';
import { startDriftReconcile } from './drift.ts';
import { startPodReleaser } from './releaser.ts';
import type { Controllers } from './setup.ts';
import { startUsageWindows } from './usage.ts';
import { startKueueChecks } from './kueue/start.ts';
import { startClaimAllocator } from './dra/start.ts';
import { poolIdOf } from './context.ts';

export interface LeaderWorkDeps {
  config: Config;
  db: Db;
  /** Fenced: the leader's writes. */
  ledger: Ledger;
  clock: DbClock;
  kc: KubeConfig;
  kube: KubeClient;
  log: Logger;
  fence: FenceHolder;
  controllers: Controllers;
  drift: ReturnType<typeof driftMetrics>;
  usage: ReturnType<typeof usageMetrics>;
}

/** The leader's jobs and services: start() when leading begins, stop() (awaits everything) when it ends. */
export class LeaderWork {
  private jobs: Jobs | undefined;
  private timers: NodeJS.Timeout[] = [];
  private readonly services: { stop(): Promise<void> }[] = [];
  private starts: Promise<void> = Promise.resolve();

  constructor(private readonly d: LeaderWorkDeps) {}

  start(): void {
    const { config, db, log, clock } = this.d;
    this.jobs = startCapacityJobs({ db, rollupEveryMs: config.rollupEveryMs, foldEveryMs: config.foldEveryMs, log, afterFold: () => clock.sync() });
    this.startPasses();
    // Hourly usage windows: at once (backfilling the hours no leader computed), then every usageEvery.
    this.services.push(startUsageWindows({ db, fence: this.d.fence.fence, log, metrics: this.d.usage, everyMs: config.usageEveryMs }));
    // The Kueue AdmissionCheck bettercompute.io/reservation, once Kueue is installed (docs/kueue.md, ADR 0041).
    const { informers } = this.d.controllers.ctx;
    this.services.push(
      startKueueChecks({
        kc: this.d.kc,
        kube: this.d.kube,
        db,
        fence: this.d.fence.fence,
        log,
        reservations: informers.reservations,
        namespaces: informers.namespaces,
        pools: informers.pools,
        poolIdOf: (name) => poolIdOf(this.d.controllers.ctx, name),
        earliestWindow: (inputs, now, horizonMs) => this.d.ledger.earliestWindow(inputs, now, horizonMs),
        nowMs: () => clock.now(),
        tenancyByName: config.tenancyByName,
        watchTimeoutSeconds: Math.max(1, Math.round(config.watchTimeoutMs / 1000)),
        watchLivenessMs: config.watchLivenessMs,
      }),
    );
    // The DRA claim allocator, once resource.k8s.io/v1 is served (docs/dra.md, ADR 0043).
    this.services.push(
      startClaimAllocator({
        kc: this.d.kc,
        kube: this.d.kube,
        db,
        ledger: this.d.ledger,
        fence: this.d.fence.fence,
        log,
        reservations: informers.reservations,
        namespaces: informers.namespaces,
        nowMs: () => clock.now(),
        tenancyByName: config.tenancyByName,
        watchTimeoutSeconds: Math.max(1, Math.round(config.watchTimeoutMs / 1000)),
        watchLivenessMs: config.watchLivenessMs,
      }),
    );
    const started = this.startReleaserAndDrift();
    started.catch((e: unknown) => log.error('leader services failed to start', errorFields(e)));
    this.starts = started.catch(() => undefined);
  }

  async stop(): Promise<void> {
    for (const t of this.timers) clearInterval(t);
    this.timers = [];
    await this.jobs?.stop();
    this.jobs = undefined;
    await this.starts;
    for (const s of this.services.splice(0)) await s.stop();
  }

  /** `fn` every `ms`, never two at once; a failure is logged and the next tick tries again. */
  private every(ms: number, what: string, fn: () => Promise<void>): void {
    let running = false;
    const t = setInterval(() => {
      if (running) return;
      running = true;
      fn()
        .catch((e: unknown) => this.d.log.warn('leader job failed', { job: what, ...errorFields(e) }))
        .finally(() => (running = false));
    }, ms);
    t.unref?.();
    this.timers.push(t);
  }

  private startPasses(): void {
    const { config, ledger, log, controllers } = this.d;
    this.every(config.expireEveryMs, 'expire-leases', async () => {
      const expired = await ledger.expireLeases();
      if (expired.length) {
        log.info('holds expired', { reservations: expired });
        controllers.wakeReservations(expired);
      }
      await controllers.wakeHeldNoMore();
    });
    // Spot preemption: notices delivered to the victims' pods, the victims ended at the deadline (ADR 0017); their pods
    // were stopped ahead of it by the releaser's stopper.
    const preemptionKube = new ClientNodeExtenderKube(this.d.kc);
    this.every(config.expireEveryMs, 'spot-preemption', async () => {
      const pass = await preemptionPass({ ledger, kube: preemptionKube, log, wake: (ids) => controllers.wakeReservations(ids) });
      // At the deadline the victims' bookings ended and the regular one's began by themselves: only a rebuild counts
      // that, so the Pools' capacity shows it now rather than at the next periodic rebuild.
      if (pass.ended.length) await this.jobs?.rebuildNow();
    });
    this.every(config.resyncEveryMs, 'resync', async () => controllers.resync());
    // BookingRepair: bookings on atoms out of service re-placed, Degraded when short, retried each pass (ADR 0016).
    this.every(config.repairEveryMs, 'repair', () => this.repair());
  }

  private async repair(): Promise<void> {
    const { config, ledger, log, controllers } = this.d;
    const outcomes = await repairPass(this.d.db, { graceSeconds: config.repairGraceMs / 1000, fence: this.d.fence.fence });
    if (outcomes.length === 0) return;
    log.info('booking repair', { outcomes });
    // A lost race changed nothing: the next pass replans it.
    const changed = outcomes.filter((o) => o.verdict !== 'contended').map((o) => o.reservationId);
    if (changed.length === 0) return;
    ledger.invalidate();
    controllers.wakeReservations(changed);
  }

  /**
   * Pods that end give their atoms back; pods of ended reservations are evicted. Then deletions no leader saw (the
   * informers have synced: startLeading waited for them), now and every driftEvery, the releaser's orphan sweep among them.
   */
  private async startReleaserAndDrift(): Promise<void> {
    const { config, db, ledger, kc, kube, log, controllers } = this.d;
    const { ctx } = controllers;
    const releaser = await startPodReleaser({
      db,
      ledger,
      kube: new ClientNodeExtenderKube(kc),
      kubeConfig: kc,
      log,
      orphanGraceMs: config.orphanGraceMs,
      // Atoms given back (a deleted Reservation's last pod gone): the Pool's pending Reservations try again.
      onFreed: (poolIds) => poolIds.forEach((id) => ctx.wakePending(ctx.poolNameOf(id))),
    });
    this.services.push(releaser);
    this.services.push(
      startDriftReconcile({
        db,
        ledger,
        fence: this.d.fence.fence,
        log,
        metrics: this.d.drift,
        everyMs: config.driftEveryMs,
        cluster: () => controllers.clusterView(),
        setReservationFinalizers: (ns, name, finalizers, rv) => kube.setReservationFinalizers(ns, name, finalizers, rv),
        onFixed: (fix) => controllers.afterDriftFix(fix),
        sweepPods: async () => (await releaser.sweepOrphans()).released.length,
      }),
    );
  }
}
