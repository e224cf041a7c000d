// Informer transforms that keep only what Berth's controllers read, so caches of tens of thousands
// of pods stay small. Controllers that share a transform share one informer (see Manager.informer).
import { Resources, type KubeObject, type ObjectMeta } from '../runtime/api/meta.ts';
import type { Informer } from '../runtime/cache/informer.ts';
import type { Manager } from '../runtime/manager/manager.ts';
import { deepFreeze, intern, interning, share } from './intern.ts';
import { MIRROR_POD_ANNOTATION } from './pods.ts';

const internRecord = (r: Record<string, string> | undefined) => {
  if (!r) return undefined;
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(r)) out[k] = intern(v);
  return out;
};

/**
 * An annotation a capability reads from its caches of pods and of other objects tenants write
 * (Capability.annotations): by key, or any key whose value is exactly `value` (a flag whose key a
 * policy names). `max`: the longest value kept (DEFAULT_MAX_ANNOTATION unless given).
 */
export type CachedAnnotation = ({ key: string } | { value: string }) & { max?: number };

/** The longest annotation value a slim object keeps unless its declaration says more: flags and names. */
const DEFAULT_MAX_ANNOTATION = 1024;

/** The kit's own: a mirror pod (every capability leaves static pods alone). */
const KIT_ANNOTATIONS: CachedAnnotation[] = [{ key: MIRROR_POD_ANNOTATION }];
let declaredAnnotations: CachedAnnotation[] = KIT_ANNOTATIONS;

/** The annotations every capability declared: the only ones slim objects of tenants' kinds keep. */
export function keepAnnotations(declared: CachedAnnotation[]): void {
  declaredAnnotations = [...KIT_ANNOTATIONS, ...declared];
}

/** The declaration that keeps annotation `k` with value `v`, if any. */
const declaration = (k: string, v: string): CachedAnnotation | undefined =>
  declaredAnnotations.find((d) => ('key' in d ? d.key === k : d.value === v));

/** Only the declared annotations, each within its length: what a tenant writes beyond them is not cached. */
function declaredOnly(annotations: Record<string, string>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(annotations)) {
    const d = declaration(k, v);
    if (d && v.length <= (d.max ?? DEFAULT_MAX_ANNOTATION)) out[k] = intern(v);
  }
  return out;
}

const DROPPED_ANNOTATIONS = ['kubectl.kubernetes.io/last-applied-configuration'];

type OwnerReference = NonNullable<ObjectMeta['ownerReferences']>[number];

/**
 * A ReplicaSet's pods have the same owner references: one frozen list serves them all. Its strings
 * are its own (interned with it), and its key is JSON, which no tenant's value can spell as another's.
 */
const slimOwners = (refs: OwnerReference[]): OwnerReference[] =>
  share(
    JSON.stringify(refs.map((o) => [o.apiVersion, o.kind, o.name, o.uid, o.controller === true])),
    refs,
    () =>
      refs.map((o) =>
        Object.freeze({
          apiVersion: o.apiVersion,
          kind: o.kind,
          name: o.name,
          uid: o.uid,
          ...(o.controller ? { controller: true } : {}),
        }),
      ),
  );

/**
 * Metadata without managedFields, keeping of annotations only those a capability declared
 * (`all`: every one but kubectl's last applied configuration, for nodes, which Berth writes by
 * JSON patch and tenants do not).
 */
export function slimMetadata(
  m: ObjectMeta | undefined,
  annotations: 'declared' | 'all' = 'declared',
): ObjectMeta {
  const out: ObjectMeta = { name: m?.name, uid: m?.uid, resourceVersion: m?.resourceVersion };
  if (m?.namespace) out.namespace = intern(m.namespace);
  if (m?.generation !== undefined) out.generation = m.generation;
  if (m?.deletionTimestamp) out.deletionTimestamp = m.deletionTimestamp;
  // Label values are at most 63 characters (the apiserver's validation): every label is kept.
  if (m?.labels) out.labels = internRecord(m.labels);
  // Kept even when empty: a JSON patch must know whether the object has an annotations map at all.
  if (m?.annotations) {
    if (annotations === 'declared') out.annotations = declaredOnly(m.annotations);
    else {
      const a = { ...m.annotations };
      for (const k of DROPPED_ANNOTATIONS) delete a[k];
      out.annotations = internRecord(a);
    }
  }
  if (m?.ownerReferences?.length) out.ownerReferences = slimOwners(m.ownerReferences);
  if (m?.finalizers?.length) out.finalizers = m.finalizers.map((f) => intern(f));
  return out;
}

/** Identity, labels, annotations and owners only (namespaces, owners): one informer per kind serves every capability. */
export const slimMeta = interning('slim-meta', (o: KubeObject): KubeObject => ({
  apiVersion: o.apiVersion,
  kind: o.kind,
  metadata: slimMetadata(o.metadata),
}));

/** A node selector requirement of a pod's required node affinity (v1.NodeSelectorRequirement). */
export interface NodeSelectorRequirement {
  key: string;
  operator: 'In' | 'NotIn' | 'Exists' | 'DoesNotExist' | 'Gt' | 'Lt';
  values?: string[];
}

/** What a pod requires of its node's labels and fields: its nodeSelector and required node affinity. */
export interface PodNodeConstraints {
  nodeSelector?: Record<string, string>;
  affinity?: {
    nodeAffinity?: {
      requiredDuringSchedulingIgnoredDuringExecution?: {
        nodeSelectorTerms: {
          matchExpressions?: NodeSelectorRequirement[];
          matchFields?: NodeSelectorRequirement[];
        }[];
      };
    };
  };
}

export interface SlimPod extends KubeObject {
  spec: {
    nodeName?: string;
    containers: { name: string; image: string }[];
    initContainers?: { name: string; image: string }[];
    schedulingGates?: { name: string }[];
  } & PodNodeConstraints;
  status: {
    phase?: string;
    hostIP?: string;
    conditions?: readonly { readonly type: string; readonly status: string }[];
  };
}

interface FullPod extends KubeObject {
  spec?: PodNodeConstraints & {
    nodeName?: string;
    containers?: { name: string; image: string }[];
    initContainers?: { name: string; image: string }[];
    schedulingGates?: { name: string }[];
  };
  status?: { phase?: string; hostIP?: string; conditions?: { type: string; status: string }[] };
}

// Shared by every cached pod that has them, frozen: a Ready condition's three values, and an
// annotations map with none a capability declared (most pods: 56 B each at 150,000 pods).
const READY: Record<string, SlimPod['status']['conditions']> = Object.fromEntries(
  ['True', 'False', 'Unknown'].map((status) => [
    status,
    Object.freeze([Object.freeze({ type: 'Ready', status })]),
  ]),
);
const NO_ANNOTATIONS: Record<string, string> = Object.freeze({});

/** A workload's pods have the same containers: one frozen list serves them all (as slimOwners). */
const slimContainers = (cs: readonly { name: string; image: string }[] = []) =>
  share(JSON.stringify(cs.map((c) => [c.name, c.image])), cs, () =>
    cs.map((c) => Object.freeze({ name: c.name, image: c.image })),
  );

/** The pod fields Berth's controllers read: identity, labels, owners, node and node constraints, images, phase, the Ready condition. */
export function slimPod(obj: KubeObject): SlimPod {
  const pod = obj as FullPod;
  const spec: SlimPod['spec'] = { containers: slimContainers(pod.spec?.containers) };
  if (pod.spec?.nodeName) spec.nodeName = intern(pod.spec.nodeName);
  if (pod.spec?.initContainers?.length) spec.initContainers = slimContainers(pod.spec.initContainers);
  if (pod.spec?.schedulingGates?.length)
    spec.schedulingGates = pod.spec.schedulingGates.map((g) => ({ name: intern(g.name) }));
  // Only the required node affinity: what eviction on removal checks the node's labels against.
  if (pod.spec?.nodeSelector) spec.nodeSelector = internRecord(pod.spec.nodeSelector)!;
  const required = pod.spec?.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution;
  if (required)
    spec.affinity = { nodeAffinity: { requiredDuringSchedulingIgnoredDuringExecution: required } };
  const status: SlimPod['status'] = {};
  if (pod.status?.phase) status.phase = intern(pod.status.phase);
  if (pod.status?.hostIP) status.hostIP = intern(pod.status.hostIP);
  // Only Ready is read (podReady); a kubelet reports four more, which at 150,000 pods cost MBs.
  const ready = pod.status?.conditions?.find((c) => c.type === 'Ready');
  if (ready) status.conditions = READY[ready.status] ?? [{ type: 'Ready', status: intern(ready.status) }];
  const metadata = slimMetadata(pod.metadata);
  if (metadata.annotations && !Object.keys(metadata.annotations).length)
    metadata.annotations = NO_ANNOTATIONS;
  return { apiVersion: 'v1', kind: 'Pod', metadata, spec, status };
}

export interface SlimNode extends KubeObject {
  spec: { taints?: { key: string; value?: string; effect: string }[]; unschedulable?: boolean };
  status: { nodeInfo?: Record<string, string>; conditions?: { type: string; status: string }[] };
}

interface FullNode extends KubeObject {
  spec?: SlimNode['spec'] & Record<string, unknown>;
  status?: {
    nodeInfo?: Record<string, string>;
    conditions?: { type: string; status: string; reason?: string }[];
  };
}

const NODE_INFO = [
  'architecture',
  'operatingSystem',
  'kernelVersion',
  'osImage',
  'containerRuntimeVersion',
  'kubeletVersion',
];

/** Berth's field managers are all named berth-*. */
export const isBerthManager = (name: string): boolean => name.startsWith('berth-');

/**
 * The managedFields entry a slim node keeps for every other manager together: only the labels and
 * annotations that a Berth manager owns too. Changing such a key is an apply conflict.
 */
export const OTHER_MANAGERS = 'other-managers';

interface FieldsEntry {
  manager?: string;
  operation?: string;
  fieldsV1?: Record<string, Record<string, Record<string, unknown>>>;
}
const META_MAPS = ['f:labels', 'f:annotations'] as const;

/** What of Berth's label and annotation keys other managers own as well, as one entry (or none). */
function othersShare(berth: FieldsEntry[], others: FieldsEntry[]): FieldsEntry | undefined {
  const meta: Record<string, Record<string, unknown>> = {};
  for (const map of META_MAPS) {
    const ours = new Set(berth.flatMap((e) => Object.keys(e.fieldsV1?.['f:metadata']?.[map] ?? {})));
    if (!ours.size) continue;
    const shared = others.flatMap((e) =>
      Object.keys(e.fieldsV1?.['f:metadata']?.[map] ?? {}).filter((k) => ours.has(k)),
    );
    if (shared.length) meta[map] = Object.fromEntries(shared.map((k) => [k, {}]));
  }
  return Object.keys(meta).length
    ? { manager: OTHER_MANAGERS, operation: 'Update', fieldsV1: { 'f:metadata': meta } }
    : undefined;
}

/**
 * A part most nodes have alike (their conditions, node info, annotations, taints, and Berth's
 * managedFields entries written within one second): one frozen copy serves them all, by its JSON (as
 * slimOwners). A node's update then replaces its own parts only, and the cache it leaves behind for
 * the collector is that much smaller.
 */
const alike = <T extends object>(value: T, own: unknown): T =>
  share(JSON.stringify(value), own, () => deepFreeze(value));

/**
 * The node fields Berth's controllers read: labels, annotations, taints, node info, conditions,
 * and the managedFields entries of Berth's own field managers (so that a controller knows what it
 * owns without caching everybody's), with one entry for the keys others own too (OTHER_MANAGERS).
 * Images and addresses, the bulk of a node, are dropped.
 */
export function slimNode(obj: KubeObject): SlimNode {
  const node = obj as FullNode;
  const metadata = slimMetadata(node.metadata, 'all');
  if (metadata.annotations) metadata.annotations = alike(metadata.annotations, node.metadata?.annotations);
  if (node.metadata?.creationTimestamp) metadata.creationTimestamp = node.metadata.creationTimestamp;
  const all = (node.metadata?.managedFields ?? []) as FieldsEntry[];
  const mf = all.filter((e) => e.manager !== undefined && isBerthManager(e.manager));
  const others = othersShare(
    mf,
    all.filter((e) => !mf.includes(e)),
  );
  if (others) mf.push(others);
  if (mf.length) metadata.managedFields = alike(mf, node.metadata?.managedFields);
  const spec: SlimNode['spec'] = {};
  if (node.spec?.taints?.length) {
    const taints = node.spec.taints.map((t) => ({ ...t, key: intern(t.key), effect: intern(t.effect) }));
    spec.taints = alike(taints, node.spec.taints);
  }
  if (node.spec?.unschedulable) spec.unschedulable = true;
  const status: SlimNode['status'] = {};
  const info = node.status?.nodeInfo;
  if (info) {
    const kept: Record<string, string> = {};
    for (const k of NODE_INFO) if (info[k]) kept[k] = intern(info[k]);
    status.nodeInfo = alike(kept, info);
  }
  if (node.status?.conditions?.length) {
    const conditions = node.status.conditions.map((c) => ({
      type: intern(c.type),
      status: intern(c.status),
    }));
    status.conditions = alike(conditions, node.status.conditions);
  }
  return { apiVersion: 'v1', kind: 'Node', metadata, spec, status };
}

/** The informer of slim nodes, one for every capability and the page (Manager.informer shares it by its transform). */
export const nodeInformer = (manager: Manager): Informer<SlimNode> =>
  manager.informer<SlimNode>(Resources.nodes, { transform: interning('slim-node', slimNode) });

const POD_NODE_INDEX = 'nodeName';

/** The informer of slim pods, shared like nodeInformer's, indexed by the node each pod runs on (podsOn). */
export function podInformer(manager: Manager): Informer<SlimPod> {
  const pods = manager.informer<SlimPod>(Resources.pods, { transform: interning('slim-pod', slimPod) });
  pods.addIndexer(POD_NODE_INDEX, (p) => (p.spec.nodeName ? [p.spec.nodeName] : []));
  return pods;
}

/** The pods of a podInformer bound to `node`. */
export const podsOn = (pods: Informer<SlimPod>, node: string): SlimPod[] =>
  pods.byIndex(POD_NODE_INDEX, node);
