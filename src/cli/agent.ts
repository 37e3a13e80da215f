// `better-compute agent`: runs the node agent until SIGINT/SIGTERM, then stops its endpoints. It reads the ledger only
// through the controller's agent API (no database credentials).
import os from 'node:os';
import { parseArgs } from 'node:util';
import { renderNodeDevices } from './render.ts';
import type { Config } from '../config.ts';
import { kubeConfigFrom } from '../kube/client.ts';
import type { Logger } from '../log.ts';
import { Agent } from '../agent/agent.ts';
import { ControllerClient } from '../agent/controller-client.ts';
import { DraPlugin } from '../agent/dra/plugin.ts';
import { ClaimPreparer } from '../agent/dra/prepare.ts';
import { SlicePublisher } from '../agent/dra/slices.ts';
import { sliceAtomsOf } from '../core/dra-slices.ts';
import { ResourceClaimClient } from '../kube/resource-claims.ts';
import { ResourceSliceClient } from '../kube/resource-slices.ts';
import { cdiAnnotationPrefixSchema, cdiKindSchema, deviceListStrategiesSchema, type DeviceListChoice, type DeviceListSettings } from '../core/device-list.ts';
import { fileSource, NodeDevicesSpecSchema, nvidiaSmiSource, type DeviceSource } from '../agent/discovery.ts';
import { formatOutput, outputUsageMessage, parseOutput, type OutputFormat } from './output.ts';

const HELP = `usage: better-compute agent [--node NAME] [--devices-file FILE] [--nvidia-smi PATH]
                            [--device-list-strategy LIST] [--cdi-device-kind KIND] [--cdi-annotation-prefix PREFIX] [--dra]
       better-compute agent --discover [-o table|wide|json|yaml] [--node NAME] [--devices-file FILE] [--nvidia-smi PATH]

--discover reads the node's devices once, as the agent would publish them in NodeDevices, prints them and exits: 0 when
read, 1 when discovery failed (the reason on stderr). It needs neither the controller nor the kubelet; without --node
or NODE_NAME the NVLink domains are named after the host name.

--device-list-strategy (DEVICE_LIST_STRATEGY, default auto): how Allocate hands the atoms to the container runtime.
auto: cdi-cri when the node's CDI specs (BETTER_COMPUTE_HOST_CDI_SPEC_DIRS, default /etc/cdi,/var/run/cdi) define
every handed device's name, else volume-mounts. Or, comma separated, as NVIDIA's device plugin names them: envvar (NVIDIA_VISIBLE_DEVICES), volume-mounts (the list as
mounts under /var/run/nvidia-container-devices), cdi-annotations (CDI names in annotations under
--cdi-annotation-prefix, CDI_ANNOTATION_PREFIX, default cdi.k8s.io/), cdi-cri (CDI names in the CRI's CDIDevices).
CDI names are <--cdi-device-kind>=<GPU or MIG UUID> (BETTER_COMPUTE_CDI_DEVICE_KIND, default nvidia.com/gpu).
Without envvar, NVIDIA_VISIBLE_DEVICES is void. See docs/node-isolation.md.

--dra (BETTER_COMPUTE_AGENT_DRA=true; off by default): also serve the kubelet's DRA plugin for gpu.bettercompute.io
(docs/dra-node.md): its socket dra.sock in BETTER_COMPUTE_DRA_PLUGIN_DIR (/var/lib/kubelet/plugins/gpu.bettercompute.io),
its registration gpu.bettercompute.io-reg.sock in BETTER_COMPUTE_PLUGINS_REGISTRY_DIR (/var/lib/kubelet/plugins_registry),
one CDI spec per prepared claim in BETTER_COMPUTE_CDI_DIR (/var/run/cdi); and publish the node's healthy atoms as its
ResourceSlices of that driver, checked every BETTER_COMPUTE_DRA_SLICE_RESYNC (60s) besides on every change
(deploy/dra/agent grants the writes, and admits only those of its own node).

Environment: NODE_NAME, BETTER_COMPUTE_DEVICES_FILE (simulated GPUs: a NodeDevices spec as JSON; else nvidia-smi),
BETTER_COMPUTE_DEVICE_PLUGIN_DIR (/var/lib/kubelet/device-plugins), BETTER_COMPUTE_POD_RESOURCES_SOCKET
(/var/lib/kubelet/pod-resources/kubelet.sock), KUBECONFIG (else in-cluster; for NodeDevices),
BETTER_COMPUTE_CONTROLLER_URL (else https://$BETTER_COMPUTE_CONTROLLER_SERVICE_HOST:$BETTER_COMPUTE_CONTROLLER_SERVICE_PORT_WEBHOOK),
BETTER_COMPUTE_CONTROLLER_CA_FILE (/etc/better-compute/ca/ca.crt), BETTER_COMPUTE_CONTROLLER_SERVER_NAME
(better-compute-controller.<namespace>.svc), BETTER_COMPUTE_AGENT_TOKEN_FILE
(/var/run/secrets/kubernetes.io/serviceaccount/token), BETTER_COMPUTE_HOST_DEV_DIR (/dev: the host's /dev as the agent
sees it, for the device nodes it hands over), BETTER_COMPUTE_HOST_PROC_DIR (/proc: the NVIDIA driver's GPU minors and
MIG capabilities).
`;

export async function agentCommand(argv: string[], config: Config, log: Logger): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      node: { type: 'string' },
      'devices-file': { type: 'string' },
      'nvidia-smi': { type: 'string' },
      'device-list-strategy': { type: 'string' },
      'cdi-device-kind': { type: 'string' },
      'cdi-annotation-prefix': { type: 'string' },
      discover: { type: 'boolean' },
      dra: { type: 'boolean' },
      output: { type: 'string', short: 'o' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) {
    process.stdout.write(HELP);
    return 0;
  }
  const output = parseOutput(values.output);
  if (!output) {
    process.stderr.write(`${outputUsageMessage(values.output!)}\n${HELP}`);
    return 2;
  }
  const deviceList = deviceListSettings(values, config);
  if ('error' in deviceList) {
    process.stderr.write(`${deviceList.error}\n${HELP}`);
    return 2;
  }
  const file = values['devices-file'] ?? config.devicesFile;
  const sourceFor = (node: string) => (file ? fileSource(file) : nvidiaSmiSource(node, values['nvidia-smi'] ?? 'nvidia-smi'));
  if (values.discover) return discoverOnce(sourceFor(values.node ?? config.nodeName ?? os.hostname()), output);
  const nodeName = values.node ?? config.nodeName;
  if (!nodeName) {
    process.stderr.write(`the agent needs its node's name (NODE_NAME or --node)\n${HELP}`);
    return 2;
  }
  const source = sourceFor(nodeName);
  if (!config.controllerUrl) {
    process.stderr.write(`the agent needs the controller's URL (BETTER_COMPUTE_CONTROLLER_URL, or the Service environment)\n${HELP}`);
    return 2;
  }
  await runAgent({ nodeName, controllerUrl: config.controllerUrl, source, deviceList: deviceList.settings, dra: values.dra ?? false }, config, log);
  return 0;
}

/** Runs the agent (and its DRA plugin when asked) until SIGINT or SIGTERM, then stops them. */
async function runAgent(
  o: { nodeName: string; controllerUrl: string; source: DeviceSource; deviceList: DeviceListSettings; dra: boolean },
  config: Config,
  log: Logger,
): Promise<void> {
  const { nodeName, source } = o;
  const backend = new ControllerClient({
    url: o.controllerUrl,
    nodeName,
    caFile: config.controllerCaFile,
    serverName: config.controllerServerName,
    tokenFile: config.agentTokenFile,
  });
  log.info('agent API', { url: config.controllerUrl, serverName: config.controllerServerName, caFile: config.controllerCaFile });
  log.info('device hand-over', { ...o.deviceList, cdiSpecDirs: config.hostCdiSpecDirs, hostDevDir: config.hostDevDir, hostProcDir: config.hostProcDir });
  const kubeConfig = kubeConfigFrom(config.kubeconfig, config.kubeCallTimeoutMs);
  const draOn = o.dra || config.agentDra;
  // The node's atoms as ResourceSlices, with the DRA plugin only (its RBAC comes with deploy/dra/agent).
  let slices: SlicePublisher | undefined;
  const agent = new Agent({
    nodeName,
    devicePluginDir: config.devicePluginDir,
    podResourcesSocket: config.podResourcesSocket,
    source,
    backend,
    log,
    kubeConfig,
    ...(config.agentReadyFile ? { readyFile: config.agentReadyFile } : {}),
    deviceList: o.deviceList,
    cdiSpecDirs: config.hostCdiSpecDirs,
    hostDirs: { dev: config.hostDevDir, proc: config.hostProcDir },
    onAtomsChange: () => slices?.trigger(),
  });
  if (draOn) slices = new SlicePublisher({ nodeName, api: new ResourceSliceClient(kubeConfig), atoms: () => sliceAtomsOf(agent.currentAtoms()), log, resyncMs: config.draSliceResyncMs });
  await agent.start();
  const dra = draOn ? draPlugin({ nodeName, config, kubeConfig, backend, agent, log, onRegistered: () => slices?.trigger() }) : undefined;
  await dra?.start();
  await slices?.start();
  await new Promise<void>((resolve) => {
    process.once('SIGINT', resolve);
    process.once('SIGTERM', resolve);
  });
  log.info('agent shutting down');
  await slices?.stop();
  await dra?.stop();
  await agent.stop();
  backend.close();
}

/** The agent's DRA kubelet plugin: claims read with the agent's kubeconfig, checked with the controller, handed over as the agent does. */
function draPlugin(i: {
  nodeName: string;
  config: Config;
  kubeConfig: ReturnType<typeof kubeConfigFrom>;
  backend: ControllerClient;
  agent: Agent;
  log: Logger;
  onRegistered: () => void;
}): DraPlugin {
  const claims = new ResourceClaimClient(i.kubeConfig);
  const preparer = new ClaimPreparer({
    nodeName: i.nodeName,
    cdiDir: i.config.cdiDir,
    readClaim: claims.get,
    askController: (uid, req) => i.backend.prepareClaim(uid, req),
    handoff: (atoms) => i.agent.draHandoff(atoms),
    log: i.log,
  });
  return new DraPlugin({ pluginDir: i.config.draPluginDir, registryDir: i.config.pluginsRegistryDir, preparer, log: i.log, onRegistered: i.onRegistered });
}

/** The device-list settings: the flags where given (checked as the environment is), else the configuration. */
export function deviceListSettings(
  flags: { 'device-list-strategy'?: string; 'cdi-device-kind'?: string; 'cdi-annotation-prefix'?: string },
  config: Pick<Config, 'deviceListStrategies' | 'cdiDeviceKind' | 'cdiAnnotationPrefix'>,
): { settings: DeviceListSettings } | { error: string } {
  const strategies = deviceListStrategiesSchema('--device-list-strategy').safeParse(flags['device-list-strategy'] ?? deviceListText(config.deviceListStrategies));
  const kind = cdiKindSchema('--cdi-device-kind').safeParse(flags['cdi-device-kind'] ?? config.cdiDeviceKind);
  const prefix = cdiAnnotationPrefixSchema('--cdi-annotation-prefix').safeParse(flags['cdi-annotation-prefix'] ?? config.cdiAnnotationPrefix);
  const issues = [strategies, kind, prefix].flatMap((r) => (r.success ? [] : r.error.issues.map((i) => i.message)));
  if (issues.length || !strategies.success || !kind.success || !prefix.success) return { error: issues.join('\n') };
  return { settings: { strategies: strategies.data, cdiKind: kind.data, cdiAnnotationPrefix: prefix.data } };
}

function deviceListText(c: DeviceListChoice): string {
  return typeof c === 'string' ? c : c.join(',');
}

/** `agent --discover`: one discovery, checked as the controller checks a NodeDevices spec, printed. */
async function discoverOnce(source: DeviceSource, output: OutputFormat): Promise<number> {
  let spec;
  try {
    spec = NodeDevicesSpecSchema.parse(await source.discover());
  } catch (e) {
    process.stderr.write(`discovery failed (${source.kind}): ${e instanceof Error ? e.message : String(e)}\n`);
    return 1;
  }
  // wide: the table already shows every field.
  process.stdout.write(formatOutput(output, spec, { table: () => renderNodeDevices(spec) }));
  return 0;
}
