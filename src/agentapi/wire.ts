// The agent API's wire format (controller ↔ node agent), one zod schema per body. Pure: the agent imports it without
// anything of the database.
import { z } from 'zod';

export const AGENT_API_PREFIX = '/agent/v1';

/** A Kubernetes node name (DNS subdomain). */
export const NodeName = z
  .string()
  .min(1)
  .max(253)
  .regex(/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/, 'not a node name');
/** A pod UID (a UUID as the API server writes it; anything of its alphabet is accepted). */
export const PodUid = z
  .string()
  .min(1)
  .max(128)
  .regex(/^[A-Za-z0-9][A-Za-z0-9._-]*$/, 'not a pod uid');

const DeviceClassSchema = z.enum(['gpu', 'gpu.mig', 'gpu.slot']);

export const NodeStateSchema = z.strictObject({
  /** The ledger's time (compute_now(), epoch milliseconds) when the state was read. */
  now: z.number(),
  /** The node's present, bookable atoms. */
  atoms: z.array(z.strictObject({ id: z.string().min(1), class: DeviceClassSchema, parentId: z.string().nullable(), healthy: z.boolean() })),
  /**
   * Reservations whose atoms this node serves: held or confirmed ones whose window holds `now`, and ones with a pod
   * still assigned here (ended or released; `end` is then a serving lease ahead of `now`). Their atoms on this node.
   */
  reservations: z.array(
    z.strictObject({
      reservationId: z.string().min(1),
      resourceName: z.string().min(1),
      atoms: z.array(z.string().min(1)),
      start: z.number(),
      end: z.number(),
    }),
  ),
  /** The node's on-demand admission in flight (the extender's lease), if any. */
  admission: z
    .strictObject({ podUid: z.string().min(1), namespace: z.string(), podName: z.string(), atoms: z.array(z.string().min(1)) })
    .nullable(),
});
export type NodeState = z.infer<typeof NodeStateSchema>;
export type NodeAtom = NodeState['atoms'][number];
export type NodeReservation = NodeState['reservations'][number];
export type NodeAdmission = NonNullable<NodeState['admission']>;

export const AdmissionDoneSchema = z.strictObject({ dropped: z.boolean() });
export type AdmissionDone = z.infer<typeof AdmissionDoneSchema>;

/** What the agent needs of the controller: its node's state, and to end an admission it has served. */
export interface AgentBackend {
  state(): Promise<NodeState>;
  admissionDone(podUid: string): Promise<void>;
}

// ---- Dynamic Resource Allocation (ADR 0043) ----


/** A ResourceClaim's UID (as the kubelet's NodePrepareResources names it). */
export const ClaimUid = PodUid;

/** The agent asks: may this claim, allocated on my node, be prepared, and with which atoms? (body of POST .../claims/{uid}/prepare) */
export const ClaimPrepareRequestSchema = z.strictObject({
  namespace: z.string().min(1).max(63),
  name: z.string().min(1).max(253),
});
export type ClaimPrepareRequest = z.infer<typeof ClaimPrepareRequestSchema>;

/**
 * The controller answers, after reading the claim afresh from the API server and the ledger: each allocated device of
 * the claim with the atom the ledger booked to that claim's pod or Reservation. Refusals are errors
 * (`{"error":{"code","message"}}`): 403 CLAIM_NOT_BOOKED when a device of the allocation is not booked to the claim,
 * 404 CLAIM_NOT_FOUND, 409 CLAIM_NOT_ON_NODE / CLAIM_NOT_ALLOCATED / CLAIM_OUTSIDE_WINDOW.
 */
export const ClaimPrepareAnswerSchema = z.strictObject({
  claimUid: z.string().min(1),
  /** The pod (on demand) or Reservation the atoms are booked to. */
  bookedTo: z.discriminatedUnion('kind', [
    z.strictObject({ kind: z.literal('pod'), podUid: z.string().min(1) }),
    z.strictObject({ kind: z.literal('reservation'), reservationId: z.string().min(1) }),
  ]),
  /** Epoch milliseconds: the end of the booking (null: open-ended, an on-demand pod's). */
  end: z.number().nullable(),
  devices: z.array(
    z.strictObject({
      /** The claim's request name this device answers. */
      request: z.string().min(1),
      /** The device name in the node's ResourceSlice (draDeviceName(atomId)). */
      device: z.string().min(1).max(63),
      /** The ledger's atom id. */
      atomId: z.string().min(1),
    }),
  ),
});
export type ClaimPrepareAnswer = z.infer<typeof ClaimPrepareAnswerSchema>;
