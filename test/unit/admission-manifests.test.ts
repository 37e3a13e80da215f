// deploy/admission/: the structure the API server and the controller rely on (the CEL itself is compiled by the API
// server in the cluster suite, e2e/cluster/admission.test.ts).
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import YAML from 'yaml';

const DIR = path.join(import.meta.dirname, '../../deploy/admission');
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Obj = Record<string, any>;
const docs = (file: string): Obj[] => YAML.parseAllDocuments(fs.readFileSync(path.join(DIR, file), 'utf8')).map((d) => d.toJS() as Obj);

/** Whether a CEL expression has a newline inside a single-quoted string literal (a YAML folding mistake). */
function newlineInLiteral(e: string): boolean {
  let inside = false;
  for (let i = 0; i < e.length; i++) {
    if (inside && e[i] === '\\') i++;
    else if (e[i] === "'") inside = !inside;
    else if (inside && e[i] === '\n') return true;
  }
  return false;
}

describe('deploy/admission', () => {
  it('newlineInLiteral', () => {
    expect(newlineInLiteral("'a' +\n'b'")).toBe(false);
    expect(newlineInLiteral("'a\nb'")).toBe(true);
  });

  it('the kustomization lists every manifest of the directory', () => {
    const k = docs('kustomization.yaml')[0]!;
    const yamls = fs.readdirSync(DIR).filter((f) => f.endsWith('.yaml') && f !== 'kustomization.yaml');
    expect([...k.resources].sort()).toEqual(yamls.sort());
  });

  it('the mutating webhook: the controller Service on 9443 at /admission/pods, Fail, no side effects, pod CREATE only', () => {
    const [w, ...rest] = docs('webhook.yaml');
    expect(rest).toEqual([]);
    expect(w).toMatchObject({ apiVersion: 'admissionregistration.k8s.io/v1', kind: 'MutatingWebhookConfiguration', metadata: { name: 'better-compute' } });
    expect(w!.webhooks).toHaveLength(1);
    const h = w!.webhooks[0];
    expect(h).toMatchObject({
      admissionReviewVersions: ['v1'],
      sideEffects: 'None',
      failurePolicy: 'Fail',
      reinvocationPolicy: 'Never',
      timeoutSeconds: 5,
      clientConfig: { service: { name: 'better-compute-controller', namespace: 'better-compute-system', port: 9443, path: '/admission/pods' } },
      rules: [{ apiGroups: [''], apiVersions: ['v1'], operations: ['CREATE'], resources: ['pods'] }],
    });
    expect(h.clientConfig.caBundle).toBeUndefined();
    expect(h.namespaceSelector.matchExpressions).toContainEqual({ key: 'kubernetes.io/metadata.name', operator: 'NotIn', values: ['better-compute-system'] });
    expect(h.matchConditions).toHaveLength(1);
    expect(h.matchConditions[0].expression).toContain("startsWith('bettercompute.io/')");
    expect(h.matchConditions[0].expression).toContain("startsWith('reservations.bettercompute.io/')");
  });

  it('each ValidatingAdmissionPolicy has a Deny binding, and every validation a reason and a message', () => {
    const all = docs('policies.yaml');
    const policies = all.filter((o) => o.kind === 'ValidatingAdmissionPolicy');
    const bindings = all.filter((o) => o.kind === 'ValidatingAdmissionPolicyBinding');
    expect(policies.map((p) => p.metadata.name).sort()).toEqual(['bettercompute-nodedevices-own-node', 'bettercompute-scheduler-only']);
    for (const p of policies) {
      expect(p.apiVersion).toBe('admissionregistration.k8s.io/v1');
      expect(p.spec.failurePolicy).toBe('Fail');
      expect(bindings.filter((b) => b.spec.policyName === p.metadata.name).map((b) => b.spec.validationActions)).toEqual([['Deny']]);
      for (const v of p.spec.validations) {
        expect(v.reason).toBe('Forbidden');
        expect(v.message ?? v.messageExpression).toBeTruthy();
      }
      // Folded YAML: no newline inside an expression's string literal.
      for (const e of [...p.spec.validations.flatMap((v: Obj) => [v.expression, v.messageExpression]), ...(p.spec.variables ?? []).map((v: Obj) => v.expression)]) {
        if (e) expect(newlineInLiteral(e), e).toBe(false);
      }
    }
  });

  it('pods: CREATE of pods requesting our resources; nodeName and the scheduler are checked', () => {
    const p = docs('policies.yaml').find((o) => o.metadata.name === 'bettercompute-scheduler-only')!;
    expect(p.spec.matchConstraints.resourceRules).toEqual([{ apiGroups: [''], apiVersions: ['v1'], operations: ['CREATE'], resources: ['pods'] }]);
    const exprs = p.spec.validations.map((v: Obj) => v.expression).join('\n');
    expect(exprs).toContain('object.spec.nodeName');
    expect(exprs).toContain("object.spec.schedulerName == 'better-compute-scheduler'");
  });

  it('NodeDevices: the agent ServiceAccount, create/update/delete, its own node from user.extra', () => {
    const p = docs('policies.yaml').find((o) => o.metadata.name === 'bettercompute-nodedevices-own-node')!;
    expect(p.spec.matchConstraints.resourceRules).toEqual([
      { apiGroups: ['bettercompute.io'], apiVersions: ['*'], operations: ['CREATE', 'UPDATE', 'DELETE'], resources: ['nodedevices', 'nodedevices/status'] },
    ]);
    expect(p.spec.matchConditions[0].expression).toBe("request.userInfo.username == 'system:serviceaccount:better-compute-system:better-compute-agent'");
    const vars = Object.fromEntries(p.spec.variables.map((v: Obj) => [v.name, v.expression]));
    expect(vars.node).toContain("request.userInfo.extra['authentication.kubernetes.io/node-name'][0]");
    expect(vars.target).toBe("request.operation == 'DELETE' ? oldObject.metadata.name : object.metadata.name");
  });
});
