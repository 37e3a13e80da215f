// Authorization of `compute:capacity:read`: who the caller is (a bearer token), and whether they may read a tenant's
// capacity. Two implementations: a static token file for local use (here) and Kubernetes TokenReview +
// SubjectAccessReview (authz-kubernetes.ts). Both deny by default.
import { createHash } from 'node:crypto';
import fs from 'node:fs/promises';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { forbidden, unauthenticated } from '../http/errors.ts';
import type { Principal } from '../http/identity.ts';

/**
 * What a capacity read is decided on: the tenant for `summary`, the pool for the others. The tenant is always the
 * request's `tenantId`; a pool-scoped decision also names the pool.
 */
export interface CapacityReadTarget {
  readonly tenantId: string;
  readonly poolId?: string;
}

export interface Authorizer {
  /** The caller behind a bearer token. Throws ApiError UNAUTHENTICATED when there is none or it is not accepted. */
  authenticate(token: string | undefined): Promise<Principal>;
  /** `compute:capacity:read` on the target. Throws ApiError FORBIDDEN when not allowed. */
  authorizeCapacityRead(principal: Principal, target: CapacityReadTarget): Promise<void>;
}

export function describeTarget(t: CapacityReadTarget): string {
  return t.poolId ? `pool ${t.poolId} of tenant ${t.tenantId}` : `tenant ${t.tenantId}`;
}

// ---------------------------------------------------------------------------------------------------------------
// Static token file

const sha256 = (s: string) => createHash('sha256').update(s).digest('hex');

const TokenEntry = z
  .strictObject({
    /** The token itself, or its SHA-256 in hex, so that the file need not hold the secret. */
    token: z.string().min(16).optional(),
    tokenSha256: z
      .string()
      .regex(/^[0-9a-f]{64}$/)
      .optional(),
    subject: z.string().min(1).max(256),
    /** Tenants this token may read; `*` is every tenant. Empty: none. */
    tenants: z.array(z.string().min(1).max(128)),
  })
  .refine((e) => (e.token === undefined) !== (e.tokenSha256 === undefined), {
    message: 'give exactly one of token and tokenSha256',
  });

export const TokenFile = z.strictObject({ tokens: z.array(TokenEntry) });
export type TokenFile = z.infer<typeof TokenFile>;

interface Grant {
  principal: Principal;
  all: boolean;
  tenants: ReadonlySet<string>;
}

/**
 * Tokens from a file, for local use:
 *
 * ```yaml
 * tokens:
 *   - token: 0123456789abcdef-local-dev      # at least 16 characters
 *     subject: alice
 *     tenants: [acme, beta]
 *   - tokenSha256: 5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8
 *     subject: ops
 *     tenants: ['*']
 * ```
 *
 * JSON with the same shape works too (YAML is a superset). A token not in the file is UNAUTHENTICATED; a tenant not
 * listed for it is FORBIDDEN.
 */
export class StaticTokenAuthorizer implements Authorizer {
  private readonly byHash = new Map<string, Grant>();
  private readonly grants = new WeakMap<Principal, Grant>();

  constructor(file: TokenFile) {
    for (const e of file.tokens) {
      const grant: Grant = {
        principal: Object.freeze({ subject: e.subject }),
        all: e.tenants.includes('*'),
        tenants: new Set(e.tenants),
      };
      this.byHash.set(e.tokenSha256 ?? sha256(e.token!), grant);
      this.grants.set(grant.principal, grant);
    }
  }

  /** Refuses every request: what `serve` uses without a token file. */
  static denyAll(): StaticTokenAuthorizer {
    return new StaticTokenAuthorizer({ tokens: [] });
  }

  static parse(text: string, source = 'token file'): StaticTokenAuthorizer {
    let doc: unknown;
    try {
      doc = parseYaml(text);
    } catch (e) {
      throw new Error(`${source}: not YAML or JSON: ${(e as Error).message}`);
    }
    const parsed = TokenFile.safeParse(doc);
    if (!parsed.success) {
      const why = parsed.error.issues.map((i) => `${i.path.join('.') || 'file'}: ${i.message}`).join('; ');
      throw new Error(`${source}: ${why}`);
    }
    return new StaticTokenAuthorizer(parsed.data);
  }

  static async fromFile(path: string): Promise<StaticTokenAuthorizer> {
    return StaticTokenAuthorizer.parse(await fs.readFile(path, 'utf8'), path);
  }

  async authenticate(token: string | undefined): Promise<Principal> {
    if (token === undefined) throw unauthenticated('a bearer token is required');
    // Looked up by hash: the comparison never runs over the secret itself.
    const grant = this.byHash.get(sha256(token));
    if (!grant) throw unauthenticated('the bearer token is not valid');
    return grant.principal;
  }

  async authorizeCapacityRead(principal: Principal, target: CapacityReadTarget): Promise<void> {
    const grant = this.grants.get(principal);
    if (grant && (grant.all || grant.tenants.has(target.tenantId))) return;
    throw forbidden(`${principal.subject} may not read the capacity of ${describeTarget(target)}`);
  }
}
