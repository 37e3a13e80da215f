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
  /** Reservations holding atoms on this node whose window holds `now`: their atoms on this node. */
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
