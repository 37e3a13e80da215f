// `better-compute agent`: runs the node agent until SIGINT/SIGTERM, then stops its endpoints and closes the database.
import { parseArgs } from 'node:util';
import type { Config } from '../config.ts';
import { DbClock } from '../db/clock.ts';
import { openDatabase } from '../db/connect.ts';
import { loadKubeConfig } from '../extender/kube.ts';
import type { Logger } from '../log.ts';
import { Agent } from './agent.ts';
import { fileSource, nvidiaSmiSource } from './discovery.ts';

const HELP = `usage: better-compute agent [--node NAME] [--devices-file FILE] [--nvidia-smi PATH]

Environment: NODE_NAME, BETTER_COMPUTE_DEVICES_FILE (simulated GPUs: a NodeDevices spec as JSON; else nvidia-smi),
BETTER_COMPUTE_DEVICE_PLUGIN_DIR (/var/lib/kubelet/device-plugins), BETTER_COMPUTE_POD_RESOURCES_SOCKET
(/var/lib/kubelet/pod-resources/kubelet.sock), DATABASE_URL, KUBECONFIG (else in-cluster).
`;

export async function agentCommand(argv: string[], config: Config, log: Logger): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      node: { type: 'string' },
      'devices-file': { type: 'string' },
      'nvidia-smi': { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) {
    process.stdout.write(HELP);
    return 0;
  }
  const nodeName = values.node ?? config.nodeName;
  if (!nodeName) {
    process.stderr.write(`the agent needs its node's name (NODE_NAME or --node)\n${HELP}`);
    return 2;
  }
  const file = values['devices-file'] ?? config.devicesFile;
  const source = file ? fileSource(file) : nvidiaSmiSource(nodeName, values['nvidia-smi'] ?? 'nvidia-smi');
  const database = await openDatabase(config, { migrate: false, poolSize: 4 });
  const clock = await DbClock.create(database.db);
  const agent = new Agent({
    nodeName,
    devicePluginDir: config.devicePluginDir,
    podResourcesSocket: config.podResourcesSocket,
    source,
    db: database.db,
    clock,
    log,
    kubeConfig: loadKubeConfig(config.kubeconfig),
  });
  await agent.start();
  const resync = setInterval(() => void clock.sync().catch(() => undefined), 60_000);
  await new Promise<void>((resolve) => {
    process.once('SIGINT', resolve);
    process.once('SIGTERM', resolve);
  });
  clearInterval(resync);
  log.info('agent shutting down');
  await agent.stop();
  await database.close();
  return 0;
}
