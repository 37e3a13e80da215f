// deploy/admission/: the structure the API server and the controller rely on, and the policies' CEL compiled and run
// on sample requests by the API server's own library, offline (tools/celcheck; the cluster suite,
// e2e/cluster/admission.test.ts, runs them on a real API server).
import fs from 'node:fs';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import YAML from 'yaml';
import { loadConfig } from '../../src/config.ts';
import { goToolVerdicts } from '../support/go-tool.ts';

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
    expect(w!.webhooks.map((x: Obj) => x.name)).toEqual(['pods.admission.bettercompute.io', 'dra-pods.admission.bettercompute.io']);
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

  it('the DRA webhook (ADR 0049): the same endpoint, pods claiming from a template, Ignore (the gate is no guard)', () => {
    const d = docs('webhook.yaml')[0]!.webhooks[1];
    expect(d).toMatchObject({
      admissionReviewVersions: ['v1'],
      sideEffects: 'None',
      failurePolicy: 'Ignore',
      reinvocationPolicy: 'Never',
      clientConfig: { service: { name: 'better-compute-controller', namespace: 'better-compute-system', port: 9443, path: '/admission/pods' } },
      rules: [{ apiGroups: [''], apiVersions: ['v1'], operations: ['CREATE'], resources: ['pods'] }],
    });
    expect(d.timeoutSeconds).toBeLessThanOrEqual(5);
    expect(d.clientConfig.caBundle).toBeUndefined();
    expect(d.namespaceSelector.matchExpressions).toContainEqual({ key: 'kubernetes.io/metadata.name', operator: 'NotIn', values: ['better-compute-system'] });
    expect(d.matchConditions).toHaveLength(1);
    expect(d.matchConditions[0].expression).toContain('resourceClaimTemplateName');
  });

  it('each ValidatingAdmissionPolicy has a Deny binding, and every validation a reason and a message', () => {
    const all = docs('policies.yaml');
    const policies = all.filter((o) => o.kind === 'ValidatingAdmissionPolicy');
    const bindings = all.filter((o) => o.kind === 'ValidatingAdmissionPolicyBinding');
    expect(policies.map((p) => p.metadata.name).sort()).toEqual([
      'bettercompute-controller-pod-annotation-only',
      'bettercompute-no-visible-devices-env',
      'bettercompute-nodedevices-own-node',
      'bettercompute-scheduler-only',
    ]);
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

describe('bettercompute-no-visible-devices-env: no pod sets NVIDIA_VISIBLE_DEVICES itself', () => {
  const all = docs('policies.yaml');
  const policy = all.find((o) => o.kind === 'ValidatingAdmissionPolicy' && o.metadata.name === 'bettercompute-no-visible-devices-env')!;
  const binding = all.find((o) => o.kind === 'ValidatingAdmissionPolicyBinding' && o.metadata.name === 'bettercompute-no-visible-devices-env')!;

  it('judges every pod at CREATE and each ephemeral container added, in every kind of container', () => {
    expect(policy.spec.matchConstraints.resourceRules).toEqual([
      { apiGroups: [''], apiVersions: ['v1'], operations: ['CREATE'], resources: ['pods'] },
      { apiGroups: [''], apiVersions: ['v1'], operations: ['UPDATE'], resources: ['pods/ephemeralcontainers'] },
    ]);
    // No matchConditions: it is not only for pods that request our resources.
    expect(policy.spec.matchConditions).toBeUndefined();
    const vars = Object.fromEntries(policy.spec.variables.map((v: Obj) => [v.name, v.expression as string]));
    for (const list of ['object.spec.containers', 'object.spec.initContainers', 'object.spec.ephemeralContainers']) expect(vars.containers).toContain(list);
    // Every rule judges the same containers: those of the request (the ephemeral ones only when they are added).
    for (const rule of ['setters', 'envFromUnsafe', 'cudaSetters']) expect(vars[rule], rule).toMatch(/^variables\.containers\.filter\(/);
    expect(vars.legacyCuda).toMatch(/^variables\.cudaSetters\.filter\(/);
    expect(vars.setters).toContain("e.name == 'NVIDIA_VISIBLE_DEVICES'");
    expect(vars.setters).toContain('has(e.valueFrom)');
    expect(vars.envFromUnsafe).toContain("'NVIDIA_VISIBLE_DEVICES'.startsWith(f.prefix)");
    expect(vars.cudaSetters).toContain("e.name == 'CUDA_VERSION'");
    expect(vars.legacyCuda).toContain("'NVIDIA_REQUIRE_CUDA'");
    // One validation per rule, each with its own message.
    expect(policy.spec.validations.map((v: Obj) => v.expression)).toEqual([
      'size(variables.setters) == 0',
      'size(variables.envFromUnsafe) == 0',
      'size(variables.legacyCuda) == 0',
    ]);
  });

  it('exempts the product’s namespace and namespaces labelled bettercompute.io/allow-visible-devices=true (the binding)', () => {
    expect(binding.spec).toMatchObject({ policyName: 'bettercompute-no-visible-devices-env', validationActions: ['Deny'] });
    expect(binding.spec.matchResources.namespaceSelector.matchExpressions).toEqual([
      { key: 'kubernetes.io/metadata.name', operator: 'NotIn', values: ['better-compute-system'] },
      { key: 'bettercompute.io/allow-visible-devices', operator: 'NotIn', values: ['true'] },
    ]);
  });
});

describe('tools/celcheck: the policies (deploy/admission, deploy/dra, deploy/dra/agent) on sample requests, with the API server’s CEL (k8s.io/apiserver v0.34.12)', () => {
  let verdicts: string[] = [];
  beforeAll(async () => {
    verdicts = await goToolVerdicts('celcheck', ['../../deploy/admission/policies.yaml', '../../deploy/admission/webhook.yaml', '../../deploy/dra/policies.yaml', '../../deploy/dra/agent/policies.yaml']);
  }, 900_000);
  const ok = (prefix: string) => expect(verdicts.some((l) => l.startsWith(`ok:   ${prefix}`)), prefix).toBe(true);

  it('every expression compiles and every sample is decided as intended; NVIDIA_VISIBLE_DEVICES: refused, allowed, exempt', () => {
    expect(verdicts.filter((l) => l.startsWith('FAIL'))).toEqual([]);
    ok('controller-pod: changes the image → denied=true');
    ok('controller-pod: sets preempt-at → denied=false');
    ok('visible-devices: NVIDIA_VISIBLE_DEVICES=all → denied=true "pod team-a/p sets NVIDIA_VISIBLE_DEVICES in container main');
    ok('visible-devices: in an init container → denied=true');
    ok('visible-devices: ephemeral container setting it → denied=true');
    ok('visible-devices: no env at all → denied=false');
    ok('visible-devices: only NVIDIA_DRIVER_CAPABILITIES → denied=false');
    ok('visible-devices binding: gpu-operator labelled allow-visible-devices=true → bound=false');
    ok('visible-devices binding: better-compute-system → bound=false');
    ok('visible-devices binding: a tenant namespace → bound=true');
    // deploy/dra/policies.yaml: only the controller allocates our driver's devices (docs/dra.md, "Who may allocate").
    ok('bettercompute-dra-allocation-controller-only variable ours compiles');
    ok('dra-allocation: the controller allocates our devices → denied=false');
    ok('dra-allocation: kube-scheduler adds reservedFor, allocation unchanged → denied=false');
    ok('dra-allocation: kube-controller-manager removes reservedFor, allocation unchanged → denied=false');
    ok('dra-allocation: kube-scheduler allocates our devices itself → denied=true');
    ok('dra-allocation: an admin forges an allocation of ours → denied=true');
    ok('dra-allocation: an admin swaps the device of an allocation of ours → denied=true');
    ok('dra-allocation: a ServiceAccount of the same name in another namespace → denied=true');
    ok('dra-allocation: kube-scheduler allocates another driver\'s devices → denied=false');
    // deploy/dra/agent/policies.yaml: the agent writes only its own node's slices of our driver (docs/security.md).
    ok('bettercompute-dra-slices-own-node variable slices compiles');
    ok("dra-slices: agent A creates its own node's slice → denied=false");
    ok("dra-slices: agent A updates its own node's slice → denied=false");
    ok("dra-slices: agent A deletes its own node's slice → denied=false");
    ok("dra-slices: agent A creates node B's slice → denied=true \"the node agent of node node-a may write only ResourceSlices of node node-a, not of node-b");
    ok("dra-slices: agent A takes node B's slice over → denied=true");
    ok("dra-slices: agent A deletes node B's slice → denied=true");
    ok("dra-slices: agent A creates another driver's slice on its node → denied=true");
    ok("dra-slices: agent A publishes node B's pool on its node → denied=true");
    ok('dra-slices: agent without node extra → denied=true');
    ok("dra-slices: the kubelet of node B deletes its node's slice → denied=false");
    // The largest pod etcd stores, every container on the longest path, stays within the API server's cost limits.
    ok('visible-devices: a pod larger than etcd stores (');
    expect(verdicts.find((l) => l.includes('a pod larger than etcd stores'))).toMatch(/80 containers, 96160 env and 4000 envFrom entries\) within the API server's cost limits → denied=false ""$/);
  });

  it('envFrom (a ConfigMap or Secret admission cannot read): refused without a prefix, with an empty one, or one NVIDIA_VISIBLE_DEVICES starts with; allowed with APP_', () => {
    for (const source of ['ConfigMap', 'Secret']) {
      ok(`visible-devices: envFrom a ${source} without a prefix → denied=true "pod team-a/p takes variables from a ConfigMap or Secret (envFrom) without a safe prefix in container main: admission cannot read them`);
      ok(`visible-devices: envFrom a ${source} with prefix NVIDIA_ → denied=true`);
      ok(`visible-devices: envFrom a ${source} with prefix APP_ → denied=false`);
    }
    ok('visible-devices: envFrom a ConfigMap with an empty prefix → denied=true');
    ok('visible-devices: envFrom with prefix NVIDIA_VISIBLE_DEVICES → denied=true');
    ok('visible-devices: envFrom with prefix NVIDIA_DRIVER_ → denied=false');
    ok('visible-devices: envFrom one with prefix APP_, one without → denied=true');
  });

  it('envFrom: in an init container, an ephemeral container (added) and a container with our GPU too; the message names the containers and the fixes', () => {
    ok('visible-devices: envFrom without a prefix in an init container → denied=true "pod team-a/p takes variables from a ConfigMap or Secret (envFrom) without a safe prefix in container setup');
    ok('visible-devices: ephemeral container with envFrom without a prefix → denied=true "pod team-a/p takes variables from a ConfigMap or Secret (envFrom) without a safe prefix in container debugger');
    ok('visible-devices: ephemeral container with envFrom prefix APP_ → denied=false');
    ok('visible-devices: envFrom without a prefix in a container that requests bettercompute.io/gpu → denied=true');
    ok('visible-devices: envFrom without a prefix in two containers → denied=true "pod team-a/p takes variables from a ConfigMap or Secret (envFrom) without a safe prefix in container main, side');
    const fix = verdicts.find((l) => l.startsWith('ok:   visible-devices: envFrom message says how to fix it'));
    expect(fix).toContain('Give each envFrom a prefix that NVIDIA_VISIBLE_DEVICES does not start with (e.g. APP_), or list the variables in env instead');
    expect(fix).toContain('may be labelled bettercompute.io/allow-visible-devices=true');
  });

  it('legacy CUDA images: CUDA_VERSION alone refused (value, valueFrom, init, ephemeral); allowed with NVIDIA_REQUIRE_CUDA, NVIDIA_VISIBLE_DEVICES=void or none, or our GPU requested', () => {
    ok('visible-devices: CUDA_VERSION alone → denied=true "pod team-a/p sets CUDA_VERSION without NVIDIA_REQUIRE_CUDA in container main (in env, or by an envFrom prefix that CUDA_VERSION starts with): the NVIDIA container toolkit takes it for a legacy CUDA image and gives it every GPU of the node');
    const fix = verdicts.find((l) => l.startsWith('ok:   visible-devices: CUDA_VERSION alone, the fix in the message'));
    expect(fix).toContain('Set NVIDIA_REQUIRE_CUDA (e.g. cuda>=12.0) or NVIDIA_VISIBLE_DEVICES=void in its env, remove CUDA_VERSION, or request bettercompute.io/gpu');
    ok('visible-devices: CUDA_VERSION from valueFrom → denied=true');
    ok('visible-devices: CUDA_VERSION in an init container → denied=true "pod team-a/p sets CUDA_VERSION without NVIDIA_REQUIRE_CUDA in container setup');
    ok('visible-devices: ephemeral container with CUDA_VERSION alone → denied=true "pod team-a/p sets CUDA_VERSION without NVIDIA_REQUIRE_CUDA in container debugger');
    ok('visible-devices: ephemeral container with CUDA_VERSION and NVIDIA_VISIBLE_DEVICES=void → denied=false');
    ok('visible-devices: CUDA_VERSION with NVIDIA_REQUIRE_CUDA → denied=false');
    ok('visible-devices: CUDA_VERSION with NVIDIA_VISIBLE_DEVICES=void → denied=false');
    ok('visible-devices: CUDA_VERSION with NVIDIA_VISIBLE_DEVICES=none → denied=false');
    ok('visible-devices: CUDA_VERSION empty → denied=false');
    ok('visible-devices: CUDA_VERSION in a container that requests bettercompute.io/gpu → denied=false');
    ok("visible-devices: CUDA_VERSION in a container that requests its Reservation's resource → denied=false");
    ok('visible-devices: CUDA_VERSION in a container that requests nvidia.com/gpu → denied=true');
    ok('visible-devices: CUDA_VERSION in one container, bettercompute.io/gpu in another → denied=true');
  });

  it('legacy CUDA images: NVIDIA_REQUIRE_CUDA counts only with a value in every entry of that name; an envFrom prefix CUDA_VERSION starts with counts as setting it', () => {
    ok('visible-devices: CUDA_VERSION with NVIDIA_REQUIRE_CUDA empty → denied=true');
    ok('visible-devices: CUDA_VERSION with NVIDIA_REQUIRE_CUDA set, then emptied → denied=true');
    ok('visible-devices: CUDA_VERSION with NVIDIA_REQUIRE_CUDA from valueFrom → denied=true');
    ok('visible-devices: only NVIDIA_REQUIRE_CUDA → denied=false');
    ok('visible-devices: envFrom with prefix CUDA_ → denied=true');
    ok('visible-devices: envFrom with prefix CUDA_ and NVIDIA_REQUIRE_CUDA in env → denied=false');
  });
});

describe('deploy/base/rbac.yaml: the node agent', () => {
  const rbac = YAML.parseAllDocuments(fs.readFileSync(path.join(import.meta.dirname, '../../deploy/base/rbac.yaml'), 'utf8')).map((d) => d.toJS() as Obj);

  it('may only create and patch NodeDevices: no read of any (RBAC cannot narrow one to its node), every write held to its node by the policy', () => {
    const role = rbac.find((o) => o.kind === 'ClusterRole' && o.metadata.name === 'better-compute-agent')!;
    expect(role.rules).toEqual([{ apiGroups: ['bettercompute.io'], resources: ['nodedevices'], verbs: ['create', 'patch'] }]);
    const binding = rbac.find((o) => o.kind === 'ClusterRoleBinding' && o.metadata.name === 'better-compute-agent')!;
    expect(binding.subjects).toEqual([{ kind: 'ServiceAccount', name: 'better-compute-agent', namespace: 'better-compute-system' }]);
    // Whatever RBAC grants the agent on NodeDevices, the own-node policy covers it.
    const policy = docs('policies.yaml').find((o) => o.metadata.name === 'bettercompute-nodedevices-own-node')!;
    const ops = policy.spec.matchConstraints.resourceRules[0].operations as string[];
    for (const verb of role.rules[0].verbs as string[]) expect(ops).toContain({ create: 'CREATE', patch: 'UPDATE' }[verb]);
    // No other role binds the agent.
    const others = rbac.filter((o) => /Binding$/.test(o.kind) && o.metadata.name !== 'better-compute-agent');
    for (const b of others) expect(b.subjects.map((s: Obj) => s.name), b.metadata.name).not.toContain('better-compute-agent');
  });
});

describe('deploy/admission/client-ca: the API server’s client certificate (opt-in, ADR 0034)', () => {
  it('a Component no overlay includes: WEBHOOK_CLIENT_CA_FILE names ca.crt of ConfigMap better-compute-webhook-client-ca, mounted read-only', () => {
    const k = docs('client-ca/kustomization.yaml')[0]!;
    expect(k).toMatchObject({ kind: 'Component', patches: [{ path: 'deployment-patch.yaml' }] });
    for (const dir of ['../base', '../overlays/trial', '../overlays/external']) {
      expect(fs.readFileSync(path.join(DIR, dir, 'kustomization.yaml'), 'utf8'), dir).not.toContain('client-ca');
    }
    const patch = docs('client-ca/deployment-patch.yaml')[0]!;
    expect(patch.metadata.name).toBe('better-compute-controller');
    const pod = patch.spec.template.spec;
    const controller = pod.containers.find((c: Obj) => c.name === 'controller');
    const file = controller.env.find((e: Obj) => e.name === 'WEBHOOK_CLIENT_CA_FILE').value as string;
    // The name src/config.ts reads.
    expect(loadConfig({ WEBHOOK_CLIENT_CA_FILE: file }).webhookClientCaFile).toBe(file);
    const mount = controller.volumeMounts.find((m: Obj) => file.startsWith(`${m.mountPath}/`));
    expect(mount.readOnly).toBe(true);
    const volume = pod.volumes.find((v: Obj) => v.name === mount.name);
    expect(volume.configMap.name).toBe('better-compute-webhook-client-ca');
    expect(volume.configMap.items).toEqual([{ key: 'ca.crt', path: path.posix.relative(mount.mountPath, file) }]);
    expect(volume.configMap.optional).toBeUndefined(); // no ConfigMap: the pod waits, it does not start unverified
  });
});
