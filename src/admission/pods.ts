// The mutating admission webhook for pods (docs/adr/0007): users write only what they mean, admission fills in the
// rest and refuses what would bypass the ledger.
//
// - A pod labelled `bettercompute.io/reservation: <name>` draws from the Reservation `<its namespace>/<name>`: every
//   `bettercompute.io/gpu` (`.mig`, `.slot`) it requests or limits becomes that Reservation's own
//   `reservations.bettercompute.io/<rsv-id>` with the same count. The id comes from the LEDGER (the booking made with
//   idempotency key = the Reservation's metadata.uid under its tenant), never from the Reservation's status. Refused:
//   no such Reservation in the pod's namespace, not booked yet, ended (released, expired, window over) or being deleted,
//   or the pod already names another reservation's resource.
// - A pod that requests a `reservations.bettercompute.io/<rsv-id>` resource directly may use it only if that booking is
//   a Reservation's of the pod's own namespace (its uid and tenant), and not ended.
// - Any pod that requests one of our resources and leaves the scheduler to default gets `better-compute-scheduler`
//   (the ValidatingAdmissionPolicy of deploy/admission/ refuses any other scheduler and spec.nodeName).
// - The ADR-0003 marker `bettercompute.io/reservation` is dropped where a pod still requests it: no node advertises it,
//   and our scheduler calls the extender for all its pods.
// - A pod that requests none of our resources but claims one of our DeviceClasses through a ResourceClaimTemplate
//   (DRA mode) gets the scheduling gate `bettercompute.io/allocation` (ADR 0049): kube-scheduler leaves it alone until
//   the claim allocator has allocated its claims of ours and lifts the gate. Never refused for it: a template that
//   cannot be read leaves the pod ungated (kube-scheduler then tries it early and again later, as without the gate).
//
// admitPod() decides from a pod and lookups (no I/O of its own); createPodAdmissionRouter() is the AdmissionReview v1
// transport the controller mounts at /admission (so the webhook path is /admission/pods). It decodes a review with
// review.ts, a large one in a worker thread off the event loop the extender shares (review-pool.ts, ADR 0047).
import express, { type Router } from 'express';
import type { IncomingMessage } from 'node:http';
import { isOurDeviceClass } from '../core/dra-allocate.ts';
import type { Informer } from '../kube/informer.ts';
import type { NamespaceCR, Reservation } from '../kube/types.ts';
import { namespaceTenant } from '../kube/types.ts';
import type { Db } from '../db/pool.ts';
import { capDeclaredBody, readCappedBody } from '../http/body-cap.ts';
import { peerOf } from '../http/peer.ts';
import { errorFields, type Logger } from '../log.ts';
import { ledgerBookings, type BookingLookup } from './bookings.ts';
import { decodeReview, decodeReviewJson, type ContainerLike, type DecodedReview, type PodLike, type Quantities } from './review.ts';
import { REVIEW_WORKER_ABOVE_BYTES, ReviewDecoderPool, ReviewPoolBusy, ReviewPoolTimeout } from './review-pool.ts';
import { ALLOCATION_GATE, GENERIC_RESOURCES, RESERVATION_GROUP, RESERVATION_LABEL, RESERVATION_MARKER, reservationIdOfResource, reservationResourceName } from '../core/names.ts';

export const SCHEDULER_NAME = 'better-compute-scheduler';
export const DEFAULT_SCHEDULER = 'default-scheduler';
/**
 * Largest AdmissionReview accepted: a pod is at most 1.5 MiB in etcd, and the webhook is sent only pods that request
 * our resources (matchConditions), so 2 MiB leaves room for the review's envelope and JSON's overhead. Larger bodies
 * are refused (413) from their Content-Length before a byte is read, or cut off at the cap while read (chunked).
 */
export const MAX_REVIEW_BYTES = 2 * 1024 * 1024;

/** The refusal of a caller without a verified client certificate (ADR 0034). */
export const CALLER_NOT_VERIFIED = 'the admission endpoint answers only the API server (a verified client certificate)';

const OUR_PREFIXES = ['bettercompute.io/', `${RESERVATION_GROUP}/`];
const isOurs = (resource: string) => OUR_PREFIXES.some((p) => resource.startsWith(p));
const isGeneric = (resource: string) => Object.hasOwn(GENERIC_RESOURCES, resource);
const isReservationResource = (resource: string) => resource.startsWith(`${RESERVATION_GROUP}/`);

// ---------------------------------------------------------------------------------------------------------------
// What is read of a pod (the rest passes through untouched: the answer is a JSON patch).

export { AdmissionReviewSchema, PodSchema, type PodLike } from './review.ts';

// ---------------------------------------------------------------------------------------------------------------
// Lookups

/** A Reservation as admission needs it. */
export interface ReservationRef {
  namespace: string;
  name: string;
  uid: string;
  /** The tenant its pods run as: its namespace's (label, else name). Never its status, which is a mirror. */
  tenant: string;
  /** metadata.deletionTimestamp is set. */
  deleting: boolean;
}

export interface AdmissionLookups {
  /** The Reservation `namespace/name`, or undefined when there is none. */
  reservation(namespace: string, name: string): Promise<ReservationRef | undefined>;
  /** The Reservations of a namespace. */
  reservationsIn(namespace: string): Promise<readonly ReservationRef[]>;
  /** The ledger. */
  bookings: BookingLookup;
  /**
   * The DeviceClass names of a pod's claim reference (its ResourceClaimTemplate's or ResourceClaim's requests): a pod
   * that requests our extended resources and uses our DeviceClasses mixes the two hand-off modes (ADR 0043). Absent:
   * not checked.
   */
  claimDeviceClasses?: (namespace: string, ref: { resourceClaimName?: string | null; resourceClaimTemplateName?: string | null }) => Promise<string[]>;
}

export interface JsonPatchOp {
  op: 'add' | 'replace' | 'remove';
  path: string;
  value?: unknown;
}

export type Admission = { allowed: true; patch?: JsonPatchOp[] } | { allowed: false; message: string; code?: number };

// ---------------------------------------------------------------------------------------------------------------
// The decision

interface ResourceMaps {
  /** `/spec/containers/0/resources` */
  path: string;
  container: string;
  requests?: Quantities | null | undefined;
  limits?: Quantities | null | undefined;
}

function resourceMaps(pod: PodLike): ResourceMaps[] {
  const out: ResourceMaps[] = [];
  const add = (field: 'containers' | 'initContainers', list: readonly ContainerLike[] | null | undefined) =>
    (list ?? []).forEach((c, i) =>
      out.push({
        path: `/spec/${field}/${i}/resources`,
        container: `${field === 'initContainers' ? 'init container' : 'container'} ${c.name ?? i}`,
        requests: c.resources?.requests,
        limits: c.resources?.limits,
      }),
    );
  add('containers', pod.spec.containers);
  add('initContainers', pod.spec.initContainers);
  return out;
}

/** The names of our resources a pod requests or limits, in any container. */
export function ourResources(pod: PodLike): Set<string> {
  const out = new Set<string>();
  for (const m of resourceMaps(pod)) for (const q of [m.requests, m.limits]) for (const k of Object.keys(q ?? {})) if (isOurs(k)) out.add(k);
  return out;
}

const podName = (pod: PodLike, namespace: string) => `${namespace}/${pod.metadata?.name || pod.metadata?.generateName || '<unnamed>'}`;
const deny = (message: string, code = 403): Admission => ({ allowed: false, message, code });

type Resolved = { ok: true; resource: string; bookingId: string } | { ok: false; message: string };

/**
 * The one refusal of a Reservation named by its label, whatever the reason (none by that name, being deleted, not
 * booked yet, ended): the webhook's caller is not authenticated (ADR 0034), so the answer must not tell a caller who
 * forged a review naming another namespace whether a Reservation exists there, what state it is in, or its ledger id.
 * The user who may read the Reservation learns the reason from `kubectl describe`.
 */
const unusableByName = (who: string, namespace: string, name: string) =>
  `pod ${who} is labelled ${RESERVATION_LABEL}=${name}, but namespace ${namespace} has no Reservation ${name} that it may use now: there is none by that name, or it is not booked yet, is being deleted, or has ended (kubectl -n ${namespace} describe reservation ${name}); create the pod once it is Reserved`;

/** The booking of Reservation `namespace/name`, refused unless it is booked and running or to come. */
async function resolveByName(ctx: AdmissionLookups, who: string, namespace: string, name: string): Promise<Resolved> {
  const refused: Resolved = { ok: false, message: unusableByName(who, namespace, name) };
  const r = await ctx.reservation(namespace, name);
  if (!r || r.deleting) return refused;
  const b = await ctx.bookings.byReservationUid(r.tenant, r.uid);
  if (!b || b.ended) return refused;
  return { ok: true, resource: reservationResourceName(b.id), bookingId: b.id };
}

/**
 * A reservation resource named directly: its booking must be a live Reservation's of the pod's own namespace. Every
 * refusal is the same answer (ADR 0034): nothing says whether the booking exists, whose it is or whether it ended.
 */
async function resolveByResource(ctx: AdmissionLookups, who: string, namespace: string, resource: string): Promise<Resolved> {
  const id = reservationIdOfResource(resource);
  if (!id) return { ok: false, message: `pod ${who} requests ${resource}, which names no reservation (expected ${RESERVATION_GROUP}/rsv-<id>)` };
  const refused: Resolved = {
    ok: false,
    message: `pod ${who} requests ${resource}, which is not a Reservation of namespace ${namespace} that it may use now: a pod may use only the Reservations of its own namespace, booked and not ended (label it ${RESERVATION_LABEL}: <Reservation name> and request bettercompute.io/gpu instead)`,
  };
  const b = await ctx.bookings.byId(id);
  if (!b) return refused;
  // A recurring Reservation's window is keyed `${uid}:${start}` (ADR 0013).
  const owner = (await ctx.reservationsIn(namespace)).find((r) => (r.uid === b.idempotencyKey || b.idempotencyKey.startsWith(`${r.uid}:`)) && r.tenant === b.tenantId);
  if (!owner || owner.deleting || b.ended) return refused;
  return { ok: true, resource, bookingId: id };
}

/** The first of the pod's claims that asks for one of our DeviceClasses (`claim <name> (<class>)`), if any. */
async function usesOurDeviceClasses(pod: PodLike, namespace: string, ctx: AdmissionLookups): Promise<string | undefined> {
  const lookup = ctx.claimDeviceClasses;
  if (!lookup) return undefined;
  for (const ref of pod.spec.resourceClaims ?? []) {
    const ours = (await lookup(namespace, ref)).find(isOurDeviceClass);
    if (ours) return `${ref.name} (${ours})`;
  }
  return undefined;
}

/**
 * A pod that requests none of our resources: gated (ALLOCATION_GATE) when one of its ResourceClaimTemplates asks for
 * one of our DeviceClasses and no ResourceClaim it names directly does (the allocator allocates only claims made from
 * a pod's templates: a pod naming one of ours directly waits with UnsupportedClaim, and kube-scheduler's own message
 * says more than a gate would). Not gated: pods of other drivers only, pods with spec.nodeName (the API server refuses
 * gates on them), pods already carrying the gate. Always admitted: the gate only saves kube-scheduler's early tries.
 */
async function gateDraPod(pod: PodLike, namespace: string, ctx: AdmissionLookups): Promise<Admission> {
  const refs = pod.spec.resourceClaims ?? [];
  const lookup = ctx.claimDeviceClasses;
  if (!lookup || refs.length === 0 || pod.spec.nodeName) return { allowed: true };
  const gates = pod.spec.schedulingGates ?? [];
  if (gates.some((g) => g.name === ALLOCATION_GATE)) return { allowed: true };
  let templateOfOurs = false;
  try {
    for (const ref of refs) {
      const ours = (await lookup(namespace, ref)).some(isOurDeviceClass);
      if (ours && ref.resourceClaimName) return { allowed: true };
      if (ours && ref.resourceClaimTemplateName) templateOfOurs = true;
    }
  } catch {
    return { allowed: true };
  }
  if (!templateOfOurs) return { allowed: true };
  const gate = { name: ALLOCATION_GATE };
  return { allowed: true, patch: [pod.spec.schedulingGates ? { op: 'add', path: '/spec/schedulingGates/-', value: gate } : { op: 'add', path: '/spec/schedulingGates', value: [gate] }] };
}

/**
 * The decision for a pod at CREATE. `pod.metadata.namespace` must be set (the transport fills it in from the request).
 * Pods that request none of our resources are admitted untouched.
 */
export async function admitPod(pod: PodLike, ctx: AdmissionLookups): Promise<Admission> {
  const namespace = pod.metadata?.namespace;
  if (!namespace) return deny('pod has no namespace', 400);
  const ours = ourResources(pod);
  if (ours.size === 0) return gateDraPod(pod, namespace, ctx);
  const who = podName(pod, namespace);
  const label = pod.metadata?.labels?.[RESERVATION_LABEL];
  const mixed = await usesOurDeviceClasses(pod, namespace, ctx);
  if (mixed) {
    return deny(
      `pod ${who} requests ${[...ours].join(', ')} and claims ${mixed} through DRA: a pod takes its GPUs through the device plugin (bettercompute.io/gpu or its Reservation's resource) or through ResourceClaims of the bettercompute.io DeviceClasses, not both (docs/dra.md)`,
    );
  }

  const named = [...ours].filter(isReservationResource);
  if (new Set(named).size > 1) return deny(`pod ${who} requests ${named.join(' and ')}: a pod draws from one reservation`);

  const generic = [...ours].filter(isGeneric);
  let target: Resolved | undefined;
  const byLabel = label !== undefined && label !== '';
  if (byLabel) {
    target = await resolveByName(ctx, who, namespace, label);
    if (target.ok && named.length && named[0] !== target.resource) {
      // The Reservation's resource is not named: a refusal carries no ledger id (ADR 0034).
      return deny(`pod ${who} is labelled ${RESERVATION_LABEL}=${label} and requests ${named[0]}, which is not that Reservation's resource: request bettercompute.io/gpu and admission rewrites it`);
    }
  } else if (named.length) {
    if (generic.length) return deny(`pod ${who} requests ${named[0]} and ${generic.join(', ')}: a pod draws from a reservation or on demand, not both`);
    target = await resolveByResource(ctx, who, namespace, named[0]!);
  }
  if (target && !target.ok) return deny(target.message);

  const patch: JsonPatchOp[] = [];
  for (const m of resourceMaps(pod)) {
    for (const field of ['requests', 'limits'] as const) {
      const q = m[field];
      if (!q) continue;
      const here = Object.keys(q).filter(isGeneric);
      const rewrite = byLabel && target?.ok && here.length > 0 ? target.resource : undefined;
      const marker = Object.hasOwn(q, RESERVATION_MARKER);
      if (!marker && !rewrite) continue;
      if (rewrite) {
        if (here.length > 1) return deny(`pod ${who}: ${m.container} asks for ${here.join(' and ')} in ${field}; a pod of a reservation asks for one of them`);
        if (Object.hasOwn(q, rewrite)) return deny(`pod ${who}: ${m.container} asks for both ${here[0]} and ${rewrite} in ${field}; ask for ${here[0]} only`);
      }
      const next: Quantities = {};
      for (const [k, v] of Object.entries(q)) {
        if (k === RESERVATION_MARKER) continue;
        if (rewrite && isGeneric(k)) next[rewrite] = v;
        else next[k] = v;
      }
      patch.push({ op: 'replace', path: `${m.path}/${field}`, value: next });
    }
  }
  const scheduler = pod.spec.schedulerName;
  if (scheduler === undefined || scheduler === null || scheduler === '' || scheduler === DEFAULT_SCHEDULER) {
    patch.push({ op: 'add', path: '/spec/schedulerName', value: SCHEDULER_NAME });
  }
  return patch.length ? { allowed: true, patch } : { allowed: true };
}

// ---------------------------------------------------------------------------------------------------------------
// The transport

export interface PodAdmissionDeps extends AdmissionLookups {
  log: Logger;
  /** False until the lookups' caches have synced: pods that need them are refused (503) rather than misjudged. */
  synced?: () => boolean;
  /**
   * Where the cluster sends the API server's webhook client certificate (ADR 0034): true when this request's caller
   * is verified (tlsClientVerified). Absent: every caller is answered, and the answers reveal nothing that a refusal
   * could tell apart. A caller not verified is refused (403) before its body is read.
   */
  callerVerified?: (req: IncomingMessage) => boolean;
  /**
   * Where reviews larger than workerAboveBytes are decoded (ADR 0047); absent: a pool of the router's own (one worker
   * thread, started on the first large review, ended with the process).
   */
  reviewPool?: ReviewDecoderPool;
  /** Bodies above this many bytes are decoded in the pool (default REVIEW_WORKER_ABOVE_BYTES); the rest on the loop. */
  workerAboveBytes?: number;
}

/** The request came over TLS with a client certificate that the listener's client CA verified. */
export function tlsClientVerified(req: IncomingMessage): boolean {
  return peerOf(req).authorized;
}

function response(uid: string, a: Admission) {
  const body: Record<string, unknown> = { uid, allowed: a.allowed };
  if (a.allowed && a.patch?.length) {
    body.patchType = 'JSONPatch';
    body.patch = Buffer.from(JSON.stringify(a.patch)).toString('base64');
  }
  const REASONS: Record<number, string> = { 400: 'BadRequest', 403: 'Forbidden', 500: 'InternalError', 503: 'ServiceUnavailable' };
  if (!a.allowed) body.status = { code: a.code ?? 403, reason: REASONS[a.code ?? 403], message: a.message };
  return { apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', response: body };
}

type Refusal = { status: number; code: string; message: string; close?: boolean };

function refuse(res: express.Response, r: Refusal): void {
  if (r.close) res.set('Connection', 'close');
  if (r.status === 503) res.set('Retry-After', '1');
  res.status(r.status).json({ error: { code: r.code, message: r.message } });
}

const CHARSET = /;\s*charset\s*=\s*"?([^";\s]*)/i;

/**
 * The request's review, decoded (ADR 0047): up to `workerAbove` bytes here, larger ones in the pool's worker threads,
 * with the same decoder; or the refusal to answer, the body left unread where it can be: an encoding or charset other
 * than UTF-8 (415), the pool full when the body declares a large size (503), a body that grows past the cap (413).
 */
async function readReview(req: express.Request, pool: ReviewDecoderPool, workerAbove: number, log: Logger): Promise<DecodedReview | Refusal | 'gone'> {
  // Not JSON (or no body at all): nothing is read, and there is no review (400), as express.json left such a request.
  if (!req.is('application/json')) return decodeReviewJson(undefined);
  const encoding = req.headers['content-encoding'];
  if (encoding !== undefined && encoding.toLowerCase() !== 'identity') {
    return { status: 415, code: 'INVALID_ARGUMENT', message: `content encoding ${JSON.stringify(encoding).slice(0, 64)} is not supported: send the review uncompressed`, close: true };
  }
  const charset = CHARSET.exec(req.headers['content-type'] ?? '')?.[1]?.toLowerCase();
  if (charset !== undefined && charset !== 'utf-8' && charset !== 'utf8') {
    return { status: 415, code: 'INVALID_ARGUMENT', message: `unsupported charset ${JSON.stringify(charset.slice(0, 64))}: send UTF-8`, close: true };
  }
  const busy = (why: string): Refusal => ({ status: 503, code: 'UNAVAILABLE', message: `better-compute admission is busy with large reviews (${why}); try again`, close: !req.complete });
  if (Number(req.headers['content-length'] ?? 0) > workerAbove && pool.full()) return busy('every worker busy, the queue full');
  const read = await readCappedBody(req, MAX_REVIEW_BYTES);
  if (!read.ok) return 'gone' in read ? 'gone' : { status: 413, code: 'PAYLOAD_TOO_LARGE', message: read.message, close: true };
  if (read.bytes.length <= workerAbove) return decodeReview(read.bytes);
  try {
    return await pool.decode(read.bytes);
  } catch (e) {
    if (e instanceof ReviewPoolBusy) return busy('every worker busy, the queue full');
    if (e instanceof ReviewPoolTimeout) return busy('the review was not decoded in time');
    log.error('pod admission could not decode a review', errorFields(e));
    return { status: 500, code: 'INTERNAL', message: 'internal error' };
  }
}

/** POST /pods: AdmissionReview admission.k8s.io/v1 in, AdmissionReview out (mounted at /admission). */
export function createPodAdmissionRouter(deps: PodAdmissionDeps): Router {
  const router = express.Router();
  if (deps.callerVerified) {
    const verified = deps.callerVerified;
    router.use((req, res, next) => {
      if (verified(req)) return next();
      res.set('Connection', 'close');
      res.status(403).json({ error: { code: 'FORBIDDEN', message: CALLER_NOT_VERIFIED } });
    });
  }
  router.use(capDeclaredBody(MAX_REVIEW_BYTES));
  const pool = deps.reviewPool ?? new ReviewDecoderPool();
  const workerAbove = deps.workerAboveBytes ?? REVIEW_WORKER_ABOVE_BYTES;
  router.post('/pods', async (req, res) => {
    const review = await readReview(req, pool, workerAbove, deps.log);
    if (review === 'gone') return void req.destroy();
    if (!('kind' in review)) return refuse(res, review);
    switch (review.kind) {
      case 'malformed':
      case 'not-a-review':
        return refuse(res, { status: 400, code: 'INVALID_ARGUMENT', message: review.message });
      case 'pass':
        return void res.json(response(review.uid, { allowed: true }));
      case 'not-a-pod':
        return void res.json(response(review.uid, deny(review.message, 400)));
    }
    const rq = review;
    const pod: PodLike = { ...rq.pod, metadata: { ...rq.pod.metadata, namespace: rq.namespace || rq.pod.metadata?.namespace } };
    const fields = { pod: podName(pod, pod.metadata?.namespace ?? ''), uid: rq.uid };
    let a: Admission;
    try {
      if (deps.synced && !deps.synced() && ourResources(pod).size > 0) a = deny('better-compute admission is starting (caches not synced yet); try again', 503);
      else a = await admitPod(pod, deps);
    } catch (e) {
      deps.log.error('pod admission failed', { ...fields, ...errorFields(e) });
      a = deny('better-compute admission could not check the pod (see the controller log); try again', 500);
    }
    if (!a.allowed) deps.log.info('pod refused', { ...fields, reason: a.message });
    else if (a.patch) deps.log.info('pod mutated', { ...fields, patch: a.patch });
    res.json(response(rq.uid, a));
  });
  router.use((err: unknown, _req: express.Request, res: express.Response, next: express.NextFunction) => {
    if (res.headersSent) return next(err);
    deps.log.error('pod admission failed', errorFields(err));
    refuse(res, { status: 500, code: 'INTERNAL', message: 'internal error' });
  });
  return router;
}

// ---------------------------------------------------------------------------------------------------------------
// Wiring from the controller's informer caches and the ledger's database

/**
 * A Reservation as admission sees it. The tenant is its namespace's, as the extender checks at bind: a booking under
 * any other tenant (status.tenant forged by someone who may write reservations/status) is never this namespace's.
 */
export function reservationRef(r: Reservation, namespace: NamespaceCR | undefined, byName = false): ReservationRef | undefined {
  const ns = r.metadata.namespace;
  if (!ns || !r.metadata.uid) return undefined;
  // A namespace that is no tenant (no label, tenancy by name off) has no Reservation a pod may use.
  const tenant = namespaceTenant(ns, namespace?.metadata.labels, byName);
  if (tenant === undefined) return undefined;
  return {
    namespace: ns,
    name: r.metadata.name,
    uid: r.metadata.uid,
    tenant,
    deleting: Boolean(r.metadata.deletionTimestamp),
  };
}

/** PodAdmissionDeps from the controller's informers (Reservations, Namespaces) and its database. */
export function podAdmissionDeps(o: {
  reservations: Pick<Informer<Reservation>, 'get' | 'list'> & { readonly hasSynced?: boolean };
  namespaces: Pick<Informer<NamespaceCR>, 'get'> & { readonly hasSynced?: boolean };
  db: Db;
  log: Logger;
  /** TENANCY_BY_NAMESPACE_NAME (default off): an unlabelled namespace is the tenant named like it. */
  tenancyByName?: boolean;
  /** Reads a claim reference's DeviceClasses (ResourceClaimClient.deviceClassesOf); absent: mixing is not checked. */
  claimDeviceClasses?: AdmissionLookups['claimDeviceClasses'];
}): PodAdmissionDeps {
  const ref = (r: Reservation | undefined) => r && reservationRef(r, o.namespaces.get(r.metadata.namespace ?? ''), o.tenancyByName ?? false);
  return {
    log: o.log,
    synced: () => o.reservations.hasSynced !== false && o.namespaces.hasSynced !== false,
    bookings: ledgerBookings(o.db),
    ...(o.claimDeviceClasses ? { claimDeviceClasses: o.claimDeviceClasses } : {}),
    reservation: async (namespace, name) => ref(o.reservations.get(`${namespace}/${name}`)),
    reservationsIn: async (namespace) =>
      o.reservations
        .list()
        .filter((r) => r.metadata.namespace === namespace)
        .map(ref)
        .filter((r): r is ReservationRef => r !== undefined),
  };
}
