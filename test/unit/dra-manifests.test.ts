// deploy/dra/ (docs/dra.md, ADR 0043): shipped by the base, DeviceClasses that select nothing, the controller's RBAC
// on ResourceClaims and nothing more, and a Deny-bound policy on claim status writes.
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import YAML from 'yaml';
import { DEVICE_CLASSES } from '../../src/core/dra-allocate.ts';
import { DRA_DRIVER } from '../../src/core/names.ts';

const DIR = path.join(import.meta.dirname, '../../deploy/dra');
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Obj = Record<string, any>;
const docs = (file: string): Obj[] => YAML.parseAllDocuments(fs.readFileSync(path.join(DIR, file), 'utf8')).map((d) => d.toJS() as Obj);

describe('deploy/dra', () => {
  it('the base includes it, and its kustomization lists every manifest of the directory', () => {
    const base = YAML.parse(fs.readFileSync(path.join(DIR, '../base/kustomization.yaml'), 'utf8')) as Obj;
    expect(base.resources).toContain('../dra');
    const yamls = fs.readdirSync(DIR).filter((f) => f.endsWith('.yaml') && f !== 'kustomization.yaml');
    expect([...docs('kustomization.yaml')[0]!.resources].sort()).toEqual(yamls.sort());
  });

  it('the four DeviceClasses the allocator serves, each selecting no device of our driver', () => {
    const classes = docs('deviceclasses.yaml');
    expect(classes.map((c) => c.metadata.name).sort()).toEqual(Object.keys(DEVICE_CLASSES).sort());
    for (const c of classes) {
      expect(c.apiVersion).toBe('resource.k8s.io/v1');
      expect(c.spec.selectors).toEqual([{ cel: { expression: `device.driver == '${DRA_DRIVER}' && false` } }]);
    }
  });

  it('RBAC: claims read and updated (finalizers), their status written, templates read; no wildcard, nothing else', () => {
    const [role, binding] = docs('rbac.yaml');
    expect(role!.rules).toEqual([
      { apiGroups: ['resource.k8s.io'], resources: ['resourceclaims'], verbs: ['get', 'list', 'watch', 'update', 'patch'] },
      { apiGroups: ['resource.k8s.io'], resources: ['resourceclaims/status'], verbs: ['update', 'patch'] },
      { apiGroups: ['resource.k8s.io'], resources: ['resourceclaimtemplates'], verbs: ['get'] },
    ]);
    expect(binding!.subjects).toEqual([{ kind: 'ServiceAccount', name: 'better-compute-controller', namespace: 'better-compute-system' }]);
  });

  it('the status policy: UPDATE of resourceclaims/status, Deny-bound, the controller the only allocator of our driver', () => {
    const [policy, binding] = docs('policies.yaml');
    expect(policy!.spec.matchConstraints.resourceRules).toEqual([{ apiGroups: ['resource.k8s.io'], apiVersions: ['*'], operations: ['UPDATE'], resources: ['resourceclaims/status'] }]);
    expect(policy!.spec.failurePolicy).toBe('Fail');
    const v = policy!.spec.validations[0];
    expect(v.expression).toContain("'system:serviceaccount:better-compute-system:better-compute-controller'");
    expect(policy!.spec.variables.find((x: Obj) => x.name === 'ours').expression).toContain(`r.driver == '${DRA_DRIVER}'`);
    expect(binding).toMatchObject({ kind: 'ValidatingAdmissionPolicyBinding', spec: { policyName: policy!.metadata.name, validationActions: ['Deny'] } });
  });

  it("the agent's DRA component (opt-in): claims get, slices written, its Node read; the switch on, the kubelet's plugin directories and CDI mounted", () => {
    const k = docs('agent/kustomization.yaml')[0]!;
    expect(k).toMatchObject({ kind: 'Component', resources: ['rbac.yaml', 'policies.yaml'], patches: [{ path: 'daemonset-patch.yaml' }] });
    const base = YAML.parse(fs.readFileSync(path.join(DIR, '../base/kustomization.yaml'), 'utf8')) as Obj;
    expect(JSON.stringify(base)).not.toContain('dra/agent');
    const [role, binding] = docs('agent/rbac.yaml');
    expect(role!.rules).toEqual([
      { apiGroups: ['resource.k8s.io'], resources: ['resourceclaims'], verbs: ['get'] },
      { apiGroups: ['resource.k8s.io'], resources: ['resourceslices'], verbs: ['list', 'create', 'update', 'delete'] },
      { apiGroups: [''], resources: ['nodes'], verbs: ['get'] },
    ]);
    expect(binding!.subjects).toEqual([{ kind: 'ServiceAccount', name: 'better-compute-agent', namespace: 'better-compute-system' }]);
    const pod = docs('agent/daemonset-patch.yaml')[0]!.spec.template.spec;
    expect(pod.containers[0].env).toEqual([{ name: 'BETTER_COMPUTE_AGENT_DRA', value: 'true' }]);
    const mounts = Object.fromEntries(pod.containers[0].volumeMounts.map((m: Obj) => [m.name, m.mountPath]));
    const host = Object.fromEntries(pod.volumes.map((v: Obj) => [v.name, v.hostPath.path]));
    // Mounted where the agent's defaults look (src/config.ts), from the same host paths.
    for (const dir of ['/var/lib/kubelet/plugins/gpu.bettercompute.io', '/var/lib/kubelet/plugins_registry', '/var/run/cdi']) {
      const name = Object.keys(mounts).find((n) => mounts[n] === dir);
      expect(name && host[name]).toBe(dir);
    }
  });

  it("the agent's slice policy: every write of resourceslices by the agent's ServiceAccount, Deny-bound, its token's node and our driver", () => {
    const [policy, binding] = docs('agent/policies.yaml');
    expect(policy!.spec.matchConstraints.resourceRules).toEqual([{ apiGroups: ['resource.k8s.io'], apiVersions: ['*'], operations: ['CREATE', 'UPDATE', 'DELETE'], resources: ['resourceslices'] }]);
    expect(policy!.spec.failurePolicy).toBe('Fail');
    expect(policy!.spec.matchConditions).toEqual([{ name: 'the-node-agent', expression: "request.userInfo.username == 'system:serviceaccount:better-compute-system:better-compute-agent'" }]);
    expect(policy!.spec.variables.find((x: Obj) => x.name === 'node').expression).toContain("request.userInfo.extra['authentication.kubernetes.io/node-name'][0]");
    expect(JSON.stringify(policy!.spec.validations)).toContain(`s.spec.driver == '${DRA_DRIVER}'`);
    expect(binding).toMatchObject({ kind: 'ValidatingAdmissionPolicyBinding', spec: { policyName: policy!.metadata.name, validationActions: ['Deny'] } });
  });
});
