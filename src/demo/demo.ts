// `npm run demo`: the product on this machine, end to end, installed the way users install it. Brings up (or reuses)
// the local Kubernetes cluster of the cluster tests, builds the image offline (`npm run image`) and imports it into
// the cluster's containerd, installs deploy/overlays/trial with `kubectl apply -k` (the controller with its embedded
// PostgreSQL and kube-scheduler `better-compute-scheduler` beside it, the admission webhook and policies, the node
// agent DaemonSet; the agent reads 8 simulated GPUs instead of nvidia-smi), adds simulated GPU nodes, applies
// examples/ (Pools, Reservations, a pod of a Reservation, an on-demand pod), waits for them, and prints the
// Reservations and the capacity summary read from the capacity API with a tenant's token. Then it keeps running (or,
// with --once, stops) and on SIGINT/SIGTERM undoes everything it did, in reverse order.
import fs from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';
import { simulatedSpec } from '../agent/discovery.ts';
import { httpClient } from '../cli/capacity.ts';
import { renderSummary } from '../cli/render.ts';
import { loadHarness, loadInstaller, REPO_ROOT, type DemoHarness, type DemoInstaller } from './cluster.ts';
import { seconds, Steps } from './steps.ts';
import { systemClock } from '../clock.ts';

export const DEMO_NAMESPACE = 'demo-team-a';
export const DEMO_TENANT = 'team-a';
const POOL_LABEL = 'bettercompute.io/demo-pool';
const DEMO_LABEL = 'bettercompute.io/demo';
const EXAMPLES = path.join(REPO_ROOT, 'examples');

/** The process cluster's Kubernetes release, as pinned in e2e/cluster/versions.env (K8S_VERSION=v1.X.Y). */
function clusterK8sVersion(): string {
  const text = fs.readFileSync(path.join(REPO_ROOT, 'e2e', 'cluster', 'versions.env'), 'utf8');
  const m = /^K8S_VERSION=(v\d+\.\d+\.\d+)$/m.exec(text);
  if (!m) throw new Error('e2e/cluster/versions.env names no K8S_VERSION=v1.X.Y');
  return m[1]!;
}
/** What earlier versions of the demo made (an in-process controller's namespace and policy): removed if left behind. */
const OLD_NAMESPACE = 'better-compute-demo';
const OLD_POLICY = 'bettercompute-reservation-namespace';
const CONTROLLER_SERVICE = 'better-compute-controller';
/** Which objects of the installed product the demo's log keeps the logs of, when it stops. */
const PRODUCT_LOGS = [
  ['deployment/better-compute-controller', 'controller'],
  ['deployment/better-compute-controller', 'scheduler'],
  ['daemonset/better-compute-agent', 'agent'],
] as const;

export interface DemoOptions {
  /** Exit after printing (no keep-running part). */
  once: boolean;
  simulatedNodes: number;
  gpusPerNode: number;
  /** Where the demo keeps its log (default ~/.cache/better-compute/demo). */
  stateDir: string;
  out: (line: string) => void;
}

export interface DemoResult {
  /** The capacity API over TLS: the controller Service's ClusterIP, port 8443 (reachable from this host through kube-proxy). */
  url: string;
  /** The controller's CA (ConfigMap better-compute-ca), written here for --ca-file and curl --cacert. */
  caFile: string;
  /** The name the API's certificate carries (the Service's), for --tls-server-name. */
  serverName: string;
  /** /metrics over TLS on the same Service, port 9090. */
  metricsUrl: string;
  /** A token of ServiceAccount demo-team-a/capacity-reader (examples/capacity-reader.yaml) for audience bettercompute.io, valid for 24 h. */
  token: string;
  reservationsTable: string;
  summary: string;
  startupMs: number;
}

interface Rsv {
  metadata: { name: string };
  status?: { phase?: string; resourceName?: string; conditions?: { type: string; reason?: string; message?: string }[] };
}

/** The GPU calendar on the capacity API's listener, for the demo's tenant (src/ui/, docs/calendar.md). */
export const calendarAddress = (apiUrl: string) => `${apiUrl}/calendar?tenant=${DEMO_TENANT}`;

/** A YAML file of examples/ with ${VAR} filled in, as objects. */
export function exampleObjects(file: string, vars: Record<string, string> = {}): Record<string, unknown>[] {
  const text = fs.readFileSync(path.join(EXAMPLES, file), 'utf8').replace(/\$\{(\w+)\}/g, (m, name: string) => vars[name] ?? m);
  return YAML.parseAllDocuments(text)
    .map((d) => d.toJS() as Record<string, unknown> | null)
    .filter((o): o is Record<string, unknown> => o !== null);
}

/** Runs the demo; resolves once everything is up and printed, with `stop` to undo it. */
export class Demo {
  private readonly undo: { what: string; fn: () => Promise<unknown> }[] = [];
  private h!: DemoHarness;
  private logFile = '';
  private installer!: DemoInstaller;
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
    const steps = new Steps(10, out, () => this.cancelled);
    const t0 = systemClock.now();
    fs.mkdirSync(this.o.stateDir, { recursive: true });
    this.logFile = path.join(this.o.stateDir, 'demo.log');
    fs.writeFileSync(this.logFile, '');
    out(`Better Compute demo: the image build's output and, when it stops, the product's logs go to ${this.logFile}`);

    await steps.run('Checking prerequisites', (note) => this.checkPrerequisites(note));
    const reused = await steps.run('Kubernetes cluster (e2e/cluster: etcd, kube-apiserver, scheduler, kubelet, containerd)', (note) => this.upCluster(note));
    await steps.run('Removing what an earlier demo left behind', async (note) => {
      note(await this.cleanupObjects());
    });
    await steps.run('Building the image offline (npm run image; cached after the first build) and loading it into containerd', (note) => this.loadImages(note));
    await steps.run(`Installing: kubectl apply --server-side -k deploy/overlays/trial (the agent with ${this.o.gpusPerNode} simulated GPUs)`, (note) =>
      this.install(note),
    );
    const simNodes = await steps.run(`Adding ${this.o.simulatedNodes} simulated GPU nodes (${this.o.gpusPerNode} GPUs each, NodeDevices)`, (note) =>
      this.addSimulatedNodes(note),
    );
    await steps.run('Applying examples/namespace.yaml, capacity-reader.yaml and pools.yaml; waiting for the Pools', (note) => this.applyPools(note, simNodes));
    await steps.run('Applying examples/reservations.yaml; waiting until both are Reserved', (note) => this.applyReservations(note));
    await steps.run('Applying examples/pod-reservation.yaml and examples/pod-ondemand.yaml; waiting until they run', (note) => this.runPods(note));

    const startupMs = systemClock.now() - t0;
    const caFile = path.join(this.o.stateDir, 'ca.crt');
    const serverName = `${CONTROLLER_SERVICE}.${this.installer.SYSTEM_NS}.svc`;
    const { url, token, reservationsTable, summary } = await steps.run('Reading the Reservations, and the capacity summary from the capacity API', (note) =>
      this.readApi(note, caFile, serverName),
    );
    this.printUsage({ url, caFile, serverName, reservationsTable, summary, startupMs, reused });
    return { url, caFile, serverName, metricsUrl: url.replace(/:8443$/, ':9090'), token, reservationsTable, summary, startupMs };
  }

  private async checkPrerequisites(note: (line: string) => void): Promise<void> {
    if (process.getuid?.() !== 0) throw new Error('run as root (sudo -s): the kubelet, containerd and the CNI plugins need it');
    const major = Number(process.versions.node.split('.')[0]);
    if (major < 20) throw new Error(`Node.js >= 20 needed, this is ${process.version}`);
    this.h = await loadHarness();
    this.installer = await loadInstaller();
    note(`root, Node.js ${process.version}`);
  }

  /** Brings the cluster up, or reuses the one that is up (taking its turn on it); whether it was reused. */
  private async upCluster(note: (line: string) => void): Promise<boolean> {
    const h = this.h;
    const reused = await h.isClusterUp();
    const k8s = clusterK8sVersion();
    const bin = path.join(path.dirname(h.CLUSTER_DIR), `k8s-${k8s}`, 'bin', 'kubelet');
    if (!reused) {
      this.o.out(
        fs.existsSync(bin)
          ? '        bringing the cluster up (~15 s; progress below)'
          : `        first use on this machine: building Kubernetes ${k8s} and etcd from Go modules, then bringing the\n` +
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
    return reused;
  }

  /** The image, built offline (cached after the first build), loaded into containerd; the build's output to the log. */
  private async loadImages(note: (line: string) => void): Promise<void> {
    let last = '';
    const log = fs.openSync(this.logFile, 'a');
    try {
      await this.installer.loadImages((line) => {
        fs.writeSync(log, `${line}\n`);
        last = line;
      });
    } finally {
      fs.closeSync(log);
    }
    note(last.replace(/^load\.sh: /, '') || 'images loaded');
  }

  /** The product installed (deploy/overlays/trial), the cluster's node labelled into the local Pool. */
  private async install(note: (line: string) => void): Promise<void> {
    const c = this.h.clusterInfo();
    this.defer('uninstall the product (its logs to the demo log first)', async () => {
      await this.saveProductLogs();
      await this.installer.uninstallProduct();
    });
    const installed = await this.installer.installProduct({ gpus: this.o.gpusPerNode, imagesLoaded: true });
    await this.kubectl(['label', 'node', c.nodeName, `${POOL_LABEL}=local`, '--overwrite']);
    this.defer(`unlabel node ${c.nodeName}`, () => this.kubectl(['label', 'node', c.nodeName, `${POOL_LABEL}-`]));
    note(`controller, better-compute-scheduler and the agent on ${c.nodeName} Ready in ${installed.readySeconds.toFixed(1)}s`);
  }

  /** Simulated GPU nodes with their NodeDevices; their names. */
  private async addSimulatedNodes(note: (line: string) => void): Promise<string[]> {
    const h = this.h;
    const simNodes = await h.addSimulatedNodes(this.o.simulatedNodes, { [POOL_LABEL]: 'sim', [DEMO_LABEL]: 'true' }, {}, { prefix: 'demo-gpu' });
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
    return simNodes;
  }

  /** The demo's namespace, its capacity-reader and the Pools, waited for until they count their GPUs. */
  private async applyPools(note: (line: string) => void, simNodes: string[]): Promise<void> {
    const h = this.h;
    const ns = exampleObjects('namespace.yaml').map((o) => {
      const meta = o.metadata as { labels?: Record<string, string> };
      meta.labels = { ...meta.labels, [DEMO_LABEL]: 'true' };
      return o;
    });
    await h.apply(ns);
    this.defer(`delete namespace ${DEMO_NAMESPACE}`, () => this.kubectl(['delete', 'namespace', DEMO_NAMESPACE, '--ignore-not-found', '--wait=false']));
    await h.apply(exampleObjects('capacity-reader.yaml'));
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
  }

  /** The two Reservations of examples/, waited for until Reserved (a Failed one throws). */
  private async applyReservations(note: (line: string) => void): Promise<void> {
    const h = this.h;
    const tomorrow = new Date(systemClock.wallNow().getTime() + 86_400_000);
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
    note(`train-now: ${list.find((r) => r.metadata.name === 'train-now')?.status?.resourceName ?? '?'}`);
  }

  /** The pod of a Reservation and an on-demand pod, waited for until they run and log their atoms. */
  private async runPods(note: (line: string) => void): Promise<void> {
    const h = this.h;
    this.defer('delete the pods', () => this.kubectl(['-n', DEMO_NAMESPACE, 'delete', 'pods', '--all', '--grace-period=0', '--force', '--ignore-not-found', '--wait=false']));
    // The pod of train-now names it by label only; admission gives it train-now's resource and the scheduler.
    await h.apply([...exampleObjects('pod-reservation.yaml'), ...exampleObjects('pod-ondemand.yaml')]);
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
  }

  /** The Reservations as kubectl shows them, and the capacity summary read from the API with the tenant's token. */
  private async readApi(
    note: (line: string) => void,
    caFile: string,
    serverName: string,
  ): Promise<{ url: string; token: string; reservationsTable: string; summary: string }> {
    const reservationsTable = await this.kubectl(['-n', DEMO_NAMESPACE, 'get', 'reservations']);
    const ip = (await this.kubectl(['-n', this.installer.SYSTEM_NS, 'get', 'service', CONTROLLER_SERVICE, '-o', 'jsonpath={.spec.clusterIP}'])).trim();
    const url = `https://${ip}:8443`;
    const ca = await this.kubectl(['-n', this.installer.SYSTEM_NS, 'get', 'configmap', 'better-compute-ca', '-o', 'jsonpath={.data.ca\\.crt}']);
    fs.writeFileSync(caFile, ca);
    const token = (await this.kubectl(['-n', DEMO_NAMESPACE, 'create', 'token', 'capacity-reader', '--audience', 'bettercompute.io', '--duration=24h'])).trim();
    let summary = '';
    const client = httpClient(url, token, { ca, servername: serverName });
    try {
      // The rollup folds its deltas every few seconds: wait until it shows the bookings.
      const s = await this.h.waitFor(
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
    note(`${url}, as ServiceAccount ${DEMO_NAMESPACE}/capacity-reader`);
    return { url, token, reservationsTable, summary };
  }

  /** What the demo shows once up: the Reservations, the summary, and how to ask the API and open the calendar. */
  private printUsage(r: { url: string; caFile: string; serverName: string; reservationsTable: string; summary: string; startupMs: number; reused: boolean }): void {
    const out = this.o.out;
    const { url, caFile, serverName } = r;
    out('');
    out(`$ kubectl -n ${DEMO_NAMESPACE} get reservations`);
    out(r.reservationsTable.trimEnd());
    out('');
    out(
      `$ better-compute capacity --tenant ${DEMO_TENANT} --server ${url} --ca-file ${caFile} --tls-server-name ${serverName} --token "$(kubectl -n ${DEMO_NAMESPACE} create token capacity-reader --audience bettercompute.io)"`,
    );
    out(r.summary.trimEnd());
    out('');
    out(`GPU calendar: ${calendarAddress(url)} (sign in with the token of capacity-reader, docs/calendar.md)`);
    out('');
    out(`Started in ${seconds(r.startupMs)} (${r.reused ? 'cluster reused' : 'cluster brought up by the demo'}).`);
  }

  /** Stops start() before its next step (it then rejects with a StepError). */
  cancel(): void {
    this.cancelled = true;
  }

  /** What to tell the user while the demo keeps running. */
  addresses(r: DemoResult): string[] {
    const c = this.h.clusterInfo();
    const ns = this.installer.SYSTEM_NS;
    return [
      'Better Compute is running (installed in namespace ' + ns + '):',
      `  capacity API  POST ${r.url}/api/compute/capacity/{summary,byPool,preview,timeline}`,
      `                TOKEN=$(kubectl -n ${DEMO_NAMESPACE} create token capacity-reader --audience bettercompute.io)`,
      `                curl -s --cacert ${r.caFile} --connect-to ${r.serverName}:8443:${new URL(r.url).host} \\`,
      `                  -H "authorization: Bearer $TOKEN" -H 'content-type: application/json' \\`,
      `                  -d '{"tenantId":"${DEMO_TENANT}"}' https://${r.serverName}:8443/api/compute/capacity/summary`,
      `                npx better-compute capacity --tenant ${DEMO_TENANT} --server ${r.url} --ca-file ${r.caFile} \\`,
      `                  --tls-server-name ${r.serverName} --token "$TOKEN"`,
      `  calendar      ${calendarAddress(r.url)}  (in a browser; sign in with $TOKEN, docs/calendar.md)`,
      `  /metrics      ${r.metricsUrl}/metrics  (TLS: CA in Secret ${ns}/better-compute-tls, key ca.crt; a bearer`,
      `                token allowed to get the non-resource URL /metrics, deploy/monitoring/rbac.yaml)`,
      `  kubectl       export KUBECONFIG=${c.kubeconfig}`,
      `                ${c.kubectl} -n ${DEMO_NAMESPACE} get reservations,pods -o wide`,
      `                ${c.kubectl} -n ${ns} logs deploy/better-compute-controller -c controller`,
      `  logs          ${this.logFile} (the image build; the product's logs when the demo stops)`,
      'Press Ctrl-C to stop; the demo then removes everything it created.',
    ];
  }

  /** Appends the installed product's container logs to the demo's log (best effort). */
  private async saveProductLogs(): Promise<void> {
    const ns = this.installer.SYSTEM_NS;
    for (const [owner, container] of PRODUCT_LOGS) {
      const r = await this.h.kubectlResult(['-n', ns, 'logs', owner, '-c', container, '--tail=2000'], { timeoutMs: 30_000 });
      fs.appendFileSync(this.logFile, `\n===== kubectl -n ${ns} logs ${owner} -c ${container} =====\n${r.code === 0 ? r.stdout : r.stderr}`);
    }
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

  /** Removes what a crashed earlier run left (or this one's, as a last resort). Returns what it did. */
  private async cleanupObjects(): Promise<string> {
    const done: string[] = [];
    const exists = async (args: string[]) => (await this.h.kubectlResult(['get', ...args])).code === 0;
    const productInstalled = await exists(['namespace', this.installer.SYSTEM_NS]);
    if (await exists(['namespace', DEMO_NAMESPACE])) {
      await this.kubectl(['-n', DEMO_NAMESPACE, 'delete', 'pods', '--all', '--grace-period=0', '--force', '--ignore-not-found', '--wait=false']).catch(() => undefined);
      await this.deleteReservations(productInstalled);
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
    await this.kubectl(['label', 'node', this.h.clusterInfo().nodeName, `${POOL_LABEL}-`]).catch(() => undefined);
    if (productInstalled) {
      await this.installer.uninstallProduct();
      done.push('the installed product');
    }
    const policy = await this.kubectl(['delete', 'validatingadmissionpolicybinding,validatingadmissionpolicy', OLD_POLICY, '--ignore-not-found']).catch(() => '');
    if (policy.trim()) done.push('admission policy');
    if (await exists(['namespace', OLD_NAMESPACE])) {
      await this.kubectl(['delete', 'namespace', OLD_NAMESPACE, '--wait=true', '--timeout=60s']);
      done.push(`namespace ${OLD_NAMESPACE}`);
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
      const t0 = systemClock.now();
      const failures: string[] = [];
      for (const { what, fn } of this.undo.reverse()) {
        const t = systemClock.now();
        try {
          await Promise.race([fn(), new Promise((_, reject) => setTimeout(() => reject(new Error('timed out after 90s')), 90_000).unref())]);
          out(`  ok      ${what} (${seconds(systemClock.now() - t)})`);
        } catch (e) {
          failures.push(what);
          out(`  FAILED  ${what}: ${(e as Error).message}`);
        }
      }
      this.undo.length = 0;
      out(failures.length ? `Cleanup finished in ${seconds(systemClock.now() - t0)} with ${failures.length} failure(s)` : `Cleaned up in ${seconds(systemClock.now() - t0)}.`);
    })();
    return this.stopping;
  }
}
