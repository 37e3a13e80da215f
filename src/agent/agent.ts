// The node agent: discovers devices, publishes them (NodeDevices), and serves one kubelet device plugin endpoint per
// resource: the generic bettercompute.io/gpu (.mig, .slot) for on-demand pods, and one per reservation holding atoms on
// this node during its window. Reservation endpoints hand out only that reservation's atoms, so the kubelet itself
// keeps reservations apart; the generic endpoints hand out the atoms booked for the pod that holds this node's
// on-demand admission lease. Every Allocate refuses an atom another live container holds (guard 6, PodResources),
// and hands the rest over the way the node's runtime enforces (device-list.ts, docs/node-isolation.md).
// What the ledger says (atoms, reservations, the admission) comes from a backend — the controller's agent API in a
// cluster (the agent holds no database credentials) — never from Reservation status.
import fs from 'node:fs';
import path from 'node:path';
import * as k8s from '@kubernetes/client-node';
import { type AgentBackend, type NodeAtom, type NodeState } from '../agentapi/wire.ts';
import type { DeviceClass } from '../core/types.ts';
import type { SliceAtom } from '../core/dra-slices.ts';
import { errorFields, type Logger } from '../log.ts';
import {
  containerAllocateResponse,
  DEFAULT_DEVICE_LIST_SETTINGS,
  DEVICE_LIST_AUTO,
  HandoffError,
  resolveDeviceList,
  type ContainerAllocateResponse,
  type DeviceListSettings,
} from '../core/device-list.ts';
import { readCdiNames } from './cdi-specs.ts';
import { readHostDeviceNodes, type HostDirs } from './device-nodes.ts';
import { DiscoveryHistory, type DeviceSource, type MigDevice, type NodeDevicesSpec } from './discovery.ts';
import { DevicePluginEndpoint, RefusedError, type EndpointHandler, type PluginDevice } from './plugin.ts';
import { podResourcesReader, type PodResourcesReader, type PodResourcesSnapshot } from './podresources.ts';
import { systemClock } from '../clock.ts';
import {
  API_VERSION,
  DISCOVERY_STALE_ANNOTATION,
  DRA_DRIVER,
  GENERIC_RESOURCES,
  GROUP,
  RESERVATION_GROUP,
  reservationIdOfResource,
  RESOURCE_OF_CLASS,
  VERSION,
} from '../core/names.ts';

/** An atom of the node as the agent keeps it: the slice's fields (src/core/dra-slices.ts), any class of ours. */
export interface AtomInfo extends Omit<SliceAtom, 'class'> {
  class: DeviceClass;
}

export type { AgentBackend } from '../agentapi/wire.ts';

export interface AgentOptions {
  nodeName: string;
  devicePluginDir: string;
  podResourcesSocket: string;
  source: DeviceSource;
  /** The node's atoms, reservations and admission (the controller's agent API, or the ledger in-process). */
  backend: AgentBackend;
  log: Logger;
  /** For publishing NodeDevices; without one nothing is published. */
  kubeConfig?: k8s.KubeConfig;
  discoverEveryMs?: number;
  reconcileEveryMs?: number;
  publish?: boolean;
  /**
   * A file touched each time the controller answered, removed when it does not: the DaemonSet's readiness probe checks
   * its age, so an agent that cannot reach the controller (no CA yet, no route, no token) is not Ready.
   */
  readyFile?: string;
  /** Failed discoveries in a row after which the last good report's GPUs are reported unhealthy (default 3). */
  unhealthyAfterFailures?: number;
  /** How Allocate hands atoms to the runtime (default: auto; docs/node-isolation.md). */
  deviceList?: DeviceListSettings;
  /** Where the node's CDI specs are seen, for `auto` (the agent's command: /etc/cdi and /var/run/cdi; default none). */
  cdiSpecDirs?: readonly string[];
  /** Where the host's device nodes and the driver's procfs are seen (default /dev and /proc). */
  hostDirs?: HostDirs;
  /** Told when the node's atoms (or their health) changed: the DRA plugin publishes them as ResourceSlices. */
  onAtomsChange?: () => void;
  /**
   * How long a preference or an Allocate keeps asking after a failed call to the controller or to the kubelet's
   * PodResources (default 10 s; 0: one try). The kubelet waits on both calls without a deadline, and a pod refused
   * on a passing fault fails for good.
   */
  callRetryMs?: number;
}

interface Served {
  endpoint: DevicePluginEndpoint;
  registered: boolean;
  /** Reservation endpoints: the atoms; generic: undefined (read from the inventory). */
  atoms?: string[];
  reservationId?: string;
}

function socketNameOf(resource: string): string {
  return `bettercompute-${resource.replace(/^.*\//, '').replace(/[^a-zA-Z0-9.-]/g, '-')}.sock`;
}

/**
 * The atoms of a device spec, by the ledger's rules (ids as in the spec: <uuid>, <uuid>/gi<g>/ci<c>, <uuid>/s<k>), with
 * what the spec says of each: its GPU's NUMA node, product and NVLink domain (a MIG instance has no NVLink), its
 * memory (a MIG instance's own; a slot has none of its own, its vramGiB is its GPU's) and a MIG instance's profile.
 */
export function atomsFromSpec(spec: NodeDevicesSpec, ledgerRows?: readonly NodeAtom[]): AtomInfo[] {
  const gpus = new Map(spec.gpus.map((g) => [g.uuid, g]));
  const migs = new Map<string, MigDevice>();
  for (const g of spec.gpus) for (const m of g.mig ?? []) migs.set(`${g.uuid}/gi${m.gi}/ci${m.ci}`, m);
  const mib = (gib: number | undefined) => (gib !== undefined ? Math.round(gib * 1024) : undefined);
  const info = (id: string, cls: DeviceClass, gpu: string, dbHealthy = true): AtomInfo => {
    const g = gpus.get(gpu);
    const m = cls === 'gpu.mig' ? migs.get(id) : undefined;
    const healthy = dbHealthy && (cls === 'gpu.mig' ? !m || ((g?.healthy ?? true) && (m.healthy ?? true)) : (g?.healthy ?? true));
    const vramGiB = cls === 'gpu.mig' ? m?.memoryGiB : g?.vramGiB;
    const memoryMiB = cls === 'gpu.mig' ? (m?.memoryMiB ?? mib(m?.memoryGiB)) : cls === 'gpu' ? (g?.memoryMiB ?? mib(g?.vramGiB)) : undefined;
    const optional = {
      numaNode: g?.numaNode,
      product: g?.product,
      model: g?.model,
      vramGiB,
      memoryMiB,
      nvlinkDomain: cls === 'gpu.mig' ? undefined : g?.nvlinkDomain,
      migProfile: m?.profile,
    };
    return {
      id,
      class: cls,
      gpu,
      visible: cls === 'gpu.mig' ? (m ? (m.uuid ?? `MIG-${gpu}/${m.gi}/${m.ci}`) : id) : gpu,
      healthy,
      ...Object.fromEntries(Object.entries(optional).filter(([, v]) => v !== undefined)),
    };
  };
  if (ledgerRows && ledgerRows.length) {
    return ledgerRows
      .filter((r) => r.class in RESOURCE_OF_CLASS)
      .map((r) => info(r.id, r.class, r.parentId ?? r.id, r.healthy));
  }
  const out: AtomInfo[] = [];
  for (const g of spec.gpus) {
    // A GPU in MIG mode is no atom itself, even with no instances.
    if (g.migEnabled || (g.mig && g.mig.length)) for (const m of g.mig ?? []) out.push(info(`${g.uuid}/gi${m.gi}/ci${m.ci}`, 'gpu.mig', g.uuid));
    else out.push(info(g.uuid, 'gpu', g.uuid));
  }
  return out;
}

/** The reservations of a node state whose window holds the state's `now`: resource name → reservation and atoms. */
export function activeReservations(state: NodeState): Map<string, { id: string; atoms: string[] }> {
  const out = new Map<string, { id: string; atoms: string[] }>();
  for (const r of state.reservations) {
    if (reservationIdOfResource(r.resourceName) !== r.reservationId) continue;
    if (!(r.start <= state.now && state.now < r.end) || !r.atoms.length) continue;
    out.set(r.resourceName, { id: r.reservationId, atoms: [...new Set(r.atoms)].sort() });
  }
  return out;
}

const OUR_RESOURCE = (name: string) => name.startsWith('bettercompute.io/') || name.startsWith(`${RESERVATION_GROUP}/`);

export class Agent {
  private spec: NodeDevicesSpec = { gpus: [], scalars: {} };
  private readonly history: DiscoveryHistory;
  private atoms = new Map<string, AtomInfo>();
  private atomsKey?: string;
  private readonly served = new Map<string, Served>();
  private readonly podResources: PodResourcesReader;
  private readonly kubeletSocket: string;
  /** The last state the backend gave; kept while the controller cannot be reached. */
  private state?: NodeState;
  /** When `state` was read (monotonic milliseconds): its `now` is advanced by the time since, so windows still end. */
  private stateAt = 0;
  private backendDown = false;
  private watcher?: fs.FSWatcher;
  private timers: NodeJS.Timeout[] = [];
  private published?: string;
  private stopped = false;
  private reconciling: Promise<void> = Promise.resolve();
  /** Admission pod UID → atoms this agent has allocated for it so far. */
  private readonly allocatedFor = new Map<string, Set<string>>();
  /**
   * Why the last preference left the choice to the kubelet; cleared by one that gave the booked atoms, and by Allocate,
   * which the kubelet calls next for the same container (its refusal names it).
   */
  private noPreference?: string;
  private kubeletIno?: number;
  /** Per resource, the last strategy choice logged. */
  private readonly lastDeviceList = new Map<string, string>();

  constructor(private readonly o: AgentOptions) {
    this.podResources = podResourcesReader(o.podResourcesSocket);
    this.history = new DiscoveryHistory(o.unhealthyAfterFailures);
    this.kubeletSocket = path.join(o.devicePluginDir, 'kubelet.sock');
  }

  async start(): Promise<void> {
    await this.discover();
    this.kubeletIno = this.inode(this.kubeletSocket);
    this.watcher = fs.watch(this.o.devicePluginDir, (_event, file) => {
      if (file === 'kubelet.sock') this.onKubeletSocket();
    });
    await this.reconcile();
    this.timers.push(setInterval(() => void this.discoverNow().catch(() => undefined), this.o.discoverEveryMs ?? 30_000));
    this.timers.push(setInterval(() => void this.reconcile(), this.o.reconcileEveryMs ?? 2000));
    this.o.log.info('agent started', { node: this.o.nodeName, source: this.o.source.kind, resources: [...this.served.keys()] });
  }

  async stop(): Promise<void> {
    this.stopped = true;
    for (const t of this.timers) clearInterval(t);
    this.watcher?.close();
    await this.reconciling.catch(() => undefined);
    for (const s of this.served.values()) await s.endpoint.stop();
    this.served.clear();
    this.podResources.close();
    this.o.log.info('agent stopped', { node: this.o.nodeName });
  }

  /** Discovers the devices again (publishing NodeDevices) and serves what that changed; what the timer runs. */
  async discoverNow(): Promise<void> {
    await this.discover();
    await this.reconcile();
  }

  /** The resources served now (resource name → registered). */
  status(): Record<string, boolean> {
    return Object.fromEntries([...this.served].map(([r, s]) => [r, s.registered]));
  }

  private inode(file: string): number | undefined {
    try {
      return fs.statSync(file).ino;
    } catch {
      return undefined;
    }
  }

  private onKubeletSocket(): void {
    const ino = this.inode(this.kubeletSocket);
    if (ino === undefined || ino === this.kubeletIno) return;
    this.kubeletIno = ino;
    this.o.log.info('kubelet.sock re-created: re-registering every endpoint', { node: this.o.nodeName });
    // The kubelet removed our sockets when it started: serve again on new ones, then register.
    void this.serialized(async () => {
      for (const s of this.served.values()) {
        await s.endpoint.stop();
        await s.endpoint.start();
        s.registered = false;
      }
      await this.registerPending();
    });
  }

  private serialized(fn: () => Promise<void>): Promise<void> {
    const next = this.reconciling.then(fn, fn);
    this.reconciling = next.catch((e: unknown) => this.o.log.error('agent step failed', errorFields(e)));
    return this.reconciling;
  }

  // ---- inventory -----------------------------------------------------------------------------------------------

  /**
   * A failed discovery keeps the last good report, marked stale, and after a few failures in a row reports its GPUs
   * unhealthy (same atoms): never a different layout (docs/adr/0009-discovery-failures.md).
   */
  private async discover(): Promise<void> {
    let stale: string | undefined;
    try {
      this.spec = this.history.succeeded(await this.o.source.discover());
    } catch (e) {
      const f = this.history.failed((e as Error).message ?? String(e), systemClock.wallNow().toISOString());
      const fields = { node: this.o.nodeName, failures: f.failures, unhealthy: f.unhealthy, ...errorFields(e) };
      if (!f.spec) {
        this.o.log.error('device discovery failed; nothing to report before a first good discovery', fields);
        return;
      }
      this.o.log.error(f.unhealthy ? 'device discovery keeps failing; reporting the last good layout unhealthy' : 'device discovery failed; keeping the last good report', fields);
      this.spec = f.spec;
      stale = f.stale;
    }
    if (this.o.kubeConfig && this.o.publish !== false) await this.publish(this.o.kubeConfig, stale).catch((e: unknown) => this.o.log.warn('publishing NodeDevices failed', errorFields(e)));
  }

  /** The NodeDevices spec without agent-local fields (driver index, PCI bus id, MIG UUIDs). */
  private publicSpec(): NodeDevicesSpec {
    return {
      gpus: this.spec.gpus.map(({ index: _i, pciBusId: _p, mig, ...g }) => ({
        ...g,
        ...(mig ? { mig: mig.map(({ uuid: _u, ...m }) => m) } : {}),
      })),
      scalars: this.spec.scalars,
    };
  }

  private async publish(kc: k8s.KubeConfig, stale: string | undefined): Promise<void> {
    const spec = this.publicSpec();
    const text = JSON.stringify({ spec, stale });
    if (text === this.published) return;
    const api = kc.makeApiClient(k8s.CustomObjectsApi);
    const base = { group: GROUP, version: VERSION, plural: 'nodedevices' };
    try {
      await api.patchClusterCustomObject(
        { ...base, name: this.o.nodeName, body: { metadata: { annotations: { [DISCOVERY_STALE_ANNOTATION]: stale ?? null } }, spec } },
        k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
      );
    } catch (e) {
      if ((e as { code?: number }).code !== 404) throw e;
      await api.createClusterCustomObject({
        ...base,
        body: {
          apiVersion: API_VERSION,
          kind: 'NodeDevices',
          metadata: { name: this.o.nodeName, ...(stale ? { annotations: { [DISCOVERY_STALE_ANNOTATION]: stale } } : {}) },
          spec,
        },
      });
    }
    this.published = text;
    this.o.log.info('published NodeDevices', { node: this.o.nodeName, gpus: spec.gpus.length, unhealthy: spec.gpus.filter((g) => g.healthy === false).length, stale: stale !== undefined });
  }

  /** Asks the backend for the node's state; when it cannot answer, the last known state stays (endpoints keep serving). */
  private async refreshState(): Promise<void> {
    try {
      this.state = await this.o.backend.state();
      this.stateAt = systemClock.now();
      this.markReady(true);
      if (this.backendDown) this.o.log.info('the controller answers again', { node: this.o.nodeName });
      this.backendDown = false;
    } catch (e) {
      if (!this.backendDown) this.o.log.warn('cannot read the node state from the controller; serving the last known state', errorFields(e));
      this.backendDown = true;
      this.markReady(false);
    }
    const atoms = atomsFromSpec(this.spec, this.state?.atoms);
    const key = JSON.stringify(atoms);
    this.atoms = new Map(atoms.map((a) => [a.id, a]));
    if (key !== this.atomsKey) {
      this.atomsKey = key;
      this.o.onAtomsChange?.();
    }
  }

  /** The node's atoms now: the ledger's rows once the controller answered, the discovered layout before. */
  currentAtoms(): AtomInfo[] {
    return [...this.atoms.values()];
  }

  private markReady(ready: boolean): void {
    const f = this.o.readyFile;
    if (!f) return;
    try {
      if (ready) {
        const now = systemClock.wallNow();
        fs.closeSync(fs.openSync(f, 'a'));
        fs.utimesSync(f, now, now);
      } else fs.rmSync(f, { force: true });
    } catch (e) {
      this.o.log.warn('cannot write the readiness file', { file: f, ...errorFields(e) });
    }
  }

  /** The node's admission in flight, asked now (never a cached answer): a new admission must be seen at once. */
  private async admission(): Promise<NodeState['admission']> {
    try {
      return (await this.o.backend.state()).admission;
    } catch (e) {
      throw new RefusedError(`cannot ask the controller which pod is admitted on ${this.o.nodeName}: ${(e as Error).message}`);
    }
  }

  // ---- endpoints -----------------------------------------------------------------------------------------------

  reconcile(): Promise<void> {
    return this.serialized(async () => {
      if (this.stopped) return;
      await this.refreshState();
      const desired = new Map<string, { atoms?: string[]; reservationId?: string }>();
      for (const [cls, resource] of Object.entries(RESOURCE_OF_CLASS)) {
        if ([...this.atoms.values()].some((a) => a.class === cls)) desired.set(resource!, {});
      }
      const state = this.state && { ...this.state, now: this.state.now + Math.max(0, systemClock.now() - this.stateAt) };
      for (const [resource, r] of state ? activeReservations(state) : []) {
        desired.set(resource, { atoms: r.atoms, reservationId: r.id });
      }
      for (const [resource, s] of [...this.served]) {
        if (desired.has(resource)) continue;
        await s.endpoint.stop();
        this.served.delete(resource);
        this.o.log.info('stopped device plugin endpoint', { resource });
      }
      for (const [resource, d] of desired) {
        const s = this.served.get(resource);
        if (s) {
          if (d.atoms && JSON.stringify(d.atoms) !== JSON.stringify(s.atoms)) s.atoms = d.atoms;
          s.endpoint.update();
          if (!s.endpoint.socketExists()) {
            // The kubelet removed it (it clears the directory when it starts): serve and register again.
            await s.endpoint.stop();
            await s.endpoint.start();
            s.registered = false;
          }
          continue;
        }
        const served: Served = { endpoint: undefined as unknown as DevicePluginEndpoint, registered: false };
        if (d.atoms) served.atoms = d.atoms;
        if (d.reservationId) served.reservationId = d.reservationId;
        served.endpoint = new DevicePluginEndpoint(this.o.devicePluginDir, socketNameOf(resource), this.handler(resource, served), this.o.log);
        await served.endpoint.start();
        this.served.set(resource, served);
        this.o.log.info('serving device plugin endpoint', { resource, devices: served.endpoint.resource && this.devicesOf(resource, served).length });
      }
      await this.registerPending();
    });
  }

  private async registerPending(): Promise<void> {
    if (!fs.existsSync(this.kubeletSocket)) return;
    for (const [resource, s] of this.served) {
      if (s.registered) continue;
      try {
        await s.endpoint.register(this.kubeletSocket);
        s.registered = true;
        this.o.log.info('registered with the kubelet', { resource });
      } catch (e) {
        this.o.log.warn('registration failed; will retry', { resource, ...errorFields(e) });
      }
    }
  }

  private devicesOf(resource: string, s: Served): PluginDevice[] {
    const toDevice = (a: AtomInfo | undefined, id: string): PluginDevice => ({
      ID: id,
      health: a && a.healthy ? 'Healthy' : 'Unhealthy',
      ...(a?.numaNode !== undefined ? { numaNode: a.numaNode } : {}),
    });
    if (s.atoms) return s.atoms.map((id) => toDevice(this.atoms.get(id), id));
    const cls = GENERIC_RESOURCES[resource];
    return [...this.atoms.values()].filter((a) => a.class === cls).map((a) => toDevice(a, a.id));
  }

  private handler(resource: string, s: Served): EndpointHandler {
    const generic = GENERIC_RESOURCES[resource];
    return {
      resource,
      preferredAllocation: generic !== undefined,
      devices: () => this.devicesOf(resource, s),
      preferred: async (available, mustInclude, size) => {
        if (!generic) return [...mustInclude, ...available.filter((a) => !mustInclude.includes(a))].slice(0, size);
        return [...new Set([...mustInclude, ...(await this.bookedPreference(generic, available))])].slice(0, size);
      },
      allocate: async (ids) => {
        if (s.reservationId) {
          const outside = ids.filter((id) => !(s.atoms ?? []).includes(id));
          if (outside.length) throw new RefusedError(`${outside.join(',')} are not atoms of reservation ${s.reservationId} on this node`);
          this.guard6(ids, await this.persist('listing the kubelet pods', () => this.listPods()));
          const response = await this.containerResponse(resource, ids, s.reservationId);
          this.o.log.info('allocated reservation atoms', { resource, atoms: ids });
          return response;
        }
        const noPreference = this.noPreference;
        this.noPreference = undefined;
        const adm = await this.persist('asking the controller for the admission', () => this.admission());
        if (!adm || adm.atoms.length === 0) {
          throw new RefusedError(`no on-demand admission is in flight on ${this.o.nodeName}: ${resource} goes only to pods bound by the scheduler extender`);
        }
        // An admission belongs to one pod: the kubelet admits pods one at a time and lists the one it admits, so an
        // Allocate while the admission's pod is not listed is for another pod, one whose own admission ran out (a
        // kubelet that came back late). It is refused rather than handed this pod's atoms, whichever it asks for.
        const snapshot = await this.persist('listing the kubelet pods', () => this.listPods());
        if (!snapshot.pods.has(`${adm.namespace}/${adm.podName}`)) {
          throw new RefusedError(
            `the on-demand admission on ${this.o.nodeName} is for pod ${adm.namespace}/${adm.podName}, which the kubelet is not admitting: this Allocate is for another pod, and its atoms are not that pod's`,
          );
        }
        const notBooked = ids.filter((id) => !adm.atoms.includes(id));
        if (notBooked.length) {
          throw new RefusedError(
            `the kubelet chose ${ids.join(',')}, but pod ${adm.namespace}/${adm.podName} was booked ${adm.atoms.join(',')}${noPreference ? ` (no preference was given: ${noPreference})` : ''}`,
          );
        }
        this.guard6(ids, snapshot);
        const response = await this.containerResponse(resource, ids);
        const done = this.allocatedFor.get(adm.podUid) ?? new Set<string>();
        for (const id of ids) done.add(id);
        this.allocatedFor.set(adm.podUid, done);
        if (adm.atoms.every((a) => done.has(a))) {
          this.allocatedFor.delete(adm.podUid);
          // The allocation stands either way: a lease not dropped runs out at its expiry.
          await this.o.backend
            .admissionDone(adm.podUid)
            .catch((e: unknown) => this.o.log.warn('could not end the admission; it will run out', { pod: `${adm.namespace}/${adm.podName}`, ...errorFields(e) }));
        }
        this.o.log.info('allocated on-demand atoms', { resource, pod: `${adm.namespace}/${adm.podName}`, atoms: ids });
        return response;
      },
    };
  }

  /**
   * The admission's atoms of this class that the kubelet offers and this agent has not yet handed over: what it should
   * choose. Empty leaves the choice to the kubelet, and Allocate then refuses anything not booked; why is logged, and
   * named in that refusal: no admission, one for a pod the kubelet is not admitting (the call is another pod's), a
   * controller or PodResources that did not answer in time, or booked atoms the kubelet does not offer.
   */
  private async bookedPreference(cls: DeviceClass, available: string[]): Promise<string[]> {
    const none = (why: string, fields: Record<string, unknown> = {}): string[] => {
      this.o.log.warn('no preference for the booked atoms: the kubelet chooses', { node: this.o.nodeName, why, ...fields });
      this.noPreference = why;
      return [];
    };
    this.noPreference = undefined;
    let adm: NodeState['admission'] = null;
    let snapshot: PodResourcesSnapshot;
    try {
      adm = await this.persist('asking the controller for the admission', () => this.admission());
      if (!adm) return none('no on-demand admission is in flight');
      snapshot = await this.persist('listing the kubelet pods', () => this.listPods());
    } catch (e) {
      return none((e as Error).message, adm ? { pod: `${adm.namespace}/${adm.podName}` } : {});
    }
    const pod = `${adm.namespace}/${adm.podName}`;
    if (!snapshot.pods.has(pod)) return none(`the admission is for pod ${pod}, which the kubelet is not admitting`);
    const done = this.allocatedFor.get(adm.podUid) ?? new Set<string>();
    const wanted = adm.atoms.filter((a) => this.classOf(a) === cls && !done.has(a));
    const offered = wanted.filter((a) => available.includes(a));
    if (offered.length < wanted.length) {
      const missing = wanted.filter((a) => !offered.includes(a));
      none(`the kubelet does not offer booked atoms ${missing.join(',')}`, { pod, available });
    }
    return offered;
  }

  /** Calls `fn` again after a failure, backing off from 100 ms to 1 s, for up to `callRetryMs`; then its last error. */
  private async persist<T>(what: string, fn: () => Promise<T>): Promise<T> {
    const until = systemClock.now() + (this.o.callRetryMs ?? 10_000);
    for (let delay = 100, attempt = 1; ; delay = Math.min(delay * 2, 1000), attempt++) {
      try {
        return await fn();
      } catch (e) {
        if (systemClock.now() + delay > until) throw e;
        this.o.log.warn(`${what} failed; asking again`, { node: this.o.nodeName, attempt, ...errorFields(e) });
        await systemClock.sleep(delay);
      }
    }
  }

  private classOf(atom: string): DeviceClass | undefined {
    const a = this.atoms.get(atom);
    if (a) return a.class;
    if (/\/gi\d+\/ci\d+$/.test(atom)) return 'gpu.mig';
    if (/\/s\d+$/.test(atom)) return 'gpu.slot';
    return 'gpu';
  }

  /** The GPU an atom is (or is part of). */
  private gpuOf(atom: string): string {
    return this.atoms.get(atom)?.gpu ?? atom.replace(/\/(gi\d+\/ci\d+|s\d+)$/, '');
  }

  /**
   * What a DRA claim's containers get for these atoms (its CDI spec's edits, src/agent/dra/): the device-plugin
   * answer's env and device nodes, the atoms named in NVIDIA_VISIBLE_DEVICES (the envvar strategy).
   */
  draHandoff(ids: string[]): Promise<ContainerAllocateResponse> {
    return this.containerResponse(DRA_DRIVER, ids, undefined, { ...DEFAULT_DEVICE_LIST_SETTINGS, strategies: ['envvar'] });
  }

  /** The container's answer for these atoms: their device nodes on the host, handed over the configured ways. */
  private async containerResponse(resource: string, ids: string[], reservationId?: string, settings?: DeviceListSettings): Promise<ContainerAllocateResponse> {
    const refs = ids.map((id) => ({ id, class: this.classOf(id) ?? 'gpu', gpu: this.gpuOf(id) }));
    const busIds = new Map(this.spec.gpus.flatMap((g) => (g.pciBusId ? [[g.uuid, g.pciBusId] as const] : [])));
    const host = await readHostDeviceNodes(this.o.hostDirs ?? { dev: '/dev', proc: '/proc' }, refs, busIds);
    // Simulated GPUs have no driver, so no device nodes; on real ones a GPU the driver does not list is worth a word.
    if (host.unknownGpus.length && this.o.source.kind !== 'file') {
      this.o.log.warn('no driver minor for these GPUs: handed over without their device node', { resource, gpus: host.unknownGpus });
    }
    const atoms = ids.map((id) => ({ id, visible: this.atoms.get(id)?.visible ?? id.replace(/\/s\d+$/, ''), deviceNodes: host.atomNodes.get(id) ?? [] }));
    const chosen = await this.chooseDeviceList(resource, atoms.map((a) => a.visible), settings ?? this.o.deviceList ?? DEFAULT_DEVICE_LIST_SETTINGS);
    try {
      return containerAllocateResponse({ resource, atoms, controlNodes: host.controlNodes, ...(reservationId ? { reservationId } : {}) }, chosen);
    } catch (e) {
      if (e instanceof HandoffError) throw new RefusedError(e.message);
      throw e;
    }
  }

  /** The strategies for this container: as configured, or for `auto` from the node's CDI specs, read at each Allocate. */
  private async chooseDeviceList(resource: string, visible: string[], settings: DeviceListSettings) {
    const cdi = settings.strategies === DEVICE_LIST_AUTO ? await readCdiNames(this.o.cdiSpecDirs ?? []) : undefined;
    for (const s of cdi?.skipped ?? []) this.o.log.warn('CDI spec left out', s);
    const r = resolveDeviceList(settings, [...new Set(visible)], cdi?.names ?? new Set());
    const key = `${r.settings.strategies.join(',')} ${r.reason}`;
    if (this.lastDeviceList.get(resource) !== key) {
      this.lastDeviceList.set(resource, key);
      this.o.log.info('device list strategy', { resource, strategies: r.settings.strategies, reason: r.reason });
    }
    return r.settings;
  }

  /** The kubelet's pods and what their containers hold (PodResources List); a refusal when it does not answer. */
  private async listPods(): Promise<PodResourcesSnapshot> {
    try {
      return await this.podResources.list(OUR_RESOURCE);
    } catch (e) {
      throw new RefusedError(`cannot check which atoms live containers hold (PodResources API): ${(e as Error).message}`);
    }
  }

  /** Guard 6: no atom that a live container holds, nor one overlapping it (its GPU, or a part of it). */
  private guard6(ids: string[], { held }: PodResourcesSnapshot): void {
    for (const id of ids) {
      const h = held.get(id);
      if (h) throw new RefusedError(`atom ${id} is held by ${h.pod} (container ${h.container}, ${h.resource})`);
      const gpu = this.gpuOf(id);
      const isWhole = gpu === id;
      for (const [atom, holder] of held) {
        const sameGpu = this.gpuOf(atom) === gpu;
        if (sameGpu && (isWhole || atom === gpu)) {
          throw new RefusedError(`atom ${id} overlaps ${atom}, held by ${holder.pod} (container ${holder.container})`);
        }
      }
    }
  }
}
