// Running `better-compute controller` replicas as child processes against the test cluster and a test database, for
// the controller suites (e2e/cluster/controller*.test.ts). Each replica's JSON log lines are kept for assertions.
import { type ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import YAML from 'yaml';
import { issueBundle } from '../../src/controller/certs.ts';
import { apply, clusterInfo, defaultSchedulerConfig, kubectl, waitCondition, waitFor } from './harness.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');

export interface Replica {
  name: string;
  child: ChildProcess;
  logs: Record<string, unknown>[];
  /** The capacity API and health. */
  url?: string;
  /** The extender's prefix (`${extenderUrl}/scheduler/filter`). */
  extenderUrl?: string;
  /** HTTPS /metrics (TokenReview + SubjectAccessReview). */
  metricsUrl?: string;
  /** HTTPS webhooks. */
  webhookUrl?: string;
  /** The CA (PEM) that the HTTPS listeners' certificate chains to (with tls 'files'; with 'secret', read the Secret). */
  ca?: string;
  exited: Promise<number | null>;
  /** SIGTERM and wait (graceful); SIGKILL after 15 s. */
  stop(): Promise<void>;
  /** SIGKILL at once: no lease release, no cleanup. */
  kill(): Promise<void>;
  isLeader(): boolean;
}

export interface ReplicaOptions {
  name: string;
  databaseUrl: string;
  namespace: string;
  env?: Record<string, string>;
  /**
   * Where the HTTPS listeners' certificate comes from: 'files' (default; a CA and certificate for 127.0.0.1 and
   * localhost made once per test process, so that the namespace need not exist), or 'secret' (the controller makes
   * Secret better-compute-tls in `namespace`, which must exist). Either way the MutatingWebhookConfiguration it would
   * patch has a name of its own, so that an installed product's is left alone.
   */
  tls?: 'files' | 'secret';
}

let tlsFiles: { cert: string; key: string; ca: string; caPem: string } | undefined;
/** A CA and serving certificate for loopback, in files, made once per test process. */
export function loopbackTlsFiles(): { cert: string; key: string; ca: string; caPem: string } {
  if (tlsFiles) return tlsFiles;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bc-e2e-tls-'));
  const b = issueBundle(Date.now(), ['localhost', '127.0.0.1']);
  const files = { cert: path.join(dir, 'tls.crt'), key: path.join(dir, 'tls.key'), ca: path.join(dir, 'ca.crt'), caPem: b.caCert };
  fs.writeFileSync(files.cert, b.cert);
  fs.writeFileSync(files.key, b.key, { mode: 0o600 });
  fs.writeFileSync(files.ca, b.caCert);
  process.on('exit', () => fs.rmSync(dir, { recursive: true, force: true }));
  tlsFiles = files;
  return files;
}

/** Starts a replica; resolves once it serves HTTP. */
export async function startReplica(o: ReplicaOptions): Promise<Replica> {
  const files = (o.tls ?? 'files') === 'files' ? loopbackTlsFiles() : undefined;
  const tlsEnv: Record<string, string> = files ? { TLS_CERT_FILE: files.cert, TLS_KEY_FILE: files.key, TLS_CA_FILE: files.ca } : {};
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', 'controller'], {
    cwd: ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: {
      PATH: process.env.PATH ?? '',
      HOME: process.env.HOME ?? '/root',
      DATABASE_URL: o.databaseUrl,
      KUBECONFIG: clusterInfo().kubeconfig,
      BETTER_COMPUTE_NAMESPACE: o.namespace,
      POD_NAME: o.name,
      HOST: '127.0.0.1',
      PORT: '0',
      EXTENDER_PORT: '0',
      METRICS_PORT: '0',
      WEBHOOK_PORT: '0',
      TLS_EXTRA_SANS: 'localhost,127.0.0.1',
      BETTER_COMPUTE_WEBHOOK_CONFIGURATION: `${o.name}-e2e-none`,
      ...tlsEnv,
      LOG_LEVEL: 'info',
      BETTER_COMPUTE_LEASE_DURATION: '3s',
      BETTER_COMPUTE_RENEW_DEADLINE: '2s',
      BETTER_COMPUTE_RETRY_PERIOD: '1s',
      BETTER_COMPUTE_CAPACITY_REFRESH: '1s',
      BETTER_COMPUTE_FOLD_EVERY: '1s',
      BETTER_COMPUTE_PENDING_MAX_BACKOFF: '5s',
      BETTER_COMPUTE_WATCH_TIMEOUT: '30s',
      BETTER_COMPUTE_WATCH_LIVENESS: '45s',
      ...o.env,
    },
  });
  const logs: Record<string, unknown>[] = [];
  let buf = '';
  const onData = (d: string) => {
    buf += d;
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      try {
        logs.push(JSON.parse(line) as Record<string, unknown>);
      } catch {
        logs.push({ msg: 'raw', line });
      }
      if (process.env.BC_CONTROLLER_LOGS === '1') process.stderr.write(`[${o.name}] ${line}\n`);
    }
  };
  child.stdout!.setEncoding('utf8').on('data', onData);
  child.stderr!.setEncoding('utf8').on('data', onData);
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  let leader = false;
  const replica: Replica = {
    name: o.name,
    child,
    logs,
    exited,
    isLeader() {
      for (const l of logs) {
        if (l.msg === 'took the ledger fence') leader = true;
        if (l.msg === 'lost leadership') leader = false;
      }
      return leader && child.exitCode === null && child.signalCode === null;
    },
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM');
      const t = setTimeout(() => child.kill('SIGKILL'), 15_000);
      await exited;
      clearTimeout(t);
    },
    async kill() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGKILL');
      await exited;
    },
  };
  const started = await waitFor(
    `controller ${o.name} listening`,
    () => {
      if (child.exitCode !== null) throw new Error(`controller ${o.name} exited ${child.exitCode}: ${JSON.stringify(logs.slice(-5))}`);
      return logs.find((l) => l.msg === 'controller started');
    },
    { timeoutMs: 60_000, intervalMs: 100 },
  );
  replica.url = started.url as string;
  replica.extenderUrl = started.extenderUrl as string;
  replica.metricsUrl = started.metricsUrl as string;
  replica.webhookUrl = started.webhookUrl as string;
  if (files) replica.ca = files.caPem;
  return replica;
}

/** The CRDs of crds/, applied and Established. */
export async function installCrds(): Promise<void> {
  await kubectl(['apply', '-k', path.join(ROOT, 'crds')]);
  await waitCondition(['crd/pools.bettercompute.io', 'crd/reservations.bettercompute.io', 'crd/nodedevices.bettercompute.io'], 'Established');
}

/** n GPUs for a NodeDevices spec: GPU-<node>-<i>, H100 80 GiB, NUMA by half. */
export function gpus(node: string, n: number) {
  return Array.from({ length: n }, (_, i) => ({
    uuid: `GPU-${node}-${i}`,
    product: 'NVIDIA H100 80GB HBM3',
    model: 'H100',
    vramGiB: 80,
    numaNode: i < n / 2 ? 0 : 1,
    nvlinkDomain: `${node}-nvl`,
    healthy: true,
  }));
}

/**
 * A bearer token for `/metrics`: ServiceAccount `name` in `namespace` (which must exist), bound (allowed) or not to a
 * ClusterRole that may get the non-resource URL /metrics, as a Prometheus would be. Returns the token and a cleanup.
 */
export async function metricsToken(namespace: string, name: string, allowed: boolean): Promise<{ token: string; cleanup(): Promise<void> }> {
  const role = `${namespace}-${name}-metrics`;
  await apply([
    { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name, namespace } },
    ...(allowed
      ? [
          { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRole', metadata: { name: role }, rules: [{ nonResourceURLs: ['/metrics'], verbs: ['get'] }] },
          {
            apiVersion: 'rbac.authorization.k8s.io/v1',
            kind: 'ClusterRoleBinding',
            metadata: { name: role },
            roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: role },
            subjects: [{ kind: 'ServiceAccount', name, namespace }],
          },
        ]
      : []),
  ]);
  const token = (await kubectl(['-n', namespace, 'create', 'token', name, '--duration=10m'])).trim();
  return {
    token,
    async cleanup() {
      if (allowed) await kubectl(['delete', 'clusterrolebinding,clusterrole', role, '--ignore-not-found']);
      await kubectl(['-n', namespace, 'delete', 'serviceaccount', name, '--ignore-not-found']);
    },
  };
}


/** The KubeSchedulerConfiguration of deploy/scheduler/, pointed at an extender on `url` (plain HTTP, loopback). */
export function schedulerConfigWithExtender(url: string): string {
  const base = YAML.parse(defaultSchedulerConfig()) as Record<string, unknown>;
  const deploy = YAML.parse(fs.readFileSync(path.join(ROOT, 'deploy', 'scheduler', 'scheduler-config.yaml'), 'utf8')) as {
    extenders: Record<string, unknown>[];
    profiles: { pluginConfig: unknown[] }[];
  };
  const extenders = deploy.extenders.map((e) => ({ ...e, urlPrefix: url, enableHTTPS: false, tlsConfig: undefined }));
  const profiles = (base.profiles as Record<string, unknown>[]).map((p) => ({ ...p, pluginConfig: deploy.profiles[0]!.pluginConfig }));
  return YAML.stringify({ ...base, extenders, profiles });
}
