// The demo drives the local cluster through the cluster tests' harness (e2e/cluster/harness.ts): the same up/down
// scripts, the same lock that lets test runs take turns, the same simulated nodes; and installs the product the way the
// cluster tests do (e2e/cluster/install.ts: the image built offline, `kubectl apply -k deploy/overlays/trial`). Both
// live outside src/ (the build's rootDir), so they are loaded at run time; e2e/cluster/demo.test.ts checks that they
// satisfy these types.
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

export const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');

export interface DemoClusterInfo {
  dir: string;
  kubeconfig: string;
  kubectl: string;
  nodeName: string;
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
}

export interface DemoInstaller {
  SYSTEM_NS: string;
  loadImages(progress?: (line: string) => void): Promise<void>;
  installProduct(opts?: { gpus?: number; imagesLoaded?: boolean }): Promise<{ readySeconds: number }>;
  uninstallProduct(): Promise<void>;
}

async function load<T>(file: string): Promise<T> {
  // The demo's one edge out of src/ (outside the build's rootDir, so found at run time), checked by demo.test.ts.
  // eslint-disable-next-line bc/folders
  return (await import(pathToFileURL(path.join(REPO_ROOT, 'e2e', 'cluster', file)).href)) as T;
}

export const loadHarness = () => load<DemoHarness>('harness.ts');
export const loadInstaller = () => load<DemoInstaller>('install.ts');
