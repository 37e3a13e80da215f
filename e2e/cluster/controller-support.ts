// Running `better-compute controller` replicas as child processes against the test cluster and a test database, for
// the controller suites (e2e/cluster/controller*.test.ts). Each replica's JSON log lines are kept for assertions.
import { type ChildProcess, spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { clusterInfo, kubectl, waitFor } from './harness.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');

export interface Replica {
  name: string;
  child: ChildProcess;
  logs: Record<string, unknown>[];
  url?: string;
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
}

/** Starts a replica; resolves once it serves HTTP. */
export async function startReplica(o: ReplicaOptions): Promise<Replica> {
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
  return replica;
}

/** The CRDs of crds/, applied and Established. */
export async function installCrds(): Promise<void> {
  await kubectl(['apply', '-k', path.join(ROOT, 'crds')]);
  await kubectl(['wait', '--for=condition=Established', '--timeout=60s', 'crd/pools.bettercompute.io', 'crd/reservations.bettercompute.io', 'crd/nodedevices.bettercompute.io']);
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
