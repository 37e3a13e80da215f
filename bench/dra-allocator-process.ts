// The controller's DRA claim allocator (src/controller/dra/, ADR 0043) in a process of its own, as the controller's
// leader runs it (src/controller/leader-work.ts): the ledger fence taken, a fenced Ledger, the informers of
// Reservations and Namespaces it reads, and startClaimAllocator itself (its ResourceClaim informer and work queue).
// bench/scheduler.bench.ts forks it in a session of its own (as it does the extender, bench/extender-process.ts), so
// that the bench's client work runs neither on its event loop nor in its scheduling group.
// It also serves the pod admission webhook (src/admission/pods.ts, as every controller replica does) over HTTPS on
// 127.0.0.1 with a certificate of its own (openssl, its own CA), so that the DRA rows' pods get the scheduling gate
// (ADR 0049) from the product's code, paying its template read: the bench points deploy/admission/webhook.yaml's
// dra-pods webhook at it.
// IPC: sends {type: 'ready', webhookUrl, caBundle} once the allocator's informers have listed; answers {type: 'stats'} with what happened
// since the last one: the reconciles of claim keys (per outcome: count, mean, p50 and p99 ms), the claims allocated and
// released (from its log), the warnings it logged, the event loop's utilization and the process's CPU time; exits on
// {type: 'stop'} or when the bench's IPC channel closes.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import express from 'express';
import { createPodAdmissionRouter, podAdmissionDeps } from '../src/admission/pods.ts';
import { ResourceClaimClient } from '../src/kube/resource-claims.ts';
import { DbClock } from '../src/db/clock.ts';
import { Ledger } from '../src/db/ledger.ts';
import { createPool } from '../src/db/pool.ts';
import { startClaimAllocator } from '../src/controller/dra/start.ts';
import { FenceHolder } from '../src/controller/fence.ts';
import { boundReservation } from '../src/kube/bounds.ts';
import { KubeClient, kubeConfigFrom, PLURALS } from '../src/kube/client.ts';
import { Informer } from '../src/kube/informer.ts';
import { type NamespaceCR, type Reservation } from '../src/kube/types.ts';
import type { Logger } from '../src/log.ts';
import { GROUP, VERSION } from '../src/core/names.ts';

export interface Reconciles {
  n: number;
  meanMs: number;
  p50Ms: number;
  p99Ms: number;
}

export type AllocatorProcessMessage =
  | { type: 'ready'; webhookUrl: string; caBundle: string }
  | {
      type: 'stats';
      reconciles: [string, Reconciles][];
      allocated: number;
      released: number;
      warnings: [string, number][];
      eventLoopUtilization: number;
      cpuSeconds: number;
    }
  | { type: 'error'; message: string };

async function main() {
  const [databaseUrl, kubeconfig] = process.argv.slice(2);
  if (!databaseUrl || !kubeconfig || !process.send) throw new Error('usage: fork(dra-allocator-process.ts, [DATABASE_URL, KUBECONFIG])');
  const send = (m: AllocatorProcessMessage) => process.send!(m);
  const db = createPool(databaseUrl, 8);
  const clock = await DbClock.create(db);
  const fence = new FenceHolder();
  await fence.take(db, `bench-allocator-${process.pid}`);
  const kc = kubeConfigFrom(kubeconfig);
  const kube = new KubeClient(kc, 'better-compute-controller', 'bench');
  // What the allocator says of each claim (its info lines) is counted; warnings by message, the rest dropped.
  let allocated = 0;
  let released = 0;
  const warnings = new Map<string, number>();
  const log: Logger = {
    debug: () => undefined,
    info: (msg) => {
      if (msg === 'dra: claim allocated') allocated++;
      else if (msg.startsWith('dra: claim deleted; released')) released++;
    },
    warn: (msg) => void warnings.set(msg, (warnings.get(msg) ?? 0) + 1),
    error: (msg, fields) => process.stderr.write(`[allocator] ${msg} ${JSON.stringify(fields ?? {})}\n`),
  };
  const informerOf = <T extends NamespaceCR | Reservation>(name: string, path: string, list: () => Promise<{ items: T[] }>, transform?: (o: T) => T) =>
    new Informer<T>({ name, kc, path, list, log, watchTimeoutSeconds: 60, livenessMs: 90_000, ...(transform ? { transform } : {}) });
  const reservations = informerOf<Reservation>('reservations', `/apis/${GROUP}/${VERSION}/${PLURALS.reservations}`, kube.listReservations, boundReservation);
  const namespaces = informerOf<NamespaceCR>('namespaces', '/api/v1/namespaces', kube.listNamespaces);
  reservations.start();
  namespaces.start();
  await Promise.all([reservations.synced, namespaces.synced]);
  const durations = new Map<string, number[]>();
  const allocator = startClaimAllocator({
    kc,
    kube,
    db,
    ledger: new Ledger(db, { fence: fence.fence }),
    fence: fence.fence,
    log,
    reservations,
    namespaces,
    nowMs: () => clock.now(),
    tenancyByName: false,
    watchTimeoutSeconds: 60,
    watchLivenessMs: 90_000,
    pollMs: 1000,
    // BENCH_ALLOCATOR_WORKERS: claims reconciled at once (the product's default 4 when unset).
    ...(process.env.BENCH_ALLOCATOR_WORKERS ? { workers: Number(process.env.BENCH_ALLOCATOR_WORKERS) } : {}),
    onProcessed: (_name, seconds, outcome) => {
      const d = durations.get(outcome) ?? [];
      d.push(seconds * 1000);
      durations.set(outcome, d);
    },
  });
  let since = performance.eventLoopUtilization();
  let cpuSince = process.cpuUsage();
  let stopping = false;
  const stop = () => {
    if (stopping) return; // 'stop', then the channel's close as the bench exits
    stopping = true;
    void allocator
      .stop()
      .then(() => Promise.all([reservations.stop(), namespaces.stop()]))
      .then(() => db.end())
      .finally(() => process.exit(0));
  };
  process.on('message', (m: { type: string }) => {
    if (m.type === 'stats') {
      const elu = performance.eventLoopUtilization(since);
      since = performance.eventLoopUtilization();
      const cpu = process.cpuUsage(cpuSince);
      cpuSince = process.cpuUsage();
      const reconciles = [...durations].map(([outcome, d]): [string, Reconciles] => {
        const sorted = [...d].sort((a, b) => a - b);
        const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? NaN;
        return [outcome, { n: d.length, meanMs: d.reduce((a, b) => a + b, 0) / d.length, p50Ms: at(0.5), p99Ms: at(0.99) }];
      });
      send({
        type: 'stats',
        reconciles,
        allocated,
        released,
        warnings: [...warnings],
        eventLoopUtilization: elu.utilization,
        cpuSeconds: (cpu.user + cpu.system) / 1e6,
      });
      durations.clear();
      allocated = 0;
      released = 0;
      warnings.clear();
    } else if (m.type === 'stop') stop();
  });
  process.on('disconnect', stop);
  // One client for the webhook's reads, as the controller has (src/controller/webhooks.ts).
  const templates = new ResourceClaimClient(kc);
  const webhook = await serveWebhook(podAdmissionDeps({ reservations, namespaces, db, log, claimDeviceClasses: (ns, ref) => templates.deviceClassesOf(ns, ref) }));
  send({ type: 'ready', webhookUrl: webhook.url, caBundle: webhook.caBundle });
}

/** The pod admission webhook on 127.0.0.1 over HTTPS, with a self-signed certificate for that address (its own CA). */
async function serveWebhook(deps: Parameters<typeof createPodAdmissionRouter>[0]): Promise<{ url: string; caBundle: string }> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bc-bench-webhook-'));
  execFileSync('openssl', [
    'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '1',
    '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1',
    '-keyout', path.join(dir, 'tls.key'), '-out', path.join(dir, 'tls.crt'),
  ], { stdio: 'ignore' });
  const cert = fs.readFileSync(path.join(dir, 'tls.crt'));
  const app = express();
  app.use('/admission', createPodAdmissionRouter(deps));
  const server = https.createServer({ key: fs.readFileSync(path.join(dir, 'tls.key')), cert }, app);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  server.unref();
  fs.rmSync(dir, { recursive: true, force: true });
  return { url: `https://127.0.0.1:${(server.address() as AddressInfo).port}/admission/pods`, caBundle: cert.toString('base64') };
}

main().catch((e: unknown) => {
  process.send?.({ type: 'error', message: e instanceof Error ? (e.stack ?? e.message) : String(e) });
  process.exit(1);
});
