// What Allocate answers for one container (docs/node-isolation.md): the booked atoms handed over the way the node's
// container runtime enforces them, never by an environment variable alone. The device-list strategies are those of
// NVIDIA's k8s-device-plugin (`envvar`, `volume-mounts`, `cdi-annotations`, `cdi-cri`, any combination); the GPUs'
// device nodes go as DeviceSpecs; BETTERCOMPUTE_ATOMS (and BETTERCOMPUTE_RESERVATION) always. Pure: atoms, the
// device nodes known to exist on the host and the settings in, a v1beta1 ContainerAllocateResponse out.
import { z } from 'zod';

export const DEVICE_LIST_STRATEGIES = ['envvar', 'volume-mounts', 'cdi-annotations', 'cdi-cri'] as const;
export type DeviceListStrategy = (typeof DEVICE_LIST_STRATEGIES)[number];
/**
 * `auto` (the default): per Allocate, `cdi-cri` when the node's CDI specs define every handed device's name, else
 * `volume-mounts`; never `envvar`, the one a pod can set itself (resolveDeviceList, ADR 0055).
 */
export const DEVICE_LIST_AUTO = 'auto';
export type DeviceListChoice = readonly DeviceListStrategy[] | typeof DEVICE_LIST_AUTO;

/** What the NVIDIA container toolkit reads the device list from (unless it reads it from mounts or CDI). */
export const VISIBLE_DEVICES_ENV = 'NVIDIA_VISIBLE_DEVICES';
/** NVIDIA_VISIBLE_DEVICES for a container whose devices come another way: the toolkit injects nothing for it. */
export const VISIBLE_DEVICES_VOID = 'void';
/** volume-mounts: the toolkit's list directory (NVIDIA_VISIBLE_DEVICES names it; one mount of /dev/null per device). */
export const DEVICE_LIST_MOUNT_DIR = '/var/run/nvidia-container-devices';
export const DEVICE_LIST_MOUNT_SOURCE = '/dev/null';
/** Our key in the CDI annotations (after the prefix): `<plugin>_<device>` as the CDI producer library builds it. */
const CDI_ANNOTATION_PLUGIN = 'bettercompute';

// CDI names (tags.cncf.io/container-device-interface): `vendor/class=device`.
const CDI_VENDOR = /^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$/;
const CDI_CLASS = /^[A-Za-z0-9]([A-Za-z0-9_-]*[A-Za-z0-9])?$/;
const CDI_DEVICE = /^[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?$/;
/** The name part of a CDI annotation key: at most 63 characters, alphanumeric at both ends. */
const CDI_ANNOTATION_NAME = /^[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$/;

const STRATEGY_LIST = `${DEVICE_LIST_AUTO} alone, or ${DEVICE_LIST_STRATEGIES.join(', ')}`;

/**
 * `envvar,cdi-cri` → ['envvar', 'cdi-cri']: comma separated, at least one, each known; repeats count once. `auto`
 * stands alone.
 */
export function deviceListStrategiesSchema(setting: string) {
  return z.string().transform((v, ctx): DeviceListChoice => {
    const names = v.split(',').map((s) => s.trim()).filter(Boolean);
    if (!names.length) {
      ctx.addIssue({ code: 'custom', message: `${setting}: no device list strategy; give ${STRATEGY_LIST}` });
      return z.NEVER;
    }
    if (names.includes(DEVICE_LIST_AUTO)) {
      if (names.length === 1) return DEVICE_LIST_AUTO;
      ctx.addIssue({ code: 'custom', message: `${setting}: ${DEVICE_LIST_AUTO} chooses the strategy itself and takes no other (given: ${v})` });
      return z.NEVER;
    }
    const unknown = names.filter((n) => !(DEVICE_LIST_STRATEGIES as readonly string[]).includes(n));
    if (unknown.length) {
      ctx.addIssue({ code: 'custom', message: `${setting}: unknown device list strategy ${unknown.join(', ')} (known: ${STRATEGY_LIST})` });
      return z.NEVER;
    }
    return [...new Set(names as DeviceListStrategy[])];
  });
}

/** A CDI device kind, `vendor/class` (e.g. nvidia.com/gpu). */
export function cdiKindSchema(setting: string) {
  return z.string().refine((k) => {
    const [vendor, cls, ...rest] = k.split('/');
    return rest.length === 0 && CDI_VENDOR.test(vendor ?? '') && CDI_CLASS.test(cls ?? '');
  }, `${setting}: not a CDI device kind (vendor/class, e.g. nvidia.com/gpu)`);
}

/** An annotation key prefix ending in '/', e.g. cdi.k8s.io/ (what the runtime reads CDI annotations under). */
export function cdiAnnotationPrefixSchema(setting: string) {
  return z.string().regex(/^[a-z0-9]([a-z0-9.-]*[a-z0-9])?\/$/, `${setting}: not an annotation prefix (a DNS name and a '/', e.g. cdi.k8s.io/)`);
}

export interface DeviceListSettings {
  strategies: DeviceListChoice;
  /** The CDI kind of the devices: `<kind>=<GPU or MIG UUID>` (the names `nvidia-ctk cdi generate` gives by UUID). */
  cdiKind: string;
  /** The prefix of the CDI annotation keys (cdi-annotations). */
  cdiAnnotationPrefix: string;
}

/** Settings whose strategies are chosen (what containerAllocateResponse takes). */
export interface ResolvedDeviceListSettings extends DeviceListSettings {
  strategies: readonly DeviceListStrategy[];
}

export const DEFAULT_DEVICE_LIST_SETTINGS: DeviceListSettings = {
  strategies: DEVICE_LIST_AUTO,
  cdiKind: 'nvidia.com/gpu',
  cdiAnnotationPrefix: 'cdi.k8s.io/',
};

/** One atom as Allocate hands it over. */
export interface HandedAtom {
  id: string;
  /** What the toolkit and CDI name it by: the GPU UUID, the MIG UUID, or for a slot its GPU's UUID. */
  visible: string;
  /** Its device nodes that exist on the host: /dev/nvidiaN, and for a MIG instance its /dev/nvidia-caps/nvidia-capN. */
  deviceNodes: readonly string[];
}

export interface Handoff {
  /** The resource the kubelet allocates (its last segment keys our CDI annotation). */
  resource: string;
  atoms: readonly HandedAtom[];
  /** The control nodes that exist on the host (/dev/nvidiactl, /dev/nvidia-uvm, /dev/nvidia-uvm-tools). */
  controlNodes: readonly string[];
  reservationId?: string;
}

/** v1beta1 ContainerAllocateResponse, field names as in proto/deviceplugin/v1beta1/api.proto. */
export interface ContainerAllocateResponse {
  envs: Record<string, string>;
  mounts: { container_path: string; host_path: string; read_only: boolean }[];
  devices: { container_path: string; host_path: string; permissions: string }[];
  annotations: Record<string, string>;
  cdi_devices: { name: string }[];
}

/** An atom that cannot be handed over with the configured strategies (Allocate refuses). */
export class HandoffError extends Error {}

const has = (s: ResolvedDeviceListSettings, x: DeviceListStrategy) => s.strategies.includes(x);

/** The CDI annotation key of a resource's allocation: `cdi.k8s.io/bettercompute_gpu.mig`, `…/bettercompute_rsv-<ulid>`. */
export function cdiAnnotationKey(prefix: string, resource: string): string {
  const name = `${CDI_ANNOTATION_PLUGIN}_${resource.replace(/^.*\//, '')}`;
  if (!CDI_ANNOTATION_NAME.test(name)) throw new HandoffError(`resource ${resource} gives no valid CDI annotation key (${name})`);
  return prefix + name;
}

/**
 * The container's part of the Allocate answer:
 * - envs: BETTERCOMPUTE_ATOMS (sorted atom ids), BETTERCOMPUTE_RESERVATION for a reservation's resource, and
 *   NVIDIA_VISIBLE_DEVICES: the UUIDs with `envvar`; the list directory with `volume-mounts` (which wins, as in
 *   NVIDIA's plugin); else `void`, so that the variable grants nothing (and an image's `NVIDIA_VISIBLE_DEVICES=all`
 *   is overridden for this container; nvidia-ctk's CDI specs set the same value);
 * - mounts (`volume-mounts`): /dev/null at /var/run/nvidia-container-devices/<uuid>, one per device;
 * - annotations (`cdi-annotations`): one key for this resource, the CDI names comma separated;
 * - cdi_devices (`cdi-cri`): the CDI names;
 * - devices: every device node of the atoms that exists on the host, read-write, and the control nodes with them
 *   (none when no GPU node is known: a simulated GPU has none).
 */
export function containerAllocateResponse(h: Handoff, s: ResolvedDeviceListSettings): ContainerAllocateResponse {
  const atoms = [...h.atoms].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  const visible = [...new Set(atoms.map((a) => a.visible))];
  const envs: Record<string, string> = { BETTERCOMPUTE_ATOMS: atoms.map((a) => a.id).join(',') };
  if (h.reservationId) envs.BETTERCOMPUTE_RESERVATION = h.reservationId;
  envs[VISIBLE_DEVICES_ENV] = has(s, 'volume-mounts') ? DEVICE_LIST_MOUNT_DIR : has(s, 'envvar') ? visible.join(',') : VISIBLE_DEVICES_VOID;

  const mounts = has(s, 'volume-mounts')
    ? visible.map((v) => ({ container_path: `${DEVICE_LIST_MOUNT_DIR}/${v}`, host_path: DEVICE_LIST_MOUNT_SOURCE, read_only: false }))
    : [];

  const cdi = has(s, 'cdi-annotations') || has(s, 'cdi-cri');
  const cdiNames = cdi ? visible.map((v) => cdiName(s.cdiKind, v)) : [];
  const annotations: Record<string, string> =
    has(s, 'cdi-annotations') && cdiNames.length ? { [cdiAnnotationKey(s.cdiAnnotationPrefix, h.resource)]: cdiNames.join(',') } : {};
  const cdi_devices = has(s, 'cdi-cri') ? cdiNames.map((name) => ({ name })) : [];

  const gpuNodes = [...new Set(atoms.flatMap((a) => a.deviceNodes))];
  const nodes = gpuNodes.length ? [...new Set([...gpuNodes, ...h.controlNodes])] : [];
  const devices = nodes.map((p) => ({ container_path: p, host_path: p, permissions: 'rw' }));

  return { envs, mounts, devices, annotations, cdi_devices };
}

function cdiName(kind: string, device: string): string {
  if (!CDI_DEVICE.test(device)) {
    throw new HandoffError(`${device} is not a CDI device name (the GPU or MIG UUID is needed; a legacy MIG id has none)`);
  }
  return `${kind}=${device}`;
}

/** The strategies chosen for one container, and why (the agent logs it when it changes). */
export interface ResolvedDeviceList {
  settings: ResolvedDeviceListSettings;
  reason: string;
}

/**
 * The strategies for handing these devices (their `visible` names) over (pure). Configured ones are taken as they
 * are; `auto` takes `cdi-cri` when `cdiDefined` (the fully qualified names the node's CDI specs define) has every
 * device's `<kind>=<name>`, so the runtime injects exactly them, else `volume-mounts`, which the toolkit honours only
 * from mounts of /dev/null that a restricted pod cannot make. Neither lets a pod's own NVIDIA_VISIBLE_DEVICES count
 * for ours (ours is `void` or the mount directory).
 */
export function resolveDeviceList(s: DeviceListSettings, visible: readonly string[], cdiDefined: ReadonlySet<string>): ResolvedDeviceList {
  if (s.strategies !== DEVICE_LIST_AUTO) return { settings: { ...s, strategies: s.strategies }, reason: 'configured' };
  const missing = visible.filter((v) => !cdiDefined.has(`${s.cdiKind}=${v}`));
  if (visible.length && !missing.length) {
    return { settings: { ...s, strategies: ['cdi-cri'] }, reason: `auto: the node's CDI specs define ${s.cdiKind}=<each device>` };
  }
  const why = visible.length ? `no CDI spec of the node defines ${missing.map((m) => `${s.cdiKind}=${m}`).join(', ')}` : 'no device to name';
  return { settings: { ...s, strategies: ['volume-mounts'] }, reason: `auto: ${why}` };
}
