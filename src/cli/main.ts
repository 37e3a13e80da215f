// The `better-compute` command.
import { parseArgs } from 'node:util';
import { loadConfig } from '../config.ts';
import { openDatabase } from '../db/connect.ts';
import { migrateSchema } from '../db/migrate.ts';
import { createLogger } from '../log.ts';
import { capacityCommand } from './capacity.ts';
import { createProgress, openingStep } from './progress.ts';
import { serveCommand } from './serve.ts';
import { usageCommand } from './usage.ts';

/** How the command is called: `better-compute`, or `kubectl bettercompute` as a kubectl plugin (bin/kubectl-bettercompute.js). */
const PROG = process.env.BETTER_COMPUTE_PROG ?? 'better-compute';

const USAGE = `usage: ${PROG} <command> [options]

commands:
  migrate            apply the database migrations (embedded PostgreSQL unless DATABASE_URL is set)
  serve              run the capacity API and /metrics (migrates first; see serve --help)
  controller         run the controller: reservations, pools, nodes and inventory from Kubernetes (see docs/operations.md)
  agent              run the node agent: device discovery, NodeDevices, kubelet device plugins (see agent --help)
  capacity           capacity summary, pool rows, placement preview, GPU timeline, quota, per domain (see capacity --help)
  usage              hourly usage windows: GPU-hours and more per pool and resource over a period (see usage --help)
  reservations       a tenant's reservations: list, get, preview of a Reservation file, confirm (see reservations --help)

Listing and get commands take -o table|wide|json|yaml. As a kubectl plugin: kubectl bettercompute <command> ...
`;

type Command = (argv: string[]) => Promise<number>;

const commands: Record<string, Command> = {
  async migrate(argv) {
    const { values } = parseArgs({ args: argv, options: { output: { type: 'string', short: 'o' }, progress: { type: 'boolean' } } });
    const config = loadConfig();
    const progress = createProgress({ flag: values.progress, isTTY: process.stderr.isTTY, write: (t) => process.stderr.write(t) });
    progress.step(openingStep(config));
    const database = await openDatabase(config);
    try {
      const client = await database.db.connect();
      try {
        progress.step('applying the migrations');
        const { migrations: applied, functions } = await migrateSchema(client);
        progress.done();
        if (values.output === 'json') console.log(JSON.stringify({ applied, functions }));
        else if (!applied.length && !functions.length) console.log('schema is up to date');
        else {
          if (applied.length) console.log(`applied migrations ${applied.join(', ')}`);
          if (functions.length) console.log(`applied functions ${functions.join(', ')}`);
        }
      } finally {
        client.release();
      }
    } finally {
      await database.close();
    }
    return 0;
  },
  serve: (argv) => serveCommand(argv, loadConfig()),
  async controller() {
    const config = loadConfig();
    const { controllerCommand } = await import('../controller/run.ts');
    return controllerCommand(config, createLogger({ level: config.logLevel }));
  },
  async agent(argv) {
    const config = loadConfig();
    const { agentCommand } = await import('./agent.ts');
    return agentCommand(argv, config, createLogger({ level: config.logLevel }));
  },
  capacity: (argv) =>
    capacityCommand(argv, loadConfig(), {
      stdout: (text) => process.stdout.write(text),
      stderr: (text) => process.stderr.write(text),
      stderrIsTTY: process.stderr.isTTY,
    }),
  usage: (argv) =>
    usageCommand(argv, loadConfig(), {
      stdout: (text) => process.stdout.write(text),
      stderr: (text) => process.stderr.write(text),
      stderrIsTTY: process.stderr.isTTY,
    }),
  async reservations(argv) {
    // Loaded on use: it brings the Kubernetes client (Reservation names) and the reconciler's translation.
    const { reservationsCommand } = await import('./reservations.ts');
    return reservationsCommand(argv, loadConfig(), {
      stdout: (text) => process.stdout.write(text),
      stderr: (text) => process.stderr.write(text),
      stderrIsTTY: process.stderr.isTTY,
    });
  },
};

async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (!name || name === '--help' || name === '-h' || name === 'help') {
    process.stdout.write(USAGE);
    return name ? 0 : 2;
  }
  const command = commands[name];
  if (!command) {
    process.stderr.write(`unknown command: ${name}\n${USAGE}`);
    return 2;
  }
  return command(rest);
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (e: unknown) => {
    const err = e as { code?: string; message?: string };
    process.stderr.write(`error${err.code ? ` ${err.code}` : ''}: ${err.message ?? String(e)}\n`);
    process.exit(1);
  },
);
