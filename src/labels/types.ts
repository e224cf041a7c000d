// The API of derived node labels: the NodeLabelRule kind, and the Rule model that both
// NodeLabelRules and k8s-auto-labeller rule files compile into. Its CRD, from a zod schema, is
// crd.ts: what reads only these (every command's capability list) loads no zod.
import type * as z from '../runtime/platform/zod.ts';
import type { PolicyStatus } from '../policy/crd.ts';
import { berthKind } from '../policy/kinds.ts';
import type { evictOnRemoval, matchTerm, taint } from './crd.ts';

export const FIELD_MANAGER = 'berth-labels';

/** Evictions on removal per minute in the whole cluster, all rules together (`--max-evictions-per-minute`). */
export const CLUSTER_MAX_PER_MINUTE = 60;
/** A pod annotation that opts the pod out of eviction on removal: `berth.dev/evict-on-removal: "false"`. */
export const OPT_OUT_ANNOTATION = 'berth.dev/evict-on-removal';
/** Where the kubelet got a pod from: anything but `api` is a static pod. */
export const CONFIG_SOURCE_ANNOTATION = 'kubernetes.io/config.source';

/** Well-known node fields a term can match, read from the Node object. */
export const NODE_FIELDS = {
  name: 'metadata.name',
  architecture: 'status.nodeInfo.architecture',
  operatingSystem: 'status.nodeInfo.operatingSystem',
  kernelVersion: 'status.nodeInfo.kernelVersion',
  osImage: 'status.nodeInfo.osImage',
  containerRuntimeVersion: 'status.nodeInfo.containerRuntimeVersion',
  kubeletVersion: 'status.nodeInfo.kubeletVersion',
} as const;
export type NodeField = keyof typeof NODE_FIELDS;

export const NODE_LABEL_RULE = berthKind('NodeLabelRule', 'Cluster');

export type MatchTerm = z.infer<typeof matchTerm>;
export type Taint = z.infer<typeof taint>;
export type EvictOnRemoval = z.infer<typeof evictOnRemoval>;

export type NodeLabelRuleStatus = PolicyStatus<'matchedNodes' | 'appliedNodes'>;

/**
 * A compiled rule, from a NodeLabelRule or a rule file. `name` is unique across both sources
 * ("nodelabelrule/edgetpu", "file:accelerators/edgetpu") and orders rules for conflict resolution.
 */
export interface Rule {
  name: string;
  /** Where it came from, for explain and events. */
  source:
    | { kind: 'NodeLabelRule'; name: string; uid?: string; generation?: number }
    | { kind: 'File'; path: string };
  allOf: MatchTerm[];
  anyOf: MatchTerm[];
  labels: Record<string, string>;
  annotations: Record<string, string>;
  taints: Taint[];
  /** Evict the pods that needed a label of this rule once it goes away (NodeLabelRules only). */
  evictOnRemoval?: EvictOnRemoval;
}
