import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import puppeteer from 'puppeteer-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  agentKubeconfig,
  apply,
  deletePodsNow,
  clusterInfo,
  kubectl,
  kubectlJson,
  kubectlResult,
  portForward,
  uniqueName,
  waitCondition,
  waitFor,
  waitForPodPhase,
  type Pod,
} from './harness.ts';
import { devicePluginClient, grpc, unary } from '../../src/agent/grpc.ts';
import { request } from '../../test/support/http.ts';
import { applyNodePool, installWithHelm, removeNodePool, reserveAndWait, SYSTEM_NS, uninstallWithHelm, type Installed } from './install.ts';

// The product as a platform team installs it: the image built offline, `kubectl apply -k deploy/overlays/trial`
// (e2e/cluster/install.ts), and then what users and attackers do from their own namespaces. Each attack here worked
// against the product before issue 9: an open extender, open /metrics, pods that skip the extender, agents that write
// other nodes' devices, tenants read by namespace name.
const c = () => clusterInfo();
const CHROMIUM = process.env.BC_CHROMIUM ?? '/usr/bin/chromium';
const TENANT = uniqueName('team');
const NS = TENANT; // the tenant's own namespace (labelled with the tenant)
const OTHER_TENANT = uniqueName('other');
const IMPOSTOR_NS = uniqueName('imp'); // labelled TENANT, but we ask about OTHER_TENANT through it
const POOL = uniqueName('pool');

let installed: Installed;
let caFile: string;

async function token(namespace: string, sa = 'default', audience?: string): Promise<string> {
  return (await kubectl(['-n', namespace, 'create', 'token', sa, '--duration=10m', ...(audience ? ['--audience', audience] : [])])).trim();
}

/** A token for the capacity API, as users make them: `kubectl create token <sa> --audience bettercompute.io` (ADR 0035). */
const apiToken = (namespace: string, sa = 'default') => token(namespace, sa, 'bettercompute.io');

/** POST a capacity API method over TLS (the Service's port 8443 on the pod's address). */
async function capacityCall(ip: string, bearer: string, tenantId: string) {
  const r = await request(`https://${ip}:8443/api/compute/capacity/summary`, {
    method: 'POST',
    ca: fs.readFileSync(caFile),
    servername: `better-compute-controller.${SYSTEM_NS}.svc`,
    token: bearer,
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ tenantId }),
  });
  return { status: r.status, body: r.json as { error?: { code: string } } };
}

function httpsGet(url: string, bearer?: string) {
  return request(url, {
    ca: fs.readFileSync(caFile),
    servername: `better-compute-controller.${SYSTEM_NS}.svc`,
    ...(bearer ? { token: bearer } : {}),
  });
}

/** A pod spec asking for `gpus` of bettercompute.io/gpu that prints the atoms it was handed. */
function gpuPodSpec(gpus: number, sleepSeconds: number) {
  return {
    restartPolicy: 'Never',
    terminationGracePeriodSeconds: 1,
    containers: [
      {
        name: 'main',
        image: c().busyboxImage,
        command: ['sh', '-c', `echo "ATOMS=$BETTERCOMPUTE_ATOMS"; sleep ${sleepSeconds}`],
        resources: { limits: { 'bettercompute.io/gpu': String(gpus) } },
      },
    ],
  };
}

function gpuPod(name: string, extra: { spec?: Record<string, unknown>; gpus?: number } = {}) {
  return { apiVersion: 'v1', kind: 'Pod', metadata: { name, namespace: NS }, spec: { ...gpuPodSpec(extra.gpus ?? 1, 2), ...extra.spec } };
}

beforeAll(async () => {
  // With `helm install` of the chart (which renders exactly deploy/, e2e/cluster/helm.test.ts): the other suites install
  // with `kubectl apply -k`, so both of the ways users install are held by a suite.
  installed = await installWithHelm({ gpus: 8 });
  process.stderr.write(`[installed] helm install to Ready in ${installed.readySeconds.toFixed(1)}s\n`);
  const ca = await kubectlJson<{ data: Record<string, string> }>(['-n', SYSTEM_NS, 'get', 'configmap', 'better-compute-ca']);
  caFile = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'bc-ca-')), 'ca.crt');
  fs.writeFileSync(caFile, ca.data['ca.crt']!);
  await apply([
    { apiVersion: 'v1', kind: 'Namespace', metadata: { name: NS, labels: { 'bettercompute.io/tenant': TENANT } } },
    { apiVersion: 'v1', kind: 'Namespace', metadata: { name: IMPOSTOR_NS, labels: { 'bettercompute.io/tenant': TENANT } } },
  ]);
  await applyNodePool(POOL, [{ tenant: TENANT, quota: { gpu: 8 } }]);
}, 1_800_000);

afterAll(async () => {
  // While the controller still runs: it removes the Reservations' finalizers, so the namespaces can go.
  await kubectlResult(['delete', 'namespace', NS, IMPOSTOR_NS, '--wait=true', '--timeout=120s'], { timeoutMs: 130_000 });
  await removeNodePool(POOL);
  if (process.env.BC_KEEP_INSTALLED !== '1') await uninstallWithHelm();
}, 300_000);

describe('installed from the image with helm install of the chart (deploy/, rendered)', () => {
  it('runs the controller beside its scheduler, and an agent that holds no database credentials', async () => {
    const pod = await installed.controllerPod();
    const p = await kubectlJson<Pod & { spec: { containers: { name: string; image: string }[] } }>(['-n', SYSTEM_NS, 'get', 'pod', pod.name]);
    expect(p.spec.containers.map((x) => x.name).sort()).toEqual(['controller', 'scheduler']);
    expect(p.spec.containers.find((x) => x.name === 'controller')!.image).toMatch(/^better-compute:\d+\.\d+\.\d+$/);
    const ds = await kubectlJson<{ spec: { template: { spec: { volumes?: Record<string, unknown>[]; containers: { env?: { name: string; valueFrom?: unknown }[] }[] } } } }>([
      '-n', SYSTEM_NS, 'get', 'daemonset', 'better-compute-agent',
    ]);
    const tmpl = ds.spec.template.spec;
    expect((tmpl.volumes ?? []).filter((v) => 'secret' in v)).toEqual([]);
    const env = tmpl.containers.flatMap((x) => x.env ?? []);
    expect(env.map((e) => e.name)).not.toContain('DATABASE_URL');
    expect(JSON.stringify(env)).not.toContain('secretKeyRef');
  });

  it('the extender is on the pod loopback only: a tenant pod cannot reach it, and the Service has no port for it', async () => {
    const { ip } = await installed.controllerPod();
    const svc = await kubectlJson<{ spec: { ports: { port: number }[] } }>(['-n', SYSTEM_NS, 'get', 'service', 'better-compute-controller']);
    expect(svc.spec.ports.map((p) => p.port).sort()).toEqual([8443, 9090, 9443]);
    const name = uniqueName('probe');
    // nc exits 0 only when it connected. The capacity API's plain-HTTP twin (8080) is on the pod's loopback only: a
    // token cannot be sent to it in clear text from the pod network (ADR 0035).
    const script = [
      `if nc -w 3 ${ip} 8888 </dev/null; then echo EXTENDER=open; else echo EXTENDER=closed; fi`,
      `if nc -w 3 ${ip} 8080 </dev/null; then echo PLAIN_API=open; else echo PLAIN_API=closed; fi`,
    ].join('; ');
    await apply({
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name, namespace: NS },
      spec: { restartPolicy: 'Never', containers: [{ name: 'main', image: c().busyboxImage, command: ['sh', '-c', script] }] },
    });
    await waitForPodPhase(NS, name, ['Succeeded', 'Failed'], 60_000);
    const logs = await kubectl(['-n', NS, 'logs', name]);
    expect(logs).toContain('EXTENDER=closed');
    expect(logs).toContain('PLAIN_API=closed');
  });

  it('/metrics is TLS and needs a token that RBAC lets read it: a tenant gets 403, anonymous 401', async () => {
    const { ip } = await installed.controllerPod();
    const url = `https://${ip}:9090/metrics`;
    expect((await httpsGet(url)).status).toBe(401);
    const tenant = await httpsGet(url, await token(NS));
    expect(tenant.status).toBe(403);
    expect(tenant.text).not.toContain('bettercompute_pool_');
    // A ServiceAccount bound to the metrics reader role (deploy/monitoring/rbac.yaml) reads it.
    const sa = uniqueName('prom');
    await kubectl(['-n', NS, 'create', 'serviceaccount', sa]);
    await apply({
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRoleBinding',
      metadata: { name: sa },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: sa },
      subjects: [{ kind: 'ServiceAccount', name: sa, namespace: NS }],
    });
    await apply({ apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRole', metadata: { name: sa }, rules: [{ nonResourceURLs: ['/metrics'], verbs: ['get'] }] });
    try {
      const prom = await waitFor('metrics for the reader', async () => {
        const r = await httpsGet(url, await token(NS, sa));
        return r.status === 200 ? r : undefined;
      }, { timeoutMs: 30_000, intervalMs: 1000 });
      expect(prom.text).toContain('bettercompute_');
    } finally {
      await kubectlResult(['delete', 'clusterrolebinding,clusterrole', sa]);
    }
  });

  it('refuses a pod that sets spec.nodeName or names another scheduler, with the reason', async () => {
    const byName = await kubectlResult(['apply', '-f', '-'], { input: JSON.stringify(gpuPod(uniqueName('direct'), { spec: { nodeName: c().nodeName } })) });
    expect(byName.code).not.toBe(0);
    expect(byName.stderr).toMatch(/nodeName/);
    const other = await kubectlResult(['apply', '-f', '-'], { input: JSON.stringify(gpuPod(uniqueName('other'), { spec: { schedulerName: 'my-scheduler' } })) });
    expect(other.code).not.toBe(0);
    expect(other.stderr).toMatch(/better-compute-scheduler/);
  });

  it('refuses a pod that sets NVIDIA_VISIBLE_DEVICES itself, in any namespace but the exempt ones (docs/node-isolation.md)', async () => {
    const sneaky = (name: string, namespace: string, value: string) => ({
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name, namespace },
      spec: { containers: [{ name: 'main', image: c().busyboxImage, command: ['sleep', '1'], env: [{ name: 'NVIDIA_VISIBLE_DEVICES', value }] }] },
    });
    const refused = await kubectlResult(['apply', '--dry-run=server', '-f', '-'], { input: JSON.stringify(sneaky(uniqueName('all-gpus'), NS, 'all')) });
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toMatch(/sets NVIDIA_VISIBLE_DEVICES in container main/);
    // void grants nothing; a namespace labelled for it (the NVIDIA operator's) is exempt.
    const none = await kubectlResult(['apply', '--dry-run=server', '-f', '-'], { input: JSON.stringify(sneaky(uniqueName('void'), NS, 'void')) });
    expect(none.code, none.stderr).toBe(0);
    const exempt = uniqueName('gpu-operator');
    await apply({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: exempt, labels: { 'bettercompute.io/allow-visible-devices': 'true' } } });
    try {
      const allowed = await kubectlResult(['apply', '--dry-run=server', '-f', '-'], { input: JSON.stringify(sneaky(uniqueName('operator'), exempt, 'all')) });
      expect(allowed.code, allowed.stderr).toBe(0);
    } finally {
      await kubectlResult(['delete', 'namespace', exempt, '--wait=false']);
    }
  });

  it('refuses an envFrom that could set NVIDIA_VISIBLE_DEVICES (no prefix, or NVIDIA_) in any container, and CUDA_VERSION alone (a legacy CUDA image); the exempt namespaces pass (docs/node-isolation.md)', async () => {
    const dryRun = (o: object) => kubectlResult(['apply', '--dry-run=server', '-f', '-'], { input: JSON.stringify(o) });
    const podWith = (name: string, namespace: string, main: Record<string, unknown>, spec: Record<string, unknown> = {}) => ({
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name, namespace },
      spec: { containers: [{ name: 'main', image: c().busyboxImage, command: ['sleep', '1'], ...main }], ...spec },
    });
    // envFrom: admission cannot read the ConfigMap or Secret; a prefix that NVIDIA_VISIBLE_DEVICES does not start with passes.
    for (const source of [{ configMapRef: { name: 'settings' } }, { secretRef: { name: 'creds' } }]) {
      const bare = await dryRun(podWith(uniqueName('envfrom'), NS, { envFrom: [source] }));
      expect(bare.code).not.toBe(0);
      expect(bare.stderr).toMatch(/takes variables from a ConfigMap or Secret \(envFrom\) without a safe prefix in container main/);
      const nvidia = await dryRun(podWith(uniqueName('envfrom-nvidia'), NS, { envFrom: [{ prefix: 'NVIDIA_', ...source }] }));
      expect(nvidia.code).not.toBe(0);
      expect(nvidia.stderr).toMatch(/without a safe prefix in container main/);
      const app = await dryRun(podWith(uniqueName('envfrom-app'), NS, { envFrom: [{ prefix: 'APP_', ...source }] }));
      expect(app.code, app.stderr).toBe(0);
    }
    const init = await dryRun(podWith(uniqueName('envfrom-init'), NS, {}, { initContainers: [{ name: 'setup', image: c().busyboxImage, command: ['true'], envFrom: [{ configMapRef: { name: 'settings' } }] }] }));
    expect(init.code).not.toBe(0);
    expect(init.stderr).toMatch(/without a safe prefix in container setup/);
    // CUDA_VERSION without NVIDIA_REQUIRE_CUDA: the toolkit's legacy rule gives such a container every GPU.
    const cuda = { name: 'CUDA_VERSION', value: '12.4.1' };
    const legacy = await dryRun(podWith(uniqueName('cuda'), NS, { env: [cuda] }));
    expect(legacy.code).not.toBe(0);
    expect(legacy.stderr).toMatch(/sets CUDA_VERSION without NVIDIA_REQUIRE_CUDA in container main/);
    const required = await dryRun(podWith(uniqueName('cuda-require'), NS, { env: [cuda, { name: 'NVIDIA_REQUIRE_CUDA', value: 'cuda>=12.4' }] }));
    expect(required.code, required.stderr).toBe(0);
    const voided = await dryRun(podWith(uniqueName('cuda-void'), NS, { env: [cuda, { name: 'NVIDIA_VISIBLE_DEVICES', value: 'void' }] }));
    expect(voided.code, voided.stderr).toBe(0);
    // Our GPU: the agent's Allocate sets NVIDIA_VISIBLE_DEVICES for the container.
    const booked = await dryRun(gpuPod(uniqueName('cuda-gpu'), { spec: { containers: [{ ...gpuPodSpec(1, 1).containers[0], env: [cuda] }] } }));
    expect(booked.code, booked.stderr).toBe(0);
    // An ephemeral container added (kubectl debug: the pods/ephemeralcontainers subresource) is judged the same way.
    const target = uniqueName('debug-target');
    await apply({ apiVersion: 'v1', kind: 'Pod', metadata: { name: target, namespace: NS }, spec: { containers: [{ name: 'main', image: c().busyboxImage, command: ['sleep', '3600'] }], terminationGracePeriodSeconds: 0 } });
    try {
      // Sent without its resourceVersion (a pod takes unconditional updates): the kubelet's status writes in between
      // would otherwise answer 409 Conflict, not the policy's verdict.
      const current = await kubectlJson<Pod & { metadata: { resourceVersion?: string }; spec: Record<string, unknown> }>(['-n', NS, 'get', 'pod', target]);
      delete current.metadata.resourceVersion;
      const debug = (envFrom: object[]) =>
        kubectlResult(['replace', '--raw', `/api/v1/namespaces/${NS}/pods/${target}/ephemeralcontainers?dryRun=All`, '-f', '-'], {
          input: JSON.stringify({ ...current, spec: { ...current.spec, ephemeralContainers: [{ name: 'debugger', image: c().busyboxImage, command: ['sh'], envFrom }] } }),
        });
      const refused = await debug([{ secretRef: { name: 'creds' } }]);
      expect(refused.code).not.toBe(0);
      expect(refused.stderr).toMatch(/without a safe prefix in container debugger/);
      const prefixed = await debug([{ prefix: 'APP_', secretRef: { name: 'creds' } }]);
      expect(prefixed.code, prefixed.stderr).toBe(0);
    } finally {
      await deletePodsNow(NS, [target]);
    }
    // A namespace labelled for NVIDIA's components is exempt from these rules too.
    const exempt = uniqueName('gpu-operator');
    await apply({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: exempt, labels: { 'bettercompute.io/allow-visible-devices': 'true' } } });
    try {
      const envFrom = await dryRun(podWith(uniqueName('operator-envfrom'), exempt, { envFrom: [{ configMapRef: { name: 'settings' } }] }));
      expect(envFrom.code, envFrom.stderr).toBe(0);
      const old = await dryRun(podWith(uniqueName('operator-cuda'), exempt, { env: [cuda] }));
      expect(old.code, old.stderr).toBe(0);
    } finally {
      await kubectlResult(['delete', 'namespace', exempt, '--wait=false']);
    }
  });

  it("the controller's identity may patch a pod only for its annotation: not the image (policy bettercompute-controller-pod-annotation-only)", async () => {
    await apply({
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'patch-target', namespace: NS },
      spec: { containers: [{ name: 'main', image: c().busyboxImage, command: ['sleep', '3600'] }], terminationGracePeriodSeconds: 0 },
    });
    const asController = ['--as', `system:serviceaccount:${SYSTEM_NS}:better-compute-controller`];
    const image = await kubectlResult([...asController, '-n', NS, 'patch', 'pod', 'patch-target', '--type=strategic', '-p', JSON.stringify({ spec: { containers: [{ name: 'main', image: 'evil:1' }] } })]);
    expect(image.code).not.toBe(0);
    expect(image.stderr).toMatch(/bettercompute-controller-pod-annotation-only.*nothing else of the spec/s);
    const note = await kubectlResult([...asController, '-n', NS, 'patch', 'pod', 'patch-target', '--type=merge', '-p', JSON.stringify({ metadata: { annotations: { 'bettercompute.io/preempt-at': '2030-01-01T00:00:00Z' } } })]);
    expect(note.code, note.stderr).toBe(0);
    const label = await kubectlResult([...asController, '-n', NS, 'label', 'pod', 'patch-target', 'stolen=yes']);
    expect(label.stderr).toMatch(/not its labels/);
    await deletePodsNow(NS, ['patch-target']);
  });

  it("an agent's identity may write only its own node's NodeDevices", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bc-agent-'));
    const asNodeA = ['--kubeconfig', agentKubeconfig(dir, 'node-a')];
    const nd = (name: string) => ({ apiVersion: 'bettercompute.io/v1alpha1', kind: 'NodeDevices', metadata: { name }, spec: { gpus: [], scalars: {} } });
    const r = await kubectlResult([...asNodeA, 'create', '-f', '-'], { input: JSON.stringify(nd('node-b')) });
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/denied|forbidden/i);
    const ok = await kubectlResult([...asNodeA, 'create', '-f', '-'], { input: JSON.stringify(nd('node-a')) });
    expect(ok.code, ok.stderr).toBe(0);
    await kubectl(['delete', 'nodedevices', 'node-a']);
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('a namespace labelled as one tenant cannot read another tenant by name (FORBIDDEN)', async () => {
    const { ip } = await installed.controllerPod();
    // RBAC lets the impostor namespace's ServiceAccount read capacity in its own namespace only.
    await apply([
      { apiVersion: 'v1', kind: 'Namespace', metadata: { name: OTHER_TENANT, labels: { 'bettercompute.io/tenant': TENANT } } },
      {
        apiVersion: 'rbac.authorization.k8s.io/v1',
        kind: 'Role',
        metadata: { name: 'capacity-reader', namespace: OTHER_TENANT },
        rules: [{ apiGroups: ['bettercompute.io'], resources: ['capacity'], verbs: ['get'] }],
      },
      {
        apiVersion: 'rbac.authorization.k8s.io/v1',
        kind: 'RoleBinding',
        metadata: { name: 'capacity-reader', namespace: OTHER_TENANT },
        roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'capacity-reader' },
        subjects: [{ kind: 'ServiceAccount', name: 'default', namespace: OTHER_TENANT }],
      },
    ]);
    try {
      await waitFor('default service account', async () => (await kubectlResult(['-n', OTHER_TENANT, 'get', 'sa', 'default'])).code === 0, { timeoutMs: 30_000 });
      const bearer = await apiToken(OTHER_TENANT);
      const ask = (tenantId: string) => capacityCall(ip, bearer, tenantId);
      // A token minted for the API server (no --audience) is not one for the capacity API.
      const apiServerToken = await token(OTHER_TENANT);
      expect(await capacityCall(ip, apiServerToken, TENANT)).toMatchObject({ status: 401, body: { error: { code: 'UNAUTHENTICATED' } } });
      // The namespace is NAMED like tenant OTHER_TENANT, but labelled TENANT: it gives nothing of OTHER_TENANT...
      const stolen = await ask(OTHER_TENANT);
      expect(stolen.status).toBe(403);
      expect(stolen.body.error?.code).toBe('FORBIDDEN');
      // ...and the RoleBinding applies to the tenant it is labelled with.
      expect((await ask(TENANT)).status).toBe(200);
    } finally {
      await kubectlResult(['delete', 'namespace', OTHER_TENANT, '--wait=false']);
    }
  });

  it('the GPU calendar through the installed controller: the sign-in without a token; with one, the Reservation by its Kubernetes name (docs/calendar.md)', async () => {
    const { ip } = await installed.controllerPod();
    const rsv = uniqueName('cal');
    const booked = await reserveAndWait(NS, rsv, POOL, 1, '1h');
    await apply([
      { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'Role', metadata: { name: 'calendar-reader', namespace: NS }, rules: [{ apiGroups: ['bettercompute.io'], resources: ['capacity'], verbs: ['get'] }] },
      {
        apiVersion: 'rbac.authorization.k8s.io/v1',
        kind: 'RoleBinding',
        metadata: { name: 'calendar-reader', namespace: NS },
        roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'calendar-reader' },
        subjects: [{ kind: 'ServiceAccount', name: 'default', namespace: NS }],
      },
    ]);
    await waitFor('default service account', async () => (await kubectlResult(['-n', NS, 'get', 'sa', 'default'])).code === 0, { timeoutMs: 30_000 });
    // Over the Service's HTTPS port, as a browser on the pod network reaches it (the plain port is the pod's loopback).
    const base = `https://${ip}:8443`;
    const tls = { ca: fs.readFileSync(caFile), servername: `better-compute-controller.${SYSTEM_NS}.svc` };
    const url = `${base}/calendar?tenant=${TENANT}&pool=${POOL}`;
    const anonymous = await request(url, tls);
    expect(anonymous.status).toBe(401);
    const signIn = anonymous.text;
    expect(signIn).toContain('action="/calendar/session"');
    expect(signIn).not.toContain(booked.reservationId);
    // Signing in as the browser does: the token in a form, back an HttpOnly cookie, the page with it.
    const bearer = await apiToken(NS);
    const session = await request(`${base}/calendar/session`, {
      ...tls,
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ token: bearer, tenant: TENANT, pool: POOL }).toString(),
    });
    expect(session.status).toBe(303);
    const setCookie = session.headers['set-cookie']?.[0] ?? '';
    expect(setCookie).toMatch(/HttpOnly/i);
    expect(setCookie).toMatch(/Secure/i);
    const cookie = setCookie.split(';')[0]!;
    // The informer's copy may lag the status write by a moment: the name shows once it has the object.
    const body = await waitFor('the calendar to show the Reservation by name', async () => {
      const r = await request(url, { ...tls, headers: { cookie } });
      return r.status === 200 && r.text.includes(`${NS}/${rsv}`) ? r.text : undefined;
    }, { timeoutMs: 30_000, intervalMs: 1000 });
    expect(body).toContain(`data-rsv="${booked.reservationId}"`);
    expect(body).toMatch(new RegExp(`data-node="${booked.allocations[0]!.node}"[^>]*data-rsv="${booked.reservationId}"`));
    await kubectlResult(['-n', NS, 'delete', 'reservation', rsv, '--wait=false']);
  });

  it('the GPU calendar in Chromium through `kubectl port-forward`, as docs/calendar.md opens it: sign-in, then the Reservation drawn on its node', async () => {
    if (!fs.existsSync(CHROMIUM)) throw new Error(`no Chromium at ${CHROMIUM}: bash e2e/cluster/install-deps.sh, or set BC_CHROMIUM`);
    const rsv = uniqueName('calb');
    const booked = await reserveAndWait(NS, rsv, POOL, 2, '2h');
    const forward = await portForward(SYSTEM_NS, 'deploy/better-compute-controller', 8080);
    const browser = await puppeteer.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run'] });
    try {
      const page = await browser.newPage();
      await page.setViewport({ width: 1440, height: 900 });
      const url = `http://127.0.0.1:${forward.port}/calendar?tenant=${TENANT}&pool=${POOL}`;
      const first = await page.goto(url);
      expect(first!.status()).toBe(401);
      expect(await page.$$('.bar')).toHaveLength(0);
      // The Role of the previous test lets the namespace's default ServiceAccount read the tenant's capacity.
      await page.type('#token', await apiToken(NS));
      await Promise.all([page.waitForNavigation(), page.click('form.signin button[type=submit]')]);
      expect(page.url()).toBe(url);
      const bar = `.row.node[data-node="${booked.allocations[0]!.node}"] .bar[data-rsv="${booked.reservationId}"]`;
      // The informer's copy may lag the status write: reload until the Reservation is drawn by its name.
      const label = await waitFor('the Reservation drawn on its node', async () => {
        const el = await page.$(bar);
        if (!el) {
          await page.reload();
          return undefined;
        }
        const text = await page.$eval(bar, (e) => e.getAttribute('aria-label') ?? '');
        if (text.includes(`${NS}/${rsv}`)) return text;
        await page.reload();
        return undefined;
      }, { timeoutMs: 30_000, intervalMs: 1000 });
      expect(label).toContain('2 GPUs');
      // A click on the bar shows the Reservation: its ledger id and its atoms.
      await page.click(bar);
      await page.waitForFunction((id) => document.querySelector('#detail-body')?.textContent?.includes(id), { timeout: 10_000 }, booked.reservationId);
      expect(await page.content()).not.toContain('Bearer');
    } finally {
      await browser.close();
      forward.close();
      await kubectlResult(['-n', NS, 'delete', 'reservation', rsv, '--wait=false']);
    }
  });

  it('an on-demand pod is scheduled by better-compute-scheduler and gets the atoms it was booked', async () => {
    const name = uniqueName('od');
    await apply(gpuPod(name, { gpus: 2 }));
    const p = await waitForPodPhase(NS, name, ['Succeeded'], 120_000);
    expect((p as unknown as { spec: { schedulerName: string } }).spec.schedulerName).toBe('better-compute-scheduler');
    const atoms = /ATOMS=(\S*)/.exec(await kubectl(['-n', NS, 'logs', name]))?.[1]?.split(',') ?? [];
    expect(atoms).toHaveLength(2);
    const annotated = p.metadata.annotations?.['bettercompute.io/atoms']?.split(',').sort();
    expect(atoms.sort()).toEqual(annotated);
  });

  it('a Job of 2 pods that names a reservation and nothing else runs on exactly its atoms', async () => {
    const rsv = uniqueName('train');
    const booked = await reserveAndWait(NS, rsv, POOL, 2, '1h');
    const atoms = booked.allocations.flatMap((a) => a.atoms).sort();
    const job = uniqueName('job');
    await apply({
      apiVersion: 'batch/v1',
      kind: 'Job',
      metadata: { name: job, namespace: NS },
      spec: {
        parallelism: 2,
        completions: 2,
        backoffLimit: 0,
        template: {
          metadata: { labels: { 'bettercompute.io/reservation': rsv } },
          spec: gpuPodSpec(1, 3),
        },
      },
    });
    await waitCondition([`job/${job}`], 'Complete', { namespace: NS, timeoutMs: 190_000 });
    const pods = await kubectlJson<{ items: Pod[] }>(['-n', NS, 'get', 'pods', '-l', `job-name=${job}`]);
    expect(pods.items).toHaveLength(2);
    const seen: string[] = [];
    for (const p of pods.items) {
      const a = /ATOMS=(\S*)/.exec(await kubectl(['-n', NS, 'logs', p.metadata.name]))?.[1] ?? '';
      expect(a.split(',')).toHaveLength(1);
      seen.push(a);
    }
    expect(seen.sort()).toEqual(atoms);
  });

  it("guard 6 on the real kubelet: Allocate for an atom a running container holds is refused, naming the holder", async () => {
    const rsv = uniqueName('g6');
    const booked = await reserveAndWait(NS, rsv, POOL, 2, '1h');
    const name = uniqueName('holder');
    await apply({
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name, namespace: NS, labels: { 'bettercompute.io/reservation': rsv } },
      spec: gpuPodSpec(1, 300),
    });
    await waitForPodPhase(NS, name, ['Running'], 120_000);
    const held = await waitFor('the holder prints its atom', async () => /ATOMS=(\S+)/.exec(await kubectl(['-n', NS, 'logs', name]))?.[1], {
      timeoutMs: 30_000,
      intervalMs: 500,
    });
    const free = booked.allocations.flatMap((a) => a.atoms).find((a) => a !== held)!;
    // The agent's endpoint for this reservation, on the host, as the kubelet dials it.
    const socket = path.join(c().devicePluginDir, `bettercompute-${booked.resourceName.replace(/^.*\//, '')}.sock`);
    const client = devicePluginClient(socket);
    const allocate = (ids: string[]) => unary<object, { container_responses: { envs: Record<string, string> }[] }>(client, 'Allocate', { container_requests: [{ devices_ids: ids }] });
    try {
      const e = await allocate([held]).then(() => undefined, (x: unknown) => x as grpc.ServiceError);
      expect(e?.code).toBe(grpc.status.FAILED_PRECONDITION);
      expect(e?.details).toContain(`atom ${held} is held by ${NS}/${name} (container main, ${booked.resourceName})`);
      // The reservation's other atom, which no container holds, is handed out: the refusal is the holder's.
      expect((await allocate([free])).container_responses[0]!.envs).toMatchObject({ BETTERCOMPUTE_ATOMS: free });
    } finally {
      client.close();
      await kubectlResult(['-n', NS, 'delete', 'pod', name, '--wait=false']);
    }
  });
});
