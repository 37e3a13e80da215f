// `npm run demo [-- --once] [-- --nodes N] [-- --gpus N]`: see demo.ts. Exit codes: 0 after a clean stop, 1 when a
// step failed (everything done so far is undone first), 130 on a second Ctrl-C (no cleanup).
import { spawn } from 'node:child_process';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Demo } from './demo.ts';
import { StepError } from './steps.ts';
import { systemClock } from '../clock.ts';

const HELP = `usage: npm run demo [-- options]

Brings up the local cluster (building Kubernetes on first use), builds the image offline, installs the product with
kubectl apply -k deploy/overlays/trial (the node agent with simulated GPUs), adds simulated GPU nodes; applies
examples/; prints the Reservations and the capacity summary; keeps running until Ctrl-C, then removes everything it
created (the cluster too, if the demo started it).

options:
  --once         stop and clean up right after printing
  --nodes N      simulated GPU nodes besides the real one (default 3)
  --gpus N       GPUs per node (default 8)
  --state DIR    where the demo's log goes (default ~/.cache/better-compute/demo)
`;

async function main(): Promise<number> {
  const { values } = parseArgs({
    options: {
      once: { type: 'boolean', default: false },
      nodes: { type: 'string', default: '3' },
      gpus: { type: 'string', default: '8' },
      state: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) {
    process.stdout.write(HELP);
    return 0;
  }
  const out = (line: string) => process.stdout.write(`${line}\n`);
  const demo = new Demo({
    once: values.once,
    simulatedNodes: Number(values.nodes),
    gpusPerNode: Number(values.gpus),
    stateDir: values.state ?? path.join(process.env.BC_CACHE ?? path.join(os.homedir(), '.cache', 'better-compute'), 'demo'),
    out,
  });

  let signalled: ((s: NodeJS.Signals) => void) | undefined;
  const stopped = new Promise<NodeJS.Signals>((resolve) => (signalled = resolve));
  // From the supervisor (below): SIGUSR2 = stop and clean up, SIGUSR1 = exit at once.
  process.on('SIGUSR2', () => {
    out('\nstopping... (Ctrl-C again to exit at once)');
    signalled?.('SIGUSR2');
  });
  process.on('SIGUSR1', () => {
    out('exiting without cleaning up (run npm run demo again to remove what is left)');
    process.exit(130);
  });

  let interrupted = false;
  void stopped.then(() => {
    interrupted = true;
    demo.cancel();
  });
  try {
    // A signal during start-up lets the current step finish, skips the rest, then undoes what was done.
    const result = await demo.start();
    if (!values.once && !interrupted) {
      out('');
      for (const line of demo.addresses(result)) out(line);
      await stopped;
    }
    await demo.stop();
    return 0;
  } catch (e) {
    if (interrupted) {
      await demo.stop();
      return 130;
    }
    out('');
    out(e instanceof StepError ? `The demo failed at "${e.step}": ${(e.cause as Error)?.message ?? String(e.cause)}` : `The demo failed: ${(e as Error).stack ?? String(e)}`);
    await demo.stop();
    return 1;
  }
}

/**
 * The demo runs in a child process of its own process group, so that Ctrl-C (which signals the terminal's whole
 * foreground group) reaches neither it nor the kubectl, build and cluster scripts it runs: they would stop half-way,
 * and the cleanup needs kubectl. This supervisor turns the first SIGINT/SIGTERM into an orderly stop (SIGUSR2) and a
 * later one into an immediate exit.
 */
function supervise(): void {
  const child = spawn(process.execPath, [...process.execArgv, fileURLToPath(import.meta.url), ...process.argv.slice(2)], {
    detached: true,
    stdio: 'inherit',
    env: { ...process.env, BC_DEMO_CHILD: '1' },
  });
  // npm and tsx relay a Ctrl-C to this process as well: repeats within 2 s count as one.
  let first: number | undefined;
  const onSignal = () => {
    if (first !== undefined && systemClock.now() - first < 2000) return;
    if (first === undefined) {
      first = systemClock.now();
      child.kill('SIGUSR2');
    } else {
      child.kill('SIGUSR1');
      setTimeout(() => {
        try {
          process.kill(-child.pid!, 'SIGKILL');
        } catch {
          // already gone
        }
      }, 3000).unref();
    }
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  process.on('SIGHUP', onSignal);
  child.on('exit', (code, signal) => process.exit(code ?? (signal ? 130 : 1)));
}

if (process.env.BC_DEMO_CHILD !== '1') supervise();
else
  main().then(
  (code) => process.exit(code),
  (e: unknown) => {
    process.stderr.write(`demo: ${(e as Error).stack ?? String(e)}\n`);
    process.exit(1);
  },
);
