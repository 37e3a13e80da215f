// `npm run demo [-- --once] [-- --nodes N] [-- --port P]`: see demo.ts. Exit codes: 0 after a clean stop, 1 when a
// step failed (everything done so far is undone first), 130 on a second Ctrl-C (no cleanup).
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { Demo } from './demo.ts';
import { StepError } from './steps.ts';

const HELP = `usage: npm run demo [-- options]

Brings up the local cluster (building Kubernetes on first use), the controller, the agent with simulated GPUs and
simulated GPU nodes; applies examples/; prints the Reservations and the capacity summary; keeps running until Ctrl-C,
then removes everything it created (the cluster too, if the demo started it).

options:
  --once         stop and clean up right after printing
  --nodes N      simulated GPU nodes besides the real one (default 3)
  --gpus N       GPUs per node (default 8)
  --port P       the controller's HTTP port (default 8080, or any free one)
  --state DIR    logs, token file, PostgreSQL data (default ~/.cache/better-compute/demo)
`;

async function main(): Promise<number> {
  const { values } = parseArgs({
    options: {
      once: { type: 'boolean', default: false },
      nodes: { type: 'string', default: '3' },
      gpus: { type: 'string', default: '8' },
      port: { type: 'string' },
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
    ...(values.port ? { port: Number(values.port) } : {}),
    stateDir: values.state ?? path.join(process.env.BC_CACHE ?? path.join(os.homedir(), '.cache', 'better-compute'), 'demo'),
    out,
  });

  let signalled: ((s: NodeJS.Signals) => void) | undefined;
  const stopped = new Promise<NodeJS.Signals>((resolve) => (signalled = resolve));
  let signals = 0;
  const onSignal = (s: NodeJS.Signals) => {
    if (++signals > 1) {
      out(`second ${s}: exiting without cleaning up (run npm run demo again to remove what is left)`);
      process.exit(130);
    }
    out(`\n${s}: stopping...`);
    signalled?.(s);
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);

  try {
    const result = await Promise.race([demo.start(), stopped.then(() => undefined)]);
    if (result && !values.once) {
      out('');
      for (const line of demo.addresses(result)) out(line);
      await stopped;
    }
    await demo.stop();
    return 0;
  } catch (e) {
    out('');
    out(e instanceof StepError ? `The demo failed at "${e.step}": ${(e.cause as Error)?.message ?? String(e.cause)}` : `The demo failed: ${(e as Error).stack ?? String(e)}`);
    await demo.stop();
    return 1;
  }
}

main().then(
  (code) => process.exit(code),
  (e: unknown) => {
    process.stderr.write(`demo: ${(e as Error).stack ?? String(e)}\n`);
    process.exit(1);
  },
);
