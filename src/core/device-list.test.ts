// The pure part of Allocate: atoms, known device nodes and the device-list strategies → the container's answer; the
// settings and their checks at start.
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../config.ts';
import {
  cdiAnnotationKey,
  containerAllocateResponse,
  DEFAULT_DEVICE_LIST_SETTINGS,
  deviceListStrategiesSchema,
  HandoffError,
  resolveDeviceList,
  type DeviceListStrategy,
  type ResolvedDeviceListSettings,
  type Handoff,
} from './device-list.ts';
import { deviceListSettings } from '../cli/agent.ts';

const G0 = 'GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77';
const G1 = 'GPU-0c8e7b4e-91a8-4a34-8a8e-1a2b3c4d5e6f';
const MIG = 'MIG-7d8e3b3a-8f0b-5d6e-9a1b-2c3d4e5f6a7b';
const CONTROL = ['/dev/nvidiactl', '/dev/nvidia-uvm'];

const settings = (...strategies: DeviceListStrategy[]): ResolvedDeviceListSettings => ({ ...DEFAULT_DEVICE_LIST_SETTINGS, strategies });
const twoGpus: Handoff = {
  resource: 'bettercompute.io/gpu',
  // Out of order, as the kubelet may send them.
  atoms: [
    { id: G1, visible: G1, deviceNodes: ['/dev/nvidia0'] },
    { id: G0, visible: G0, deviceNodes: ['/dev/nvidia3'] },
  ],
  controlNodes: CONTROL,
};
const rw = (p: string) => ({ container_path: p, host_path: p, permissions: 'rw' });

describe('containerAllocateResponse', () => {
  it('envvar: NVIDIA_VISIBLE_DEVICES with the UUIDs, our variables, the device nodes; no mounts, no CDI', () => {
    expect(containerAllocateResponse(twoGpus, settings('envvar'))).toEqual({
      envs: { NVIDIA_VISIBLE_DEVICES: `${G1},${G0}`, BETTERCOMPUTE_ATOMS: `${G1},${G0}` },
      mounts: [],
      devices: [rw('/dev/nvidia0'), rw('/dev/nvidia3'), rw('/dev/nvidiactl'), rw('/dev/nvidia-uvm')],
      annotations: {},
      cdi_devices: [],
    });
  });

  it('volume-mounts: the variable names the list directory, one /dev/null mount per device', () => {
    const r = containerAllocateResponse(twoGpus, settings('volume-mounts'));
    expect(r.envs.NVIDIA_VISIBLE_DEVICES).toBe('/var/run/nvidia-container-devices');
    expect(r.mounts).toEqual([
      { container_path: `/var/run/nvidia-container-devices/${G1}`, host_path: '/dev/null', read_only: false },
      { container_path: `/var/run/nvidia-container-devices/${G0}`, host_path: '/dev/null', read_only: false },
    ]);
    expect(r.cdi_devices).toEqual([]);
    // With envvar too, the mounts win (as in NVIDIA's plugin): the variable never lists UUIDs then.
    expect(containerAllocateResponse(twoGpus, settings('envvar', 'volume-mounts')).envs.NVIDIA_VISIBLE_DEVICES).toBe('/var/run/nvidia-container-devices');
  });

  it('cdi-annotations: one annotation for the resource with the CDI names; the variable is void', () => {
    const r = containerAllocateResponse(twoGpus, settings('cdi-annotations'));
    expect(r.annotations).toEqual({ 'cdi.k8s.io/bettercompute_gpu': `nvidia.com/gpu=${G1},nvidia.com/gpu=${G0}` });
    expect(r.envs).toEqual({ NVIDIA_VISIBLE_DEVICES: 'void', BETTERCOMPUTE_ATOMS: `${G1},${G0}` });
    expect(r.cdi_devices).toEqual([]);
    expect(r.mounts).toEqual([]);
  });

  it('cdi-cri: CDI devices in the CRI field; kind and prefix as configured', () => {
    const s: ResolvedDeviceListSettings = { strategies: ['cdi-cri', 'cdi-annotations'], cdiKind: 'k8s.device-plugin.nvidia.com/gpu', cdiAnnotationPrefix: 'nvidia.cdi.k8s.io/' };
    const r = containerAllocateResponse(twoGpus, s);
    expect(r.cdi_devices).toEqual([{ name: `k8s.device-plugin.nvidia.com/gpu=${G1}` }, { name: `k8s.device-plugin.nvidia.com/gpu=${G0}` }]);
    expect(Object.keys(r.annotations)).toEqual(['nvidia.cdi.k8s.io/bettercompute_gpu']);
    expect(r.envs.NVIDIA_VISIBLE_DEVICES).toBe('void');
  });

  it('envvar with CDI: both, the variable listing the UUIDs', () => {
    const r = containerAllocateResponse(twoGpus, settings('envvar', 'cdi-cri'));
    expect(r.envs.NVIDIA_VISIBLE_DEVICES).toBe(`${G1},${G0}`);
    expect(r.cdi_devices).toHaveLength(2);
  });

  it('a reservation: BETTERCOMPUTE_RESERVATION, and its resource keys the annotation', () => {
    const rsv = 'rsv_01k2aaaaaaaaaaaaaaaaaaaaaa';
    const r = containerAllocateResponse({ ...twoGpus, resource: 'reservations.bettercompute.io/rsv-01k2aaaaaaaaaaaaaaaaaaaaaa', reservationId: rsv }, settings('cdi-annotations'));
    expect(r.envs.BETTERCOMPUTE_RESERVATION).toBe(rsv);
    expect(Object.keys(r.annotations)).toEqual(['cdi.k8s.io/bettercompute_rsv-01k2aaaaaaaaaaaaaaaaaaaaaa']);
  });

  it('a MIG instance: its MIG UUID, its GPU node and capability nodes', () => {
    const id = `${G0}/gi1/ci0`;
    const nodes = ['/dev/nvidia3', '/dev/nvidia-caps/nvidia-cap12', '/dev/nvidia-caps/nvidia-cap13'];
    const r = containerAllocateResponse({ resource: 'bettercompute.io/gpu.mig', atoms: [{ id, visible: MIG, deviceNodes: nodes }], controlNodes: CONTROL }, settings('envvar', 'cdi-cri'));
    expect(r.envs).toMatchObject({ NVIDIA_VISIBLE_DEVICES: MIG, BETTERCOMPUTE_ATOMS: id });
    expect(r.cdi_devices).toEqual([{ name: `nvidia.com/gpu=${MIG}` }]);
    expect(r.devices).toEqual([...nodes, ...CONTROL].map(rw));
  });

  it('slots of one GPU: the GPU once, in every list', () => {
    const atoms = [0, 1].map((k) => ({ id: `${G0}/s${k}`, visible: G0, deviceNodes: ['/dev/nvidia3'] }));
    const r = containerAllocateResponse({ resource: 'bettercompute.io/gpu.slot', atoms, controlNodes: CONTROL }, settings('envvar', 'volume-mounts', 'cdi-cri'));
    expect(r.envs.BETTERCOMPUTE_ATOMS).toBe(`${G0}/s0,${G0}/s1`);
    expect(r.mounts).toHaveLength(1);
    expect(r.cdi_devices).toEqual([{ name: `nvidia.com/gpu=${G0}` }]);
    expect(r.devices.map((d) => d.host_path)).toEqual(['/dev/nvidia3', ...CONTROL]);
  });

  it('simulated GPUs (no device node known): no device specs at all, not even the control nodes', () => {
    const sim = { resource: 'bettercompute.io/gpu', atoms: [{ id: G0, visible: G0, deviceNodes: [] }], controlNodes: CONTROL };
    expect(containerAllocateResponse(sim, settings('envvar')).devices).toEqual([]);
  });

  it('a device with no CDI name (a legacy MIG id) is refused under CDI, handed over without it', () => {
    const legacy = { resource: 'bettercompute.io/gpu.mig', atoms: [{ id: `${G0}/gi1/ci0`, visible: `MIG-${G0}/1/0`, deviceNodes: [] }], controlNodes: [] };
    expect(() => containerAllocateResponse(legacy, settings('cdi-cri'))).toThrow(HandoffError);
    expect(containerAllocateResponse(legacy, settings('envvar')).envs.NVIDIA_VISIBLE_DEVICES).toBe(`MIG-${G0}/1/0`);
  });

  it('cdiAnnotationKey: the resource’s last segment, at most 63 characters after the prefix', () => {
    expect(cdiAnnotationKey('cdi.k8s.io/', 'bettercompute.io/gpu.mig')).toBe('cdi.k8s.io/bettercompute_gpu.mig');
    expect(() => cdiAnnotationKey('cdi.k8s.io/', `x/${'a'.repeat(60)}`)).toThrow(HandoffError);
  });
});

describe('resolveDeviceList', () => {
  const auto = DEFAULT_DEVICE_LIST_SETTINGS;
  const defined = new Set([`nvidia.com/gpu=${G0}`, `nvidia.com/gpu=${G1}`, 'nvidia.com/gpu=all', 'other.com/gpu=' + MIG]);

  it('auto (the default): cdi-cri when the node’s specs define every device under the kind', () => {
    expect(auto.strategies).toBe('auto');
    const r = resolveDeviceList(auto, [G1, G0], defined);
    expect(r.settings.strategies).toEqual(['cdi-cri']);
    expect(r.reason).toBe("auto: the node's CDI specs define nvidia.com/gpu=<each device>");
    // What the container then gets: the CDI names, the variable void, no mount to forge.
    const handed = containerAllocateResponse(twoGpus, r.settings);
    expect(handed.cdi_devices).toEqual([{ name: `nvidia.com/gpu=${G1}` }, { name: `nvidia.com/gpu=${G0}` }]);
    expect(handed.envs.NVIDIA_VISIBLE_DEVICES).toBe('void');
  });

  it('auto: volume-mounts when one device is not defined, or defined under another kind; never envvar', () => {
    const missing = resolveDeviceList(auto, [G0, MIG], defined);
    expect(missing.settings.strategies).toEqual(['volume-mounts']);
    expect(missing.reason).toBe(`auto: no CDI spec of the node defines nvidia.com/gpu=${MIG}`);
    expect(resolveDeviceList(auto, [G0], new Set()).settings.strategies).toEqual(['volume-mounts']);
    expect(resolveDeviceList({ ...auto, cdiKind: 'other.com/gpu' }, [MIG], defined).settings.strategies).toEqual(['cdi-cri']);
    expect(containerAllocateResponse(twoGpus, missing.settings).envs.NVIDIA_VISIBLE_DEVICES).toBe('/var/run/nvidia-container-devices');
  });

  it('configured strategies are taken as they are, whatever the specs define', () => {
    expect(resolveDeviceList(settings('envvar'), [G0], defined)).toEqual({ settings: settings('envvar'), reason: 'configured' });
  });
});

describe('the device-list settings', () => {
  const parse = (v: string) => deviceListStrategiesSchema('DEVICE_LIST_STRATEGY').safeParse(v);

  it('a comma-separated list of NVIDIA’s strategy names; repeats count once', () => {
    expect(parse('envvar').data).toEqual(['envvar']);
    expect(parse(' cdi-cri, envvar ,cdi-cri').data).toEqual(['cdi-cri', 'envvar']);
    expect(parse('envvar,volume-mounts,cdi-annotations,cdi-cri').data).toHaveLength(4);
  });

  it('an unknown strategy, or none, is an error that names the setting and the known ones', () => {
    expect(parse('envvar,cdi').error?.issues[0]?.message).toBe(
      'DEVICE_LIST_STRATEGY: unknown device list strategy cdi (known: auto alone, or envvar, volume-mounts, cdi-annotations, cdi-cri)',
    );
    expect(parse(' , ').error?.issues[0]?.message).toMatch(/^DEVICE_LIST_STRATEGY: no device list strategy/);
  });

  it('auto stands alone', () => {
    expect(parse('auto').data).toBe('auto');
    expect(parse('auto,envvar').error?.issues[0]?.message).toBe('DEVICE_LIST_STRATEGY: auto chooses the strategy itself and takes no other (given: auto,envvar)');
  });

  it('the agent’s configuration: auto, nvidia.com/gpu, cdi.k8s.io/, /etc/cdi and /var/run/cdi by default; a wrong value stops the start', () => {
    expect(loadConfig({})).toMatchObject({ deviceListStrategies: 'auto', hostCdiSpecDirs: ['/etc/cdi', '/var/run/cdi'], cdiDeviceKind: 'nvidia.com/gpu', cdiAnnotationPrefix: 'cdi.k8s.io/', hostDevDir: '/dev', hostProcDir: '/proc' });
    expect(loadConfig({ DEVICE_LIST_STRATEGY: 'cdi-cri,volume-mounts', BETTER_COMPUTE_HOST_DEV_DIR: '/host/dev' })).toMatchObject({ deviceListStrategies: ['cdi-cri', 'volume-mounts'], hostDevDir: '/host/dev' });
    expect(() => loadConfig({ DEVICE_LIST_STRATEGY: 'nvidia' })).toThrow('DEVICE_LIST_STRATEGY: unknown device list strategy nvidia (known: auto alone, or envvar, volume-mounts, cdi-annotations, cdi-cri)');
    expect(() => loadConfig({ BETTER_COMPUTE_CDI_DEVICE_KIND: 'gpu' })).toThrow(/BETTER_COMPUTE_CDI_DEVICE_KIND: not a CDI device kind/);
    expect(() => loadConfig({ CDI_ANNOTATION_PREFIX: 'cdi.k8s.io' })).toThrow(/CDI_ANNOTATION_PREFIX: not an annotation prefix/);
  });

  it('the flags override the environment and are checked the same way', () => {
    const config = loadConfig({});
    expect(deviceListSettings({ 'device-list-strategy': 'cdi-annotations', 'cdi-device-kind': 'example.com/gpu' }, config)).toEqual({
      settings: { strategies: ['cdi-annotations'], cdiKind: 'example.com/gpu', cdiAnnotationPrefix: 'cdi.k8s.io/' },
    });
    expect(deviceListSettings({}, config)).toEqual({ settings: DEFAULT_DEVICE_LIST_SETTINGS });
    expect(deviceListSettings({ 'device-list-strategy': 'env' }, config)).toEqual({
      error: '--device-list-strategy: unknown device list strategy env (known: auto alone, or envvar, volume-mounts, cdi-annotations, cdi-cri)',
    });
  });
});
