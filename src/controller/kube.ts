// The controller's Kubernetes calls in one place: lists for the informers, status and metadata patches, Events and
// the Lease. Merge patches everywhere (RFC 7386); finalizer changes carry the resourceVersion, so a concurrent change
// is a 409 and the reconcile runs again.
import {
  CoordinationV1Api,
  CoreV1Api,
  CustomObjectsApi,
  KubeConfig,
  PatchStrategy,
  setHeaderOptions,
  type V1Lease,
} from '@kubernetes/client-node';
import type { ListResult } from './informer.ts';
import {
  API_VERSION,
  GROUP,
  VERSION,
  type KubeObject,
  type NamespaceCR,
  type NodeCR,
  type NodeDevicesCR,
  type PoolCR,
  type Reservation,
} from './types.ts';

export const PLURALS = { reservations: 'reservations', pools: 'pools', nodedevices: 'nodedevices' } as const;

const mergePatch = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);

/** A KubeConfig from a file, else the default chain (KUBECONFIG, ~/.kube/config, in-cluster). */
export function kubeConfigFrom(file?: string): KubeConfig {
  const kc = new KubeConfig();
  if (file) kc.loadFromFile(file);
  else kc.loadFromDefault();
  return kc;
}

/** HTTP status of a client error (ApiException.code), if any. */
export function statusOf(e: unknown): number | undefined {
  const code = (e as { code?: unknown; statusCode?: unknown })?.code ?? (e as { statusCode?: unknown })?.statusCode;
  return typeof code === 'number' ? code : undefined;
}

export interface EventInput {
  type: 'Normal' | 'Warning';
  reason: string;
  message: string;
}

export class KubeClient {
  readonly custom: CustomObjectsApi;
  readonly core: CoreV1Api;
  readonly coordination: CoordinationV1Api;

  constructor(
    readonly kc: KubeConfig,
    private readonly component = 'better-compute-controller',
    private readonly instance = '',
  ) {
    this.custom = kc.makeApiClient(CustomObjectsApi);
    this.core = kc.makeApiClient(CoreV1Api);
    this.coordination = kc.makeApiClient(CoordinationV1Api);
  }

  // ----- lists (informers)

  listReservations = async (): Promise<ListResult<Reservation>> =>
    (await this.custom.listCustomObjectForAllNamespaces({ group: GROUP, version: VERSION, resourcePlural: PLURALS.reservations })) as ListResult<Reservation>;

  listPools = async (): Promise<ListResult<PoolCR>> =>
    (await this.custom.listClusterCustomObject({ group: GROUP, version: VERSION, plural: PLURALS.pools })) as ListResult<PoolCR>;

  listNodeDevices = async (): Promise<ListResult<NodeDevicesCR>> =>
    (await this.custom.listClusterCustomObject({ group: GROUP, version: VERSION, plural: PLURALS.nodedevices })) as ListResult<NodeDevicesCR>;

  listNodes = async (): Promise<ListResult<NodeCR>> => (await this.core.listNode()) as unknown as ListResult<NodeCR>;

  listNamespaces = async (): Promise<ListResult<NamespaceCR>> => (await this.core.listNamespace()) as unknown as ListResult<NamespaceCR>;

  // ----- writes

  async patchReservationStatus(ns: string, name: string, status: Record<string, unknown>): Promise<void> {
    await this.custom.patchNamespacedCustomObjectStatus(
      { group: GROUP, version: VERSION, namespace: ns, plural: PLURALS.reservations, name, body: { status } },
      mergePatch,
    );
  }

  /** Replaces the finalizer list, failing with 409 when the object changed since `resourceVersion`. */
  async setReservationFinalizers(ns: string, name: string, finalizers: string[], resourceVersion: string): Promise<Reservation> {
    return (await this.custom.patchNamespacedCustomObject(
      {
        group: GROUP,
        version: VERSION,
        namespace: ns,
        plural: PLURALS.reservations,
        name,
        body: { metadata: { finalizers, resourceVersion } },
      },
      mergePatch,
    )) as Reservation;
  }

  async patchPoolStatus(name: string, status: Record<string, unknown>): Promise<void> {
    await this.custom.patchClusterCustomObjectStatus(
      { group: GROUP, version: VERSION, plural: PLURALS.pools, name, body: { status } },
      mergePatch,
    );
  }

  async patchNodeDevicesStatus(name: string, status: Record<string, unknown>): Promise<void> {
    await this.custom.patchClusterCustomObjectStatus(
      { group: GROUP, version: VERSION, plural: PLURALS.nodedevices, name, body: { status } },
      mergePatch,
    );
  }

  /** A core/v1 Event about `obj` (namespaced objects: in their namespace; cluster-scoped ones: in `default`). */
  async event(obj: KubeObject, kind: string, e: EventInput): Promise<void> {
    const ns = obj.metadata.namespace ?? 'default';
    const now = new Date();
    await this.core.createNamespacedEvent({
      namespace: ns,
      body: {
        metadata: { generateName: `${obj.metadata.name}.`, namespace: ns },
        involvedObject: {
          apiVersion: obj.apiVersion ?? (kind === 'Node' ? 'v1' : API_VERSION),
          kind,
          name: obj.metadata.name,
          ...(obj.metadata.namespace ? { namespace: obj.metadata.namespace } : {}),
          ...(obj.metadata.uid ? { uid: obj.metadata.uid } : {}),
          ...(obj.metadata.resourceVersion ? { resourceVersion: obj.metadata.resourceVersion } : {}),
        },
        type: e.type,
        reason: e.reason,
        message: e.message.slice(0, 1024),
        firstTimestamp: now,
        lastTimestamp: now,
        count: 1,
        source: { component: this.component },
        reportingComponent: this.component,
        reportingInstance: this.instance,
        action: e.reason,
      },
    });
  }

  // ----- the Lease

  async readLease(ns: string, name: string): Promise<V1Lease | undefined> {
    try {
      return await this.coordination.readNamespacedLease({ namespace: ns, name });
    } catch (e) {
      if (statusOf(e) === 404) return undefined;
      throw e;
    }
  }

  createLease(ns: string, lease: V1Lease): Promise<V1Lease> {
    return this.coordination.createNamespacedLease({ namespace: ns, body: lease });
  }

  replaceLease(ns: string, name: string, lease: V1Lease): Promise<V1Lease> {
    return this.coordination.replaceNamespacedLease({ namespace: ns, name, body: lease });
  }
}
