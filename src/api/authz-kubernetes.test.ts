// The Kubernetes authorizer against a fake API server on loopback that answers TokenReview and SubjectAccessReview.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { KubernetesAuthorizer, MAX_TENANT_NAMESPACES, PRODUCT_AUDIENCE, tenantNamespaces } from './authz-kubernetes.ts';
import { API_SERVER_AUDIENCE, startFakeKubeApi, type FakeKubeApi, type FakeUser, type SeenRequest } from '../../test/support/fake-kube-api.ts';
import { ApiError } from '../http/errors.ts';

/** token → user; (user, namespace, name?) → allowed. */
const USERS: Record<string, FakeUser> = {
  'alice-token': {
    username: 'alice',
    uid: 'u-1',
    groups: ['team-a', 'system:authenticated'],
    extra: { scopes: ['read'] },
    audiences: [PRODUCT_AUDIENCE, API_SERVER_AUDIENCE],
  },
  /** Minted with `kubectl create token` and no --audience: valid for the API server only. */
  'api-server-token': { username: 'mallory', groups: ['system:authenticated'] },
  'product-token': { username: 'erin', groups: ['system:authenticated'], audiences: [PRODUCT_AUDIENCE] },
  'bob-token': { username: 'bob', uid: 'u-2', groups: ['system:authenticated'] },
  'carol-token': { username: 'carol', groups: ['system:authenticated'] },
  'dave-token': { username: 'dave', groups: ['system:authenticated'] },
};
/**
 * Namespaces (ADR 0005): acme and ops are their own tenants (no label); globex has two labelled namespaces; the
 * namespace NAMED initech is labelled tenant globex, so tenant initech has no namespace at all.
 */
const NAMESPACES = [
  { name: 'acme' },
  { name: 'ops' },
  { name: 'globex-train', labels: { 'bettercompute.io/tenant': 'globex' } },
  { name: 'globex-serve', labels: { 'bettercompute.io/tenant': 'globex' } },
  { name: 'initech', labels: { 'bettercompute.io/tenant': 'globex' } },
  ...Array.from({ length: 40 }, (_, i) => ({ name: `big-${String(i).padStart(2, '0')}`, labels: { 'bettercompute.io/tenant': 'big' } })),
];
/** RoleBindings: alice in acme; bob in ops for one pool; carol in globex-serve; dave in the namespace named initech. */
const allowed = (user: string, ns: string, name?: string) =>
  (user === 'alice' && ns === 'acme') ||
  (user === 'bob' && ns === 'ops' && (name === undefined || name === 'pool_allowed')) ||
  (user === 'carol' && ns === 'globex-serve') ||
  (user === 'dave' && ns === 'initech') ||
  (user === 'carol' && ns === 'big-39');
/** With tenancy by name on (TENANCY_BY_NAMESPACE_NAME): acme and ops are tenants by their names. */
const namespacesOfTenant = (t: string) => tenantNamespaces(t, NAMESPACES.map((n) => ({ metadata: n })), true);

let fake: FakeKubeApi;
let seen: SeenRequest[];
const kubeConfig = () => fake.kubeConfig();
const failNext = (n: number) => fake.failNext(n);

beforeAll(async () => {
  fake = await startFakeKubeApi({ users: USERS, allowed, namespaces: NAMESPACES });
  seen = fake.seen;
});
afterAll(async () => fake.close());
beforeEach(() => {
  seen.length = 0;
  failNext(0);
});

async function failure(p: Promise<unknown>): Promise<ApiError> {
  try {
    await p;
  } catch (e) {
    expect(e).toBeInstanceOf(ApiError);
    return e as ApiError;
  }
  throw new Error('expected an ApiError');
}

describe('KubernetesAuthorizer', () => {
  it('no token: UNAUTHENTICATED without asking the API server', async () => {
    const a = new KubernetesAuthorizer({ kubeConfig: kubeConfig() });
    expect((await failure(a.authenticate(undefined))).code).toBe('UNAUTHENTICATED');
    expect(seen).toEqual([]);
  });

  it('a token the TokenReview does not accept: UNAUTHENTICATED', async () => {
    const a = new KubernetesAuthorizer({ kubeConfig: kubeConfig() });
    const e = await failure(a.authenticate('stolen-token'));
    expect([e.code, e.status]).toEqual(['UNAUTHENTICATED', 401]);
    expect(seen).toHaveLength(1);
    expect(seen[0]).toMatchObject({
      path: '/apis/authentication.k8s.io/v1/tokenreviews',
      authorization: 'Bearer controller-sa-token',
      body: { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenReview', spec: { token: 'stolen-token' } },
    });
  });

  it('with the product audience: a token minted for the API server only is refused, one minted for the audience accepted', async () => {
    const a = new KubernetesAuthorizer({ kubeConfig: kubeConfig(), audiences: [PRODUCT_AUDIENCE] });
    const e = await failure(a.authenticate('api-server-token'));
    expect([e.code, e.status]).toEqual(['UNAUTHENTICATED', 401]);
    expect(seen[0]!.body.spec).toEqual({ token: 'api-server-token', audiences: ['bettercompute.io'] });
    expect((await a.authenticate('product-token')).subject).toBe('erin');
    // Without the setting (the agents' and Prometheus's reviewer), the API server's tokens are the ones accepted.
    const plain = new KubernetesAuthorizer({ kubeConfig: kubeConfig() });
    expect((await plain.authenticate('api-server-token')).subject).toBe('mallory');
    expect((await failure(plain.authenticate('product-token'))).code).toBe('UNAUTHENTICATED');
  });

  it('an authenticator that ignores spec.audiences (no status.audiences): refused, and the refusal is cached', async () => {
    const lax = await startFakeKubeApi({ users: USERS, allowed, ignoresAudiences: true });
    try {
      const a = new KubernetesAuthorizer({ kubeConfig: lax.kubeConfig(), audiences: [PRODUCT_AUDIENCE] });
      const e = await failure(a.authenticate('api-server-token'));
      expect(e.code).toBe('UNAUTHENTICATED');
      expect(e.message).toContain('--audience bettercompute.io');
      await failure(a.authenticate('api-server-token'));
      expect(lax.seen).toHaveLength(1);
    } finally {
      await lax.close();
    }
  });

  it('TokenReview, then a SubjectAccessReview for get capacity.bettercompute.io in the tenant’s namespace', async () => {
    const a = new KubernetesAuthorizer({ kubeConfig: kubeConfig(), namespacesOfTenant, audiences: [PRODUCT_AUDIENCE] });
    const alice = await a.authenticate('alice-token');
    expect(alice).toEqual({ subject: 'alice', uid: 'u-1', groups: ['team-a', 'system:authenticated'], extra: { scopes: ['read'] } });
    expect(seen[0]!.body.spec).toEqual({ token: 'alice-token', audiences: ['bettercompute.io'] });
    await a.authorizeCapacityRead(alice, { tenantId: 'acme' });
    expect(seen[1]).toMatchObject({ path: '/apis/authorization.k8s.io/v1/subjectaccessreviews', authorization: 'Bearer controller-sa-token' });
    expect(seen[1]!.body).toEqual({
      apiVersion: 'authorization.k8s.io/v1',
      kind: 'SubjectAccessReview',
      spec: {
        user: 'alice',
        uid: 'u-1',
        groups: ['team-a', 'system:authenticated'],
        extra: { scopes: ['read'] },
        resourceAttributes: { namespace: 'acme', verb: 'get', group: 'bettercompute.io', resource: 'capacity' },
      },
    });
  });

  it('a pool-scoped read names the pool, so RBAC resourceNames can narrow it', async () => {
    const a = new KubernetesAuthorizer({ kubeConfig: kubeConfig(), namespacesOfTenant });
    const bob = await a.authenticate('bob-token');
    await a.authorizeCapacityRead(bob, { tenantId: 'ops', poolId: 'pool_allowed' });
    expect(seen[1]!.body.spec.resourceAttributes).toEqual({ namespace: 'ops', verb: 'get', group: 'bettercompute.io', resource: 'capacity', name: 'pool_allowed' });
    const e = await failure(a.authorizeCapacityRead(bob, { tenantId: 'ops', poolId: 'pool_other' }));
    expect([e.code, e.status, e.message]).toEqual(['FORBIDDEN', 403, 'bob may not read the capacity of pool pool_other of tenant ops']);
  });

  it('another tenant’s namespace: FORBIDDEN', async () => {
    const a = new KubernetesAuthorizer({ kubeConfig: kubeConfig(), namespacesOfTenant });
    const alice = await a.authenticate('alice-token');
    expect((await failure(a.authorizeCapacityRead(alice, { tenantId: 'ops' }))).code).toBe('FORBIDDEN');
  });

  it('tenantNamespaces: the labelled ones, plus (tenancy by name on) the one named like the tenant while it has no tenant label', () => {
    const all = NAMESPACES.map((n) => ({ metadata: n }));
    expect(tenantNamespaces('globex', all, true)).toEqual(['globex-serve', 'globex-train', 'initech']);
    expect(tenantNamespaces('acme', all, true)).toEqual(['acme']);
    expect(tenantNamespaces('initech', all, true)).toEqual([]);
    expect(tenantNamespaces('nobody', all, true)).toEqual([]);
    // Off (the default): an unlabelled namespace is no tenant; labels decide alone.
    expect(tenantNamespaces('acme', all)).toEqual([]);
    expect(tenantNamespaces('globex', all)).toEqual(['globex-serve', 'globex-train', 'initech']);
    expect(tenantNamespaces('acme', [{ metadata: { name: 'acme', labels: { 'bettercompute.io/tenant': '' } } }], true)).toEqual(['acme']);
  });

  it('tenancy by name off (the default): the unlabelled namespace named like the tenant gives nothing, and is not even asked for', async () => {
    const a = new KubernetesAuthorizer({ kubeConfig: kubeConfig(), cacheTtlMs: 0 });
    const alice = await a.authenticate('alice-token');
    seen.length = 0;
    expect((await failure(a.authorizeCapacityRead(alice, { tenantId: 'acme' }))).code).toBe('FORBIDDEN');
    expect(seen.map((r) => `${r.method} ${decodeURIComponent(r.path)}`)).toEqual(['GET /api/v1/namespaces?labelSelector=bettercompute.io/tenant=acme']);
  });

  it('a RoleBinding in any of the tenant’s labelled namespaces applies', async () => {
    const a = new KubernetesAuthorizer({ kubeConfig: kubeConfig(), namespacesOfTenant });
    await a.authorizeCapacityRead(await a.authenticate('carol-token'), { tenantId: 'globex' });
    const asked = seen.filter((r) => r.path.endsWith('/subjectaccessreviews')).map((r) => r.body.spec.resourceAttributes.namespace);
    expect(asked.sort()).toEqual(['globex-serve', 'globex-train', 'initech']);
    // Not in the namespace named like the tenant: there is none.
    expect((await failure(a.authorizeCapacityRead(await a.authenticate('carol-token'), { tenantId: 'acme' }))).code).toBe('FORBIDDEN');
  });

  it('a namespace NAMED like tenant initech but labelled globex gives nothing for initech: FORBIDDEN, no review asked', async () => {
    const a = new KubernetesAuthorizer({ kubeConfig: kubeConfig(), namespacesOfTenant });
    const dave = await a.authenticate('dave-token');
    seen.length = 0;
    const e = await failure(a.authorizeCapacityRead(dave, { tenantId: 'initech' }));
    expect([e.code, e.status, e.message]).toEqual(['FORBIDDEN', 403, 'dave may not read the capacity of tenant initech']);
    expect(seen).toEqual([]);
    // …while it is one of globex's namespaces, so the same RoleBinding reads globex.
    await a.authorizeCapacityRead(dave, { tenantId: 'globex' });
  });

  it('without namespacesOfTenant: asks the API server (label selector, then the namespace by name), cached for the TTL', async () => {
    let now = 0;
    const a = new KubernetesAuthorizer({ kubeConfig: kubeConfig(), cacheTtlMs: 1000, monotonicNow: () => now, tenancyByName: true });
    const alice = await a.authenticate('alice-token');
    const dave = await a.authenticate('dave-token');
    const carol = await a.authenticate('carol-token');
    seen.length = 0;
    // The unlabelled namespace named like the tenant still works.
    await a.authorizeCapacityRead(alice, { tenantId: 'acme' });
    expect(seen.map((r) => `${r.method} ${decodeURIComponent(r.path)}`)).toEqual([
      'GET /api/v1/namespaces?labelSelector=bettercompute.io/tenant=acme',
      'GET /api/v1/namespaces/acme',
      'POST /apis/authorization.k8s.io/v1/subjectaccessreviews',
    ]);
    expect((await failure(a.authorizeCapacityRead(dave, { tenantId: 'initech' }))).code).toBe('FORBIDDEN');
    await a.authorizeCapacityRead(carol, { tenantId: 'globex' });
    seen.length = 0;
    await a.authorizeCapacityRead(dave, { tenantId: 'globex' });
    expect(seen.filter((r) => r.method === 'GET')).toEqual([]);
    now = 1000;
    await a.authorizeCapacityRead(dave, { tenantId: 'globex' });
    expect(seen.filter((r) => r.method === 'GET')).toHaveLength(2);
  });

  it('bounded: at most MAX_TENANT_NAMESPACES reviews per decision, a few at a time, stopping at the first yes', async () => {
    const a = new KubernetesAuthorizer({ kubeConfig: kubeConfig(), namespacesOfTenant });
    const carol = await a.authenticate('carol-token');
    seen.length = 0;
    // carol's RoleBinding is in big-39, past the bound (the first 32 by name are asked).
    expect((await failure(a.authorizeCapacityRead(carol, { tenantId: 'big' }))).code).toBe('FORBIDDEN');
    expect(seen).toHaveLength(MAX_TENANT_NAMESPACES);
    seen.length = 0;
    await a.authorizeCapacityRead(carol, { tenantId: 'globex' });
    expect(seen.length).toBeLessThanOrEqual(3);
  });

  it('answers are reused for the TTL, then asked again', async () => {
    let now = 0;
    const a = new KubernetesAuthorizer({ kubeConfig: kubeConfig(), namespacesOfTenant, cacheTtlMs: 1000, monotonicNow: () => now });
    for (let i = 0; i < 3; i++) await a.authorizeCapacityRead(await a.authenticate('alice-token'), { tenantId: 'acme' });
    expect(seen).toHaveLength(2);
    for (let i = 0; i < 3; i++) expect((await failure(a.authorizeCapacityRead(await a.authenticate('alice-token'), { tenantId: 'ops' }))).code).toBe('FORBIDDEN');
    expect(seen).toHaveLength(3);
    now = 1000;
    await a.authorizeCapacityRead(await a.authenticate('alice-token'), { tenantId: 'acme' });
    expect(seen).toHaveLength(5);
  });

  it('a rejected token is refused from the cache for rejectedTtlMs (one TokenReview, not one per request), then asked again', async () => {
    let now = 0;
    const a = new KubernetesAuthorizer({ kubeConfig: kubeConfig(), rejectedTtlMs: 5000, monotonicNow: () => now });
    for (let i = 0; i < 5; i++) expect((await failure(a.authenticate('stolen-token'))).code).toBe('UNAUTHENTICATED');
    expect(seen).toHaveLength(1);
    now = 5000;
    await failure(a.authenticate('stolen-token'));
    expect(seen).toHaveLength(2);
  });

  it('concurrent requests with one token share one TokenReview', async () => {
    const a = new KubernetesAuthorizer({ kubeConfig: kubeConfig(), cacheTtlMs: 0, rejectedTtlMs: 0 });
    const users = await Promise.all(Array.from({ length: 10 }, () => a.authenticate('alice-token')));
    expect(new Set(users.map((u) => u.subject))).toEqual(new Set(['alice']));
    const bad = await Promise.all(Array.from({ length: 10 }, () => failure(a.authenticate('garbage'))));
    expect(bad.every((e) => e.code === 'UNAUTHENTICATED')).toBe(true);
    expect(seen.filter((r) => r.path.endsWith('/tokenreviews'))).toHaveLength(2);
  });

  it('an API server failure is an error, not a decision (the HTTP layer answers INTERNAL)', async () => {
    const a = new KubernetesAuthorizer({ kubeConfig: kubeConfig(), namespacesOfTenant, cacheTtlMs: 0 });
    failNext(1);
    await expect(a.authenticate('alice-token')).rejects.not.toBeInstanceOf(ApiError);
    const alice = await a.authenticate('alice-token');
    failNext(1);
    await expect(a.authorizeCapacityRead(alice, { tenantId: 'acme' })).rejects.toThrow();
    await a.authorizeCapacityRead(alice, { tenantId: 'acme' });
  });
});
