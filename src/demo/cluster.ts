// The demo drives the local cluster through the cluster tests' harness (e2e/cluster/harness.ts): the same up/down
// scripts, the same lock that lets test runs take turns, the same simulated nodes. The harness lives outside src/
// (the build's rootDir), so it is loaded at run time; e2e/cluster/demo.test.ts checks that it satisfies this type.
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

export const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');

export interface DemoClusterInfo {
  dir: string;
  kubeconfig: string;
  kubectl: string;
  schedulerConfigFile: string;
  nodeName: string;
  devicePluginDir: string;
  podResourcesSocket: string;
  busyboxImage: string;
  local: boolean;
}

export interface DemoHarness {
  CLUSTER_DIR: string;
  clusterInfo(): DemoClusterInfo;
  isClusterUp(): Promise<boolean>;
  acquireCluster(): Promise<void>;
  releaseCluster(): Promise<void>;
  kubectl(args: string[], opts?: { input?: string; timeoutMs?: number }): Promise<string>;
  kubectlResult(args: string[], opts?: { input?: string; timeoutMs?: number }): Promise<{ code: number; stdout: string; stderr: string }>;
  apply(manifest: string | object | object[]): Promise<string>;
  waitFor<T>(what: string, fn: () => Promise<T | undefined | false> | T | undefined | false, opts?: { timeoutMs?: number; intervalMs?: number }): Promise<T>;
  addSimulatedNodes(n: number, labels?: Record<string, string>, capacity?: Record<string, string>, opts?: { prefix?: string }): Promise<string[]>;
  removeSimulatedNodes(names?: string[]): Promise<void>;
  defaultSchedulerConfig(): string;
  restartScheduler(configYaml?: string): Promise<void>;
}

export async function loadHarness(): Promise<DemoHarness> {
  const file = path.join(REPO_ROOT, 'e2e', 'cluster', 'harness.ts');
  return (await import(pathToFileURL(file).href)) as DemoHarness;
}
