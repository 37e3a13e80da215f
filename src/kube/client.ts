// The controller's Kubernetes calls in one place: lists for the informers, status and metadata patches, Events and
// the Lease. Merge patches everywhere (RFC 7386); finalizer changes carry the resourceVersion, so a concurrent change
// is a 409 and the reconcile runs again.
import {
  CoordinationV1Api,
  CoreV1Api,
  CustomObjectsApi,
  KubeConfig,
  Observable,
  PatchStrategy,
  setHeaderOptions,
  type ApiConstructor,
  type ApiType,
  type Configuration,
  type ConfigurationOptions,
  type HttpLibrary,
  type RequestContext,
  type V1Lease,
} from '@kubernetes/client-node';
import { PooledKubeConfig } from './connections.ts';
import type { ListResult } from './informer.ts';
import { listAllPages, type ListPage } from './paging.ts';
import { type KubeObject, type NamespaceCR, type NodeCR, type NodeDevicesCR, type PoolCR, type Reservation } from './types.ts';
import { systemClock } from '../clock.ts';
import { boundReservation } from './bounds.ts';
import { API_VERSION, GROUP, VERSION } from '../core/names.ts';

export const PLURALS = { reservations: 'reservations', pools: 'pools', nodedevices: 'nodedevices' } as const;

/** The client's list parameters of one page. */
const pageParams = (p: { limit: number; continue?: string }) => ({ limit: p.limit, ...(p.continue ? { _continue: p.continue } : {}) });
const same = <T>(x: T): T => x;

const mergePatch = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);

/** The default longest Kubernetes API call (BETTER_COMPUTE_KUBE_CALL_TIMEOUT). */
export const DEFAULT_KUBE_CALL_TIMEOUT_MS = 30_000;

/** A Kubernetes API call given up after its timeout (the request is aborted). */
export class KubeCallTimeoutError extends Error {
  constructor(readonly timeoutMs: number) {
    super(`the Kubernetes API did not answer within ${timeoutMs} ms`);
    this.name = 'KubeCallTimeoutError';
  }
}

/** Sends through `inner` with the request's signal joined to a timer's: the call is aborted after `timeoutMs`. */
function timedHttp(inner: HttpLibrary, timeoutMs: number): HttpLibrary {
  return {
    send(ctx: RequestContext) {
      const timer = AbortSignal.timeout(timeoutMs);
      const own = ctx.getSignal();
      ctx.setSignal(own ? AbortSignal.any([own, timer]) : timer);
      return new Observable(
        inner
          .send(ctx)
          .toPromise()
          .catch((e: unknown) => {
            throw timer.aborted && !own?.aborted ? new KubeCallTimeoutError(timeoutMs) : e;
          }),
      );
    },
  };
}

/**
 * A KubeConfig whose API clients (makeApiClient) abort every call that has not finished (its body read) within
 * `callTimeoutMs`: a hung API server or connection must not hang the caller. Watches make their own requests and keep
 * their own liveness (informer.ts). Calls share kept-alive connections (PooledKubeConfig).
 */
export class TimedKubeConfig extends PooledKubeConfig {
  constructor(readonly callTimeoutMs: number) {
    super();
  }

  override makeApiClient<T extends ApiType>(Api: ApiConstructor<T>): T {
    const timeoutMs = this.callTimeoutMs;
    // The library builds the configuration (server, auth, user agent); the client gets it with the timed transport.
    function Timed(config: Configuration): T {
      return new Api({ ...config, httpApi: timedHttp(config.httpApi, timeoutMs) });
    }
    return super.makeApiClient(Timed as unknown as ApiConstructor<T>);
  }
}

/**
 * The product's one way to a KubeConfig: from a file, else the default chain (KUBECONFIG, ~/.kube/config, in-cluster),
 * or only the in-cluster service account (`whenNoFile: 'in-cluster'`); every call timed, connections shared.
 */
export function kubeConfigFrom(
  file?: string,
  callTimeoutMs = DEFAULT_KUBE_CALL_TIMEOUT_MS,
  whenNoFile: 'default' | 'in-cluster' = 'default',
): KubeConfig {
  const kc = new TimedKubeConfig(callTimeoutMs);
  if (file) kc.loadFromFile(file);
  else if (whenNoFile === 'in-cluster') kc.loadFromCluster();
  else kc.loadFromDefault();
  return kc;
}

/** Per-call options that abort the request when `signal` does (besides the client's own timeout). */
function abortedBy(signal: AbortSignal | undefined): ConfigurationOptions | undefined {
  if (!signal) return undefined;
  return {
    middleware: [
      {
        pre(ctx: RequestContext) {
          const own = ctx.getSignal();
          ctx.setSignal(own ? AbortSignal.any([own, signal]) : signal);
          return new Observable(Promise.resolve(ctx));
        },
        post: (res) => new Observable(Promise.resolve(res)),
      },
    ],
    middlewareMergeStrategy: 'append',
  };
}

/** The Lease calls of leader election; `signal` aborts a call the elector no longer waits for. */
export interface LeaseClient {
  readLease(ns: string, name: string, signal?: AbortSignal): Promise<V1Lease | undefined>;
  createLease(ns: string, lease: V1Lease, signal?: AbortSignal): Promise<V1Lease>;
  replaceLease(ns: string, name: string, lease: V1Lease, signal?: AbortSignal): Promise<V1Lease>;
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

export class KubeClient implements LeaseClient {
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

  listReservations = (): Promise<ListResult<Reservation>> =>
    listAllPages<Reservation>(
      (p) => this.custom.listCustomObjectForAllNamespaces({ group: GROUP, version: VERSION, resourcePlural: PLURALS.reservations, ...pageParams(p) }) as Promise<ListPage<Reservation>>,
      boundReservation,
    );

  listPools = (): Promise<ListResult<PoolCR>> =>
    listAllPages<PoolCR>((p) => this.custom.listClusterCustomObject({ group: GROUP, version: VERSION, plural: PLURALS.pools, ...pageParams(p) }) as Promise<ListPage<PoolCR>>, same);

  listNodeDevices = (): Promise<ListResult<NodeDevicesCR>> =>
    listAllPages<NodeDevicesCR>(
      (p) => this.custom.listClusterCustomObject({ group: GROUP, version: VERSION, plural: PLURALS.nodedevices, ...pageParams(p) }) as Promise<ListPage<NodeDevicesCR>>,
      same,
    );

  listNodes = (): Promise<ListResult<NodeCR>> => listAllPages<NodeCR>((p) => this.core.listNode(pageParams(p)) as unknown as Promise<ListPage<NodeCR>>, same);

  listNamespaces = (): Promise<ListResult<NamespaceCR>> =>
    listAllPages<NamespaceCR>((p) => this.core.listNamespace(pageParams(p)) as unknown as Promise<ListPage<NamespaceCR>>, same);

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
    const now = systemClock.wallNow();
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

  async readLease(ns: string, name: string, signal?: AbortSignal): Promise<V1Lease | undefined> {
    try {
      return await this.coordination.readNamespacedLease({ namespace: ns, name }, abortedBy(signal));
    } catch (e) {
      if (statusOf(e) === 404) return undefined;
      throw e;
    }
  }

  createLease(ns: string, lease: V1Lease, signal?: AbortSignal): Promise<V1Lease> {
    return this.coordination.createNamespacedLease({ namespace: ns, body: lease }, abortedBy(signal));
  }

  replaceLease(ns: string, name: string, lease: V1Lease, signal?: AbortSignal): Promise<V1Lease> {
    return this.coordination.replaceNamespacedLease({ namespace: ns, name, body: lease }, abortedBy(signal));
  }
}
