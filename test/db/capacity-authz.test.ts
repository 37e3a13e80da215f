// The capacity API with the Kubernetes authorizer, over HTTP on a real database, against a fake Kubernetes API server
// (TokenReview + SubjectAccessReview) on loopback.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CAPACITY_PATHS } from '../../src/api/app.ts';
import { KubernetesAuthorizer } from '../../src/api/authz-kubernetes.ts';
import { silentLogger, type Logger } from '../../src/log.ts';
import { startTestApi, type TestApi } from '../support/api.ts';
import { makeNode, makePool } from '../support/builders.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { startFakeKubeApi, type FakeKubeApi } from '../support/fake-kube-api.ts';
import { expectError } from '../support/http-assert.ts';

let t: TestDatabase;
let kube: FakeKubeApi;
let api: TestApi;
let ACME: string;
let OPS: string;
let OPS_OTHER: string;
const errors: unknown[] = [];

beforeAll(async () => {
  t = await createTestDatabase();
  ACME = await makePool('authz-acme').owner('acme').create(t.db);
  OPS = await makePool('authz-ops').owner('ops').create(t.db);
  OPS_OTHER = await makePool('authz-ops-2').owner('ops').create(t.db);
  await makeNode('authz-n1').gpus(2).create(t.db, ACME);
  kube = await startFakeKubeApi({
    users: {
      'alice-token': { username: 'alice', uid: 'u-1', groups: ['team-a'] },
      'bob-token': { username: 'bob', uid: 'u-2', groups: [] },
      'eve-token': { username: 'eve', uid: 'u-3', groups: [] },
    },
    // alice reads all of acme; bob reads ops' summary and one named pool of ops only (RBAC resourceNames); eve is
    // bound in the namespace NAMED initech, which is labelled tenant acme.
    allowed: (user, ns, name) =>
      (user === 'alice' && ns === 'acme') || (user === 'bob' && ns === 'ops' && (name === undefined || name === OPS)) || (user === 'eve' && ns === 'initech'),
    namespaces: [{ name: 'acme' }, { name: 'ops' }, { name: 'initech', labels: { 'bettercompute.io/tenant': 'acme' } }],
  });
  const log: Logger = { ...silentLogger, error: (msg, f) => errors.push({ msg, ...f }) };
  api = await startTestApi(t.db, { authorizer: new KubernetesAuthorizer({ kubeConfig: kube.kubeConfig(), cacheTtlMs: 0, tenancyByName: true }), log, token: '' });
});
afterAll(async () => {
  await api?.close();
  await kube?.close();
  await t?.drop();
});

const post = (path: string, body: unknown, token?: string) => api.client.request({ path, body, ...(token ? { token } : {}) });

describe('Kubernetes authorization over HTTP', () => {
  it('no token: UNAUTHENTICATED, and the API server is not asked', async () => {
    const before = kube.seen.length;
    expectError(await post(CAPACITY_PATHS.summary, { tenantId: 'acme' }), 'UNAUTHENTICATED');
    expect(kube.seen.length).toBe(before);
  });

  it('a token the TokenReview refuses: UNAUTHENTICATED', async () => {
    expectError(await post(CAPACITY_PATHS.summary, { tenantId: 'acme' }, 'forged'), 'UNAUTHENTICATED');
  });

  it('summary is decided on the tenant’s namespaces (acme, and initech labelled acme)', async () => {
    expect((await post(CAPACITY_PATHS.summary, { tenantId: 'acme' }, 'alice-token')).status).toBe(200);
    const sar = kube.seen.filter((r) => r.path.endsWith('/subjectaccessreviews') && r.body.spec.resourceAttributes.namespace === 'acme').at(-1)!;
    expect(sar.path).toBe('/apis/authorization.k8s.io/v1/subjectaccessreviews');
    expect(sar.body.spec).toMatchObject({ user: 'alice', uid: 'u-1', groups: ['team-a'], resourceAttributes: { namespace: 'acme', verb: 'get', group: 'bettercompute.io', resource: 'capacity' } });
    expect(sar.body.spec.resourceAttributes.name).toBeUndefined();
    expectError(await post(CAPACITY_PATHS.summary, { tenantId: 'ops' }, 'alice-token'), 'FORBIDDEN');
  });

  it('byPool, preview and timeline are decided on the pool, in the tenant’s namespace', async () => {
    expect((await post(CAPACITY_PATHS.byPool, { tenantId: 'ops', poolId: OPS }, 'bob-token')).status).toBe(200);
    expect(kube.seen.at(-1)!.body.spec.resourceAttributes).toEqual({ namespace: 'ops', verb: 'get', group: 'bettercompute.io', resource: 'capacity', name: OPS });
    expectError(await post(CAPACITY_PATHS.byPool, { tenantId: 'ops', poolId: OPS_OTHER }, 'bob-token'), 'FORBIDDEN');
    expect((await post(CAPACITY_PATHS.timeline, { tenantId: 'ops', poolId: OPS }, 'bob-token')).status).toBe(200);
    const preview = { tenantId: 'acme', poolId: ACME, devices: [{ class: 'gpu', count: 1 }], duration: '1h', idempotencyKey: 'k' };
    expect((await post(CAPACITY_PATHS.preview, preview, 'alice-token')).json).toMatchObject({ fits: true });
    expectError(await post(CAPACITY_PATHS.preview, preview, 'bob-token'), 'FORBIDDEN');
  });

  it('tenants by label: a namespace named like tenant initech but labelled acme reads acme, not initech (FORBIDDEN)', async () => {
    expectError(await post(CAPACITY_PATHS.summary, { tenantId: 'initech' }, 'eve-token'), 'FORBIDDEN');
    expect((await post(CAPACITY_PATHS.summary, { tenantId: 'acme' }, 'eve-token')).status).toBe(200);
    expect((await post(CAPACITY_PATHS.byPool, { tenantId: 'acme', poolId: ACME }, 'eve-token')).status).toBe(200);
  });

  it('invalid input from an authenticated caller is INVALID_INPUT before any SubjectAccessReview', async () => {
    const before = kube.seen.length;
    expectError(await post(CAPACITY_PATHS.summary, { tenantId: '' }, 'alice-token'), 'INVALID_INPUT');
    expect(kube.seen.slice(before).map((s) => s.path)).toEqual(['/apis/authentication.k8s.io/v1/tokenreviews']);
  });

  it('the API server failing is INTERNAL (500) with a well-formed body, and logged', async () => {
    kube.failNext(1);
    const res = await post(CAPACITY_PATHS.summary, { tenantId: 'acme' }, 'alice-token');
    expect(expectError(res, 'INTERNAL')).toBe('internal error');
    expect(errors).toHaveLength(1);
    expect((await post(CAPACITY_PATHS.summary, { tenantId: 'acme' }, 'alice-token')).status).toBe(200);
  });
});
