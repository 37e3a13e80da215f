// An AdmissionReview's bytes decoded to what pod admission reads of it: JSON parsed, checked with zod, and the pod cut
// down to the fields admitPod() looks at. The one decoder of both paths (ADR 0047): run on the event loop for a small
// body, in a worker thread (review-pool.ts) for a large one, so that both give the same answers by construction and a
// large body's parse and check never hold the loop that the scheduler extender shares.
// No I/O, no clock: the worker imports this module and nothing that opens a connection.
import { z } from 'zod';
import { RESERVATION_LABEL } from '../core/names.ts';

type Quantities = Record<string, string | number>;
const Quantities = z.record(z.string(), z.union([z.string(), z.number()]));
const Container = z.looseObject({
  name: z.string().optional(),
  resources: z.looseObject({ requests: Quantities.nullish(), limits: Quantities.nullish() }).nullish(),
});
export const PodSchema = z.looseObject({
  metadata: z
    .looseObject({
      name: z.string().optional(),
      generateName: z.string().optional(),
      namespace: z.string().optional(),
      labels: z.record(z.string(), z.string()).nullish(),
    })
    .optional(),
  spec: z.looseObject({
    containers: z.array(Container),
    initContainers: z.array(Container).nullish(),
    schedulerName: z.string().nullish(),
    nodeName: z.string().nullish(),
    resourceClaims: z
      .array(z.looseObject({ name: z.string(), resourceClaimName: z.string().nullish(), resourceClaimTemplateName: z.string().nullish() }))
      .nullish(),
    schedulingGates: z.array(z.looseObject({ name: z.string() })).nullish(),
  }),
});
export type PodLike = z.infer<typeof PodSchema>;
export type ContainerLike = z.infer<typeof Container>;
export type { Quantities };

export const AdmissionReviewSchema = z.looseObject({
  apiVersion: z.literal('admission.k8s.io/v1'),
  kind: z.literal('AdmissionReview'),
  request: z.looseObject({
    uid: z.string().min(1),
    kind: z.looseObject({ group: z.string(), version: z.string(), kind: z.string() }).optional(),
    operation: z.string(),
    namespace: z.string().optional(),
    object: z.unknown().optional(),
  }),
});

/** What the transport does with a review, decided from its bytes alone. Plain data: it crosses a worker's port. */
export type DecodedReview =
  /** Not JSON (HTTP 400, INVALID_ARGUMENT, JSON.parse's message). */
  | { kind: 'malformed'; message: string }
  /** JSON, but no AdmissionReview admission.k8s.io/v1 (HTTP 400, INVALID_ARGUMENT). */
  | { kind: 'not-a-review'; message: string }
  /** Not a pod's CREATE: admitted as it is. */
  | { kind: 'pass'; uid: string }
  /** A pod's CREATE whose object is no pod: refused in the review (code 400). */
  | { kind: 'not-a-pod'; uid: string; message: string }
  /** A pod to decide on: only the fields admitPod() reads (the resource maps whole: the patch replaces them). */
  | { kind: 'pod'; uid: string; namespace: string | undefined; pod: PodLike };

const issues = (e: z.ZodError) => e.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ');

const UTF8_BOM = '\uFEFF';

/**
 * JSON of a body: an empty body is `{}` and a leading byte-order mark is dropped, as express.json read them before
 * (ADR 0047). Throws JSON.parse's SyntaxError.
 */
export function parseJsonBody(bytes: Uint8Array): unknown {
  let text = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('utf8');
  if (text.startsWith(UTF8_BOM)) text = text.slice(1);
  return text.length === 0 ? {} : (JSON.parse(text) as unknown);
}

function slimContainer(c: ContainerLike): ContainerLike {
  const out: ContainerLike = c.name !== undefined ? { name: c.name } : {};
  const r = c.resources;
  if (r === null) out.resources = null;
  else if (r) out.resources = { ...(r.requests !== undefined ? { requests: r.requests } : {}), ...(r.limits !== undefined ? { limits: r.limits } : {}) };
  return out;
}

/** The pod cut down to what admission reads: names, the reservation label, the containers' resources, the scheduler, the claims, the scheduling gates. */
export function slimPod(p: PodLike): PodLike {
  const m = p.metadata;
  const label = m?.labels?.[RESERVATION_LABEL];
  const s = p.spec;
  return {
    ...(m
      ? {
          metadata: {
            ...(m.name !== undefined ? { name: m.name } : {}),
            ...(m.generateName !== undefined ? { generateName: m.generateName } : {}),
            ...(m.namespace !== undefined ? { namespace: m.namespace } : {}),
            ...(label !== undefined ? { labels: { [RESERVATION_LABEL]: label } } : {}),
          },
        }
      : {}),
    spec: {
      containers: s.containers.map(slimContainer),
      ...(s.initContainers ? { initContainers: s.initContainers.map(slimContainer) } : {}),
      ...(s.schedulerName !== undefined ? { schedulerName: s.schedulerName } : {}),
      ...(s.nodeName !== undefined ? { nodeName: s.nodeName } : {}),
      ...(s.resourceClaims
        ? {
            resourceClaims: s.resourceClaims.map((c) => ({
              name: c.name,
              ...(c.resourceClaimName !== undefined ? { resourceClaimName: c.resourceClaimName } : {}),
              ...(c.resourceClaimTemplateName !== undefined ? { resourceClaimTemplateName: c.resourceClaimTemplateName } : {}),
            })),
          }
        : {}),
      ...(s.schedulingGates ? { schedulingGates: s.schedulingGates.map((g) => ({ name: g.name })) } : {}),
    },
  };
}

/** An already parsed body (or none: `undefined`) decoded. */
export function decodeReviewJson(json: unknown): DecodedReview {
  const review = AdmissionReviewSchema.safeParse(json);
  if (!review.success) return { kind: 'not-a-review', message: `not an AdmissionReview admission.k8s.io/v1: ${issues(review.error)}` };
  const rq = review.data.request;
  if (rq.operation !== 'CREATE' || (rq.kind && rq.kind.kind !== 'Pod')) return { kind: 'pass', uid: rq.uid };
  const parsed = PodSchema.safeParse(rq.object);
  if (!parsed.success) return { kind: 'not-a-pod', uid: rq.uid, message: `not a pod: ${issues(parsed.error)}` };
  return { kind: 'pod', uid: rq.uid, namespace: rq.namespace, pod: slimPod(parsed.data) };
}

/** A body's bytes decoded. */
export function decodeReview(bytes: Uint8Array): DecodedReview {
  let json: unknown;
  try {
    json = parseJsonBody(bytes);
  } catch (e) {
    return { kind: 'malformed', message: (e as Error).message };
  }
  return decodeReviewJson(json);
}
