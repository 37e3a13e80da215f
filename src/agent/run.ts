// `better-compute agent`: runs the node agent until SIGINT/SIGTERM, then stops its endpoints. It reads the ledger only
// through the controller's agent API (no database credentials).
import { parseArgs } from 'node:util';
import type { Config } from '../config.ts';
import { kubeConfigFrom } from '../controller/kube.ts';
import type { Logger } from '../log.ts';
import { Agent } from './agent.ts';
import { ControllerClient } from './controller-client.ts';
import { fileSource, nvidiaSmiSource } from './discovery.ts';

const HELP = `usage: better-compute agent [--node NAME] [--devices-file FILE] [--nvidia-smi PATH]

Environment: NODE_NAME, BETTER_COMPUTE_DEVICES_FILE (simulated GPUs: a NodeDevices spec as JSON; else nvidia-smi),
BETTER_COMPUTE_DEVICE_PLUGIN_DIR (/var/lib/kubelet/device-plugins), BETTER_COMPUTE_POD_RESOURCES_SOCKET
(/var/lib/kubelet/pod-resources/kubelet.sock), KUBECONFIG (else in-cluster; for NodeDevices),
BETTER_COMPUTE_CONTROLLER_URL (else https://$BETTER_COMPUTE_CONTROLLER_SERVICE_HOST:$BETTER_COMPUTE_CONTROLLER_SERVICE_PORT_WEBHOOK),
BETTER_COMPUTE_CONTROLLER_CA_FILE (/etc/better-compute/ca/ca.crt), BETTER_COMPUTE_CONTROLLER_SERVER_NAME
(better-compute-controller.<namespace>.svc), BETTER_COMPUTE_AGENT_TOKEN_FILE
(/var/run/secrets/kubernetes.io/serviceaccount/token).
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
  if (!config.controllerUrl) {
    process.stderr.write(`the agent needs the controller's URL (BETTER_COMPUTE_CONTROLLER_URL, or the Service environment)\n${HELP}`);
    return 2;
  }
  const backend = new ControllerClient({
    url: config.controllerUrl,
    nodeName,
    caFile: config.controllerCaFile,
    serverName: config.controllerServerName,
    tokenFile: config.agentTokenFile,
  });
  log.info('agent API', { url: config.controllerUrl, serverName: config.controllerServerName, caFile: config.controllerCaFile });
  const agent = new Agent({
    nodeName,
    devicePluginDir: config.devicePluginDir,
    podResourcesSocket: config.podResourcesSocket,
    source,
    backend,
    log,
    kubeConfig: kubeConfigFrom(config.kubeconfig),
    ...(config.agentReadyFile ? { readyFile: config.agentReadyFile } : {}),
  });
  await agent.start();
  await new Promise<void>((resolve) => {
    process.once('SIGINT', resolve);
    process.once('SIGTERM', resolve);
  });
  log.info('agent shutting down');
  await agent.stop();
  backend.close();
  return 0;
}
