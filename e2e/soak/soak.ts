// The soak (issue 11): the product on the test cluster — two `better-compute controller` replicas (child processes of
// the real CLI) on a real PostgreSQL, kube-scheduler with the extender, the agent serving the real kubelet — while
// Reservations, pods and nodes churn and faults are injected: the API server stalls, resets and refuses the
// controllers' connections (a TCP proxy in front of it), PostgreSQL is killed and restarted, the leader is killed,
// the kubelet restarts, and nodes are deleted while no leader runs. At checkpoints (churn and faults paused, the
// system given time to settle) and at the end, it checks what must never happen:
// - two live bookings of one atom overlap, or a quota counter differs from a rebuild (test/support/invariants.ts);
// - a pod that is bound and not ended has lost its booking (released without evidence);
// - a running GPU container's atoms differ from its booking, or it holds an atom outside a live booking of its own
//   (its on-demand booking, or its Reservation's bookings at this instant: docs/booking-end.md);
// - after a drift reconcile, the ledger still holds an orphan: a live booking of a pod that is gone, a live
//   reservation whose Reservation is gone, or a node that is gone still in its pool or schedulable.
// - a hand-over fails a pod: the kubelet refuses one at admission (UnexpectedAdmissionError). Before the churn, a drill
//   puts one on the boundary: back to back on the real node's GPUs, every replica down through the first booking's end
//   while its stubborn pod still runs, the next booking's pod must wait for it, unbound, and then run (handoverDrill).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import YAML from 'yaml';
import { Agent } from '../../src/agent/agent.ts';
import { fileSource, simulatedSpec } from '../../src/agent/discovery.ts';
import { inProcessBackend } from '../../src/agentapi/state.ts';
import { DbClock } from '../../src/db/clock.ts';
import { startEmbedded, type EmbeddedServer } from '../../src/db/embedded.ts';
import { migrate } from '../../src/db/migrate.ts';
import { createPool, type Db } from '../../src/db/pool.ts';
import { kubeConfigFrom } from '../../src/kube/client.ts';
import { createLogger } from '../../src/log.ts';
import { checkInvariants, CLEAN, rng } from '../../test/support/invariants.ts';
import { gpus as simulatedGpus, installCrds, schedulerConfigWithExtender, startReplica, type Replica } from '../cluster/controller-support.ts';
import {
  addSimulatedNodes,
  apply,
  clusterInfo,
  defaultSchedulerConfig,
  deletePodsNow,
  kubectl,
  kubectlJson,
  kubectlResult,
  removeSimulatedNodes,
  restartKubelet,
  restartScheduler,
  SIMULATED_TOLERATION,
  uniqueName,
  waitFor,
  type List,
  type Pod,
} from '../cluster/harness.ts';
import { startPair } from '../../test/support/pg-pair.ts';
import { TcpProxy } from '../../test/support/tcp-proxy.ts';

export interface SoakOptions {
  minutes: number;
  seed?: number;
  /** Time between checkpoints (default 60 s). */
  checkpointEveryMs?: number;
  /** Progress lines. */
  log?: (line: string) => void;
  /**
   * `embedded` (the default): one durable embedded PostgreSQL, killed by the `postgres-kill` fault and restarted by its
   * supervisor. `replicated`: a primary and its synchronous standby (test/support/pg-pair.ts) behind one two-host
   * URL; the `postgres-failover` fault kills the primary, promotes the standby and makes a new standby.
   */
  database?: 'embedded' | 'replicated';
}

export interface Checkpoint {
  atSeconds: number;
  violations: string[];
  livePods: number;
  runningChecked: number;
  liveBookings: number;
}

export interface SoakReport {
  seed: number;
  minutes: number;
  database: 'embedded' | 'replicated';
  ops: Record<string, number>;
  faults: Record<string, number>;
  checkpoints: Checkpoint[];
  violations: string[];
  leaderChanges: number;
}

const SIM_NODES = 3;
const GPUS_PER_NODE = 8;
const POOL_LABEL = 'bettercompute.io/soak-pool';
const OUR_GPU = 'bettercompute.io/gpu';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface SimNode {
  name: string;
  gpus: ReturnType<typeof simulatedGpus>;
}

interface PodView {
  metadata: { name: string; namespace: string; uid: string; deletionTimestamp?: string; annotations?: Record<string, string> };
  spec: { nodeName?: string; containers: { resources?: { limits?: Record<string, string> } }[] };
  status?: { phase?: string; reason?: string; message?: string };
}

export async function runSoak(o: SoakOptions): Promise<SoakReport> {
  const seed = o.seed ?? Date.now() % 1_000_000;
  const random = rng(seed);
  const pick = <T>(xs: readonly T[]): T | undefined => (xs.length ? xs[Math.floor(random() * xs.length)] : undefined);
  const say = o.log ?? ((line: string) => process.stderr.write(`[soak] ${line}\n`));
  const c = clusterInfo();
  const report: SoakReport = { seed, minutes: o.minutes, database: o.database ?? 'embedded', ops: {}, faults: {}, checkpoints: [], violations: [], leaderChanges: 0 };
  const count = (bag: Record<string, number>, k: string) => (bag[k] = (bag[k] ?? 0) + 1);
  const t0 = Date.now();
  const elapsed = () => Math.round((Date.now() - t0) / 1000);

  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'bc-soak-'));
  fs.chmodSync(tmp, 0o755);
  const database = await startDatabase(o.database ?? 'embedded', path.join(tmp, 'pg'));
  const db: Db = createPool(database.url, 8);
  {
    const client = await db.connect();
    await migrate(client);
    client.release();
  }
  const ctrlNs = uniqueName('soak-ctrl');
  const tenant = uniqueName('soak');
  const poolName = uniqueName('soak-pool');
  await installCrds();
  await apply([
    { apiVersion: 'v1', kind: 'Namespace', metadata: { name: ctrlNs } },
    { apiVersion: 'v1', kind: 'Namespace', metadata: { name: tenant, labels: { 'bettercompute.io/tenant': tenant } } },
  ]);

  // The controllers reach the API server through the fault proxy; everything the soak itself does goes direct.
  const kubeconfig = YAML.parse(fs.readFileSync(c.kubeconfig, 'utf8')) as { clusters: { cluster: { server: string } }[] };
  const server = new URL(kubeconfig.clusters[0]!.cluster.server);
  const apiProxy = new TcpProxy(() => [{ host: server.hostname, port: Number(server.port || 443) }]);
  await apiProxy.listen();
  for (const cl of kubeconfig.clusters) cl.cluster.server = `https://${server.hostname}:${apiProxy.port}`;
  const proxiedKubeconfig = path.join(tmp, 'controller.kubeconfig');
  fs.writeFileSync(proxiedKubeconfig, YAML.stringify(kubeconfig), { mode: 0o600 });

  const replicaEnv = {
    KUBECONFIG: proxiedKubeconfig,
    LOG_LEVEL: 'info',
    BETTER_COMPUTE_DRIFT_EVERY: '10s',
    BETTER_COMPUTE_ORPHAN_GRACE: '5s',
  };
  const replicas = new Map<string, Replica>();
  const everyReplica: Replica[] = [];
  const isUp = (r: Replica | undefined) => r !== undefined && r.child.exitCode === null && r.child.signalCode === null;
  const startNamed = async (name: string) => {
    // Never two processes of one name: they would share the Lease identity and both lead.
    const running = replicas.get(name);
    if (isUp(running)) return running!;
    const r = await startReplica({ name, databaseUrl: database.url, namespace: ctrlNs, env: replicaEnv });
    replicas.set(name, r);
    everyReplica.push(r);
    return r;
  };
  await Promise.all([startNamed('soak-a'), startNamed('soak-b')]);
  // kube-scheduler calls whichever replica's extender is alive.
  const extenderProxy = new TcpProxy(() =>
    [...replicas.values()]
      .filter((r) => r.child.exitCode === null && r.child.signalCode === null && r.extenderUrl)
      .map((r) => {
        const u = new URL(r.extenderUrl!);
        return { host: u.hostname, port: Number(u.port) };
      }),
  );
  await extenderProxy.listen();
  await restartScheduler(schedulerConfigWithExtender(`http://127.0.0.1:${extenderProxy.port}/scheduler`));

  // The agent on the real node: it reads the node's state by the function the controller's agent API serves.
  const agentDb = createPool(database.url, 4);
  const clock = await DbClock.create(agentDb);
  const devicesFile = path.join(tmp, 'devices.json');
  fs.writeFileSync(devicesFile, JSON.stringify(simulatedSpec(c.nodeName, GPUS_PER_NODE)));
  const agent = new Agent({
    nodeName: c.nodeName,
    devicePluginDir: c.devicePluginDir,
    podResourcesSocket: c.podResourcesSocket,
    source: fileSource(devicesFile),
    backend: inProcessBackend(agentDb, clock, c.nodeName),
    log: createLogger({ level: 'error' }),
    kubeConfig: kubeConfigFrom(c.kubeconfig),
    reconcileEveryMs: 500,
    discoverEveryMs: 5000,
  });
  await agent.start();

  const simNodes: SimNode[] = [];
  const addSimNodes = async (n: number) => {
    const names = await addSimulatedNodes(n, { [POOL_LABEL]: poolName }, {}, { prefix: 'soak' });
    const added = names.map((name) => ({ name, gpus: simulatedGpus(name, GPUS_PER_NODE) }));
    await apply(added.map((s) => ({ apiVersion: 'bettercompute.io/v1alpha1', kind: 'NodeDevices', metadata: { name: s.name }, spec: { gpus: s.gpus, scalars: { vcpu: 64, memoryGiB: 512 } } })));
    simNodes.push(...added);
  };
  await kubectl(['label', 'node', c.nodeName, `${POOL_LABEL}=${poolName}`, '--overwrite']);
  await addSimNodes(SIM_NODES);
  await apply({
    apiVersion: 'bettercompute.io/v1alpha1',
    kind: 'Pool',
    metadata: { name: poolName },
    spec: { nodeSelector: { [POOL_LABEL]: poolName }, ownerTenant: 'platform', gpuModel: 'H100', sharing: 'exclusive', offerings: [{ tenant, quota: { gpu: 64 } }] },
  });
  const totalGpus = (SIM_NODES + 1) * GPUS_PER_NODE;
  await waitFor(`pool ${poolName} with ${totalGpus} GPUs`, async () => {
    const p = await kubectlJson<{ status?: { capacity?: { resource: string; total: number }[] } }>(['get', 'pool', poolName]);
    return p.status?.capacity?.find((r) => r.resource === 'gpu')?.total === totalGpus;
  }, { timeoutMs: 120_000, intervalMs: 1000 });
  say(`set up in ${elapsed()}s: 2 replicas, ${SIM_NODES} simulated nodes and ${c.nodeName}, ${totalGpus} GPUs; seed ${seed}`);

  // --- churn -------------------------------------------------------------------------------------------------------
  const reservations: string[] = [];
  const pods: { name: string; kind: 'ondemand' | 'reservation' }[] = [];
  // `stubborn`: the pod ignores SIGTERM and names a day of grace, so only the booking's cap stops it at its end.
  const podSpec = (limits: Record<string, string>, seconds: number, tolerate: boolean, stubborn = false) => ({
    restartPolicy: 'Never',
    terminationGracePeriodSeconds: stubborn ? 86_400 : 1,
    ...(tolerate ? { tolerations: [SIMULATED_TOLERATION] } : {}),
    containers: [
      {
        name: 'main',
        image: c.busyboxImage,
        command: ['sh', '-c', `${stubborn ? "trap '' TERM; " : ''}echo "ATOMS=$BETTERCOMPUTE_ATOMS"; sleep ${seconds}`],
        resources: { limits },
      },
    ],
  });
  // Reservation pods labelled so are covered by a PodDisruptionBudget that refuses every eviction.
  const GUARDED = { 'soak.bettercompute.io/guarded': 'true' };
  await apply({ apiVersion: 'policy/v1', kind: 'PodDisruptionBudget', metadata: { name: 'guarded', namespace: tenant }, spec: { maxUnavailable: 0, selector: { matchLabels: GUARDED } } });
  const churnOps: [number, string, () => Promise<void>][] = [
    [3, 'reserve', async () => {
      const name = uniqueName('r');
      await apply({
        apiVersion: 'bettercompute.io/v1alpha1',
        kind: 'Reservation',
        metadata: { name, namespace: tenant },
        // Some end while their pods run (1-2 min), some are spot ones that a later Reservation may preempt.
        spec: {
          pool: poolName,
          devices: [{ class: 'gpu', count: 1 + Math.floor(random() * 2) }],
          duration: random() < 0.3 ? `${60 + Math.floor(random() * 60)}s` : `${5 + Math.floor(random() * 10)}m`,
          ...(random() < 0.2 ? { spot: true } : {}),
        },
      });
      reservations.push(name);
    }],
    [2, 'release', async () => {
      const name = pick(reservations);
      if (!name) return;
      reservations.splice(reservations.indexOf(name), 1);
      await kubectl(['-n', tenant, 'delete', 'reservation', name, '--wait=false', '--ignore-not-found']);
    }],
    [4, 'pod-ondemand', async () => {
      const name = uniqueName('od');
      await apply({ apiVersion: 'v1', kind: 'Pod', metadata: { name, namespace: tenant }, spec: podSpec({ [OUR_GPU]: '1' }, 15 + Math.floor(random() * 45), false) });
      pods.push({ name, kind: 'ondemand' });
    }],
    [3, 'pod-reservation', async () => {
      const name = pick(reservations);
      if (!name) return;
      const r = await kubectlJson<{ status?: { phase?: string; resourceName?: string } }>(['-n', tenant, 'get', 'reservation', name]).catch(() => undefined);
      if (r?.status?.phase !== 'Reserved' || !r.status.resourceName) return;
      const pod = uniqueName('rp');
      const guarded = random() < 0.3;
      await apply({
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { name: pod, namespace: tenant, ...(guarded ? { labels: GUARDED } : {}) },
        spec: podSpec({ [r.status.resourceName]: '1' }, 20 + Math.floor(random() * 60), true, guarded || random() < 0.3),
      });
      pods.push({ name: pod, kind: 'reservation' });
    }],
    [3, 'pod-delete', async () => {
      const p = pick(pods);
      if (!p) return;
      pods.splice(pods.indexOf(p), 1);
      // Pods on simulated nodes have no kubelet to confirm a graceful deletion; on the real node a pod is deleted
      // gracefully, as a user would: forced, its container would outlive its pod and its release.
      const got = await kubectlJson<PodView>(['-n', tenant, 'get', 'pod', p.name]).catch(() => undefined);
      if (got?.spec.nodeName === c.nodeName) await kubectl(['-n', tenant, 'delete', 'pod', p.name, '--wait=false', '--ignore-not-found']);
      else await deletePodsNow(tenant, [p.name]);
    }],
    [1, 'cordon', async () => {
      const n = pick(simNodes);
      if (n) await kubectl([random() < 0.5 ? 'cordon' : 'uncordon', n.name]);
    }],
    [2, 'health-flip', async () => {
      const n = pick(simNodes);
      if (!n) return;
      const g = pick(n.gpus)!;
      g.healthy = !g.healthy;
      await kubectl(['patch', 'nodedevices', n.name, '--type=merge', '-p', JSON.stringify({ spec: { gpus: n.gpus } })]);
    }],
    [1, 'layout-change', async () => {
      const n = pick(simNodes);
      if (!n) return;
      const g = pick(n.gpus)! as (typeof n.gpus)[number] & { mig?: { gi: number; ci: number; profile: string }[] };
      if (g.mig) delete g.mig;
      else g.mig = [{ gi: 1, ci: 0, profile: '3g.40gb' }, { gi: 2, ci: 0, profile: '3g.40gb' }];
      await kubectl(['patch', 'nodedevices', n.name, '--type=merge', '-p', JSON.stringify({ spec: { gpus: n.gpus } })]);
    }],
    [1, 'node-delete', async () => {
      const n = pick(simNodes);
      if (!n) return;
      await deleteSimNode(n);
      await addSimNodes(1);
    }],
  ];
  const deleteSimNode = async (n: SimNode) => {
    simNodes.splice(simNodes.indexOf(n), 1);
    await removeSimulatedNodes([n.name]);
    await kubectl(['delete', 'nodedevices', n.name, '--ignore-not-found', '--wait=false']);
    goneNodes.add(n.name);
  };
  const goneNodes = new Set<string>();
  const weightSum = churnOps.reduce((s, [w]) => s + w, 0);

  // --- faults ------------------------------------------------------------------------------------------------------
  const leader = () => [...replicas.values()].find((r) => r.isLeader());
  const restartReplica = async (name: string) => {
    await startNamed(name);
  };
  const databaseBack = () =>
    waitFor('PostgreSQL taking writes again', async () => db.query('SELECT 1').then(() => true, () => false), { timeoutMs: 60_000, intervalMs: 200 });
  const faultOps: [number, string, () => Promise<void>][] = [
    [2, 'api-stall', () => apiProxy.stallFor(3000 + random() * 7000)],
    [2, 'api-reset', async () => void apiProxy.reset()],
    [1, 'api-refuse', () => apiProxy.refuse(2000 + random() * 4000)],
    [2, database.fault, async () => {
      await database.inject();
      await databaseBack();
    }],
    [2, 'leader-kill', async () => {
      const l = leader();
      if (!l) return;
      await l.kill();
      await sleep(1000 + random() * 4000);
      await restartReplica(l.name);
    }],
    [1, 'kubelet-restart', () => restartKubelet()],
    [1, 'node-delete-during-failover', async () => {
      const l = leader();
      const n = pick(simNodes);
      if (!l || !n) return;
      // Every replica down: nobody sees the delete events.
      const all = [...replicas.values()];
      await Promise.all(all.map((r) => r.kill()));
      await deleteSimNode(n);
      await sleep(1000);
      await Promise.all(all.map((r) => restartReplica(r.name)));
      await addSimNodes(1);
    }],
  ];
  const faultSum = faultOps.reduce((s, [w]) => s + w, 0);
  const choose = <T>(ops: [number, string, T][], sum: number): [number, string, T] => {
    let x = random() * sum;
    for (const op of ops) if ((x -= op[0]) < 0) return op;
    return ops[ops.length - 1]!;
  };

  let paused = false;
  let stopping = false;
  let deadline = t0 + o.minutes * 60_000;
  const errors: Record<string, number> = {};
  // Operations in flight: a checkpoint waits for them (a leader kill restarts its replica itself).
  const inFlight = new Set<Promise<void>>();
  const loop = async (name: string, every: () => number, ops: [number, string, () => Promise<void>][], sum: number, bag: Record<string, number>) => {
    while (!stopping) {
      await sleep(every());
      if (paused || stopping) continue;
      const [, op, fn] = choose(ops, sum);
      const p = fn();
      inFlight.add(p);
      try {
        await p;
        count(bag, op);
      } catch (e) {
        count(errors, `${name}:${op}`);
        say(`${op} failed (${(e as Error).message.split('\n')[0]}); going on`);
      } finally {
        inFlight.delete(p);
      }
    }
  };

  // --- the hand-over drill -----------------------------------------------------------------------------------------
  /**
   * A leader failover through a booking's end, with nobody to stop its pod in time: two Reservations of the real node's
   * 8 GPUs back to back (the simulated nodes cordoned while they are placed), the first's pod ignoring SIGTERM, the
   * second's made before its start. Every replica is killed 50 s before the first's end (before its pods are told to
   * stop, 40 s ahead) and started again 10 s after it: the first's container still runs when the second's pod can be
   * scheduled, and is stopped only once a new leader takes over (the old one's Lease runs out first). The second's pod
   * must stay unbound while the first's container holds the atoms, then run on them: never fail at the node's
   * admission. Returns what went wrong. Run before the churn, on an empty node, with no fault running.
   */
  const handoverDrill = async (): Promise<string[]> => {
    type Booked = { status?: { phase?: string; end?: string; resourceName?: string; allocations?: { node: string; atoms: string[] }[] } };
    const book = async (name: string, spec: Record<string, unknown>) => {
      await apply({ apiVersion: 'bettercompute.io/v1alpha1', kind: 'Reservation', metadata: { name, namespace: tenant }, spec: { pool: poolName, devices: [{ class: 'gpu', count: GPUS_PER_NODE }], ...spec } });
      return waitFor(`drill reservation ${name} Reserved`, async () => {
        const r = await kubectlJson<Booked>(['-n', tenant, 'get', 'reservation', name]);
        return r.status?.phase === 'Reserved' ? r.status : undefined;
      }, { timeoutMs: 60_000, intervalMs: 250 });
    };
    const cordon = (verb: 'cordon' | 'uncordon') => Promise.all(simNodes.map((n) => kubectl([verb, n.name])));
    const first = uniqueName('drill-first');
    const second = uniqueName('drill-second');
    await cordon('cordon');
    let a: NonNullable<Booked['status']>;
    let b: NonNullable<Booked['status']>;
    try {
      a = await book(first, { duration: '80s' });
      b = await book(second, { start: a.end, duration: '2m' });
    } finally {
      await cordon('uncordon');
    }
    const atomsOf = (st: NonNullable<Booked['status']>) => (st.allocations ?? []).flatMap((x) => x.atoms).sort();
    const nodesOf = (st: NonNullable<Booked['status']>) => [...new Set((st.allocations ?? []).map((x) => x.node))];
    if (JSON.stringify(nodesOf(a)) !== JSON.stringify([c.nodeName]) || JSON.stringify(atomsOf(a)) !== JSON.stringify(atomsOf(b))) {
      return [`drill: the two bookings are not on ${c.nodeName}'s same atoms (${nodesOf(a).join(',')}: ${atomsOf(a).join(',')}; then ${nodesOf(b).join(',')}: ${atomsOf(b).join(',')})`];
    }
    const end = Date.parse(a.end!);
    const firstPod = `${first}-0`;
    const secondPod = `${second}-0`;
    const gpus = String(GPUS_PER_NODE);
    await apply({ apiVersion: 'v1', kind: 'Pod', metadata: { name: firstPod, namespace: tenant }, spec: { ...podSpec({ [a.resourceName!]: gpus }, 3600, true, true), terminationGracePeriodSeconds: 30 } });
    const firstUid = await waitFor(`drill pod ${firstPod} Running`, async () => {
      const p = await kubectlJson<PodView>(['-n', tenant, 'get', 'pod', firstPod]);
      return p.status?.phase === 'Running' ? p.metadata.uid : undefined;
    }, { timeoutMs: 60_000, intervalMs: 500 });
    await apply({ apiVersion: 'v1', kind: 'Pod', metadata: { name: secondPod, namespace: tenant }, spec: podSpec({ [b.resourceName!]: gpus }, 5, true) });
    const until = (ms: number) => sleep(Math.max(0, ms - Date.now()));
    if (Date.now() > end - 50_000) return [`drill: set up too late (${Math.round((end - Date.now()) / 1000)} s before the first booking's end)`];
    await until(end - 50_000);
    const all = [...replicas.values()];
    await Promise.all(all.map((r) => r.kill()));
    try {
      await until(end + 10_000);
    } finally {
      await Promise.all(all.map((r) => restartReplica(r.name)));
    }
    // The second pod ran (Running, or already Succeeded), or failed: the kubelet's word on the hand-over.
    const outcome = await waitFor(`drill pod ${secondPod} run or failed`, async () => {
      const p = await kubectlJson<PodView>(['-n', tenant, 'get', 'pod', secondPod]);
      const phase = p.status?.phase;
      return phase === 'Running' || phase === 'Succeeded' || phase === 'Failed' ? { ...p.status!, seenAt: Date.now() } : undefined;
    }, { timeoutMs: 120_000, intervalMs: 250 }).catch((e: Error) => ({ phase: 'timeout', reason: '', message: e.message, seenAt: Date.now() }));
    const { items: said } = await kubectlJson<List<{ reason: string; message: string }>>(['-n', tenant, 'get', 'events', '--field-selector', `involvedObject.name=${secondPod}`]);
    const waited = said.some((e) => e.reason === 'FailedScheduling' && e.message.includes('WaitingForPod: pod'));
    const reasons = [...new Set(said.map((e) => `${e.reason}: ${e.message.slice(0, 160)}`))];
    say(`hand-over drill: the next booking's pod ${outcome.phase} ${Math.round((outcome.seenAt - end) / 1000)}s after the first's end; it waited for the first (WaitingForPod): ${waited}; its events: ${reasons.join(' | ')}`);
    const wrong: string[] = [];
    if (outcome.phase === 'Failed' || outcome.phase === 'timeout') {
      wrong.push(`drill: the next booking's pod ${secondPod} ${outcome.phase === 'Failed' ? `failed (${outcome.reason ?? ''}: ${outcome.message ?? ''})` : `did not run: ${outcome.message}`}`);
      // Where the first pod stands, and what the replicas said about it.
      const held = await kubectlJson<PodView>(['-n', tenant, 'get', 'pod', firstPod]).catch(() => undefined);
      wrong.push(`  ${firstPod}: ${held ? `${held.status?.phase}, deletionTimestamp ${held.metadata.deletionTimestamp ?? 'none'}` : 'gone'}`);
      wrong.push(...(await explainOrphan(firstUid)));
    }
    await kubectlResult(['-n', tenant, 'delete', 'pod', firstPod, secondPod, '--ignore-not-found', '--wait=true', '--timeout=90s'], { timeoutMs: 100_000 });
    await kubectlResult(['-n', tenant, 'delete', 'reservation', first, second, '--ignore-not-found', '--wait=true', '--timeout=60s'], { timeoutMs: 70_000 });
    return wrong;
  };

  // --- checkpoints -------------------------------------------------------------------------------------------------
  /** For the report: an orphan's rows in the ledger, and what the replicas logged about it (the last 12 lines). */
  const explainOrphan = async (uid: string): Promise<string[]> => {
    const { rows } = await db.query<{ what: string }>(
      `SELECT format('allocation %s kind %s created %s released %s during %s', id, kind, created_at, released_at, during) AS what
         FROM allocations WHERE pod_uid = $1
       UNION ALL
       SELECT format('assignment to %s created %s released %s', reservation_id, created_at, released_at)
         FROM reservation_pod_assignments WHERE pod_uid = $1`,
      [uid],
    );
    const said = everyReplica.flatMap((r) =>
      r.logs.filter((l) => JSON.stringify(l).includes(uid)).map((l) => `${r.name}${isUp(r) ? '' : ' (gone)'}: ${JSON.stringify(l).slice(0, 300)}`),
    );
    const leaders = everyReplica.flatMap((r) =>
      r.logs.filter((l) => l.msg === 'took the ledger fence' || l.msg === 'lost leadership').map((l) => `${String(l.time)} ${r.name} ${String(l.msg)}`),
    );
    return [
      ...rows.map((r) => `  ${uid}: ${r.what}`),
      ...said.slice(-12).map((l) => `  ${uid}: ${l}`),
      `  leaderships: ${leaders.sort().slice(-6).join(' | ')}`,
    ];
  };

  const checkpoint = async (): Promise<Checkpoint> => {
    const violations: string[] = [];
    // Settle: every replica up, a leader, the releaser and a drift reconcile given time to run.
    for (const r of [...replicas.values()]) if (!isUp(r)) await restartReplica(r.name);
    await waitFor('a leader', async () => leader(), { timeoutMs: 60_000, intervalMs: 500 });
    // Two complete drift runs of one leader after the pause: the second one's pod sweep is a grace period after the
    // first's. Runs of a leader that has since gone do not count: a new leader's releaser starts its count of misses
    // over (two runs, one by each, left a pod gone before the pause unreleased).
    const since = Date.now();
    const driftRuns = () =>
      leader()?.logs.filter((l) => l.msg === 'drift reconcile done' && l.complete === true && Date.parse(String(l.time)) > since).length ?? 0;
    const driftDone = await waitFor('two drift reconciles after the pause', async () => driftRuns() >= 2, {
      timeoutMs: 90_000,
      intervalMs: 1000,
    }).catch(() => false);
    if (!driftDone) {
      // What the replicas said about it since (the leader's warnings, or its silence), for whoever reads the report.
      const said = everyReplica
        .flatMap((r) => r.logs.filter((l) => Date.parse(String(l.time)) > since && /drift|leader|fence/.test(String(l.msg))).map((l) => `${r.name}: ${l.msg} ${String(l.error ?? l.reason ?? l.why ?? '')}`))
        .slice(-8);
      violations.push(`${driftRuns()} complete drift reconciles within 90 s of the pause, not 2; the replicas said: ${said.join(' | ') || 'nothing'}`);
    }
    await sleep(5000);

    const inv = await checkInvariants(db);
    // The kept rollup moves bookings whose window began or ended only at its periodic rebuild (migrations/0003): a
    // difference in allocated or reserved alone is that lag, not a fault. Every other column must agree.
    inv.rollupMismatches = inv.rollupMismatches.filter((m) => !bookingLagOnly(String(m.kept), String(m.computed)));
    // Likewise a limited quota key's used + reserved is recomputed at each booking and release of the key and at the
    // rebuild: charges that ended on their own since then still count. More than that, or less than booked, is a fault.
    const { rows: ended } = await db.query<{ tenant_id: string; pool_id: string; resource: string; ended: number }>(
      `SELECT tenant_id, pool_id, resource, sum(amount)::int AS ended FROM quota_charges
        WHERE NOT isempty(during) AND upper(during) > to_timestamp($1::float8 / 1000) AND upper(during) <= compute_now()
        GROUP BY 1, 2, 3`,
      [since],
    );
    inv.quotaTotalMismatches = inv.quotaTotalMismatches.filter(
      (m) => !quotaLagOnly(m, ended.find((e) => e.tenant_id === m.tenant_id && e.pool_id === m.pool_id && e.resource === m.resource)?.ended ?? 0),
    );
    for (const [k, v] of Object.entries(inv)) {
      const clean = (CLEAN as unknown as Record<string, unknown>)[k];
      if (JSON.stringify(v) !== JSON.stringify(clean)) violations.push(`invariant ${k}: ${JSON.stringify(v).slice(0, 400)}`);
    }
    // The ledger first, then the cluster: a pod that is still there after its holding was released lost it
    // without evidence.
    const { rows: holdings } = await db.query<{ pod_uid: string; live: boolean; reservation_over: boolean; atoms: string[] | null }>(`
      SELECT a.pod_uid, bool_or(a.released_at IS NULL AND upper(a.during) > compute_now()) AS live, false AS reservation_over,
             array_agg(b.device_id ORDER BY b.device_id) FILTER (WHERE b.during @> compute_now()) AS atoms
        FROM allocations a LEFT JOIN device_bookings b ON b.allocation_id = a.id
       WHERE a.kind = 'pod' GROUP BY a.pod_uid
      UNION ALL
      SELECT p.pod_uid, bool_or(p.released_at IS NULL), bool_and(r.state NOT IN ('held', 'confirmed') OR r.ends_at <= compute_now()), NULL
        FROM reservation_pod_assignments p JOIN reservations r ON r.id = p.reservation_id GROUP BY p.pod_uid`);
    const byUid = new Map<string, (typeof holdings)[number]>();
    for (const h of holdings) {
      const prev = byUid.get(h.pod_uid);
      byUid.set(h.pod_uid, prev ? { ...prev, live: prev.live || h.live, reservation_over: prev.reservation_over || h.reservation_over, atoms: prev.atoms ?? h.atoms } : h);
    }
    const listed = (await kubectlJson<List<PodView>>(['-n', tenant, 'get', 'pods'])).items;
    const alive = listed.filter((p) => p.spec.nodeName && !p.metadata.deletionTimestamp && !['Succeeded', 'Failed'].includes(p.status?.phase ?? ''));
    for (const p of alive) {
      const h = byUid.get(p.metadata.uid);
      // A pod of a node the soak deleted (its Node and NodeDevices gone: the evidence its atoms were released on) stays
      // listed until kube-controller-manager's pod GC removes it; it has not lost its booking.
      if (goneNodes.has(p.spec.nodeName ?? '')) continue;
      if (h && !h.live && !h.reservation_over) violations.push(`pod ${p.metadata.name} (${p.status?.phase} on ${p.spec.nodeName}) lost its booking`);
    }
    // What each reservation pod's Reservation has booked at this instant (its live bookings), by the pod's assignment.
    const { rows: reservationAtoms } = await db.query<{ pod_uid: string; atoms: string[] | null }>(`
      SELECT p.pod_uid, array_agg(DISTINCT b.device_id) FILTER (WHERE b.during @> compute_now()) AS atoms
        FROM reservation_pod_assignments p JOIN allocations a ON a.reservation_id = p.reservation_id
        LEFT JOIN device_bookings b ON b.allocation_id = a.id
       WHERE p.released_at IS NULL GROUP BY p.pod_uid`);
    const bookedNow = new Map(reservationAtoms.map((r) => [r.pod_uid, new Set(r.atoms ?? [])]));
    let runningChecked = 0;
    // Every container that runs on the real node, those still stopping (a deletionTimestamp) included: no atom is
    // held by two of them. A stopping one may be past its booking; only one that is not stopping must be inside it.
    const holderOf = new Map<string, string>();
    const running = listed.filter((x) => x.status?.phase === 'Running' && x.spec.nodeName === c.nodeName);
    for (const p of running) {
      const log = await kubectlResult(['-n', tenant, 'logs', p.metadata.name]);
      const atoms = /ATOMS=(\S*)/.exec(log.stdout)?.[1]?.split(',').filter(Boolean).sort() ?? [];
      for (const a of atoms) {
        const other = holderOf.get(a);
        if (other) violations.push(`atom ${a} is held by both ${other} and ${p.metadata.name}${p.metadata.deletionTimestamp ? ' (stopping)' : ''}`);
        holderOf.set(a, p.metadata.name);
      }
      if (p.metadata.deletionTimestamp) continue;
      const h = byUid.get(p.metadata.uid);
      const onDemand = p.spec.containers.some((ct) => ct.resources?.limits?.[OUR_GPU]);
      if (onDemand && JSON.stringify(atoms) !== JSON.stringify(h?.atoms ?? [])) {
        violations.push(`pod ${p.metadata.name} runs on ${atoms.join(',')} but is booked ${(h?.atoms ?? []).join(',')}`);
      }
      if (!onDemand && atoms.length !== 1) violations.push(`pod ${p.metadata.name} of a reservation runs on ${atoms.length} atoms, not 1`);
      // No container holds an atom outside a live booking of its own.
      const own = onDemand ? new Set(h?.atoms ?? []) : (bookedNow.get(p.metadata.uid) ?? new Set<string>());
      const outside = atoms.filter((a) => !own.has(a));
      if (outside.length) violations.push(`pod ${p.metadata.name} holds ${outside.join(',')} outside a live booking of its own`);
      runningChecked++;
    }
    // A hand-over never fails a pod: the kubelet's admission refused none (guard 6 is the last line, never the path).
    for (const p of listed.filter((x) => x.status?.phase === 'Failed' && x.status.reason === 'UnexpectedAdmissionError')) {
      violations.push(`pod ${p.metadata.name} failed at the node's admission: ${p.status?.message ?? ''}`);
    }
    // Orphans after the reconcile: holdings of pods that are gone, reservations whose Reservation is gone, nodes that
    // are gone but still in a pool.
    const everyPod = new Set((await kubectlJson<List<Pod>>(['get', 'pods', '-A'])).items.map((p) => (p.metadata as { uid?: string }).uid));
    const orphanPods = [...byUid.values()].filter((h) => h.live && !everyPod.has(h.pod_uid));
    if (orphanPods.length) {
      violations.push(`live holdings of ${orphanPods.length} pods that are gone: ${orphanPods.map((h) => h.pod_uid).slice(0, 5).join(',')}`);
      for (const h of orphanPods.slice(0, 3)) violations.push(...(await explainOrphan(h.pod_uid)));
    }
    const crs = (await kubectlJson<List<{ metadata: { uid: string } }>>(['get', 'reservations', '-A'])).items.map((r) => r.metadata.uid);
    const { rows: orphanRsv } = await db.query<{ id: string }>(
      `SELECT id FROM reservations WHERE state IN ('held', 'confirmed') AND ends_at > compute_now() AND NOT (idempotency_key = ANY($1))`,
      [crs],
    );
    if (orphanRsv.length) violations.push(`${orphanRsv.length} live reservations whose Reservation is gone: ${orphanRsv.map((r) => r.id).join(',')}`);
    const { rows: goneInPool } = await db.query<{ id: string }>(
      `SELECT id FROM nodes WHERE id = ANY($1) AND (pool_id IS NOT NULL OR schedulable)`,
      [[...goneNodes]],
    );
    if (goneInPool.length) violations.push(`deleted nodes still in a pool or schedulable: ${goneInPool.map((n) => n.id).join(',')}`);
    const { rows: live } = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM device_bookings WHERE during @> compute_now()`);
    return { atSeconds: elapsed(), violations, livePods: alive.length, runningChecked, liveBookings: live[0]!.n };
  };

  const drillStarted = Date.now();
  const drilled = await handoverDrill();
  count(report.ops, 'handover-drill');
  report.violations.push(...drilled.map((v) => `[${elapsed()}s] ${v}`));
  for (const v of drilled) say(`  ${v}`);
  say(`hand-over drill ${drilled.length ? 'FAILED' : 'passed'} in ${Math.round((Date.now() - drillStarted) / 1000)}s`);
  // The churn gets its full minutes after the drill.
  deadline += Date.now() - drillStarted;
  const churn = loop('churn', () => 300 + random() * 900, churnOps, weightSum, report.ops);
  const faults = loop('fault', () => 5000 + random() * 7000, faultOps, faultSum, report.faults);
  const every = o.checkpointEveryMs ?? 60_000;
  try {
    while (Date.now() < deadline) {
      await sleep(Math.min(every, Math.max(0, deadline - Date.now())));
      paused = true;
      await Promise.allSettled([...inFlight]);
      const last = Date.now() >= deadline;
      const cp = await checkpoint();
      report.checkpoints.push(cp);
      report.violations.push(...cp.violations.map((v) => `[${cp.atSeconds}s] ${v}`));
      say(
        `checkpoint at ${cp.atSeconds}s: ${cp.violations.length ? `${cp.violations.length} VIOLATIONS` : 'clean'}; ${cp.livePods} live pods ` +
          `(${cp.runningChecked} running on ${c.nodeName} checked), ${cp.liveBookings} live atom bookings; ops ${JSON.stringify(report.ops)}; faults ${JSON.stringify(report.faults)}`,
      );
      for (const v of cp.violations) say(`  ${v}`);
      if (last) break;
      paused = false;
    }
  } finally {
    stopping = true;
    await Promise.all([churn, faults]);
    report.leaderChanges = everyReplica.reduce((n, r) => n + r.logs.filter((l) => l.msg === 'took the ledger fence').length, 0);
    if (Object.keys(errors).length) say(`operations that failed (and were let go): ${JSON.stringify(errors)}`);
    // Clean up: what the soak made, and the scheduler's default configuration.
    await kubectlResult(['delete', 'namespace', tenant, '--wait=false']);
    await kubectlResult(['-n', tenant, 'delete', 'reservations', '--all', '--wait=true', '--timeout=60s'], { timeoutMs: 70_000 });
    await removeSimulatedNodes(simNodes.map((n) => n.name)).catch(() => undefined);
    await kubectlResult(['delete', 'nodedevices', ...simNodes.map((n) => n.name), '--ignore-not-found']);
    await kubectlResult(['delete', 'pool', poolName, '--wait=true', '--timeout=60s'], { timeoutMs: 70_000 });
    await kubectlResult(['label', 'node', c.nodeName, `${POOL_LABEL}-`]);
    await restartScheduler(defaultSchedulerConfig()).catch(() => undefined);
    await Promise.all(everyReplica.map((r) => r.stop()));
    await agent.stop();
    await kubectlResult(['delete', 'namespace', ctrlNs, '--wait=false']);
    await apiProxy.close();
    await extenderProxy.close();
    await agentDb.end();
    await db.end();
    await database.stop();
    fs.rmSync(tmp, { recursive: true, force: true });
  }
  return report;
}

interface SoakDatabase {
  url: string;
  /** The fault's name in the report, and the fault itself. */
  fault: 'postgres-kill' | 'postgres-failover';
  inject(): Promise<void>;
  stop(): Promise<void>;
}

async function startDatabase(kind: 'embedded' | 'replicated', dataDir: string): Promise<SoakDatabase> {
  if (kind === 'replicated') {
    const pair = await startPair();
    return { url: pair.url, fault: 'postgres-failover', inject: () => pair.failover(), stop: () => pair.stop() };
  }
  // Durable (not `fast`): the soak kills the server, and a crash must lose no committed booking.
  const pg: EmbeddedServer = await startEmbedded({ dataDir, logger: createLogger({ level: 'warn' }) });
  return {
    url: pg.url,
    fault: 'postgres-kill',
    // A crash, not a shutdown: SIGKILL the postmaster; the embedded server's supervisor starts it again on its data.
    async inject() {
      const before = pg.restarts;
      const pid = Number(fs.readFileSync(path.join(dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
      process.kill(pid, 'SIGKILL');
      await waitFor('PostgreSQL started again', async () => pg.restarts > before, { timeoutMs: 60_000, intervalMs: 200 });
    },
    stop: () => pg.stop(),
  };
}

/** Rollup rows `(total,allocatable,allocated,reserved,provisioning,unhealthy,maintenance,unreachable)` equal but for allocated and reserved. */
export function bookingLagOnly(kept: string, computed: string): boolean {
  const cols = (t: string) => t.replace(/[()]/g, '').split(',').map((x) => Number(x || 0));
  const [a, b] = [cols(kept), cols(computed)];
  return a.length === 8 && b.length === 8 && [0, 1, 4, 5, 6, 7].every((i) => a[i] === b[i]);
}

/** A quota key counting more than its bookings not yet ended by no more than the charges that ended since `since`. */
export function quotaLagOnly(m: { total: number; booked: number }, endedSince: number): boolean {
  return m.total >= m.booked && m.total - m.booked <= endedSince;
}

/** The report as a few lines of text (README, CI log). */
export function formatReport(r: SoakReport): string {
  const lines = [
    `soak: ${r.minutes} min, seed ${r.seed}, ${r.database} database, ${r.checkpoints.length} checkpoints, ${r.leaderChanges} leaderships taken`,
    `operations: ${Object.entries(r.ops).map(([k, v]) => `${k} ${v}`).join(', ')}`,
    `faults:     ${Object.entries(r.faults).map(([k, v]) => `${k} ${v}`).join(', ')}`,
    `invariants: ${r.violations.length ? `${r.violations.length} VIOLATIONS` : 'all held at every checkpoint'}`,
    ...r.violations.map((v) => `  ${v}`),
  ];
  return lines.join('\n');
}
