// ResourceSlices (resource.k8s.io/v1) as the agent writes its node's (docs/dra-node.md, ADR 0043): the node's slices
// of our driver listed by field selector, each slice created, replaced at the resourceVersion read, or deleted with
// that resourceVersion as a precondition; and the Node's UID, the slices' owner. Every answer is checked with zod;
// every call has the KubeConfig's timeout (TimedKubeConfig). Which slices the agent may write is the admission
// policy's (deploy/dra/agent/policies.yaml): only those of its own node.
import { CoreV1Api, CustomObjectsApi, type KubeConfig } from '@kubernetes/client-node';
import { z } from 'zod';
import { ResourceSliceListSchema, type ExistingSlice, type ResourceSliceObject } from '../core/dra-slices.ts';
import { statusOf } from './client.ts';
import { RESOURCE_GROUP, RESOURCE_VERSION } from './resource-claims.ts';
import { DRA_DRIVER } from '../core/names.ts';

const slicesOf = { group: RESOURCE_GROUP, version: RESOURCE_VERSION, plural: 'resourceslices' } as const;

/** At most this many slices are read for one node (a node's atoms fill a few; more is someone else's doing). */
const MAX_LISTED = 500;

const NodeSchema = z.looseObject({ metadata: z.looseObject({ name: z.string(), uid: z.string().min(1) }) });
const WrittenSchema = z.looseObject({ metadata: z.looseObject({ name: z.string(), resourceVersion: z.string().min(1) }) });

export class ResourceSliceClient {
  private readonly custom: CustomObjectsApi;
  private readonly core: CoreV1Api;

  constructor(kc: KubeConfig) {
    this.custom = kc.makeApiClient(CustomObjectsApi);
    this.core = kc.makeApiClient(CoreV1Api);
  }

  /** The node's slices of our driver (field selector spec.nodeName and spec.driver), checked. */
  async listOfNode(node: string): Promise<ExistingSlice[]> {
    const raw = await this.custom.listClusterCustomObject({
      ...slicesOf,
      fieldSelector: `spec.nodeName=${node},spec.driver=${DRA_DRIVER}`,
      limit: MAX_LISTED,
    });
    const list = ResourceSliceListSchema.safeParse(raw);
    if (!list.success) throw new Error(`the API server's ResourceSlice list is not one: ${list.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`);
    if ((raw as { metadata?: { continue?: string } }).metadata?.continue) throw new Error(`node ${node} has more than ${MAX_LISTED} ResourceSlices of ${DRA_DRIVER}`);
    return list.data.items;
  }

  async create(slice: ResourceSliceObject): Promise<void> {
    WrittenSchema.parse(await this.custom.createClusterCustomObject({ ...slicesOf, body: slice }));
  }

  /** Replaces the slice whole, at `resourceVersion` (a concurrent change is a 409). */
  async replace(slice: ResourceSliceObject, resourceVersion: string): Promise<void> {
    const body = { ...slice, metadata: { ...slice.metadata, resourceVersion } };
    WrittenSchema.parse(await this.custom.replaceClusterCustomObject({ ...slicesOf, name: slice.metadata.name, body }));
  }

  /** Deletes the slice if it is still at `resourceVersion`; one already gone is no error. */
  async delete(name: string, resourceVersion: string): Promise<void> {
    try {
      await this.custom.deleteClusterCustomObject({ ...slicesOf, name, body: { preconditions: { resourceVersion } } });
    } catch (e) {
      if (statusOf(e) !== 404) throw e;
    }
  }

  /** The Node's UID (the slices' owner: deleting the Node deletes them). */
  async nodeUid(node: string): Promise<string> {
    return NodeSchema.parse(await this.core.readNode({ name: node })).metadata.uid;
  }
}
