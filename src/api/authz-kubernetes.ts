// `compute:capacity:read` decided by Kubernetes: a TokenReview says who the bearer token belongs to, then
// SubjectAccessReviews ask RBAC whether that user may `get` `capacity` in group `bettercompute.io` in ANY of the
// tenant's namespaces (docs/adr/0005): those labelled `bettercompute.io/tenant=<tenant>`, plus, only with tenancy by
// name on (TENANCY_BY_NAMESPACE_NAME, ADR 0040), the namespace named `<tenant>` while it carries no tenant label. A namespace named like a tenant but labelled for another gives
// nothing for the first. Pool-scoped reads name the pool (`resourceAttributes.name`), so a Role may narrow them with
// `resourceNames`; the tenant-wide summary names nothing.
import { createHash } from 'node:crypto';
import {
  AuthenticationV1Api,
  AuthorizationV1Api,
  CoreV1Api,
  KubeConfig,
  type V1NonResourceAttributes,
  type V1ResourceAttributes,
} from '@kubernetes/client-node';
import { describeTarget, type Authorizer, type CapacityReadTarget } from './authz.ts';
import { forbidden, unauthenticated } from '../http/errors.ts';
import { namespaceTenant } from '../kube/types.ts';
import { systemClock } from '../clock.ts';
import { GROUP, TENANT_LABEL as TENANT_NAMESPACE_LABEL } from '../core/names.ts';
import type { Principal } from '../http/identity.ts';

/** The RBAC API group of `compute:capacity:read` (the product's own group). */
export const CAPACITY_GROUP = GROUP;
/**
 * The audience of the capacity API's tokens (`kubectl create token <sa> --audience bettercompute.io`; ADR 0035): a
 * token minted for it is not accepted by the API server, and one minted for the API server is not accepted here.
 */
export const PRODUCT_AUDIENCE = 'bettercompute.io';
export const CAPACITY_RESOURCE = 'capacity';
export const CAPACITY_VERB = 'get';

/** Namespace label naming the tenant (ADR 0005); a namespace without it is no tenant unless tenancy by name is on. */
export { TENANT_NAMESPACE_LABEL };
/** At most this many of a tenant's namespaces are asked about per decision (first by name). */
export const MAX_TENANT_NAMESPACES = 32;

export interface NamespaceLike {
  metadata: { name?: string; labels?: Record<string, string> | undefined };
}

/**
 * A tenant's namespaces, from a list of all namespaces (e.g. an informer's cache): those labelled
 * `bettercompute.io/tenant=<tenant>`, plus, with `byName`, the one named `<tenant>` if it has no tenant label. Sorted.
 */
export function tenantNamespaces(tenantId: string, namespaces: Iterable<NamespaceLike>, byName = false): string[] {
  const out = new Set<string>();
  for (const ns of namespaces) {
    const name = ns.metadata.name;
    if (!name) continue;
    if (namespaceTenant(name, ns.metadata.labels, byName) === tenantId) out.add(name);
  }
  return [...out].sort();
}

const LABEL_VALUE = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/;
const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

/**
 * A tenant's namespaces asked of the API server (for `serve`, which has no informer): a list by label selector and a
 * get of the namespace named like the tenant. Needs `list` and `get` on namespaces.
 */
export function tenantNamespacesFromApi(kc: KubeConfig, byName = false): (tenantId: string) => Promise<string[]> {
  const core = kc.makeApiClient(CoreV1Api);
  return async (tenantId) => {
    const found: NamespaceLike[] = [];
    if (tenantId.length <= 63 && LABEL_VALUE.test(tenantId)) {
      const list = await core.listNamespace({ labelSelector: `${TENANT_NAMESPACE_LABEL}=${tenantId}` });
      found.push(...list.items.map((n) => ({ metadata: { name: n.metadata?.name, labels: n.metadata?.labels } })));
    }
    if (byName && tenantId.length <= 63 && DNS_LABEL.test(tenantId)) {
      try {
        const n = await core.readNamespace({ name: tenantId });
        found.push({ metadata: { name: n.metadata?.name, labels: n.metadata?.labels } });
      } catch (e) {
        if ((e as { code?: number }).code !== 404) throw e;
      }
    }
    return tenantNamespaces(tenantId, found, byName);
  };
}

export interface KubernetesAuthorizerOptions {
  kubeConfig: KubeConfig;
  /**
   * The namespaces of a tenant (see tenantNamespaces). The controller passes its namespace informer's cache:
   * `(t) => tenantNamespaces(t, informers.namespaces.list())`. Default: asked of the API server
   * (tenantNamespacesFromApi), cached for cacheTtlMs.
   */
  namespacesOfTenant?: (tenantId: string) => readonly string[] | Promise<readonly string[]>;
  /** Without namespacesOfTenant: whether an unlabelled namespace is the tenant named like it (TENANCY_BY_NAMESPACE_NAME). */
  tenancyByName?: boolean;
  /** Audiences the token must be valid for (TokenReviewerOptions); the controller passes API_TOKEN_AUDIENCES. */
  audiences?: string[];
  /** How long a review's answer is reused, in milliseconds (0: never). Default 10 s. */
  cacheTtlMs?: number;
  /** How long a refused token is refused without asking again (TokenReviewerOptions). Default 5 s. */
  rejectedTtlMs?: number;
  /** A monotonic clock in milliseconds for the cache (tests inject one). Default systemClock.now (src/clock.ts). */
  monotonicNow?: () => number;
}

const MAX_CACHE_ENTRIES = 10_000;

class TtlCache<V> {
  private readonly entries = new Map<string, { value: V; expires: number }>();
  constructor(
    private readonly ttlMs: number,
    private readonly now: () => number,
  ) {}
  get(key: string): V | undefined {
    const e = this.entries.get(key);
    if (!e) return undefined;
    if (e.expires <= this.now()) {
      this.entries.delete(key);
      return undefined;
    }
    return e.value;
  }
  set(key: string, value: V): void {
    if (this.ttlMs <= 0) return;
    if (this.entries.size >= MAX_CACHE_ENTRIES) this.entries.clear();
    this.entries.set(key, { value, expires: this.now() + this.ttlMs });
  }
}

export interface TokenReviewerOptions {
  kubeConfig: KubeConfig;
  /**
   * Audiences the token must be valid for (TokenReview `spec.audiences`); the review must also name one of them in
   * `status.audiences`. Default: the API server's (the agents' and Prometheus's projected tokens).
   */
  audiences?: string[];
  /** How long an answer is reused, in milliseconds (0: never). Default 10 s. */
  cacheTtlMs?: number;
  /**
   * How long a token the API server refused is refused again without asking, in milliseconds (0: never). Default 5 s:
   * garbage tokens then cost one TokenReview per token per 5 s, not one per request.
   */
  rejectedTtlMs?: number;
  /** A monotonic clock in milliseconds for the cache (tests inject one). Default systemClock.now (src/clock.ts). */
  monotonicNow?: () => number;
}

/**
 * Who a bearer token belongs to, by TokenReview (answers cached by the token's hash). Shared by every listener that
 * takes Kubernetes tokens: the capacity API, /metrics, the node agents' API.
 */
export class TokenReviewer {
  private readonly authn: AuthenticationV1Api;
  private readonly users: TtlCache<Principal>;
  private readonly rejected: TtlCache<true>;
  /** Reviews in flight by token hash: concurrent requests with one token share one TokenReview. */
  private readonly inFlight = new Map<string, Promise<Principal>>();

  constructor(private readonly opts: TokenReviewerOptions) {
    this.authn = opts.kubeConfig.makeApiClient(AuthenticationV1Api);
    const now = opts.monotonicNow ?? (() => systemClock.now());
    this.users = new TtlCache(opts.cacheTtlMs ?? 10_000, now);
    this.rejected = new TtlCache(opts.rejectedTtlMs ?? 5_000, now);
  }

  /** The token's user (name, uid, groups, extra). Throws ApiError UNAUTHENTICATED for no token or one not accepted. */
  async authenticate(token: string | undefined): Promise<Principal> {
    if (token === undefined) throw unauthenticated('a bearer token is required');
    const key = createHash('sha256').update(token).digest('hex');
    const cached = this.users.get(key);
    if (cached) return cached;
    if (this.rejected.get(key)) throw unauthenticated('the bearer token is not valid');
    const pending = this.inFlight.get(key);
    if (pending) return pending;
    const review = this.review(token, key).finally(() => this.inFlight.delete(key));
    this.inFlight.set(key, review);
    return review;
  }

  private async review(token: string, key: string): Promise<Principal> {
    const review = await this.authn.createTokenReview({
      body: {
        apiVersion: 'authentication.k8s.io/v1',
        kind: 'TokenReview',
        spec: { token, ...(this.opts.audiences ? { audiences: this.opts.audiences } : {}) },
      },
    });
    const status = review.status;
    if (!status?.authenticated || !status.user?.username) {
      this.rejected.set(key, true);
      throw unauthenticated('the bearer token is not valid');
    }
    // An authenticator that ignores spec.audiences (a webhook, an old API server) answers without them: such a token
    // was not minted for us, and a token meant for the API server must not be accepted here (ADR 0035).
    const wanted = this.opts.audiences;
    if (wanted?.length && !wanted.some((a) => status.audiences?.includes(a))) {
      this.rejected.set(key, true);
      throw unauthenticated(`the bearer token is not valid for audience ${wanted.join(', ')} (kubectl create token <sa> --audience ${wanted[0]})`);
    }
    const u = status.user;
    const principal: Principal = Object.freeze({
      subject: u.username!,
      ...(u.uid ? { uid: u.uid } : {}),
      ...(u.groups ? { groups: [...u.groups] } : {}),
      ...(u.extra ? { extra: u.extra } : {}),
    });
    this.users.set(key, principal);
    return principal;
  }
}

/** What a SubjectAccessReview asks about: an API resource, or a non-resource path such as /metrics. */
export type AccessAttributes =
  | { resourceAttributes: V1ResourceAttributes; nonResourceAttributes?: never }
  | { nonResourceAttributes: V1NonResourceAttributes; resourceAttributes?: never };

/** Whether RBAC lets a user do something, by SubjectAccessReview (answers cached per user and question). */
export class AccessReviewer {
  private readonly authz: AuthorizationV1Api;
  private readonly decisions: TtlCache<boolean>;

  constructor(opts: { kubeConfig: KubeConfig; cacheTtlMs?: number; monotonicNow?: () => number }) {
    this.authz = opts.kubeConfig.makeApiClient(AuthorizationV1Api);
    this.decisions = new TtlCache(opts.cacheTtlMs ?? 10_000, opts.monotonicNow ?? (() => systemClock.now()));
  }

  async allowed(principal: Principal, attributes: AccessAttributes): Promise<boolean> {
    const key = JSON.stringify([principal.subject, principal.uid, principal.groups, principal.extra, attributes]);
    const cached = this.decisions.get(key);
    if (cached !== undefined) return cached;
    const review = await this.authz.createSubjectAccessReview({
      body: {
        apiVersion: 'authorization.k8s.io/v1',
        kind: 'SubjectAccessReview',
        spec: {
          user: principal.subject,
          ...(principal.uid ? { uid: principal.uid } : {}),
          ...(principal.groups ? { groups: [...principal.groups] } : {}),
          ...(principal.extra ? { extra: Object.fromEntries(Object.entries(principal.extra).map(([k, v]) => [k, [...v]])) } : {}),
          ...attributes,
        },
      },
    });
    const allowed = review.status?.allowed === true && review.status.denied !== true;
    this.decisions.set(key, allowed);
    return allowed;
  }
}

export class KubernetesAuthorizer implements Authorizer {
  private readonly tokens: TokenReviewer;
  private readonly access: AccessReviewer;
  private readonly namespacesOfTenant: (tenantId: string) => readonly string[] | Promise<readonly string[]>;
  private readonly decisions: TtlCache<boolean>;

  constructor(opts: KubernetesAuthorizerOptions) {
    this.tokens = new TokenReviewer(opts);
    this.access = new AccessReviewer(opts);
    const now = opts.monotonicNow ?? (() => systemClock.now());
    this.decisions = new TtlCache(opts.cacheTtlMs ?? 10_000, now);
    if (opts.namespacesOfTenant) this.namespacesOfTenant = opts.namespacesOfTenant;
    else {
      const cache = new TtlCache<readonly string[]>(opts.cacheTtlMs ?? 10_000, now);
      const ask = tenantNamespacesFromApi(opts.kubeConfig, opts.tenancyByName ?? false);
      this.namespacesOfTenant = async (t) => {
        const hit = cache.get(t);
        if (hit) return hit;
        const list = await ask(t);
        cache.set(t, list);
        return list;
      };
    }
  }

  authenticate(token: string | undefined): Promise<Principal> {
    return this.tokens.authenticate(token);
  }

  async authorizeCapacityRead(principal: Principal, target: CapacityReadTarget): Promise<void> {
    const key = JSON.stringify([principal.subject, principal.uid, principal.groups, principal.extra, target.tenantId, target.poolId]);
    let allowed = this.decisions.get(key);
    if (allowed === undefined) {
      const namespaces = [...(await this.namespacesOfTenant(target.tenantId))].sort().slice(0, MAX_TENANT_NAMESPACES);
      allowed = false;
      // A few at a time, stopping at the first namespace that allows.
      for (let i = 0; i < namespaces.length && !allowed; i += 4) {
        const answers = await Promise.all(
          namespaces.slice(i, i + 4).map((namespace) =>
            this.access.allowed(principal, {
              resourceAttributes: {
                namespace,
                verb: CAPACITY_VERB,
                group: CAPACITY_GROUP,
                resource: CAPACITY_RESOURCE,
                ...(target.poolId ? { name: target.poolId } : {}),
              },
            }),
          ),
        );
        allowed = answers.some(Boolean);
      }
      this.decisions.set(key, allowed);
    }
    if (!allowed) throw forbidden(`${principal.subject} may not read the capacity of ${describeTarget(target)}`);
  }
}
