import { acquireCluster, isClusterUp, releaseCluster } from './harness.ts';

// The `cluster` project's global setup: one cluster for the whole run, shared with any other test run on this machine.
// A cluster that is up (npm run cluster:up, or another run's) is reused; one that a test run started is taken down
// when the last run using it ends, unless BC_KEEP_CLUSTER=1 (see ctl.sh acquire/release). With BC_EXTERNAL_CLUSTER=1
// (e.g. kind, e2e/kind/run.sh) nothing is started or stopped.
export default async function setup(): Promise<() => Promise<void>> {
  if (process.env.BC_EXTERNAL_CLUSTER === '1') {
    if (!(await isClusterUp())) throw new Error('BC_EXTERNAL_CLUSTER=1, but the cluster at BC_KUBECONFIG does not answer');
    return async () => undefined;
  }
  const t0 = Date.now();
  await acquireCluster();
  process.stderr.write(`[cluster] ready after ${((Date.now() - t0) / 1000).toFixed(1)}s\n`);
  return () => releaseCluster();
}
