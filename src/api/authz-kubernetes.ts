// `compute:capacity:read` decided by Kubernetes: a TokenReview says who the bearer token belongs to, then a
// SubjectAccessReview asks RBAC whether that user may `get` `capacity` in group `bettercompute.io` in the tenant's
// namespace. Pool-scoped reads name the pool (`resourceAttributes.name`), so a Role may narrow them with
// `resourceNames`; the tenant-wide summary names nothing.
import { AuthorizationV1Api, KubeConfig } from '@kubernetes/client-node';
import { describeTarget, type Authorizer, type CapacityReadTarget, type Principal } from './authz.ts';
import { forbidden, unauthenticated } from './errors.ts';
import { tokenReviewer, TtlCache, type TokenUser } from './token-review.ts';

export const CAPACITY_GROUP = 'bettercompute.io';
export const CAPACITY_RESOURCE = 'capacity';
export const CAPACITY_VERB = 'get';

export interface KubernetesAuthorizerOptions {
  kubeConfig: KubeConfig;
  /** The namespace a tenant's decisions are made in. Default: the namespace named like the tenant. */
  namespaceFor?: (tenantId: string) => string;
  /** Audiences the token must be valid for (TokenReview `spec.audiences`); default: the API server's. */
  audiences?: string[];
  /** How long a review's answer is reused, in milliseconds (0: never). Default 10 s. */
  cacheTtlMs?: number;
  /** A monotonic clock in milliseconds for the cache (tests inject one). Default performance.now. */
  monotonicNow?: () => number;
}

/** A KubeConfig from a file, or the in-cluster service account when no file is given. */
export function loadKubeConfig(file?: string): KubeConfig {
  const kc = new KubeConfig();
  if (file) kc.loadFromFile(file);
  else kc.loadFromCluster();
  return kc;
}

export class KubernetesAuthorizer implements Authorizer {
  private readonly review: (token: string) => Promise<TokenUser | undefined>;
  private readonly authz: AuthorizationV1Api;
  private readonly namespaceFor: (tenantId: string) => string;
  private readonly decisions: TtlCache<boolean>;

  constructor(private readonly opts: KubernetesAuthorizerOptions) {
    this.authz = opts.kubeConfig.makeApiClient(AuthorizationV1Api);
    this.namespaceFor = opts.namespaceFor ?? ((t) => t);
    const now = opts.monotonicNow ?? (() => performance.now());
    this.review = tokenReviewer({ kubeConfig: opts.kubeConfig, ...(opts.audiences ? { audiences: opts.audiences } : {}), cacheTtlMs: opts.cacheTtlMs ?? 10_000, monotonicNow: now });
    this.decisions = new TtlCache(opts.cacheTtlMs ?? 10_000, now);
  }

  async authenticate(token: string | undefined): Promise<Principal> {
    if (token === undefined) throw unauthenticated('a bearer token is required');
    const u = await this.review(token);
    if (!u) throw unauthenticated('the bearer token is not valid');
    return Object.freeze({ subject: u.username, ...(u.uid ? { uid: u.uid } : {}), ...(u.groups ? { groups: u.groups } : {}), ...(u.extra ? { extra: u.extra } : {}) });
  }

  async authorizeCapacityRead(principal: Principal, target: CapacityReadTarget): Promise<void> {
    const namespace = this.namespaceFor(target.tenantId);
    const key = JSON.stringify([principal.subject, principal.uid, principal.groups, namespace, target.poolId]);
    let allowed = this.decisions.get(key);
    if (allowed === undefined) {
      const review = await this.authz.createSubjectAccessReview({
        body: {
          apiVersion: 'authorization.k8s.io/v1',
          kind: 'SubjectAccessReview',
          spec: {
            user: principal.subject,
            ...(principal.uid ? { uid: principal.uid } : {}),
            ...(principal.groups ? { groups: [...principal.groups] } : {}),
            ...(principal.extra ? { extra: Object.fromEntries(Object.entries(principal.extra).map(([k, v]) => [k, [...v]])) } : {}),
            resourceAttributes: {
              namespace,
              verb: CAPACITY_VERB,
              group: CAPACITY_GROUP,
              resource: CAPACITY_RESOURCE,
              ...(target.poolId ? { name: target.poolId } : {}),
            },
          },
        },
      });
      allowed = review.status?.allowed === true && review.status.denied !== true;
      this.decisions.set(key, allowed);
    }
    if (!allowed) throw forbidden(`${principal.subject} may not read the capacity of ${describeTarget(target)}`);
  }
}
