// Guard 6 on the node: which atoms live containers hold, from the kubelet's PodResources API (v1 List).
import { podResourcesClient, unary, type grpc } from './grpc.ts';

interface ListResponse {
  pod_resources: { name: string; namespace: string; containers: { name: string; devices: { resource_name: string; device_ids: string[] }[] }[] }[];
}

export interface Holder {
  pod: string;
  container: string;
  resource: string;
}

/** One List of the kubelet's pods: what their containers hold, and which pods it has (the one it admits included). */
export interface PodResourcesSnapshot {
  /** atom → the container holding it, for the resources whose names pass the filter. */
  held: Map<string, Holder>;
  /** `namespace/name` of every pod the kubelet lists: its active pods, a pod it is admitting among them. */
  pods: Set<string>;
}

export interface PodResourcesReader {
  list(resourceFilter: (name: string) => boolean): Promise<PodResourcesSnapshot>;
  close(): void;
}

export function podResourcesReader(socket: string): PodResourcesReader {
  let client: grpc.Client | undefined;
  return {
    async list(resourceFilter) {
      client ??= podResourcesClient(socket);
      const res = await unary<object, ListResponse>(client, 'List', {}, 3000);
      const out = new Map<string, Holder>();
      const pods = new Set<string>();
      for (const p of res.pod_resources) {
        pods.add(`${p.namespace}/${p.name}`);
        for (const c of p.containers) {
          for (const d of c.devices) {
            if (!resourceFilter(d.resource_name)) continue;
            for (const id of d.device_ids) out.set(id, { pod: `${p.namespace}/${p.name}`, container: c.name, resource: d.resource_name });
          }
        }
      }
      return { held: out, pods };
    },
    close() {
      client?.close();
      client = undefined;
    },
  };
}
