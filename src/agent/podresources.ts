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

export interface PodResourcesReader {
  /** atom → the container holding it, for the resources whose names pass `resourceFilter`. */
  held(resourceFilter: (name: string) => boolean): Promise<Map<string, Holder>>;
  close(): void;
}

export function podResourcesReader(socket: string): PodResourcesReader {
  let client: grpc.Client | undefined;
  return {
    async held(resourceFilter) {
      client ??= podResourcesClient(socket);
      const res = await unary<object, ListResponse>(client, 'List', {}, 3000);
      const out = new Map<string, Holder>();
      for (const p of res.pod_resources) {
        for (const c of p.containers) {
          for (const d of c.devices) {
            if (!resourceFilter(d.resource_name)) continue;
            for (const id of d.device_ids) out.set(id, { pod: `${p.namespace}/${p.name}`, container: c.name, resource: d.resource_name });
          }
        }
      }
      return out;
    },
    close() {
      client?.close();
      client = undefined;
    },
  };
}
