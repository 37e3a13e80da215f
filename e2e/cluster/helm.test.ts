import fs from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { renders } from '../../scripts/helm/chart.ts';
import { clusterInfo, kubectl, kubectlResult } from './harness.ts';
import { chartDir, helm } from './install.ts';

// The Helm chart (scripts/helm/chart.ts, generated from deploy/, ADR 0037): it lints, renders what kustomize renders,
// puts values where they belong and passes the API server's dry run. The installed-product suite (installed.test.ts)
// installs it with `helm install`.
type Obj = { kind: string; metadata: { name: string; namespace?: string; annotations?: Record<string, string> } };

function objects(text: string): Map<string, Obj> {
  const out = new Map<string, Obj>();
  for (const d of YAML.parseAllDocuments(text)) {
    const o = d.toJSON() as Obj | null;
    if (o) out.set(`${o.kind}/${o.metadata.namespace ?? ''}/${o.metadata.name}`, o);
  }
  return out;
}

let dir: string;
// With its CRDs (crds/, which Helm installs when they are missing and never replaces).
const template = (...set: string[]) =>
  helm(['template', 'better-compute', dir, '--namespace', 'better-compute-system', '--include-crds', ...set.flatMap((s) => ['--set', s])]);

describe('the Helm chart', () => {
  beforeAll(() => {
    dir = chartDir();
  }, 600_000);
  let madeNamespace = false;
  afterAll(async () => {
    fs.rmSync(path.dirname(dir), { recursive: true, force: true });
    if (madeNamespace) await kubectlResult(['delete', 'namespace', 'better-compute-system', '--wait=true', '--timeout=120s'], { timeoutMs: 130_000 });
  }, 180_000);

  it('lints', async () => {
    expect(await helm(['lint', dir, '--strict'])).toMatch(/1 chart\(s\) linted, 0 chart\(s\) failed/);
  }, 600_000);

  it('renders with its defaults what kustomize renders, for each database mode, with monitoring and with Kueue', async () => {
    const k = renders(clusterInfo().kubectl);
    expect(objects(await template())).toEqual(objects(k.trial));
    expect(objects(await template('database.mode=external'))).toEqual(objects(k.external));
    const both = objects(k.trial);
    for (const [key, o] of objects(k.monitoring)) both.set(key, o);
    expect(objects(await template('monitoring.enabled=true'))).toEqual(both);
    const withKueue = objects(k.trial);
    for (const [key, o] of objects(k.kueue)) withKueue.set(key, o);
    expect(objects(await template('kueue.enabled=true'))).toEqual(withKueue);
  }, 120_000);

  it('puts the values where they belong, and refuses values that cannot work', async () => {
    const out = objects(
      await template(
        'database.mode=external',
        'controller.replicas=3',
        'image.tag=9.9.9',
        'database.secret.name=pg-app',
        'agent.deviceListStrategy=cdi-cri',
        'agent.nodeSelector.pool=a100',
        'controller.resources.limits.memory=3Gi',
      ),
    );
    const deployment = out.get('Deployment/better-compute-system/better-compute-controller') as unknown as {
      spec: { replicas: number; template: { spec: { containers: { name: string; image: string; resources: unknown; env: { name: string; valueFrom?: { secretKeyRef?: { name: string } } }[] }[] } } };
    };
    expect(deployment.spec.replicas).toBe(3);
    const controller = deployment.spec.template.spec.containers.find((c) => c.name === 'controller')!;
    expect(controller.image).toMatch(/:9\.9\.9$/);
    expect(controller.resources).toEqual({ limits: { memory: '3Gi' } });
    expect(controller.env.find((e) => e.name === 'DATABASE_URL')?.valueFrom?.secretKeyRef?.name).toBe('pg-app');
    const agent = out.get('DaemonSet/better-compute-system/better-compute-agent') as unknown as {
      spec: { template: { spec: { nodeSelector: unknown; containers: { image: string; env: { name: string; value?: string }[] }[] } } };
    };
    expect(agent.spec.template.spec.nodeSelector).toEqual({ pool: 'a100' });
    expect(agent.spec.template.spec.containers[0]!.image).toMatch(/:9\.9\.9$/);
    expect(agent.spec.template.spec.containers[0]!.env.find((e) => e.name === 'DEVICE_LIST_STRATEGY')?.value).toBe('cdi-cri');
    await expect(template('controller.replicas=2')).rejects.toThrow(/controller.replicas must be 1/);
    await expect(template('database.mode=cloud')).rejects.toThrow(/database.mode must be embedded or external/);
  }, 120_000);

  it('passes the API server dry run in each database mode', async () => {
    // The dry run creates nothing, so its namespaced objects need their namespace: made for real here, with the labels
    // deploy/ gives it (removed after, unless it was there before).
    madeNamespace = (await kubectlResult(['get', 'namespace', 'better-compute-system'])).code !== 0;
    await kubectl(['apply', '-f', path.join(import.meta.dirname, '../../deploy/base/namespace.yaml')]);
    for (const mode of ['embedded', 'external']) {
      const text = await template(`database.mode=${mode}`, 'namespace.create=false');
      const r = await kubectlResult(['apply', '--dry-run=server', '--server-side', '-f', '-'], { input: text, timeoutMs: 120_000 });
      expect(r.code, `${mode}: ${r.stderr}`).toBe(0);
    }
  }, 180_000);
});
