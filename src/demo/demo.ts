// `npm run demo`: the product on this machine, end to end. Brings up (or reuses) the local Kubernetes cluster of the
// cluster tests, starts PostgreSQL, the controller (capacity API; scheduler extender on loopback; /metrics and webhooks
// over HTTPS with a certificate it makes into a Secret of its namespace) and the pod releaser in this process, points
// kube-scheduler at the extender, runs the node
// agent on the real node with 8 simulated GPUs, adds simulated GPU nodes, applies examples/ (Pools, Reservations, a
// pod of a Reservation, an on-demand pod), waits for them, and prints the Reservations and the capacity summary. Then
// it keeps running (or, with --once, stops) and on SIGINT/SIGTERM undoes everything it did, in reverse order.
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import YAML from 'yaml';
import { Agent } from '../agent/agent.ts';
import { fileSource, simulatedSpec } from '../agent/discovery.ts';
import { inProcessBackend } from '../agentapi/state.ts';
import { httpClient } from '../cli/capacity.ts';
import { renderSummary } from '../cli/render.ts';
import { loadConfig } from '../config.ts';
import type { RunningController } from '../controller/run.ts';
import { DbClock } from '../db/clock.ts';
import { startEmbedded, type EmbeddedServer } from '../db/embedded.ts';
import { createPool } from '../db/pool.ts';
import { loadKubeConfig } from '../extender/kube.ts';
import { createLogger, type Logger } from '../log.ts';
import { loadHarness, REPO_ROOT, type DemoHarness } from './cluster.ts';
import { seconds, Steps } from './steps.ts';

export const DEMO_NAMESPACE = 'demo-team-a';
export const DEMO_TENANT = 'team-a';
export const CONTROLLER_NAMESPACE = 'better-compute-demo';
const POOL_LABEL = 'bettercompute.io/demo-pool';
const DEMO_LABEL = 'bettercompute.io/demo';
const EXAMPLES = path.join(REPO_ROOT, 'examples');
/** The namespace-grant policy of earlier versions: removed by the cleanup if a previous demo left it behind. */
const POLICY = 'bettercompute-reservation-namespace';

export interface DemoOptions {
  /** Exit after printing (no keep-running part). */
  once: boolean;
  simulatedNodes: number;
  gpusPerNode: number;
  /** The controller's capacity API port; default 8080 when free, else any (its other listeners take any free port). */
  port?: number;
  /** Where the demo keeps its log, token and PostgreSQL data (default ~/.cache/better-compute/demo). */
  stateDir: string;
  out: (line: string) => void;
}

export interface DemoResult {
  url: string;
  /** HTTPS, for a bearer token allowed to get the non-resource URL /metrics. */
  metricsUrl: string;
  token: string;
  reservationsTable: string;
  summary: string;
  startupMs: number;
}

interface Rsv {
  metadata: { name: string };
  status?: { phase?: string; resourceName?: string; conditions?: { type: string; reason?: string; message?: string }[] };
}

async function freePort(preferred?: number): Promise<number> {
  const tryPort = (p: number) =>
    new Promise<number | undefined>((resolve) => {
      const s = net.createServer();
      s.once('error', () => resolve(undefined));
      s.listen(p, '127.0.0.1', () => {
        const a = s.address();
        s.close(() => resolve(typeof a === 'object' && a ? a.port : undefined));
      });
    });
  if (preferred !== undefined) {
    const p = await tryPort(preferred);
    if (p !== undefined) return p;
  }
  const p = await tryPort(0);
  if (p === undefined) throw new Error('no free TCP port on 127.0.0.1');
  return p;
}

function fileLogger(file: string): { log: Logger; close(): void } {
  const fd = fs.openSync(file, 'a');
  let open = true;
  return {
    log: createLogger({ level: 'info', write: (line) => open && fs.writeSync(fd, `${line}\n`) }),
    close() {
      open = false;
      fs.closeSync(fd);
    },
  };
}

/** A YAML file of examples/ with ${VAR} filled in, as objects. */
export function exampleObjects(file: string, vars: Record<string, string> = {}): Record<string, unknown>[] {
  const text = fs.readFileSync(path.join(EXAMPLES, file), 'utf8').replace(/\$\{(\w+)\}/g, (m, name: string) => vars[name] ?? m);
  return YAML.parseAllDocuments(text)
    .map((d) => d.toJS() as Record<string, unknown> | null)
    .filter((o): o is Record<string, unknown> => o !== null);
}

/** kube-scheduler's default config with deploy/scheduler's extender and plugin config, the extender at `url`. */
export function schedulerConfigWithExtender(defaultConfig: string, url: string): string {
  const base = YAML.parse(defaultConfig) as Record<string, unknown>;
  const deploy = YAML.parse(fs.readFileSync(path.join(REPO_ROOT, 'deploy', 'scheduler', 'scheduler-config.yaml'), 'utf8')) as {
    extenders: Record<string, unknown>[];
    profiles: { pluginConfig: unknown[] }[];
  };
  const extenders = deploy.extenders.map(({ tlsConfig: _t, ...e }) => ({ ...e, urlPrefix: url, enableHTTPS: false }));
  const profiles = (base.profiles as Record<string, unknown>[]).map((p) => ({ ...p, pluginConfig: deploy.profiles[0]!.pluginConfig }));
  return YAML.stringify({ ...base, extenders, profiles });
}

/** The extender's URL prefix on the controller's extender listener (its filter answers 400 to an empty body). */
async function extenderPrefix(url: string): Promise<string> {
  const prefix = `${url}/scheduler`;
  const r = await fetch(`${prefix}/filter`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
  await r.arrayBuffer();
  if (r.status === 400) return prefix;
  throw new Error(`the controller at ${url} serves no scheduler extender (POST /scheduler/filter answers ${r.status})`);
}

/** Runs the demo; resolves once everything is up and printed, with `stop` to undo it. */
export class Demo {
  private readonly undo: { what: string; fn: () => Promise<unknown> }[] = [];
  private h!: DemoHarness;
  private logFile = '';
  private closeLog: () => void = () => undefined;
  private stopping?: Promise<void>;
  private cancelled = false;

  constructor(private readonly o: DemoOptions) {}

  private defer(what: string, fn: () => Promise<unknown>) {
    this.undo.push({ what, fn });
  }

  private kubectl(args: string[], input?: string) {
    return this.h.kubectl(args, { ...(input !== undefined ? { input } : {}), timeoutMs: 60_000 });
  }

  private async json<T>(args: string[]): Promise<T> {
    return JSON.parse(await this.kubectl([...args, '-o', 'json'])) as T;
  }

  async start(): Promise<DemoResult> {
    const out = this.o.out;
    const steps = new Steps(13, out, () => this.cancelled);
    const t0 = performance.now();
    fs.mkdirSync(this.o.stateDir, { recursive: true });
    this.logFile = path.join(this.o.stateDir, 'demo.log');
    fs.writeFileSync(this.logFile, '');
    const { log, close } = fileLogger(this.logFile);
    this.closeLog = close;
    out(`Better Compute demo: logs of the controller, agent and releaser go to ${this.logFile}`);

    await steps.run('Checking prerequisites', async (note) => {
      if (process.getuid?.() !== 0) throw new Error('run as root (sudo -s): the kubelet, containerd and the CNI plugins need it');
      const major = Number(process.versions.node.split('.')[0]);
      if (major < 20) throw new Error(`Node.js >= 20 needed, this is ${process.version}`);
      this.h = await loadHarness();
      note(`root, Node.js ${process.version}`);
    });

    const h = this.h;
    let reused = false;
    await steps.run('Kubernetes cluster (e2e/cluster: etcd, kube-apiserver, scheduler, kubelet, containerd)', async (note) => {
      reused = await h.isClusterUp();
      const bin = path.join(path.dirname(h.CLUSTER_DIR), 'k8s-v1.34.12', 'bin', 'kubelet');
      if (!reused) {
        out(
          fs.existsSync(bin)
            ? '        bringing the cluster up (~15 s; progress below)'
            : '        first use on this machine: building Kubernetes v1.34.12 and etcd from Go modules, then bringing the\n' +
                '        cluster up (~6 min on 2 free cores, up to ~13 min with empty caches; progress below)',
        );
      }
      if (process.env.BC_DEMO_LOCK_HELD === '1') {
        // Run from a cluster test (e2e/cluster/demo.test.ts): the test run holds the cluster's turn already.
        if (!reused) throw new Error('BC_DEMO_LOCK_HELD=1, but no cluster is up');
      } else {
        // Test runs and demos take turns on the one cluster (a lock); a cluster this acquire starts is taken down by
        // the release, one that was up already is left up.
        await h.acquireCluster();
        this.defer('release the cluster (down only if the demo started it)', () => h.releaseCluster());
      }
      const c = h.clusterInfo();
      note(reused ? `reusing the cluster that was up (${c.dir})` : `started (${c.dir}); the demo takes it down when it stops`);
    });
    const c = h.clusterInfo();
    const kc = loadKubeConfig(c.kubeconfig);

    await steps.run('Removing what an earlier demo left behind', async (note) => {
      note(await this.cleanupObjects(false));
    });

    let url!: string;
    let token!: string;
    await steps.run('Starting PostgreSQL (embedded, a fresh database)', async (note) => {
      // Run as root, PostgreSQL runs as the `postgres` user, which cannot enter /root: a directory it can reach.
      const pgDir = fs.mkdtempSync(path.join(os.tmpdir(), 'bc-demo-pg-'));
      fs.chmodSync(pgDir, 0o755);
      const dataDir = path.join(pgDir, 'data');
      const port = await freePort();
      const pg: EmbeddedServer = await startEmbedded({ dataDir, port, fast: true, log: (line) => log.debug('postgres', { line }) });
      this.defer('stop PostgreSQL and remove its data', async () => {
        await pg.stop();
        fs.rmSync(pgDir, { recursive: true, force: true });
      });
      url = pg.url;
      note(`127.0.0.1:${port}, data in ${dataDir}`);
    });

    // deploy/admission/ (webhook + policies) needs the installed controller's HTTPS listener and scheduler; this
    // in-process demo runs without admission.
    await steps.run('Installing the CRDs', async (note) => {
      await this.kubectl(['apply', '-k', path.join(REPO_ROOT, 'crds')]);
      await this.kubectl(['wait', '--for=condition=Established', '--timeout=60s', 'crd/pools.bettercompute.io', 'crd/reservations.bettercompute.io', 'crd/nodedevices.bettercompute.io']);
      note('CRDs Pool, Reservation, NodeDevices');
    });

    let controller!: RunningController;
    await steps.run('Starting the controller (capacity API, scheduler extender, HTTPS /metrics; as leader: pod releaser, namespace grants)', async (note) => {
      await this.kubectl(['create', 'namespace', CONTROLLER_NAMESPACE]);
      this.defer(`delete namespace ${CONTROLLER_NAMESPACE}`, () => this.kubectl(['delete', 'namespace', CONTROLLER_NAMESPACE, '--ignore-not-found', '--wait=false']));
      token = `demo-${randomBytes(16).toString('hex')}`;
      const tokenFile = path.join(this.o.stateDir, 'tokens.yaml');
      fs.writeFileSync(tokenFile, YAML.stringify({ tokens: [{ token, subject: 'demo', tenants: ['*'] }] }), { mode: 0o600 });
      const port = await freePort(this.o.port ?? 8080);
      const config = loadConfig({
        DATABASE_URL: url,
        KUBECONFIG: c.kubeconfig,
        BETTER_COMPUTE_NAMESPACE: CONTROLLER_NAMESPACE,
        POD_NAME: `demo-${os.hostname()}-${process.pid}`,
        HOST: '127.0.0.1',
        PORT: String(port),
        EXTENDER_PORT: '0',
        METRICS_PORT: '0',
        WEBHOOK_PORT: '0',
        // The certificate goes into Secret better-compute-tls of the demo's namespace (deleted with it); it also names
        // loopback. No MutatingWebhookConfiguration of that name: an installed product's is left alone.
        TLS_EXTRA_SANS: 'localhost,127.0.0.1',
        BETTER_COMPUTE_WEBHOOK_CONFIGURATION: 'better-compute-demo',
        LOG_LEVEL: 'info',
        BETTER_COMPUTE_TOKEN_FILE: tokenFile,
        BETTER_COMPUTE_LEASE_DURATION: '4s',
        BETTER_COMPUTE_RENEW_DEADLINE: '3s',
        BETTER_COMPUTE_RETRY_PERIOD: '1s',
        BETTER_COMPUTE_CAPACITY_REFRESH: '2s',
        BETTER_COMPUTE_FOLD_EVERY: '1s',
        BETTER_COMPUTE_PENDING_MAX_BACKOFF: '5s',
      });
      const { runController } = await import('../controller/run.ts');
      controller = await runController(config, log);
      this.defer('stop the controller', () => controller.stop());
      await h.waitFor('the controller to lead', () => controller.isLeader(), { timeoutMs: 30_000, intervalMs: 200 });

      note(`${controller.url} (leader)`);
    });

    await steps.run('Restarting kube-scheduler with the extender (deploy/scheduler/)', async (note) => {
      const prefix = await extenderPrefix(controller.extenderUrl);
      this.defer('restore the default kube-scheduler config', () => h.restartScheduler(h.defaultSchedulerConfig()));
      await h.restartScheduler(schedulerConfigWithExtender(h.defaultSchedulerConfig(), prefix));
      note(`extender at ${prefix}`);
    });

    await steps.run(`Starting the node agent on ${c.nodeName} with ${this.o.gpusPerNode} simulated GPUs`, async (note) => {
      await this.kubectl(['label', 'node', c.nodeName, `${POOL_LABEL}=local`, '--overwrite']);
      this.defer(`unlabel node ${c.nodeName}`, () => this.kubectl(['label', 'node', c.nodeName, `${POOL_LABEL}-`]));
      const devicesFile = path.join(this.o.stateDir, 'devices.json');
      fs.writeFileSync(devicesFile, JSON.stringify(simulatedSpec(c.nodeName, this.o.gpusPerNode)));
      const adb = createPool(url, 4);
      const agent = new Agent({
        nodeName: c.nodeName,
        devicePluginDir: c.devicePluginDir,
        podResourcesSocket: c.podResourcesSocket,
        source: fileSource(devicesFile),
        backend: inProcessBackend(adb, await DbClock.create(adb), c.nodeName),
        log,
        kubeConfig: kc,
        reconcileEveryMs: 1000,
        discoverEveryMs: 10_000,
      });
      await agent.start();
      this.defer('stop the agent and delete its NodeDevices', async () => {
        await agent.stop();
        await adb.end();
        await this.kubectl(['delete', 'nodedevices', c.nodeName, '--ignore-not-found', '--wait=false']);
      });
      note(`device file ${devicesFile} (BETTER_COMPUTE_DEVICES_FILE)`);
    });

    let simNodes: string[] = [];
    await steps.run(`Adding ${this.o.simulatedNodes} simulated GPU nodes (${this.o.gpusPerNode} GPUs each, NodeDevices)`, async (note) => {
      simNodes = await h.addSimulatedNodes(this.o.simulatedNodes, { [POOL_LABEL]: 'sim', [DEMO_LABEL]: 'true' }, {}, { prefix: 'demo-gpu' });
      this.defer('remove the simulated nodes and their NodeDevices', async () => {
        await this.kubectl(['delete', 'nodedevices', '--ignore-not-found', '--wait=false', ...simNodes]);
        await h.removeSimulatedNodes(simNodes);
      });
      await h.apply(
        simNodes.map((node) => ({
          apiVersion: 'bettercompute.io/v1alpha1',
          kind: 'NodeDevices',
          metadata: { name: node, labels: { [DEMO_LABEL]: 'true' } },
          spec: simulatedSpec(node, this.o.gpusPerNode),
        })),
      );
      note(simNodes.join(', '));
    });

    await steps.run('Applying examples/namespace.yaml and examples/pools.yaml; waiting for the Pools', async (note) => {
      const ns = exampleObjects('namespace.yaml').map((o) => {
        const meta = o.metadata as { labels?: Record<string, string> };
        meta.labels = { ...meta.labels, [DEMO_LABEL]: 'true' };
        return o;
      });
      await h.apply(ns);
      this.defer(`delete namespace ${DEMO_NAMESPACE}`, () => this.kubectl(['delete', 'namespace', DEMO_NAMESPACE, '--ignore-not-found', '--wait=false']));
      const pools = exampleObjects('pools.yaml');
      this.defer('delete the Pools', () => this.kubectl(['delete', 'pools', '--ignore-not-found', ...pools.map((p) => (p.metadata as { name: string }).name)]));
      await h.apply(pools);
      const want: Record<string, number> = { 'demo-local': this.o.gpusPerNode, 'demo-sim': this.o.gpusPerNode * simNodes.length };
      for (const [pool, gpus] of Object.entries(want)) {
        await h.waitFor(
          `Pool ${pool} with ${gpus} allocatable GPUs`,
          async () => {
            const p = await this.json<{ status?: { capacity?: { resource: string; allocatable: number }[] } }>(['get', 'pool', pool]);
            return p.status?.capacity?.find((r) => r.resource === 'gpu')?.allocatable === gpus;
          },
          { timeoutMs: 90_000, intervalMs: 500 },
        );
      }
      note(Object.entries(want).map(([p, g]) => `${p}: ${g} GPUs`).join(', '));
    });

    let resourceName = '';
    await steps.run('Applying examples/reservations.yaml; waiting until both are Reserved', async (note) => {
      const tomorrow = new Date(Date.now() + 86_400_000);
      const start = `${tomorrow.toISOString().slice(0, 10)}T09:00:00Z`;
      this.defer('delete the Reservations (the controller releases their bookings)', () => this.deleteReservations(true));
      await h.apply(exampleObjects('reservations.yaml', { TOMORROW_0900_UTC: start }));
      const list = await h.waitFor(
        'Reservations train-now and train-tomorrow Reserved',
        async () => {
          const items = (await this.json<{ items: Rsv[] }>(['-n', DEMO_NAMESPACE, 'get', 'reservations'])).items;
          const failed = items.find((r) => r.status?.phase === 'Failed');
          if (failed) {
            const cond = failed.status?.conditions?.find((x) => x.type === 'Reserved');
            throw new Error(`Reservation ${failed.metadata.name} Failed: ${cond?.reason ?? ''} ${cond?.message ?? ''}`);
          }
          return items.length === 2 && items.every((r) => r.status?.phase === 'Reserved') ? items : undefined;
        },
        { timeoutMs: 90_000, intervalMs: 500 },
      );
      resourceName = list.find((r) => r.metadata.name === 'train-now')?.status?.resourceName ?? '';
      if (!resourceName) throw new Error('train-now has no status.resourceName');
      note(`train-now: ${resourceName}`);
    });

    await steps.run('Applying examples/pod-reservation.yaml and examples/pod-ondemand.yaml; waiting until they run', async (note) => {
      // The kubelet must advertise the resources before the pods can go.
      await h.waitFor(
        `${c.nodeName} advertising ${resourceName} and bettercompute.io/gpu`,
        async () => {
          const alloc = (await this.json<{ status?: { allocatable?: Record<string, string> } }>(['get', 'node', c.nodeName])).status?.allocatable ?? {};
          return Number(alloc[resourceName] ?? 0) === 2 && Number(alloc['bettercompute.io/gpu'] ?? 0) === this.o.gpusPerNode;
        },
        { timeoutMs: 60_000, intervalMs: 500 },
      );
      this.defer('delete the pods', () => this.kubectl(['-n', DEMO_NAMESPACE, 'delete', 'pods', '--all', '--grace-period=0', '--force', '--ignore-not-found', '--wait=false']));
      await h.apply([...exampleObjects('pod-reservation.yaml', { RESOURCE_NAME: resourceName }), ...exampleObjects('pod-ondemand.yaml')]);
      for (const pod of ['trainer', 'notebook']) {
        await h.waitFor(
          `pod ${DEMO_NAMESPACE}/${pod} Running`,
          async () => {
            const p = await this.json<{ status?: { phase?: string } }>(['-n', DEMO_NAMESPACE, 'get', 'pod', pod]);
            if (p.status?.phase === 'Failed') throw new Error(`pod ${pod} Failed`);
            return p.status?.phase === 'Running';
          },
          { timeoutMs: 120_000, intervalMs: 500 },
        ).catch(async (e: unknown) => {
          const events = await this.kubectl(['-n', DEMO_NAMESPACE, 'get', 'events', '--field-selector', `involvedObject.name=${pod}`]).catch(() => '');
          throw new Error(`${(e as Error).message}\n${events}`);
        });
      }
      const atoms: string[] = [];
      for (const pod of ['trainer', 'notebook']) {
        const logs = await h.waitFor(`${pod}'s log`, async () => {
          const l = await this.kubectl(['-n', DEMO_NAMESPACE, 'logs', pod]);
          return l.includes('BETTERCOMPUTE_ATOMS=') ? l : undefined;
        });
        atoms.push(`${pod}: ${logs.split('\n').find((l) => l.startsWith('BETTERCOMPUTE_ATOMS=')) ?? ''}`);
      }
      note('trainer (Reservation train-now, 2 GPUs) and notebook (on demand, 1 GPU) Running');
      for (const a of atoms) note(a);
    });

    const startupMs = performance.now() - t0;
    let reservationsTable = '';
    let summary = '';
    await steps.run('Reading the Reservations and the capacity summary', async () => {
      reservationsTable = await this.kubectl(['-n', DEMO_NAMESPACE, 'get', 'reservations']);
      const client = httpClient(controller.url, token);
      try {
        // The rollup folds its deltas every second: wait until it shows the bookings.
        const s = await h.waitFor(
          'the capacity summary to show the bookings',
          async () => {
            const s = await client.summary({ tenantId: DEMO_TENANT });
            const local = s.pools.find((p) => p.name === 'demo-local')?.capacity.find((r) => r.resource === 'gpu');
            return local && local.allocated + local.reserved >= 3 ? s : undefined;
          },
          { timeoutMs: 30_000, intervalMs: 500 },
        ).catch(() => client.summary({ tenantId: DEMO_TENANT }));
        summary = renderSummary(s);
      } finally {
        await client.close();
      }
    });

    out('');
    out(`$ kubectl -n ${DEMO_NAMESPACE} get reservations`);
    out(reservationsTable.trimEnd());
    out('');
    out(`$ better-compute capacity --tenant ${DEMO_TENANT} --server ${controller.url}`);
    out(summary.trimEnd());
    out('');
    out(`Started in ${seconds(startupMs)} (${reused ? 'cluster reused' : 'cluster brought up by the demo'}).`);
    return { url: controller.url, metricsUrl: controller.metricsUrl, token, reservationsTable, summary, startupMs };
  }

  /** Stops start() before its next step (it then rejects with a StepError). */
  cancel(): void {
    this.cancelled = true;
  }

  /** What to tell the user while the demo keeps running. */
  addresses(r: DemoResult): string[] {
    const c = this.h.clusterInfo();
    return [
      'Better Compute is running:',
      `  capacity API  POST ${r.url}/api/compute/capacity/{summary,byPool,preview,timeline}`,
      `                curl -s -H 'authorization: Bearer ${r.token}' -H 'content-type: application/json' \\`,
      `                  -d '{"tenantId":"${DEMO_TENANT}"}' ${r.url}/api/compute/capacity/summary`,
      `                npx better-compute capacity --tenant ${DEMO_TENANT} --server ${r.url} --token ${r.token}`,
      `  /metrics      ${r.metricsUrl}/metrics  (HTTPS: CA in Secret ${CONTROLLER_NAMESPACE}/better-compute-tls, key ca.crt;`,
      `                a bearer token allowed to get the non-resource URL /metrics)`,
      `  health        ${r.url}/healthz  ${r.url}/readyz`,
      `  kubectl       export KUBECONFIG=${c.kubeconfig}`,
      `                ${c.kubectl} -n ${DEMO_NAMESPACE} get reservations,pods -o wide`,
      `  logs          ${this.logFile}`,
      'Press Ctrl-C to stop; the demo then removes everything it created.',
    ];
  }

  /** Deletes the demo's Reservations; without a controller (or when it does not finish), drops their finalizers. */
  private async deleteReservations(controllerRunning: boolean): Promise<void> {
    const names = async () =>
      (await this.json<{ items: Rsv[] }>(['-n', DEMO_NAMESPACE, 'get', 'reservations']).catch(() => ({ items: [] as Rsv[] }))).items.map((r) => r.metadata.name);
    if ((await names()).length === 0) return;
    await this.kubectl(['-n', DEMO_NAMESPACE, 'delete', 'reservations', '--all', '--wait=false']).catch(() => undefined);
    if (controllerRunning) {
      await this.h.waitFor('the Reservations to go', async () => (await names()).length === 0, { timeoutMs: 30_000, intervalMs: 500 }).catch(() => undefined);
    }
    for (const name of await names()) {
      await this.kubectl(['-n', DEMO_NAMESPACE, 'patch', 'reservation', name, '--type=merge', '-p', '{"metadata":{"finalizers":null}}']).catch(() => undefined);
    }
  }

  /** Removes demo objects (a crashed earlier run's, or this one's as a last resort). Returns what it did. */
  private async cleanupObjects(controllerRunning: boolean): Promise<string> {
    const done: string[] = [];
    const node = this.h.clusterInfo().nodeName;
    const nsExists = (await this.h.kubectlResult(['get', 'namespace', DEMO_NAMESPACE])).code === 0;
    if (nsExists) {
      await this.kubectl(['-n', DEMO_NAMESPACE, 'delete', 'pods', '--all', '--grace-period=0', '--force', '--ignore-not-found', '--wait=false']).catch(() => undefined);
      await this.deleteReservations(controllerRunning);
      await this.kubectl(['delete', 'namespace', DEMO_NAMESPACE, '--wait=true', '--timeout=60s']).catch(() => undefined);
      done.push(`namespace ${DEMO_NAMESPACE}`);
    }
    const pools = await this.kubectl(['delete', 'pools', 'demo-local', 'demo-sim', '--ignore-not-found']).catch(() => '');
    if (pools.trim()) done.push('Pools');
    const sims = (await this.json<{ items: { metadata: { name: string } }[] }>(['get', 'nodes', '-l', `${DEMO_LABEL}=true`])).items.map((n) => n.metadata.name);
    if (sims.length) {
      await this.kubectl(['delete', 'nodedevices', '--ignore-not-found', '--wait=false', ...sims]);
      await this.h.removeSimulatedNodes(sims);
      done.push(`${sims.length} simulated nodes`);
    }
    await this.kubectl(['label', 'node', node, `${POOL_LABEL}-`]).catch(() => undefined);
    const policy = await this.kubectl(['delete', 'validatingadmissionpolicybinding,validatingadmissionpolicy', POLICY, '--ignore-not-found']).catch(() => '');
    if (policy.trim()) done.push('admission policy');
    if ((await this.h.kubectlResult(['get', 'namespace', CONTROLLER_NAMESPACE])).code === 0) {
      await this.kubectl(['delete', 'namespace', CONTROLLER_NAMESPACE, '--wait=true', '--timeout=60s']);
      done.push(`namespace ${CONTROLLER_NAMESPACE}`);
    }
    return done.length ? `removed ${done.join(', ')}` : 'nothing left behind';
  }

  /** Undoes everything start() did, in reverse order; every step is tried even when one fails. Idempotent. */
  stop(): Promise<void> {
    this.stopping ??= (async () => {
      const out = this.o.out;
      if (this.undo.length === 0) return;
      out('');
      out('Stopping and cleaning up:');
      const t0 = performance.now();
      const failures: string[] = [];
      for (const { what, fn } of this.undo.reverse()) {
        const t = performance.now();
        try {
          await Promise.race([fn(), new Promise((_, reject) => setTimeout(() => reject(new Error('timed out after 90s')), 90_000).unref())]);
          out(`  ok      ${what} (${seconds(performance.now() - t)})`);
        } catch (e) {
          failures.push(what);
          out(`  FAILED  ${what}: ${(e as Error).message}`);
        }
      }
      this.undo.length = 0;
      out(failures.length ? `Cleanup finished in ${seconds(performance.now() - t0)} with ${failures.length} failure(s); see ${this.logFile}` : `Cleaned up in ${seconds(performance.now() - t0)}.`);
      this.closeLog();
    })();
    return this.stopping;
  }
}
