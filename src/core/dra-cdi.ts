// What the agent's DRA plugin (src/agent/dra/) decides, pure: which of a claim's allocation results are its to
// prepare on this node, the CDI spec a prepared claim's containers get (one CDI device per claim, named by its UID,
// carrying what the device-plugin path hands a container: the atoms' env and device nodes), and the kubelet's answer.
import type { ContainerAllocateResponse } from './device-list.ts';
import { type ResourceClaim } from './dra-allocate.ts';
import { CLAIM_CDI_KIND, DRA_DRIVER } from './names.ts';

/** The CDI spec version written (the first with every field used here and the one current runtimes read). */
export const CDI_VERSION = '0.6.0';

/** A CDI device name: alphanumerics, '_', '.', ':', '-', alphanumeric at both ends. */
const CDI_DEVICE = /^[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?$/;

export interface ClaimResult {
  request: string;
  pool: string;
  device: string;
}

export interface CdiSpec {
  cdiVersion: string;
  kind: string;
  devices: {
    name: string;
    containerEdits: {
      env: string[];
      deviceNodes: { path: string; hostPath: string; permissions: string }[];
      mounts?: { hostPath: string; containerPath: string; options: string[] }[];
    };
  }[];
}

/** The kubelet's v1 Device, field names as in proto/dra/v1/api.proto. */
export interface DraDevice {
  request_names: string[];
  pool_name: string;
  device_name: string;
  cdi_device_ids: string[];
}

/** The allocation's results of our driver in this node's pool (the pool is the node's name), in allocation order. */
export function ourResults(claim: ResourceClaim, node: string): ClaimResult[] {
  return (claim.status?.allocation?.devices?.results ?? [])
    .filter((r) => r.driver === DRA_DRIVER && r.pool === node)
    .map((r) => ({ request: r.request, pool: r.pool, device: r.device }));
}

/** The CDI name of a prepared claim's device; undefined when the UID cannot be a CDI device name. */
export function claimCdiName(claimUid: string): string | undefined {
  return CDI_DEVICE.test(claimUid) ? `${CLAIM_CDI_KIND}=${claimUid}` : undefined;
}

/** The spec file's name in the CDI directory: `<vendor>-<class>_<device>.json`, as CDI producers name theirs. */
export function claimCdiFileName(claimUid: string): string {
  return `bettercompute.io-claim_${claimUid}.json`;
}

/**
 * The CDI spec of a prepared claim: one device named by the claim's UID whose edits are the device-plugin answer's
 * environment (BETTERCOMPUTE_ATOMS, NVIDIA_VISIBLE_DEVICES, …), its device nodes and its mounts. Sorted, so that the
 * same claim and atoms always give the same bytes.
 */
export function claimCdiSpec(claimUid: string, handed: ContainerAllocateResponse): CdiSpec {
  if (!claimCdiName(claimUid)) throw new Error(`claim uid ${claimUid} is not a CDI device name`);
  const env = Object.entries(handed.envs)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([k, v]) => `${k}=${v}`);
  const deviceNodes = handed.devices.map((d) => ({ path: d.container_path, hostPath: d.host_path, permissions: d.permissions }));
  const mounts = handed.mounts.map((m) => ({ hostPath: m.host_path, containerPath: m.container_path, options: m.read_only ? ['ro', 'bind'] : ['rw', 'bind'] }));
  return {
    cdiVersion: CDI_VERSION,
    kind: CLAIM_CDI_KIND,
    devices: [{ name: claimUid, containerEdits: { env, deviceNodes, ...(mounts.length ? { mounts } : {}) } }],
  };
}

/** The kubelet's answer for a prepared claim: each of our results, every one with the claim's CDI device. */
export function preparedDevices(claimUid: string, results: readonly ClaimResult[]): DraDevice[] {
  const cdi = claimCdiName(claimUid);
  if (!cdi) throw new Error(`claim uid ${claimUid} is not a CDI device name`);
  return results.map((r) => ({ request_names: [r.request], pool_name: r.pool, device_name: r.device, cdi_device_ids: [cdi] }));
}

/** Whether the controller's devices are exactly our results (same request and device pairs, none more, none fewer). */
export function sameDevices(results: readonly ClaimResult[], answered: readonly { request: string; device: string }[]): boolean {
  const key = (d: { request: string; device: string }) => `${d.request}\n${d.device}`;
  const ours = new Set(results.map(key));
  const theirs = new Set(answered.map(key));
  return ours.size === results.length && theirs.size === answered.length && ours.size === theirs.size && [...ours].every((k) => theirs.has(k));
}
