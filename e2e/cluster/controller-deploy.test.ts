import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { createTestDatabase, type TestDatabase } from '../../test/support/db.ts';
import { request as httpsGet } from '../../test/support/http.ts';
import { installCrds, metricsToken, startReplica, type Replica } from './controller-support.ts';
import { clusterInfo, kubectl, kubectlResult, uniqueName, waitCondition } from './harness.ts';

// deploy/: the kustomize overlays render, the API server accepts what they render (server-side dry run), RBAC has no
// wildcards, and the Grafana dashboard and alert rules name only metrics that a running controller's /metrics has.
const execFileP = promisify(execFile);
const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const NS = 'better-compute-system';

interface Obj {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string };
  spec?: Record<string, unknown> & {
    replicas?: number;
    template?: { spec: { securityContext?: Record<string, unknown>; containers: Container[]; volumes?: { name: string }[] } };
  };
  rules?: { apiGroups?: string[]; resources?: string[]; verbs?: string[] }[];
}
interface Container {
  env?: { name: string; value?: string; valueFrom?: unknown }[];
  livenessProbe?: { httpGet?: { path: string } };
  readinessProbe?: { httpGet?: { path: string } };
  resources?: { limits?: Record<string, string>; requests?: Record<string, string> };
  securityContext?: Record<string, unknown>;
}

async function render(overlay: string): Promise<{ text: string; objects: Obj[] }> {
  const text = await kubectl(['kustomize', path.join(ROOT, 'deploy', 'overlays', overlay)]);
  return { text, objects: parseAllDocuments(text).map((d) => d.toJSON() as Obj) };
}

const deploymentOf = (objects: Obj[]) => objects.find((o) => o.kind === 'Deployment' && o.metadata.name === 'better-compute-controller')!;

let createdNs = false;
let tdb: TestDatabase | undefined;
let replica: Replica | undefined;

beforeAll(async () => {
  await installCrds();
  const r = await kubectlResult(['get', 'namespace', NS]);
  if (r.code !== 0) {
    await kubectl(['create', 'namespace', NS]);
    createdNs = true;
  }
});

afterAll(async () => {
  await replica?.stop();
  await tdb?.drop();
  if (createdNs) await kubectl(['delete', 'namespace', NS, '--wait=false']);
});

describe('deploy/', () => {
  it('renders both overlays: trial is one replica with its data on a PVC, external two with DATABASE_URL from a Secret', async () => {
    const trial = await render('trial');
    const embedded = deploymentOf(trial.objects);
    expect(embedded.spec!.replicas).toBe(1);
    const ec = embedded.spec!.template!.spec.containers[0]!;
    expect(ec.env!.find((e) => e.name === 'BETTER_COMPUTE_DATA_DIR')?.value).toBe('/var/lib/better-compute');
    expect(embedded.spec!.template!.spec.volumes).toEqual(
      expect.arrayContaining([{ name: 'data', persistentVolumeClaim: { claimName: 'better-compute-data' } }]),
    );
    expect(trial.objects.some((o) => o.kind === 'PersistentVolumeClaim' && o.metadata.name === 'better-compute-data')).toBe(true);
    // kube-scheduler beside the controller; nothing in the pod or the agent holds database credentials but the controller.
    expect(embedded.spec!.template!.spec.containers.map((c) => (c as { name?: string }).name)).toEqual(['controller', 'scheduler']);
    expect(trial.text).not.toMatch(/better-compute-db\b/);
    const external = deploymentOf((await render('external')).objects);
    expect(external.spec!.replicas).toBe(2);
    const xc = external.spec!.template!.spec.containers[0]!;
    expect(xc.env!.find((e) => e.name === 'DATABASE_URL')?.valueFrom).toEqual({ secretKeyRef: { name: 'better-compute-database', key: 'url' } });
    for (const c of [ec, xc]) {
      expect(c.livenessProbe?.httpGet?.path).toBe('/healthz');
      expect(c.readinessProbe?.httpGet?.path).toBe('/readyz');
      expect(c.resources?.limits?.memory).toBeDefined();
      expect(c.resources?.limits?.cpu).toBeDefined();
      expect(c.securityContext).toMatchObject({ readOnlyRootFilesystem: true, allowPrivilegeEscalation: false });
    }
    expect(external.spec!.template!.spec.securityContext).toMatchObject({ runAsNonRoot: true });
  });

  it('RBAC is least privilege: no wildcards anywhere', async () => {
    const { objects } = await render('external');
    const roles = objects.filter((o) => o.kind === 'ClusterRole' || o.kind === 'Role');
    expect(roles.length).toBeGreaterThanOrEqual(2);
    for (const role of roles) {
      for (const rule of role.rules ?? []) {
        for (const v of [...(rule.apiGroups ?? []), ...(rule.resources ?? []), ...(rule.verbs ?? [])]) expect(v).not.toContain('*');
        // No cluster-wide writes to namespaces or secrets (tenants are namespace labels nobody of ours writes).
        if ((rule.resources ?? []).includes('namespaces')) expect(rule.verbs).toEqual(['get', 'list', 'watch']);
      }
    }
  });

  it('the API server accepts the CRDs and the rendered manifests (server-side dry run)', async () => {
    await kubectl(['apply', '--dry-run=server', '-k', path.join(ROOT, 'crds')]);
    for (const overlay of ['trial', 'external']) {
      const { objects } = await render(overlay);
      const r = await kubectlResult(['apply', '--dry-run=server', '-f', '-'], {
        input: JSON.stringify({ apiVersion: 'v1', kind: 'List', items: objects }),
      });
      expect(r.code, r.stderr).toBe(0);
      expect(r.stderr).not.toMatch(/error|invalid|forbidden/i);
    }
  });

  it("deploy/monitoring matches the Prometheus Operator's real CRD schemas (ServiceMonitor, PrometheusRule)", async () => {
    // The CRDs of a pinned release, fetched through the Go module proxy; applied for real (a dry run needs them).
    const { stdout } = await execFileP('bash', [path.join(ROOT, 'e2e', 'cluster', 'prometheus-operator-crds.sh')], { timeout: 300_000 });
    const dir = stdout.trim();
    for (const crd of ['servicemonitors', 'prometheusrules']) {
      await kubectl(['apply', '--server-side', '-f', path.join(dir, `monitoring.coreos.com_${crd}.yaml`)]);
      await waitCondition([`crd/${crd}.monitoring.coreos.com`], 'Established');
    }
    const text = await kubectl(['kustomize', path.join(ROOT, 'deploy', 'monitoring')]);
    const objects = parseAllDocuments(text).map((d) => d.toJSON() as Obj);
    expect(objects.map((o) => o.kind).sort()).toEqual(['ClusterRole', 'ClusterRoleBinding', 'PrometheusRule', 'Secret', 'ServiceAccount', 'ServiceMonitor']);
    // Strict field validation: an unknown or misspelt field is an error, not a warning.
    const r = await kubectlResult(['apply', '--dry-run=server', '--validate=strict', '-f', '-'], {
      input: JSON.stringify({ apiVersion: 'v1', kind: 'List', items: objects }),
    });
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).not.toMatch(/error|invalid|unknown field/i);
  });

  it('the dashboard and the alert rules name only metrics that /metrics exposes', async () => {
    tdb = await createTestDatabase(3);
    replica = await startReplica({ name: uniqueName('ctl-metrics'), databaseUrl: tdb.url, namespace: uniqueName('unused-ns') });
    // /metrics is on its own HTTPS listener only, for a token RBAC allows to get /metrics.
    expect((await httpsGet(`${replica.url}/metrics`, { ca: replica.ca! })).status).toBe(404);
    const scraper = await metricsToken(NS, uniqueName('scraper'), true);
    const tenant = await metricsToken(NS, uniqueName('tenant'), false);
    let text: string;
    try {
      expect((await httpsGet(`${replica.metricsUrl}/metrics`, { ca: replica.ca! })).status).toBe(401);
      expect((await httpsGet(`${replica.metricsUrl}/metrics`, { ca: replica.ca!, token: tenant.token })).status).toBe(403);
      const scrape = await httpsGet(`${replica.metricsUrl}/metrics`, { ca: replica.ca!, token: scraper.token });
      expect(scrape.status).toBe(200);
      text = scrape.text;
    } finally {
      await scraper.cleanup();
      await tenant.cleanup();
    }
    const exposed = new Set<string>();
    for (const m of text.matchAll(/^# TYPE (\S+) (\S+)$/gm)) {
      const [name, type] = [m[1]!, m[2]!];
      exposed.add(name);
      if (type === 'histogram') for (const s of ['_bucket', '_sum', '_count']) exposed.add(name + s);
      if (type === 'counter' && !name.endsWith('_total')) exposed.add(`${name}_total`);
    }
    const dashboard = JSON.parse(fs.readFileSync(path.join(ROOT, 'deploy', 'grafana', 'better-compute.json'), 'utf8')) as {
      panels: { title: string; targets?: { expr: string }[] }[];
    };
    const exprs = dashboard.panels.flatMap((p) => (p.targets ?? []).map((t) => t.expr));
    const rules = parseAllDocuments(fs.readFileSync(path.join(ROOT, 'deploy', 'monitoring', 'prometheusrule.yaml'), 'utf8'))[0]!.toJSON() as {
      spec: { groups: { rules: { expr: string }[] }[] };
    };
    exprs.push(...rules.spec.groups.flatMap((g) => g.rules.map((r) => r.expr)));
    const referenced = new Set(exprs.flatMap((e) => [...e.matchAll(/\bbettercompute_[a-z0-9_]+/g)].map((m) => m[0])));
    expect(referenced.size).toBeGreaterThan(10);
    const missing = [...referenced].filter((n) => !exposed.has(n));
    expect(missing).toEqual([]);
    // Every capacity column and bucket is on the dashboard.
    for (const col of ['capacity', 'allocatable', 'allocated', 'reserved', 'available', 'provisioning', 'unhealthy', 'maintenance', 'unreachable']) {
      expect(referenced).toContain(`bettercompute_pool_${col}`);
    }
    expect(referenced).toContain('bettercompute_placement_duration_seconds_bucket');
    expect(referenced).toContain('bettercompute_placement_lost_races_total');
    expect(clusterInfo().kubectl).toBeTruthy();
  });
});
