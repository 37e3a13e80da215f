// The Kubernetes authorizer against a fake API server on loopback that answers TokenReview and SubjectAccessReview.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { KubernetesAuthorizer } from './authz-kubernetes.ts';
import { startFakeKubeApi, type FakeKubeApi, type FakeUser, type SeenRequest } from '../../test/support/fake-kube-api.ts';
import { ApiError } from './errors.ts';

/** token → user; (user, namespace, name?) → allowed. */
const USERS: Record<string, FakeUser> = {
  'alice-token': { username: 'alice', uid: 'u-1', groups: ['team-a', 'system:authenticated'], extra: { scopes: ['read'] } },
  'bob-token': { username: 'bob', uid: 'u-2', groups: ['system:authenticated'] },
};
const allowed = (user: string, ns: string, name?: string) =>
  (user === 'alice' && ns === 'acme') || (user === 'bob' && ns === 'ops' && (name === undefined || name === 'pool_allowed'));

let fake: FakeKubeApi;
let seen: SeenRequest[];
const kubeConfig = () => fake.kubeConfig();
const failNext = (n: number) => fake.failNext(n);

beforeAll(async () => {
  fake = await startFakeKubeApi({ users: USERS, allowed });
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

  it('TokenReview, then a SubjectAccessReview for get capacity.bettercompute.io in the tenant’s namespace', async () => {
    const a = new KubernetesAuthorizer({ kubeConfig: kubeConfig(), audiences: ['bettercompute'] });
    const alice = await a.authenticate('alice-token');
    expect(alice).toEqual({ subject: 'alice', uid: 'u-1', groups: ['team-a', 'system:authenticated'], extra: { scopes: ['read'] } });
    expect(seen[0]!.body.spec).toEqual({ token: 'alice-token', audiences: ['bettercompute'] });
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
    const a = new KubernetesAuthorizer({ kubeConfig: kubeConfig() });
    const bob = await a.authenticate('bob-token');
    await a.authorizeCapacityRead(bob, { tenantId: 'ops', poolId: 'pool_allowed' });
    expect(seen[1]!.body.spec.resourceAttributes).toEqual({ namespace: 'ops', verb: 'get', group: 'bettercompute.io', resource: 'capacity', name: 'pool_allowed' });
    const e = await failure(a.authorizeCapacityRead(bob, { tenantId: 'ops', poolId: 'pool_other' }));
    expect([e.code, e.status, e.message]).toEqual(['FORBIDDEN', 403, 'bob may not read the capacity of pool pool_other of tenant ops']);
  });

  it('another tenant’s namespace: FORBIDDEN', async () => {
    const a = new KubernetesAuthorizer({ kubeConfig: kubeConfig() });
    const alice = await a.authenticate('alice-token');
    expect((await failure(a.authorizeCapacityRead(alice, { tenantId: 'ops' }))).code).toBe('FORBIDDEN');
  });

  it('namespaceFor maps a tenant to its namespace', async () => {
    const a = new KubernetesAuthorizer({ kubeConfig: kubeConfig(), namespaceFor: (t) => t.replace('tenant-', '') });
    await a.authorizeCapacityRead(await a.authenticate('alice-token'), { tenantId: 'tenant-acme' });
    expect(seen[1]!.body.spec.resourceAttributes.namespace).toBe('acme');
  });

  it('answers are reused for the TTL, then asked again', async () => {
    let now = 0;
    const a = new KubernetesAuthorizer({ kubeConfig: kubeConfig(), cacheTtlMs: 1000, monotonicNow: () => now });
    for (let i = 0; i < 3; i++) await a.authorizeCapacityRead(await a.authenticate('alice-token'), { tenantId: 'acme' });
    expect(seen).toHaveLength(2);
    for (let i = 0; i < 3; i++) expect((await failure(a.authorizeCapacityRead(await a.authenticate('alice-token'), { tenantId: 'ops' }))).code).toBe('FORBIDDEN');
    expect(seen).toHaveLength(3);
    now = 1000;
    await a.authorizeCapacityRead(await a.authenticate('alice-token'), { tenantId: 'acme' });
    expect(seen).toHaveLength(5);
  });

  it('a rejected token is not cached: the next request asks again', async () => {
    const a = new KubernetesAuthorizer({ kubeConfig: kubeConfig() });
    await failure(a.authenticate('stolen-token'));
    await failure(a.authenticate('stolen-token'));
    expect(seen).toHaveLength(2);
  });

  it('an API server failure is an error, not a decision (the HTTP layer answers INTERNAL)', async () => {
    const a = new KubernetesAuthorizer({ kubeConfig: kubeConfig(), cacheTtlMs: 0 });
    failNext(1);
    await expect(a.authenticate('alice-token')).rejects.not.toBeInstanceOf(ApiError);
    const alice = await a.authenticate('alice-token');
    failNext(1);
    await expect(a.authorizeCapacityRead(alice, { tenantId: 'acme' })).rejects.toThrow();
    await a.authorizeCapacityRead(alice, { tenantId: 'acme' });
  });
});
