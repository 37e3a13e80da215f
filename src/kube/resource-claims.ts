// ResourceClaims (resource.k8s.io/v1, Dynamic Resource Allocation) as the controller's claim allocator and the agent
// API's prepare check read and write them (ADR 0043): the list for the informer, a fresh GET, the status subresource
// (status.allocation, written with the claim's resourceVersion so that a concurrent change is a 409) and our finalizer.
// Through the custom-objects client, which speaks to any API group's REST paths; the KubeConfig's timeouts apply.
import { CustomObjectsApi, PatchStrategy, setHeaderOptions, type KubeConfig } from '@kubernetes/client-node';
import { statusOf } from './client.ts';
import type { ListResult } from './informer.ts';
import { listAllPages, type ListPage } from './paging.ts';
import type { KubeObject } from './types.ts';

export const RESOURCE_GROUP = 'resource.k8s.io';
export const RESOURCE_VERSION = 'v1';
export const RESOURCE_CLAIMS_PATH = `/apis/${RESOURCE_GROUP}/${RESOURCE_VERSION}/resourceclaims`;

const mergePatch = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);
const claimsOf = { group: RESOURCE_GROUP, version: RESOURCE_VERSION, plural: 'resourceclaims' } as const;

/** A ResourceClaim as the API server sends it (core/dra-allocate.ts ResourceClaimSchema reads it). */
export interface ResourceClaimObject extends KubeObject {
  spec?: Record<string, unknown>;
  status?: Record<string, unknown>;
}

/** Reads one claim afresh (the prepare check). Undefined when there is none by that name. */
export type ClaimReader = (namespace: string, name: string) => Promise<unknown>;

export class ResourceClaimClient {
  private readonly custom: CustomObjectsApi;

  constructor(kc: KubeConfig) {
    this.custom = kc.makeApiClient(CustomObjectsApi);
  }

  /** Whether the API server serves resource.k8s.io/v1 (Kubernetes 1.34+) and lets us list claims. */
  async served(): Promise<'served' | 'absent' | 'forbidden'> {
    try {
      await this.custom.listCustomObjectForAllNamespaces({ group: RESOURCE_GROUP, version: RESOURCE_VERSION, resourcePlural: 'resourceclaims', limit: 1 });
      return 'served';
    } catch (e) {
      if (statusOf(e) === 404) return 'absent';
      if (statusOf(e) === 403) return 'forbidden';
      throw e;
    }
  }

  list = (): Promise<ListResult<ResourceClaimObject>> =>
    listAllPages<ResourceClaimObject>(
      (p) =>
        this.custom.listCustomObjectForAllNamespaces({
          group: RESOURCE_GROUP,
          version: RESOURCE_VERSION,
          resourcePlural: 'resourceclaims',
          limit: p.limit,
          ...(p.continue ? { _continue: p.continue } : {}),
        }) as Promise<ListPage<ResourceClaimObject>>,
      (x) => x,
    );

  get: ClaimReader = async (namespace, name) => {
    try {
      return await this.custom.getNamespacedCustomObject({ ...claimsOf, namespace, name });
    } catch (e) {
      if (statusOf(e) === 404) return undefined;
      throw e;
    }
  };

  /**
   * The DeviceClass names a pod's claim reference asks for: those of its ResourceClaimTemplate or ResourceClaim
   * (empty when there is none by that name yet). Admission's check that a pod does not mix hand-off modes.
   */
  async deviceClassesOf(namespace: string, ref: { resourceClaimName?: string | null; resourceClaimTemplateName?: string | null }): Promise<string[]> {
    const template = ref.resourceClaimTemplateName;
    const name = template ?? ref.resourceClaimName;
    if (!name) return [];
    let obj: { spec?: { spec?: unknown; devices?: unknown } } | undefined;
    try {
      obj = (await this.custom.getNamespacedCustomObject({ ...claimsOf, plural: template ? 'resourceclaimtemplates' : 'resourceclaims', namespace, name })) as typeof obj;
    } catch (e) {
      if (statusOf(e) === 404) return [];
      throw e;
    }
    const spec = (template ? obj?.spec?.spec : obj?.spec) as { devices?: { requests?: { exactly?: { deviceClassName?: string }; firstAvailable?: { deviceClassName?: string }[] }[] } } | undefined;
    return (spec?.devices?.requests ?? []).flatMap((r) => [r.exactly?.deviceClassName, ...(r.firstAvailable ?? []).map((f) => f.deviceClassName)]).filter((x): x is string => typeof x === 'string');
  }

  /** Replaces the claim's status (PUT of the status subresource): `claim` carries its resourceVersion. */
  async replaceStatus(claim: ResourceClaimObject): Promise<ResourceClaimObject> {
    const { namespace, name } = claim.metadata;
    return (await this.custom.replaceNamespacedCustomObjectStatus({ ...claimsOf, namespace: namespace!, name, body: claim })) as ResourceClaimObject;
  }

  /** Sets the claim's finalizers, at `resourceVersion` (a concurrent change is a 409). */
  async setFinalizers(namespace: string, name: string, finalizers: string[], resourceVersion: string): Promise<ResourceClaimObject> {
    return (await this.custom.patchNamespacedCustomObject(
      { ...claimsOf, namespace, name, body: { metadata: { finalizers, resourceVersion } } },
      mergePatch,
    )) as ResourceClaimObject;
  }
}
