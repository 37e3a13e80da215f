// Kueue on the process cluster, for e2e/cluster/kueue.test.ts (docs/adr/0041-kueue-admission-check.md): the manager
// built offline (build-kueue.sh), its CRDs applied from the module, and the manager run as a host process with the
// admin kubeconfig, like the cluster's own components (this cluster has no image registry, and a pod would need an
// image of Kueue built without Docker). Its webhooks are off: no ValidatingWebhookConfiguration or
// MutatingWebhookConfiguration is installed and internalCertManagement is disabled, so Jobs are created suspended by
// their authors (what Kueue's defaulting webhook would do). Its webhook server still starts (controller-runtime starts
// it with the manager) on loopback with a throwaway certificate nobody calls.
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { promisify } from 'node:util';
import { CLUSTER_SCRIPTS_DIR, apply, clusterInfo, kubectlResult, waitCondition, waitFor } from './harness.ts';

export const KUEUE_NS = 'kueue-system';
const METRICS_CERT_DIR = '/etc/kueue/metrics/certs';

export interface RunningKueue {
  logFile: string;
  stop(): Promise<void>;
}

/** Builds Kueue once (cached under ~/.cache/better-compute/kueue-<version>/); the output directory. */
export async function buildKueue(): Promise<string> {
  const { stdout } = await promisify(execFile)('bash', [path.join(CLUSTER_SCRIPTS_DIR, 'build-kueue.sh')], { maxBuffer: 16 * 1024 * 1024, timeout: 3_600_000 });
  return stdout.trim();
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const port = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(port));
    });
    s.on('error', reject);
  });
}

/** The manager's Configuration: Jobs only, the Reservation label copied from Job to Workload, webhooks unreachable. */
function configYaml(o: { health: number; webhook: number; certDir: string }): string {
  return JSON.stringify({
    apiVersion: 'config.kueue.x-k8s.io/v1beta2',
    kind: 'Configuration',
    namespace: KUEUE_NS,
    health: { healthProbeBindAddress: `127.0.0.1:${o.health}` },
    metrics: { bindAddress: '0' },
    webhook: { port: o.webhook, host: '127.0.0.1', certDir: o.certDir },
    leaderElection: { leaderElect: false },
    internalCertManagement: { enable: false },
    integrations: { frameworks: ['batch/job'], labelKeysToCopy: ['bettercompute.io/reservation', 'bettercompute.io/pool'] },
  });
}

async function selfSignedCert(dir: string): Promise<void> {
  await promisify(execFile)('openssl', [
    'req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', '/CN=kueue-webhook.local',
    '-keyout', path.join(dir, 'tls.key'), '-out', path.join(dir, 'tls.crt'),
  ]);
}

/** Applies Kueue's CRDs and starts its manager; resolves once its readiness probe answers. */
export async function startKueue(out: string): Promise<RunningKueue> {
  const c = clusterInfo();
  const r = await kubectlResult(['apply', '--server-side', '--force-conflicts', '-f', path.join(out, 'manifests', 'crds.yaml')], { timeoutMs: 120_000 });
  if (r.code !== 0) throw new Error(`applying Kueue's CRDs failed: ${r.stderr}`);
  await waitCondition(['crd/workloads.kueue.x-k8s.io', 'crd/admissionchecks.kueue.x-k8s.io', 'crd/clusterqueues.kueue.x-k8s.io'], 'Established');
  await apply({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: KUEUE_NS } });
  const dir = fs.mkdtempSync(path.join(c.dir, 'kueue-'));
  const certDir = path.join(dir, 'certs');
  fs.mkdirSync(certDir);
  await selfSignedCert(certDir);
  // With internalCertManagement off, v0.17 reads its metrics server's certificate from this fixed path (main.go), even
  // with metrics off: the same throwaway certificate, on this test machine only.
  fs.mkdirSync(METRICS_CERT_DIR, { recursive: true });
  for (const f of ['tls.crt', 'tls.key']) fs.copyFileSync(path.join(certDir, f), path.join(METRICS_CERT_DIR, f));
  const health = await freePort();
  fs.writeFileSync(path.join(dir, 'config.yaml'), configYaml({ health, webhook: await freePort(), certDir }));
  const logFile = path.join(c.dir, 'logs', 'kueue.log');
  fs.mkdirSync(path.dirname(logFile), { recursive: true });
  const log = fs.openSync(logFile, 'w');
  const child: ChildProcess = spawn(path.join(out, 'bin', 'kueue'), ['--config', path.join(dir, 'config.yaml'), '--feature-gates=VisibilityOnDemand=false'], {
    env: { ...process.env, KUBECONFIG: c.kubeconfig },
    stdio: ['ignore', log, log],
  });
  let exited: string | undefined;
  child.on('exit', (code, signal) => (exited = `exited with ${code ?? signal}`));
  await waitFor(
    'the Kueue manager ready',
    async () => {
      if (exited) throw new Error(`kueue ${exited}:\n${fs.readFileSync(logFile, 'utf8').slice(-3000)}`);
      const res = await fetch(`http://127.0.0.1:${health}/readyz`).catch(() => undefined);
      return res?.ok;
    },
    { timeoutMs: 90_000, intervalMs: 500 },
  ).catch((e: unknown) => {
    child.kill('SIGKILL');
    throw e;
  });
  return {
    logFile,
    async stop() {
      if (!exited) {
        const gone = new Promise((r) => child.once('exit', r));
        child.kill('SIGTERM');
        await Promise.race([gone, new Promise((r) => setTimeout(r, 10_000))]);
        if (!exited) child.kill('SIGKILL');
      }
      fs.closeSync(log);
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Removes Kueue's CRDs (and with them every Kueue object) and its namespace: the other suites never see Kueue. */
export async function removeKueue(out: string): Promise<void> {
  await kubectlResult(['delete', '--ignore-not-found', '--wait=true', '--timeout=120s', '-f', path.join(out, 'manifests', 'crds.yaml')], { timeoutMs: 130_000 });
  await kubectlResult(['delete', 'namespace', KUEUE_NS, '--ignore-not-found', '--wait=true', '--timeout=60s'], { timeoutMs: 70_000 });
}
