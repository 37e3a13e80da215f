import { clusterDown, clusterUp, isClusterUp } from './harness.ts';

// The `cluster` project's global setup: one cluster for the whole run. A cluster that is already up (npm run cluster:up,
// or a previous run with BC_KEEP_CLUSTER=1) is reused and left running; one started here is taken down at the end
// unless BC_KEEP_CLUSTER=1. With BC_EXTERNAL_CLUSTER=1 (e.g. kind) nothing is started or stopped.
export default async function setup(): Promise<() => Promise<void>> {
  if (process.env.BC_EXTERNAL_CLUSTER === '1') {
    if (!(await isClusterUp())) throw new Error('BC_EXTERNAL_CLUSTER=1, but the cluster at BC_KUBECONFIG does not answer');
    return async () => undefined;
  }
  if (await isClusterUp()) {
    process.stderr.write('[cluster] reusing the test cluster that is up\n');
    return async () => undefined;
  }
  const t0 = Date.now();
  await clusterUp();
  process.stderr.write(`[cluster] up in ${((Date.now() - t0) / 1000).toFixed(1)}s\n`);
  return async () => {
    if (process.env.BC_KEEP_CLUSTER === '1') {
      process.stderr.write('[cluster] BC_KEEP_CLUSTER=1: leaving the test cluster up (npm run cluster:down)\n');
      return;
    }
    await clusterDown();
  };
}
