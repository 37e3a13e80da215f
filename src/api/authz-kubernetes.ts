// `compute:capacity:read` decided by Kubernetes: a TokenReview says who the bearer token belongs to, then a
// SubjectAccessReview asks RBAC whether that user may `get` `capacity` in group `bettercompute.io` in the tenant's
// namespace. Pool-scoped reads name the pool (`resourceAttributes.name`), so a Role may narrow them with
// `resourceNames`; the tenant-wide summary names nothing.
import { createHash } from 'node:crypto';
import { AuthenticationV1Api, AuthorizationV1Api, KubeConfig } from '@kubernetes/client-node';
import { describeTarget, type Authorizer, type CapacityReadTarget, type Principal } from './authz.ts';
import { forbidden, unauthenticated } from './errors.ts';

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

/** A KubeConfig from a file, or the in-cluster service account when no file is given. */
export function loadKubeConfig(file?: string): KubeConfig {
  const kc = new KubeConfig();
  if (file) kc.loadFromFile(file);
  else kc.loadFromCluster();
  return kc;
}

export class KubernetesAuthorizer implements Authorizer {
  private readonly authn: AuthenticationV1Api;
  private readonly authz: AuthorizationV1Api;
  private readonly namespaceFor: (tenantId: string) => string;
  private readonly users: TtlCache<Principal>;
  private readonly decisions: TtlCache<boolean>;

  constructor(private readonly opts: KubernetesAuthorizerOptions) {
    this.authn = opts.kubeConfig.makeApiClient(AuthenticationV1Api);
    this.authz = opts.kubeConfig.makeApiClient(AuthorizationV1Api);
    this.namespaceFor = opts.namespaceFor ?? ((t) => t);
    const now = opts.monotonicNow ?? (() => performance.now());
    this.users = new TtlCache(opts.cacheTtlMs ?? 10_000, now);
    this.decisions = new TtlCache(opts.cacheTtlMs ?? 10_000, now);
  }

  async authenticate(token: string | undefined): Promise<Principal> {
    if (token === undefined) throw unauthenticated('a bearer token is required');
    const key = createHash('sha256').update(token).digest('hex');
    const cached = this.users.get(key);
    if (cached) return cached;
    const review = await this.authn.createTokenReview({
      body: {
        apiVersion: 'authentication.k8s.io/v1',
        kind: 'TokenReview',
        spec: { token, ...(this.opts.audiences ? { audiences: this.opts.audiences } : {}) },
      },
    });
    const status = review.status;
    if (!status?.authenticated || !status.user?.username) {
      throw unauthenticated('the bearer token is not valid');
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
