// The kube-scheduler extender wire format (k8s.io/kube-scheduler/extender/v1), PascalCase as the scheduler sends and
// expects it. Only the fields we read are checked; the rest of the Pod passes through untouched.
import { z } from 'zod';

const Quantity = z.union([z.string(), z.number()]);
const ResourceList = z.record(z.string(), Quantity);

const Container = z.looseObject({
  name: z.string(),
  resources: z.looseObject({ requests: ResourceList.optional(), limits: ResourceList.optional() }).optional(),
});

export const PodSchema = z.looseObject({
  metadata: z.looseObject({
    name: z.string(),
    namespace: z.string().default('default'),
    uid: z.string().min(1),
    labels: z.record(z.string(), z.string()).optional(),
    annotations: z.record(z.string(), z.string()).optional(),
  }),
  spec: z.looseObject({
    containers: z.array(Container).default([]),
    initContainers: z.array(Container).nullish(),
    activeDeadlineSeconds: z.number().int().positive().nullish(),
    nodeName: z.string().nullish(),
  }),
});
export type Pod = z.infer<typeof PodSchema>;

export const ExtenderArgsSchema = z.looseObject({
  Pod: PodSchema,
  // nodeCacheCapable: the scheduler sends names only; a full NodeList is accepted and reduced to its names.
  Nodes: z.looseObject({ items: z.array(z.looseObject({ metadata: z.looseObject({ name: z.string() }) })).nullish() }).nullish(),
  NodeNames: z.array(z.string()).nullish(),
});
export type ExtenderArgs = z.infer<typeof ExtenderArgsSchema>;

export function nodeNamesOf(args: ExtenderArgs): string[] {
  if (args.NodeNames) return args.NodeNames;
  return (args.Nodes?.items ?? []).map((n) => n.metadata.name);
}

/** FailedNodes: node name → reason; the scheduler shows the reasons in the pod's FailedScheduling event. */
export interface ExtenderFilterResult {
  Nodes: null;
  NodeNames: string[] | null;
  FailedNodes: Record<string, string>;
  FailedAndUnresolvableNodes: Record<string, string>;
  Error: string;
}

export interface HostPriority {
  Host: string;
  Score: number;
}

export const ExtenderBindingArgsSchema = z.looseObject({
  PodName: z.string().min(1),
  PodNamespace: z.string().min(1),
  PodUID: z.string().min(1),
  Node: z.string().min(1),
});
export type ExtenderBindingArgs = z.infer<typeof ExtenderBindingArgsSchema>;

export interface ExtenderBindingResult {
  Error: string;
}
