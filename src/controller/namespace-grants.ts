// OBSOLETE (issue 9): the pod admission webhook (src/admission/pods.ts) now checks against the ledger that a pod uses
// only its own namespace's Reservations, and deploy/admission/policy.yaml, which read these labels, is gone. Delete this
// file together with its call in src/controller/run.ts; then the controller needs no `namespaces: patch`.
//
// Namespace grants for the admission policy of deploy/admission/: while a Reservation holds its booking, its
// namespace carries the label `<status.resourceName>: <reservation name>` (e.g.
// `reservations.bettercompute.io/rsv-01k2...: train-now`); the ValidatingAdmissionPolicy admits a pod's reservation
// resource only when its namespace carries that label. Namespaces are cluster-scoped, so a tenant cannot grant itself
// another namespace's Reservation.
//
// Run by `npm run demo` and the admission cluster test. In a deployment the controller's leader runs it (it already
// may patch namespaces, deploy/base/rbac.yaml): `startNamespaceGrants({ kubeConfig, log })`.
import * as k8s from '@kubernetes/client-node';
import { RESERVATION_GROUP } from '../extender/resources.ts';
import { errorFields, type Logger } from '../log.ts';

const GROUP = 'bettercompute.io';
const VERSION = 'v1alpha1';
const PREFIX = `${RESERVATION_GROUP}/`;
const ENDED = new Set(['Released', 'Expired', 'Failed']);

export interface ReservationLike {
  metadata?: { name?: string; namespace?: string; deletionTimestamp?: unknown };
  status?: { phase?: string; resourceName?: string };
}

/** namespace → (label key = resource name → Reservation name) for the Reservations that hold a booking. */
export function desiredGrants(reservations: readonly ReservationLike[]): Map<string, Map<string, string>> {
  const out = new Map<string, Map<string, string>>();
  for (const r of reservations) {
    const ns = r.metadata?.namespace;
    const name = r.metadata?.name;
    const resource = r.status?.resourceName;
    if (!ns || !name || !resource?.startsWith(PREFIX) || r.metadata?.deletionTimestamp) continue;
    if (ENDED.has(r.status?.phase ?? '')) continue;
    let m = out.get(ns);
    if (!m) out.set(ns, (m = new Map()));
    m.set(resource, name);
  }
  return out;
}

/** The merge patch that makes a namespace's grant labels equal `want` (undefined: nothing to change). */
export function grantPatch(labels: Record<string, string> | undefined, want: ReadonlyMap<string, string>): Record<string, string | null> | undefined {
  const patch: Record<string, string | null> = {};
  for (const k of Object.keys(labels ?? {})) if (k.startsWith(PREFIX) && !want.has(k)) patch[k] = null;
  for (const [k, v] of want) if (labels?.[k] !== v) patch[k] = v;
  return Object.keys(patch).length ? patch : undefined;
}

export interface NamespaceGrants {
  /** One pass now (also run on every Reservation change and every `everyMs`). */
  sync(): Promise<void>;
  stop(): Promise<void>;
}

export async function startNamespaceGrants(o: { kubeConfig: k8s.KubeConfig; log: Logger; everyMs?: number }): Promise<NamespaceGrants> {
  const core = o.kubeConfig.makeApiClient(k8s.CoreV1Api);
  const custom = o.kubeConfig.makeApiClient(k8s.CustomObjectsApi);
  const informer = k8s.makeInformer<k8s.KubernetesObject>(
    o.kubeConfig,
    `/apis/${GROUP}/${VERSION}/reservations`,
    () => custom.listClusterCustomObject({ group: GROUP, version: VERSION, plural: 'reservations' }) as Promise<k8s.KubernetesListObject<k8s.KubernetesObject>>,
  );
  let stopped = false;
  let running: Promise<void> = Promise.resolve();

  const pass = async () => {
    const want = desiredGrants(informer.list() as ReservationLike[]);
    const namespaces = (await core.listNamespace()).items;
    for (const ns of namespaces) {
      const name = ns.metadata?.name;
      if (!name) continue;
      const patch = grantPatch(ns.metadata?.labels, want.get(name) ?? new Map());
      if (!patch) continue;
      try {
        await core.patchNamespace({ name, body: { metadata: { labels: patch } } }, k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch));
        o.log.info('namespace reservation grants updated', { namespace: name, labels: patch });
      } catch (e) {
        o.log.warn('patching namespace grants failed', { namespace: name, ...errorFields(e) });
      }
    }
  };
  const sync = () => {
    running = running.then(pass, pass).catch((e: unknown) => o.log.warn('namespace grants pass failed', errorFields(e)));
    return running;
  };
  const poke = () => void sync();
  informer.on('add', poke);
  informer.on('update', poke);
  informer.on('delete', poke);
  informer.on('error', (e: unknown) => {
    if (stopped) return;
    o.log.warn('reservation watch failed; restarting', errorFields(e));
    setTimeout(() => {
      if (!stopped) void informer.start().catch(() => undefined);
    }, 1000);
  });
  await informer.start();
  await sync();
  const timer = setInterval(poke, o.everyMs ?? 10_000);
  timer.unref();
  return {
    sync,
    async stop() {
      stopped = true;
      clearInterval(timer);
      await informer.stop();
      await running;
    },
  };
}
