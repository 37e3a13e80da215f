// bench:scale's one simulated part: a Kubernetes API server for objects only, run as its own process so that its
// memory is not the controller's. It serves the collections the controller lists and watches (Nodes, Namespaces, Pods,
// Pools, NodeDevices, Reservations) in the API's list/watch JSON, LISTs paged by `limit` and `continue` (a token that
// names the snapshot's resourceVersion and an offset), WATCHes from a resourceVersion (replayed from the log of every
// change since the seed), merge-patches of status and metadata, and Events (counted, not kept). No
// kubelets, no scheduler, no admission: objects only (docs/adr/0042-bounded-memory-and-the-scale-bench.md).
//   node --import tsx bench/sim-kube-api.ts    prints `listening <port>` and serves until stdin closes.
// Env: SIM_NODES, SIM_POOLS, SIM_TENANTS, SIM_RESERVATIONS, SIM_PODS (the sizes), SIM_GPUS_PER_NODE (8).
import http from 'node:http';
import type { AddressInfo } from 'node:net';

type Obj = { metadata: { name: string; namespace?: string; resourceVersion?: string } & Record<string, unknown> } & Record<string, unknown>;
interface Collection {
  kind: string;
  objects: Map<string, Obj>;
  /** Every change after the initial objects, oldest first. */
  log: { rv: number; type: string; object: Obj }[];
  watchers: Set<http.ServerResponse>;
  sorted?: string[];
}

const num = (k: string, d: number) => Number(process.env[k] ?? d);
const NODES = num('SIM_NODES', 5000);
const POOLS = num('SIM_POOLS', 10);
const TENANTS = num('SIM_TENANTS', 20);
const RESERVATIONS = num('SIM_RESERVATIONS', 20_000);
const PODS = num('SIM_PODS', 50_000);
const GPUS = num('SIM_GPUS_PER_NODE', 8);
const GROUP = '/apis/bettercompute.io/v1alpha1';

let rv = 1;
const created = (i: number) => new Date(Date.UTC(2026, 0, 1) + i * 1000).toISOString().replace(/\.\d+Z$/, 'Z');
const collections = new Map<string, Collection>();
const collection = (path: string, kind: string, items: Obj[]) => {
  const objects = new Map<string, Obj>();
  for (const o of items) {
    o.metadata.resourceVersion = String(++rv);
    objects.set(o.metadata.namespace ? `${o.metadata.namespace}/${o.metadata.name}` : o.metadata.name, o);
  }
  collections.set(path, { kind, objects, log: [], watchers: new Set() });
};

function seed(): void {
  const tenants = Array.from({ length: TENANTS }, (_, t) => `t${t}`);
  collection('/api/v1/namespaces', 'Namespace', tenants.map((t, i) => ({ metadata: { name: t, uid: `ns-${t}`, creationTimestamp: created(i), labels: { 'bettercompute.io/tenant': t } } })));
  collection(`${GROUP}/pools`, 'Pool', Array.from({ length: POOLS }, (_, p) => ({
    apiVersion: 'bettercompute.io/v1alpha1', kind: 'Pool',
    metadata: { name: `p${p}`, uid: `pool-${p}`, generation: 1, creationTimestamp: created(p) },
    spec: { nodeSelector: { 'bench/pool': `p${p}` }, gpuModel: 'H100', ownerTenant: tenants[0], offerings: tenants.slice(1).map((tenant) => ({ tenant })) },
  })));
  collection('/api/v1/nodes', 'Node', Array.from({ length: NODES }, (_, i) => ({
    apiVersion: 'v1', kind: 'Node',
    metadata: { name: `n${i}`, uid: `node-${i}`, creationTimestamp: created(i), labels: { 'bench/pool': `p${i % POOLS}`, 'kubernetes.io/hostname': `n${i}`, 'topology.kubernetes.io/zone': `z${i % 16}` } },
    spec: {},
    status: { conditions: [{ type: 'Ready', status: 'True' }], allocatable: { cpu: '128', memory: '1Ti', 'bettercompute.io/gpu': String(GPUS) } },
  })));
  collection(`${GROUP}/nodedevices`, 'NodeDevices', Array.from({ length: NODES }, (_, i) => ({
    apiVersion: 'bettercompute.io/v1alpha1', kind: 'NodeDevices',
    metadata: { name: `n${i}`, uid: `nd-${i}`, generation: 1, creationTimestamp: created(i) },
    spec: {
      gpus: Array.from({ length: GPUS }, (_, g) => ({ uuid: `GPU-n${i}-${g}`, product: 'NVIDIA H100 80GB HBM3', model: 'H100', vramGiB: 80, numaNode: g < GPUS / 2 ? 0 : 1, nvlinkDomain: `n${i}`, healthy: true })),
      scalars: { vcpu: 128, memoryGiB: 1024, hugepages1Gi: 0 },
    },
  })));
  collection(`${GROUP}/reservations`, 'Reservation', Array.from({ length: RESERVATIONS }, (_, i) => ({
    apiVersion: 'bettercompute.io/v1alpha1', kind: 'Reservation',
    metadata: { name: `r${i}`, namespace: tenants[i % TENANTS], uid: `rsv-${i}`, generation: 1, creationTimestamp: created(i) },
    spec: { pool: `p${Math.floor(i / TENANTS) % POOLS}`, devices: [{ class: 'gpu', count: 1, selector: { vramGiB: { gte: 80 } } }], duration: '12h', binding: 'confirmed' },
  })));
  collection('/api/v1/pods', 'Pod', Array.from({ length: PODS }, (_, i) => ({
    apiVersion: 'v1', kind: 'Pod',
    metadata: { name: `pod-${i}`, namespace: tenants[i % TENANTS], uid: `pod-uid-${i}`, creationTimestamp: created(i), labels: { app: `a${i % 500}` } },
    spec: { nodeName: `n${i % NODES}`, containers: [{ name: 'main', image: 'registry.example/train:1', resources: { limits: { 'bettercompute.io/gpu': '1' } } }] },
    status: { phase: 'Running', podIP: `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}` },
  })));
}

const json = (res: http.ServerResponse, code: number, body: unknown) => {
  res.statusCode = code;
  res.setHeader('content-type', 'application/json');
  res.end(JSON.stringify(body));
};
const status = (res: http.ServerResponse, code: number, message: string) => json(res, code, { kind: 'Status', apiVersion: 'v1', status: 'Failure', message, code });

/** A paged LIST: the token is `${snapshotRv}:${offset}`; the pages of one list come from the objects in key order. */
function list(c: Collection, q: URLSearchParams, res: http.ServerResponse): void {
  const limit = Number(q.get('limit') ?? 0) || Number.POSITIVE_INFINITY;
  const [snap, offset] = (q.get('continue') ?? `${rv}:0`).split(':').map(Number) as [number, number];
  // Objects changed since the snapshot are served as changed (the bench makes no list during its writes).
  // No object is created or deleted after the seed: the key order is computed once.
  const keys = (c.sorted ??= [...c.objects.keys()].sort());
  const to = Math.min(keys.length, offset + limit);
  const items = keys.slice(offset, to).map((k) => c.objects.get(k));
  json(res, 200, { apiVersion: 'v1', kind: `${c.kind}List`, metadata: { resourceVersion: String(snap), ...(to < keys.length ? { continue: `${snap}:${to}` } : {}) }, items });
}

function watch(c: Collection, q: URLSearchParams, res: http.ServerResponse): void {
  const from = Number(q.get('resourceVersion') ?? 0);
  res.statusCode = 200;
  res.setHeader('content-type', 'application/json');
  res.flushHeaders();
  for (const e of c.log) if (e.rv > from) res.write(`${JSON.stringify({ type: e.type, object: e.object })}\n`);
  c.watchers.add(res);
  const timeout = Number(q.get('timeoutSeconds') ?? 60) * 1000;
  const bookmark = setInterval(() => res.write(`${JSON.stringify({ type: 'BOOKMARK', object: { kind: c.kind, metadata: { resourceVersion: String(rv) } } })}\n`), Math.min(10_000, timeout / 2));
  const end = setTimeout(() => res.end(), timeout);
  res.on('close', () => {
    clearInterval(bookmark);
    clearTimeout(end);
    c.watchers.delete(res);
  });
}

/** RFC 7386 merge patch. */
function merge(target: unknown, patch: unknown): unknown {
  if (typeof patch !== 'object' || patch === null || Array.isArray(patch)) return patch;
  const out: Record<string, unknown> = typeof target === 'object' && target !== null && !Array.isArray(target) ? { ...(target as Record<string, unknown>) } : {};
  for (const [k, v] of Object.entries(patch as Record<string, unknown>)) {
    if (v === null) delete out[k];
    else out[k] = merge(out[k], v);
  }
  return out;
}

function patch(c: Collection, key: string, body: Record<string, unknown>, res: http.ServerResponse): void {
  const cur = c.objects.get(key);
  if (!cur) return status(res, 404, `${key} not found`);
  const given = (body.metadata as { resourceVersion?: string } | undefined)?.resourceVersion;
  if (given && given !== cur.metadata.resourceVersion) return status(res, 409, 'the object has been modified');
  const next = merge(cur, body) as Obj;
  next.metadata.resourceVersion = String(++rv);
  c.objects.set(key, next);
  const e = { rv, type: 'MODIFIED', object: next };
  c.log.push(e);
  for (const w of c.watchers) w.write(`${JSON.stringify({ type: e.type, object: e.object })}\n`);
  json(res, 200, next);
}

let events = 0;
const OBJECT = /^(\/api\/v1|\/apis\/bettercompute\.io\/v1alpha1)(?:\/namespaces\/([^/]+))?\/([a-z]+)(?:\/([^/]+))?(?:\/(status))?$/;

function handle(req: http.IncomingMessage, body: string, res: http.ServerResponse): void {
  const url = new URL(req.url ?? '/', 'http://sim');
  const m = OBJECT.exec(url.pathname);
  if (!m) return status(res, 404, `no route ${url.pathname}`);
  const [, prefix, ns, plural, name] = m;
  if (req.method === 'POST' && plural === 'events') {
    events++;
    return json(res, 201, JSON.parse(body || '{}'));
  }
  const c = collections.get(`${prefix}/${plural}`);
  if (!c) return status(res, 404, `no collection ${plural}`);
  if (req.method === 'GET' && !name) return url.searchParams.get('watch') === 'true' || url.searchParams.get('watch') === '1' ? watch(c, url.searchParams, res) : list(c, url.searchParams, res);
  if (req.method === 'GET' && name) {
    const o = c.objects.get(ns ? `${ns}/${name}` : name);
    return o ? json(res, 200, o) : status(res, 404, `${name} not found`);
  }
  if (req.method === 'PATCH' && name) return patch(c, ns ? `${ns}/${name}` : name, JSON.parse(body || '{}') as Record<string, unknown>, res);
  status(res, 405, `${req.method} not served`);
}

seed();
const server = http.createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    try {
      handle(req, Buffer.concat(chunks).toString('utf8'), res);
    } catch (e) {
      status(res, 500, (e as Error).message);
    }
  });
});
server.listen(0, '127.0.0.1', () => {
  process.stdout.write(`listening ${(server.address() as AddressInfo).port}\n`);
});
// Stats on request (a line on stdin), and an end when the parent goes.
process.stdin.on('data', () => process.stdout.write(`stats ${JSON.stringify({ events, rv, rssMiB: Math.round(process.memoryUsage().rss / 2 ** 20) })}\n`));
process.stdin.on('end', () => process.exit(0));
