// Who a bearer token belongs to, asked of the Kubernetes API server (TokenReview). Used by the capacity API's
// Kubernetes authorizer and by the controller's agent API (node agents' projected ServiceAccount tokens).
import { createHash } from 'node:crypto';
import { AuthenticationV1Api, type KubeConfig } from '@kubernetes/client-node';

/** A user the API server vouched for. `extra` carries, for a pod's bound token, `authentication.kubernetes.io/node-name`. */
export interface TokenUser {
  readonly username: string;
  readonly uid?: string;
  readonly groups?: readonly string[];
  readonly extra?: Readonly<Record<string, readonly string[]>>;
}

export interface TokenReviewOptions {
  kubeConfig: KubeConfig;
  /** Audiences the token must be valid for (TokenReview `spec.audiences`); default: the API server's. */
  audiences?: string[];
  /** How long a review's answer is reused, in milliseconds (0: never). Default 10 s. */
  cacheTtlMs?: number;
  /** A monotonic clock in milliseconds for the cache (tests inject one). Default performance.now. */
  monotonicNow?: () => number;
}

const MAX_CACHE_ENTRIES = 10_000;

/** A bounded map whose entries run out after a fixed time (a monotonic clock). */
export class TtlCache<V> {
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

/**
 * A function from a bearer token to the user the API server says it belongs to, or undefined when the token is not
 * accepted. Answers (accepted tokens only) are kept for `cacheTtlMs`, keyed by the token's SHA-256. Throws when the API
 * server cannot be asked.
 */
export function tokenReviewer(opts: TokenReviewOptions): (token: string) => Promise<TokenUser | undefined> {
  const api = opts.kubeConfig.makeApiClient(AuthenticationV1Api);
  const users = new TtlCache<TokenUser>(opts.cacheTtlMs ?? 10_000, opts.monotonicNow ?? (() => performance.now()));
  return async (token) => {
    const key = createHash('sha256').update(token).digest('hex');
    const cached = users.get(key);
    if (cached) return cached;
    const review = await api.createTokenReview({
      body: {
        apiVersion: 'authentication.k8s.io/v1',
        kind: 'TokenReview',
        spec: { token, ...(opts.audiences ? { audiences: opts.audiences } : {}) },
      },
    });
    const status = review.status;
    if (!status?.authenticated || !status.user?.username) return undefined;
    const u = status.user;
    const user: TokenUser = Object.freeze({
      username: u.username!,
      ...(u.uid ? { uid: u.uid } : {}),
      ...(u.groups ? { groups: [...u.groups] } : {}),
      ...(u.extra ? { extra: u.extra } : {}),
    });
    users.set(key, user);
    return user;
  };
}
