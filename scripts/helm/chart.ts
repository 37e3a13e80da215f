// The Helm chart, generated from deploy/ (ADR 0037): kustomize is the one source of truth; this turns its renders into
// templates. Objects the two overlays render alike are plain templates; objects they render differently become one
// template with both variants under `database.mode`; deploy/monitoring goes under `monitoring.enabled`, deploy/kueue
// under `kueue.enabled`. The values a
// platform team sets (images, replicas, resources, the agent's node selector and device-list strategy, the database
// Secret, extra env and volumes) are put in at fixed places, each defaulting to what kustomize renders, so the chart with
// its default values renders exactly the kustomize objects (e2e/cluster/helm.test.ts compares them).
//
//   npm run chart [-- OUT_DIR]     writes the chart to OUT_DIR (default dist/chart/better-compute)
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';

const ROOT = path.resolve(import.meta.dirname, '../..');

type Obj = { apiVersion: string; kind: string; metadata: { name: string; namespace?: string; annotations?: Record<string, string> } } & Record<string, unknown>;
type Container = { name: string; image?: string; env?: unknown[]; resources?: unknown; volumeMounts?: unknown[] };
type PodSpec = { containers: Container[]; nodeSelector?: unknown; volumes?: { name: string; hostPath?: { path: string } }[] };

export interface Renders {
  /** kubectl kustomize deploy/overlays/trial (embedded PostgreSQL). */
  trial: string;
  /** kubectl kustomize deploy/overlays/external (DATABASE_URL from a Secret). */
  external: string;
  /** kubectl kustomize deploy/monitoring (Prometheus Operator objects). */
  monitoring: string;
  /** kubectl kustomize deploy/kueue (the Kueue AdmissionCheck and the controller's RBAC on Kueue's objects). */
  kueue: string;
}

export interface Chart {
  /** Relative path in the chart → contents. */
  files: Map<string, string>;
}

const CONTROLLER = 'better-compute-controller';
const AGENT = 'better-compute-agent';

function parseAll(text: string): Obj[] {
  return YAML.parseAllDocuments(text)
    .map((d) => d.toJSON() as Obj | null)
    .filter((o): o is Obj => o !== null);
}

function key(o: Obj): string {
  return `${o.kind}/${o.metadata.namespace ?? ''}/${o.metadata.name}`;
}

function fileName(o: Obj): string {
  return `${o.kind.toLowerCase()}-${o.metadata.name}.yaml`;
}

function podSpec(o: Obj): PodSpec | undefined {
  if (o.kind !== 'Deployment' && o.kind !== 'DaemonSet') return undefined;
  return (o.spec as { template: { spec: PodSpec } }).template.spec;
}

/**
 * A value point: the object's field is replaced by a sentinel before the object is written as YAML, and the sentinel's
 * line by template text after. `scalar` stands for the field's value; `orDefault` for a mapping that the value replaces
 * when set (else the rendered mapping stays); `append` for items added to a list.
 */
type Point =
  | { sentinel: string; kind: 'scalar'; expr: string }
  | { sentinel: string; kind: 'orDefault'; value: string; rendered: unknown }
  | { sentinel: string; kind: 'append'; value: string };

class Points {
  readonly all: Point[] = [];
  private n = 0;
  private next(): string {
    return `__BC_HELM_${this.n++}__`;
  }
  scalar(expr: string): string {
    const sentinel = this.next();
    this.all.push({ sentinel, kind: 'scalar', expr });
    return sentinel;
  }
  orDefault(value: string, rendered: unknown): string {
    const sentinel = this.next();
    this.all.push({ sentinel, kind: 'orDefault', value, rendered });
    return sentinel;
  }
  append(value: string): string {
    const sentinel = this.next();
    this.all.push({ sentinel, kind: 'append', value });
    return sentinel;
  }
}

interface Defaults {
  image: { repository: string; tag: string };
  schedulerImage: { repository: string; tag: string };
  deviceListStrategy: string;
  podResourcesHostPath: string;
  secret: { name: string; key: string };
}

function splitImage(image: string): { repository: string; tag: string } {
  const at = image.lastIndexOf(':');
  if (at <= image.lastIndexOf('/')) throw new Error(`image ${image} has no tag`);
  return { repository: image.slice(0, at), tag: image.slice(at + 1) };
}

function defaultsOf(trial: Obj[], external: Obj[]): Defaults {
  const deployment = trial.find((o) => o.kind === 'Deployment' && o.metadata.name === CONTROLLER);
  const daemonset = trial.find((o) => o.kind === 'DaemonSet' && o.metadata.name === AGENT);
  if (!deployment || !daemonset) throw new Error(`the render has no Deployment ${CONTROLLER} or DaemonSet ${AGENT}`);
  const containers = podSpec(deployment)!.containers;
  const image = containers.find((c) => c.name === 'controller')?.image;
  const scheduler = containers.find((c) => c.name === 'scheduler')?.image;
  if (!image || !scheduler) throw new Error('the controller Deployment has no controller or scheduler container image');
  const agentSpec = podSpec(daemonset)!;
  const strategy = (agentSpec.containers[0]?.env as { name: string; value?: string }[] | undefined)?.find((e) => e.name === 'DEVICE_LIST_STRATEGY')?.value;
  const podResources = agentSpec.volumes?.find((v) => v.name === 'pod-resources')?.hostPath?.path;
  if (!strategy || !podResources) throw new Error('the agent DaemonSet has no DEVICE_LIST_STRATEGY env or pod-resources hostPath volume');
  const extDeployment = external.find((o) => o.kind === 'Deployment' && o.metadata.name === CONTROLLER)!;
  const dbEnv = (podSpec(extDeployment)!.containers.find((c) => c.name === 'controller')?.env as { name: string; valueFrom?: { secretKeyRef?: { name: string; key: string } } }[]).find(
    (e) => e.name === 'DATABASE_URL',
  );
  const ref = dbEnv?.valueFrom?.secretKeyRef;
  if (!ref) throw new Error('the external overlay gives DATABASE_URL from no Secret');
  return { image: splitImage(image), schedulerImage: splitImage(scheduler), deviceListStrategy: strategy, podResourcesHostPath: podResources, secret: ref };
}

/** Puts the value points into one object (a copy), for the database mode it renders in. */
function withPoints(o: Obj, d: Defaults, points: Points, mode: 'embedded' | 'external'): Obj {
  const c = structuredClone(o);
  const spec = podSpec(c);
  if (!spec) return c;
  const image = `${d.image.repository}:${d.image.tag}`;
  const schedulerImage = `${d.schedulerImage.repository}:${d.schedulerImage.tag}`;
  for (const ct of spec.containers) {
    if (ct.image === image) ct.image = points.scalar('{{ .Values.image.repository }}:{{ .Values.image.tag }}');
    else if (ct.image === schedulerImage) ct.image = points.scalar('{{ .Values.scheduler.image.repository }}:{{ .Values.scheduler.image.tag }}');
  }
  if (c.kind === 'Deployment' && c.metadata.name === CONTROLLER) {
    const s = c.spec as { replicas: number };
    s.replicas = points.scalar(`{{ .Values.controller.replicas | default ${s.replicas} }}`) as unknown as number;
    const ct = spec.containers.find((x) => x.name === 'controller')!;
    ct.resources = points.orDefault('.Values.controller.resources', ct.resources);
    ct.env = [...(ct.env ?? []), points.append('.Values.controller.extraEnv')];
    ct.volumeMounts = [...(ct.volumeMounts ?? []), points.append('.Values.controller.extraVolumeMounts')];
    spec.volumes = [...(spec.volumes ?? []), points.append('.Values.controller.extraVolumes') as unknown as { name: string }];
    if (mode === 'external') {
      for (const e of ct.env as { name?: string; valueFrom?: { secretKeyRef?: { name: string; key: string } } }[]) {
        if (e.name === 'DATABASE_URL' && e.valueFrom?.secretKeyRef) {
          e.valueFrom.secretKeyRef.name = points.scalar('{{ .Values.database.secret.name }}');
          e.valueFrom.secretKeyRef.key = points.scalar('{{ .Values.database.secret.key }}');
        }
      }
    }
  }
  if (c.kind === 'DaemonSet' && c.metadata.name === AGENT) {
    spec.nodeSelector = points.orDefault('.Values.agent.nodeSelector', spec.nodeSelector);
    const ct = spec.containers[0]!;
    ct.resources = points.orDefault('.Values.agent.resources', ct.resources);
    for (const e of ct.env as { name?: string; value?: string }[]) {
      if (e.name === 'DEVICE_LIST_STRATEGY') e.value = points.scalar('{{ .Values.agent.deviceListStrategy | quote }}');
    }
    ct.env = [...(ct.env ?? []), points.append('.Values.agent.extraEnv')];
    ct.volumeMounts = [...(ct.volumeMounts ?? []), points.append('.Values.agent.extraVolumeMounts')];
    for (const v of spec.volumes ?? []) {
      if (v.name === 'pod-resources' && v.hostPath) v.hostPath.path = points.scalar('{{ .Values.agent.podResourcesHostPath }}');
    }
    spec.volumes = [...(spec.volumes ?? []), points.append('.Values.agent.extraVolumes') as unknown as { name: string }];
  }
  return c;
}

/** The object as YAML with its sentinels replaced by template text. */
function toTemplate(o: Obj, points: Points): string {
  // Text of the manifests that looks like a template (alert rules' {{ $value }}, the dashboard's legends) stays text.
  let text = YAML.stringify(o, { lineWidth: 0 }).replace(/\{\{|\}\}/g, (m) => (m === '{{' ? '{{ "{{" }}' : '{{ "}}" }}'));
  for (const p of points.all) {
    const re = new RegExp(`^( *)(- )?([^\\n]*?)${p.sentinel}$`, 'm');
    const m = re.exec(text);
    if (!m) continue;
    const [line, indent, dash = '', prefix] = m as unknown as [string, string, string | undefined, string];
    let out: string;
    if (p.kind === 'scalar') {
      out = `${indent}${dash}${prefix}${p.expr}`;
    } else if (p.kind === 'append') {
      const col = indent.length;
      out = `${indent}{{- with ${p.value} }}\n${indent}{{- toYaml . | nindent ${col} }}\n${indent}{{- end }}`;
    } else {
      // `field: SENTINEL`: the field, then the value's mapping or the rendered one.
      const col = indent.length + 2;
      const pad = ' '.repeat(col);
      const rendered = YAML.stringify(p.rendered ?? {}, { lineWidth: 0 })
        .trimEnd()
        .split('\n')
        .map((l) => pad + l)
        .join('\n');
      out = `${indent}${prefix.trimEnd()}\n${pad}{{- if ${p.value} }}\n${pad}{{- toYaml ${p.value} | nindent ${col} }}\n${pad}{{- else }}\n${rendered}\n${pad}{{- end }}`;
    }
    text = text.replace(line, () => out);
  }
  if (/__BC_HELM_\d+__/.test(text)) throw new Error(`${key(o)}: a value point was not replaced`);
  return text;
}

function wrap(cond: string, body: string): string {
  return `{{- if ${cond} }}\n${body}{{- end }}\n`;
}

function valuesYaml(d: Defaults, version: string): string {
  return `# Better Compute Capacity ${version}. Every default renders what kustomize renders (deploy/overlays/trial).
# Where the ledger lives: embedded (PostgreSQL inside the controller's pod, its data on a 10 GiB PersistentVolumeClaim;
# one replica only) or external (DATABASE_URL from a Secret, e.g. CloudNativePG; two replicas by default).
database:
  mode: embedded
  # external only: the Secret with the database URL, e.g.
  #   kubectl -n better-compute-system create secret generic better-compute-database --from-literal=url='postgres://...'
  secret:
    name: ${d.secret.name}
    key: ${d.secret.key}

image:
  repository: ${d.image.repository}
  tag: ${JSON.stringify(d.image.tag)}

# kube-scheduler beside the controller, the scheduler that calls the extender.
scheduler:
  image:
    repository: ${d.schedulerImage.repository}
    tag: ${JSON.stringify(d.schedulerImage.tag)}

controller:
  # Empty: 1 with the embedded database, 2 with an external one.
  replicas:
  # Empty: the manifests' requests and limits.
  resources: {}
  # Extra environment variables for the controller container (a list of EnvVar), and volumes with their mounts, e.g.
  # the API server's webhook client CA (docs/operations.md): WEBHOOK_CLIENT_CA_FILE and the ConfigMap holding it.
  extraEnv: []
  extraVolumes: []
  extraVolumeMounts: []

agent:
  # Empty: the manifests' selector (bettercompute.io/gpu-node: "true").
  nodeSelector: {}
  resources: {}
  # How Allocate hands the GPUs to a container (docs/node-isolation.md): auto (CDI where the node's CDI specs name
  # the GPUs, else volume-mounts), or envvar, volume-mounts, cdi-annotations, cdi-cri, comma separated to combine.
  deviceListStrategy: ${d.deviceListStrategy}
  # The kubelet's pod-resources directory on the host (another kubelet root dir, e.g. k3s, moves it).
  podResourcesHostPath: ${d.podResourcesHostPath}
  extraEnv: []
  extraVolumes: []
  extraVolumeMounts: []

# The Prometheus Operator's ServiceMonitor, the alert rules and their RBAC (the operator's CRDs must be installed).
monitoring:
  enabled: false

# The Kueue AdmissionCheck bettercompute-reservation and the controller's RBAC on Kueue's objects (docs/kueue.md; Kueue
# v0.17 or later must be installed first: the AdmissionCheck is Kueue's kind).
kueue:
  enabled: false

# The chart makes the namespace better-compute-system with its Pod Security labels. Set false when it exists already
# (then install with --namespace better-compute-system).
namespace:
  create: true
`;
}

const VALIDATE = `{{- /* Refuses values that cannot work, before anything is applied. */ -}}
{{- if not (has .Values.database.mode (list "embedded" "external")) }}
{{- fail (printf "database.mode must be embedded or external, not %q" (toString .Values.database.mode)) }}
{{- end }}
{{- if and (eq .Values.database.mode "embedded") .Values.controller.replicas (gt (int .Values.controller.replicas) 1) }}
{{- fail "database.mode embedded keeps the ledger in the controller's pod: controller.replicas must be 1 (use an external database for more)" }}
{{- end }}
`;

/** The chart from the three renders (pure: tests call it with renders of their own). */
export function buildChart(r: Renders, version: string): Chart {
  const trial = parseAll(r.trial);
  const external = parseAll(r.external);
  const monitoring = parseAll(r.monitoring);
  const kueue = parseAll(r.kueue);
  const d = defaultsOf(trial, external);
  const points = new Points();
  const files = new Map<string, string>();
  files.set(
    'Chart.yaml',
    `apiVersion: v2
name: better-compute
description: GPU reservations over time on exact devices, booked in PostgreSQL so that no GPU is promised twice.
type: application
version: ${version}
appVersion: ${JSON.stringify(version)}
`,
  );
  files.set('values.yaml', valuesYaml(d, version));
  files.set('templates/validate.yaml', VALIDATE);
  const byKey = (list: Obj[]) => new Map(list.map((o) => [key(o), o]));
  const t = byKey(trial);
  const e = byKey(external);
  const keys = [...new Set([...t.keys(), ...e.keys()])];
  for (const k of keys) {
    const a = t.get(k);
    const b = e.get(k);
    const any = (a ?? b)!;
    if (any.kind === 'CustomResourceDefinition') {
      // crds/: installed when missing, never replaced nor deleted by Helm (a CRD's deletion deletes every Reservation),
      // and no ownership asked of one that exists (an install after `kubectl apply -k`). Plain YAML, not a template.
      if (a && b && JSON.stringify(a) !== JSON.stringify(b)) throw new Error(`${k}: the overlays render the CRD differently`);
      files.set(`crds/${any.metadata.name}.yaml`, YAML.stringify(any, { lineWidth: 0 }));
      continue;
    }
    let body: string;
    if (a && b && JSON.stringify(a) === JSON.stringify(b)) body = toTemplate(withPoints(a, d, points, 'embedded'), points);
    else {
      const embedded = a ? toTemplate(withPoints(a, d, points, 'embedded'), points) : '';
      const ext = b ? toTemplate(withPoints(b, d, points, 'external'), points) : '';
      body = `{{- if eq .Values.database.mode "embedded" }}\n${embedded}{{- else }}\n${ext}{{- end }}\n`;
    }
    if (any.kind === 'Namespace') body = wrap('.Values.namespace.create', body);
    files.set(`templates/${fileName(any)}`, body);
  }
  for (const o of monitoring) files.set(`templates/monitoring/${fileName(o)}`, wrap('.Values.monitoring.enabled', toTemplate(withPoints(o, d, points, 'embedded'), points)));
  for (const o of kueue) files.set(`templates/kueue/${fileName(o)}`, wrap('.Values.kueue.enabled', toTemplate(withPoints(o, d, points, 'embedded'), points)));
  return { files };
}

/** kubectl: BC_KUBECTL, else the one on PATH. */
function kubectlBin(): string {
  return process.env.BC_KUBECTL ?? 'kubectl';
}

/** `kubectl kustomize` of a directory of deploy/ (relative to the repository). */
export function renderKustomize(dir: string, kubectl = kubectlBin()): string {
  return execFileSync(kubectl, ['kustomize', path.join(ROOT, dir)], { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
}

/** The renders the chart is made of. */
export function renders(kubectl = kubectlBin()): Renders {
  return {
    trial: renderKustomize('deploy/overlays/trial', kubectl),
    external: renderKustomize('deploy/overlays/external', kubectl),
    monitoring: renderKustomize('deploy/monitoring', kubectl),
    kueue: renderKustomize('deploy/kueue', kubectl),
  };
}

/** Writes the chart to `out` (replacing what is there); returns `out`. */
export function writeChart(out: string, kubectl = kubectlBin()): string {
  const version = (JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { version: string }).version;
  const chart = buildChart(renders(kubectl), version);
  fs.rmSync(out, { recursive: true, force: true });
  for (const [rel, text] of chart.files) {
    fs.mkdirSync(path.dirname(path.join(out, rel)), { recursive: true });
    fs.writeFileSync(path.join(out, rel), text);
  }
  return out;
}

if (process.argv[1] && path.resolve(process.argv[1]) === path.resolve(import.meta.filename)) {
  const out = path.resolve(process.argv[2] ?? path.join(ROOT, 'dist/chart/better-compute'));
  writeChart(out);
  process.stdout.write(`${out}\n`);
}
