// Kueue's objects as the reservation AdmissionCheck reads and writes them (kueue.x-k8s.io/v1beta2, the version Kueue
// v0.17 stores): lists for the informers, whether Kueue is installed at all, and the two status writes, each a
// server-side apply of only our fields under our own field manager, so that Kueue's fields and other checks' entries
// in the same lists are left alone (status.admissionChecks and status.conditions are maps keyed by name and type).
import { BatchV1Api, CustomObjectsApi, PatchStrategy, setHeaderOptions, type KubeConfig } from '@kubernetes/client-node';
import type { PodSetUpdate } from '../core/kueue-check.ts';
import { PLURALS, statusOf } from './client.ts';
import type { ListResult } from './informer.ts';
import { type Condition, type KubeObject, type Reservation } from './types.ts';
import { GROUP, VERSION } from '../core/names.ts';

export const KUEUE_GROUP = 'kueue.x-k8s.io';
export const KUEUE_VERSION = 'v1beta2';
export const KUEUE_API_VERSION = `${KUEUE_GROUP}/${KUEUE_VERSION}`;
export const KUEUE_PLURALS = { workloads: 'workloads', admissionChecks: 'admissionchecks' } as const;
/** The field manager of our writes to Kueue's objects. */
export const CHECK_FIELD_MANAGER = 'bettercompute.io-reservation-check';

const apply = setHeaderOptions('Content-Type', PatchStrategy.ServerSideApply);

export interface AdmissionCheckCR extends KubeObject {
  spec?: { controllerName?: string; parameters?: Record<string, unknown> };
  status?: { conditions?: Condition[] };
}

/** A Workload as the informer caches it (the check parses what it reads with core's WorkloadSchema). */
export interface WorkloadCR extends KubeObject {
  spec?: Record<string, unknown>;
  status?: Record<string, unknown>;
}

export interface CheckStateWrite {
  name: string;
  state: string;
  message: string;
  lastTransitionTime: string;
  podSetUpdates?: PodSetUpdate[];
}

export class KueueClient {
  private readonly custom: CustomObjectsApi;
  private readonly batch: BatchV1Api;

  constructor(kc: KubeConfig) {
    this.custom = kc.makeApiClient(CustomObjectsApi);
    this.batch = kc.makeApiClient(BatchV1Api);
  }

  /** Creates the Reservation the check books for a Workload; false when one of that name exists already. */
  async createReservation(r: Reservation): Promise<boolean> {
    try {
      await this.custom.createNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: r.metadata.namespace ?? '', plural: PLURALS.reservations, body: r });
      return true;
    } catch (e) {
      if (statusOf(e) === 409) return false;
      throw e;
    }
  }

  /** Deletes a booked Reservation, only if it is still the one of `uid` (a namesake made since is left alone). */
  async deleteReservation(namespace: string, name: string, uid: string): Promise<void> {
    try {
      await this.custom.deleteNamespacedCustomObject({ group: GROUP, version: VERSION, namespace, plural: PLURALS.reservations, name, body: { preconditions: { uid } } });
    } catch (e) {
      // Gone already, or another object of that name (the precondition): nothing of ours to delete.
      if (statusOf(e) === 404 || statusOf(e) === 409) return;
      throw e;
    }
  }

  /** A batch/v1 Job's spec.activeDeadlineSeconds; undefined when it has none, is gone, or is not ours to read. */
  async jobActiveDeadlineSeconds(namespace: string, name: string): Promise<number | undefined> {
    try {
      const j = await this.batch.readNamespacedJob({ namespace, name });
      return j.spec?.activeDeadlineSeconds ?? undefined;
    } catch (e) {
      if (statusOf(e) === 404 || statusOf(e) === 403) return undefined;
      throw e;
    }
  }

  /** Whether Kueue's API is served (its CRDs are installed: else 404) and ours to read (deploy/kueue's RBAC: else 403). */
  async installed(): Promise<'installed' | 'absent' | 'forbidden'> {
    try {
      await this.custom.listClusterCustomObject({ group: KUEUE_GROUP, version: KUEUE_VERSION, plural: KUEUE_PLURALS.admissionChecks, limit: 1 });
      return 'installed';
    } catch (e) {
      if (statusOf(e) === 404) return 'absent';
      if (statusOf(e) === 403) return 'forbidden';
      throw e;
    }
  }

  listWorkloads = async (): Promise<ListResult<WorkloadCR>> =>
    (await this.custom.listCustomObjectForAllNamespaces({ group: KUEUE_GROUP, version: KUEUE_VERSION, resourcePlural: KUEUE_PLURALS.workloads })) as ListResult<WorkloadCR>;

  listAdmissionChecks = async (): Promise<ListResult<AdmissionCheckCR>> =>
    (await this.custom.listClusterCustomObject({ group: KUEUE_GROUP, version: KUEUE_VERSION, plural: KUEUE_PLURALS.admissionChecks })) as ListResult<AdmissionCheckCR>;

  /** Our entry of the Workload's status.admissionChecks (server-side apply, forced: the entry's fields are ours). */
  async applyWorkloadCheck(namespace: string, name: string, check: CheckStateWrite): Promise<void> {
    await this.custom.patchNamespacedCustomObjectStatus(
      {
        group: KUEUE_GROUP,
        version: KUEUE_VERSION,
        namespace,
        plural: KUEUE_PLURALS.workloads,
        name,
        body: { apiVersion: KUEUE_API_VERSION, kind: 'Workload', metadata: { name, namespace }, status: { admissionChecks: [check] } },
        fieldManager: CHECK_FIELD_MANAGER,
        force: true,
      },
      apply,
    );
  }

  /** The AdmissionCheck's Active condition: Kueue keeps a ClusterQueue inactive until its checks' controllers say so. */
  async applyAdmissionCheckActive(name: string, condition: Condition): Promise<void> {
    await this.custom.patchClusterCustomObjectStatus(
      {
        group: KUEUE_GROUP,
        version: KUEUE_VERSION,
        plural: KUEUE_PLURALS.admissionChecks,
        name,
        body: { apiVersion: KUEUE_API_VERSION, kind: 'AdmissionCheck', metadata: { name }, status: { conditions: [condition] } },
        fieldManager: CHECK_FIELD_MANAGER,
        force: true,
      },
      apply,
    );
  }
}
