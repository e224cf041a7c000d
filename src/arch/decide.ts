// Pure decisions of architecture-aware placement: which pods are never gated, which ArchPlacement
// places a pod, the architectures every image of a pod supports, and the one pod patch that places
// it (affinity or tolerations, result, state) and takes its gate off. The webhook and the controller
// feed these from their caches and the registry; nothing here does I/O.
import { isDeepStrictEqual } from 'node:util';
import { parseReference, registryListed } from '../registry/reference.ts';
import { InspectionError, MAX_RETRY_AFTER_MS, type Inspection, type Platform } from '../registry/types.ts';
import { podSelected, podSelection } from '../policy/namespace.ts';
import type { NodeTaint } from '../policy/nodes/plan.ts';
import { tolerates, type Toleration } from '../policy/nodes/taints.ts';
import { guarded, mutate, type JsonPatchOp } from '../runtime/api/jsonpatch.ts';
import type { KubeObject } from '../runtime/api/meta.ts';
import {
  ARCH_LABEL,
  ARCH_TAINT,
  ArchPlacement,
  FAILURE_ANNOTATION,
  POLICY_ANNOTATION,
  RESULT_ANNOTATION,
  SCHEDULING_GATE,
  SKIP_ANNOTATION,
  STATE_LABEL,
  type ArchPlacementSpec,
  type PodState,
} from './types.ts';
import { daemonSetOwner, hasSchedulingGate, isMirrorPod, podOs } from '../policy/pods.ts';

export interface NodeSelectorRequirement {
  key: string;
  operator: string;
  values?: string[];
}
export interface NodeSelectorTerm {
  matchExpressions?: NodeSelectorRequirement[];
  matchFields?: NodeSelectorRequirement[];
}
export interface PreferredTerm {
  weight: number;
  preference: NodeSelectorTerm;
}
interface Container {
  name: string;
  image: string;
  imagePullPolicy?: string;
}

/** The pod fields placement reads and writes. */
export interface ArchPod extends KubeObject {
  spec: {
    nodeName?: string;
    nodeSelector?: Record<string, string>;
    affinity?: {
      nodeAffinity?: {
        requiredDuringSchedulingIgnoredDuringExecution?: { nodeSelectorTerms: NodeSelectorTerm[] };
        preferredDuringSchedulingIgnoredDuringExecution?: PreferredTerm[];
      };
    } & Record<string, unknown>;
    tolerations?: Toleration[];
    schedulingGates?: { name: string }[];
    imagePullSecrets?: { name: string }[];
    containers: Container[];
    initContainers?: Container[];
    os?: { name: string };
  };
}

/** The value of the impossible requirement an empty intersection gets: no kubelet reports it. */
export const NO_COMMON_ARCHITECTURE = 'berth-no-common-architecture';

export interface ExemptionContext {
  berthNamespace: string;
  /** Whether a Service of the namespace backs an admission webhook (from the webhook configurations). */
  servesWebhook(namespace: string): boolean;
}

/** The namespaces of the Services a Mutating- or ValidatingWebhookConfiguration calls. */
export const webhookServiceNamespaces = (config: KubeObject): string[] => [
  ...new Set(
    ((config['webhooks'] ?? []) as { clientConfig?: { service?: { namespace?: string } } }[]).flatMap(
      (h) => h.clientConfig?.service?.namespace ?? [],
    ),
  ),
];

const required = (pod: ArchPod) =>
  pod.spec.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution?.nodeSelectorTerms;

/** The pod already says which architectures it runs on: its nodeSelector, or every required term. */
export function constrainsArch(pod: ArchPod): boolean {
  if (pod.spec.nodeSelector?.[ARCH_LABEL] !== undefined) return true;
  const terms = required(pod);
  return !!terms?.length && terms.every((t) => (t.matchExpressions ?? []).some((e) => e.key === ARCH_LABEL));
}

/** Why a pod is never gated, or undefined when a policy may gate it. */
export function exemption(
  pod: ArchPod,
  namespace: string,
  ctx: ExemptionContext,
  /** The pod's arch constraint is Berth's own (a reinvocation, toPlaceAgain): it does not exempt. */
  ownArch = false,
): string | undefined {
  // Cluster add-ons: gating them could hold up the whole cluster.
  if (namespace.startsWith('kube-')) return `namespace ${namespace} holds cluster add-ons`;
  // Berth's own pods: gated, they could never be released.
  if (namespace === ctx.berthNamespace) return "Berth's own namespace";
  // A pod that serves a webhook, gated while Berth is down, could block Berth's own pod (the anchor's deadlock).
  if (ctx.servesWebhook(namespace)) return `namespace ${namespace} serves an admission webhook`;
  if (pod.spec.nodeName) return 'the pod names its node (a pod with nodeName cannot carry gates)';
  const annotations = pod.metadata?.annotations ?? {};
  if (isMirrorPod(pod)) return 'mirror pod of a static pod';
  if (daemonSetOwner(pod)) return 'DaemonSet pods run on the node they are made for';
  if (annotations[SKIP_ANNOTATION] === 'true') return `annotation ${SKIP_ANNOTATION}=true`;
  if (!ownArch && constrainsArch(pod)) return `the pod already constrains ${ARCH_LABEL}`;
  return undefined;
}

export interface Policy {
  name: string;
  spec: ArchPlacementSpec;
  /** Being deleted: it gates nothing new, and releases what it holds. */
  deleting: boolean;
}

/** Specs as parsed, by object uid: the spec changes only with the generation. */
export type ParseCache = Map<
  string,
  { generation: number | undefined; spec?: ArchPlacementSpec; error?: string }
>;

/** Every ArchPlacement that parses, highest priority first (ties by name), and the others' errors. */
export function parsePolicies(
  objs: KubeObject[],
  cache: ParseCache = new Map(),
): { policies: Policy[]; errors: Map<string, string> } {
  const policies: Policy[] = [];
  const errors = new Map<string, string>();
  const seen = new Set<string>();
  for (const obj of objs) {
    const name = obj.metadata!.name!;
    const uid = obj.metadata?.uid ?? name;
    seen.add(uid);
    let c = cache.get(uid);
    if (!c || c.generation !== obj.metadata?.generation) {
      const r = ArchPlacement.parse({
        ...obj,
        apiVersion: ArchPlacement.apiVersion,
        kind: ArchPlacement.kind,
      });
      c = r.success
        ? { generation: obj.metadata?.generation, spec: r.data.spec }
        : { generation: obj.metadata?.generation, error: r.error };
      cache.set(uid, c);
    }
    if (c.spec) policies.push({ name, spec: c.spec, deleting: !!obj.metadata?.deletionTimestamp });
    else errors.set(name, c.error!);
  }
  for (const uid of cache.keys()) if (!seen.has(uid)) cache.delete(uid);
  policies.sort(
    (a, b) => b.spec.priority - a.spec.priority || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0),
  );
  return { policies, errors };
}

/** The policy that places the pod: the first live one (by priority, then name) that selects it. */
export function choosePolicy(
  policies: Policy[],
  pod: KubeObject,
  namespace: string,
  namespaceLabels: Record<string, string> | undefined,
  berthNamespace: string,
): Policy | undefined {
  return policies.find(
    (p) =>
      !p.deleting && podSelected(namespace, pod.metadata?.labels, namespaceLabels, p.spec, berthNamespace),
  );
}

/**
 * Whether choosing the pod's policy turns on the labels of its namespace, not known yet: a live
 * policy whose namespaceSelector decides comes before any that selects the pod whatever they are.
 */
export function namespaceDecides(
  policies: Policy[],
  pod: KubeObject,
  namespace: string,
  berthNamespace: string,
): boolean {
  for (const p of policies) {
    if (p.deleting) continue;
    const selected = podSelection(namespace, pod.metadata?.labels, undefined, p.spec, berthNamespace);
    if (selected !== false) return selected === undefined;
  }
  return false;
}

export const gated = (pod: ArchPod): boolean => hasSchedulingGate(pod, SCHEDULING_GATE);

/**
 * A copy of the pod to change, new down to what Berth's changes reach (its metadata and spec; the
 * affinity is copied where it is changed) and sharing the rest with `pod`, which stays as it was.
 * The webhook makes one for every review: a structuredClone of the whole pod cost milliseconds in
 * bursts (bench:arch's CPU profile), and the patch's diff skips what is shared at once.
 */
function editable(pod: ArchPod): ArchPod & { metadata: NonNullable<ArchPod['metadata']> } {
  return { ...pod, metadata: { ...pod.metadata }, spec: { ...pod.spec } };
}

/** The pod with Berth's gate, the state label Gated and its policy's name. */
function withGate(pod: ArchPod, policy: string): ArchPod {
  const out = editable(pod);
  out.spec.schedulingGates = [...(out.spec.schedulingGates ?? []), { name: SCHEDULING_GATE }];
  const meta = out.metadata;
  meta.labels = { ...meta.labels, [STATE_LABEL]: 'Gated' };
  meta.annotations = { ...meta.annotations, [POLICY_ANNOTATION]: policy };
  return out;
}

/**
 * The webhook's change to a new pod the policy selects: nothing when the pod carries the gate
 * already (a reinvocation). When every image's platforms are already known without a request
 * (`known`: cached digests, fresh tags, tags pulled `Always` read since the pod came) and they
 * share an architecture, the pod is placed at once and never gated: no second write, no wait for
 * the controller. Otherwise the gate, the state label and the policy's name, and the controller
 * reads the images.
 */
export function gatePod(
  pod: ArchPod,
  policy: Policy,
  known?: Inspection[],
  opts: { archTainted?: boolean; from?: ArchPod } = {},
): { patch: JsonPatchOp[]; placed?: string[] } {
  if (gated(pod)) return { patch: [] };
  // `from`: the pod to decide on (toPlaceAgain's), where the patch is still `pod`'s.
  const base = opts.from ?? pod;
  const held = withGate(base, policy.name);
  const architectures = known && intersection(base, known);
  if (!known || !architectures?.length) {
    // Gated: no result of an earlier placement stands.
    if (opts.from) delete held.metadata!.annotations![RESULT_ANNOTATION];
    return { patch: mutate(pod, held) };
  }
  const out = placed(
    held,
    { kind: 'Placed', architectures, inspections: known },
    { ...policy.spec, archTainted: opts.archTainted === true },
  );
  out.metadata!.annotations![RESULT_ANNOTATION] = resultText(architectures, known, true);
  return { patch: mutate(pod, out), placed: architectures };
}

/**
 * Where a gated pod that lost its state label is found (the controller's informer selects the label,
 * so it no longer sees the pod): among the pods not bound to a node (a gated pod never is) that have
 * no such label. The apiserver selects on both, so the answer holds no pod Berth has in hand already.
 */
export const UNLABELLED_UNBOUND = { fieldSelector: 'spec.nodeName=', labelSelector: `!${STATE_LABEL}` };

/**
 * A pod that carries Berth's gate without the state label gets the label back (Gated), so that the
 * controller's informer sees it again and places or releases it; nothing for any other pod. Valid
 * only while the gate is still there.
 */
export function relabelPatch(pod: ArchPod): JsonPatchOp[] {
  const gates = pod.spec.schedulingGates ?? [];
  const at = gates.findIndex((g) => g.name === SCHEDULING_GATE);
  if (at < 0 || pod.metadata?.labels?.[STATE_LABEL] !== undefined) return [];
  const out = editable(pod);
  out.metadata.labels = { ...out.metadata.labels, [STATE_LABEL]: 'Gated' };
  return [{ op: 'test', path: `/spec/schedulingGates/${at}`, value: gates[at] }, ...mutate(pod, out)];
}

/** What a placement at admission says of itself, in its result: the architectures and the images. */
export interface AdmissionPlacement {
  architectures: string[];
  images: string[];
}

/** What Berth recorded on a pod: its state, the policy that gated it, its images' result, why it failed. */
export const podRecords = (pod: ArchPod) => ({
  state: pod.metadata?.labels?.[STATE_LABEL],
  policy: pod.metadata?.annotations?.[POLICY_ANNOTATION],
  result: pod.metadata?.annotations?.[RESULT_ANNOTATION],
  failure: pod.metadata?.annotations?.[FAILURE_ANNOTATION],
});

/** A pod the webhook placed at admission: its result, for the event the pod could not get then. */
export function placedAtAdmission(pod: ArchPod): AdmissionPlacement | undefined {
  if (pod.metadata?.labels?.[STATE_LABEL] !== 'Placed' || gated(pod)) return undefined;
  try {
    const r = JSON.parse(pod.metadata?.annotations?.[RESULT_ANNOTATION] ?? '{}') as {
      placedAt?: unknown;
      architectures?: unknown;
      images?: { image?: unknown }[];
    };
    if (r.placedAt !== 'admission' || !Array.isArray(r.architectures)) return undefined;
    const strings = (xs: unknown[]) => xs.filter((x): x is string => typeof x === 'string');
    return {
      architectures: strings(r.architectures),
      images: strings((Array.isArray(r.images) ? r.images : []).map((i) => i?.image)),
    };
  } catch {
    return undefined;
  }
}

/**
 * A pod placed at admission (`first`, placedAtAdmission) as Berth's webhook is asked again
 * (reinvocationPolicy IfNeeded) after a later webhook changed it: a sidecar injected, an image
 * rewritten to a mirror. Undefined when its images are the ones it was placed for (nothing to do);
 * otherwise the pod without what the first placement added (exactly Berth's `In` requirement and
 * preferred terms, its tolerations), to be decided anew on every image.
 */
export function toPlaceAgain(pod: ArchPod, policy: Policy, first: AdmissionPlacement): ArchPod | undefined {
  if (podImages(pod).every((i) => first.images.includes(i.image))) return undefined;
  const values = first.architectures.length ? first.architectures : [NO_COMMON_ARCHITECTURE];
  const ours = (e: { key: string; operator: string; values?: string[] }) =>
    e.key === ARCH_LABEL && e.operator === 'In' && isDeepStrictEqual(e.values, values);
  const out = editable(pod);
  const terms = required(pod);
  // Taints mode placed by tolerations only: the affinity is all the pod's own.
  if (terms?.length && policy.spec.mode !== 'Taints') {
    const left = terms
      .filter(
        (t) =>
          !(
            (t.matchExpressions ?? []).length === 1 &&
            ours(t.matchExpressions![0]!) &&
            !t.matchFields?.length
          ),
      )
      .map((t) => ({ ...t, matchExpressions: (t.matchExpressions ?? []).filter((e) => !ours(e)) }));
    const affinity = (out.spec.affinity = { ...out.spec.affinity });
    const node = (affinity.nodeAffinity = { ...affinity.nodeAffinity });
    if (left.length) node.requiredDuringSchedulingIgnoredDuringExecution = { nodeSelectorTerms: left };
    else delete node.requiredDuringSchedulingIgnoredDuringExecution;
    const preferred = (node.preferredDuringSchedulingIgnoredDuringExecution ?? []).filter(
      (t) => !(policy.spec.preferredArchitectures ?? []).some((p) => isDeepStrictEqual(t, preferredTerm(p))),
    );
    if (preferred.length) node.preferredDuringSchedulingIgnoredDuringExecution = preferred;
    else delete node.preferredDuringSchedulingIgnoredDuringExecution;
  }
  const tolerations = (pod.spec.tolerations ?? []).filter(
    (t) => !first.architectures.some((a) => isDeepStrictEqual(t, archToleration(a))),
  );
  if (tolerations.length) out.spec.tolerations = tolerations;
  else delete out.spec.tolerations;
  return out;
}

/** One image of the pod, once however many containers name it. */
export interface PodImage {
  image: string;
  /** Some container pulls it with imagePullPolicy Always: the tag is revalidated. */
  revalidate: boolean;
}

/**
 * Distinct images Berth reads for one pod at most: each costs up to 17 registry requests (an index
 * and 16 children), and one pod of hundreds of images would hold every pod behind it (issue 47).
 */
export const MAX_POD_IMAGES = 32;

/** Why a pod's images are not read at all (a permanent Bounded failure), or undefined. */
export function tooManyImages(images: readonly PodImage[]): InspectionError | undefined {
  const n = new Set(images.map((i) => i.image)).size;
  if (n <= MAX_POD_IMAGES) return undefined;
  return new InspectionError(
    'Bounded',
    '',
    `the pod names ${n} images; Berth reads at most ${MAX_POD_IMAGES} for one pod`,
  );
}

/**
 * `namespace/name` of each pull secret a pod's images may be read with: its own, then the
 * cluster-wide one (`--arch-pull-secret`) when given. Also whose cached reads may answer for the
 * pod (registry/known.ts). `namespace`: a pod made from a template has none of its own at admission.
 */
export function pullSecretRefs(pod: ArchPod, namespace: string, clusterWide?: string): string[] {
  const refs = (pod.spec.imagePullSecrets ?? []).map((s) => `${namespace}/${s.name}`);
  if (clusterWide?.includes('/')) refs.push(clusterWide);
  return refs;
}

export function podImages(pod: ArchPod): PodImage[] {
  const out = new Map<string, PodImage>();
  for (const c of [...(pod.spec.initContainers ?? []), ...pod.spec.containers]) {
    const seen = out.get(c.image);
    const always = c.imagePullPolicy === 'Always';
    if (seen) seen.revalidate ||= always;
    else out.set(c.image, { image: c.image, revalidate: always });
  }
  return [...out.values()];
}

/**
 * The first of the pod's images whose registry its policy does not list, as the failure it is; none
 * when the policy lists no registries. An image that is no reference is left to its inspection,
 * which fails it without a request.
 */
export function unlistedRegistry(pod: ArchPod, policy: Policy): InspectionError | undefined {
  const listed = policy.spec.registries;
  if (!listed) return undefined;
  for (const { image } of podImages(pod)) {
    let domain: string;
    try {
      domain = parseReference(image).domain;
    } catch {
      continue;
    }
    if (!registryListed(listed, domain))
      return new InspectionError(
        'RegistryNotAllowed',
        image,
        `${domain} is not among the registries ArchPlacement ${policy.name} lists (spec.registries); no request was sent`,
      );
  }
  return undefined;
}

const platformText = (p: Platform) => `${p.os}/${p.architecture}${p.variant ? `/${p.variant}` : ''}`;

/**
 * The architectures every image supports for the pod's OS (podOs), sorted. The node label has no
 * variant, so variants narrow nothing here; they stay in the result.
 */
export function intersection(pod: ArchPod, inspections: Inspection[]): string[] {
  const os = podOs(pod);
  let common: Set<string> | undefined;
  for (const i of inspections) {
    const archs = new Set(i.platforms.filter((p) => p.os === os).map((p) => p.architecture));
    common = common ? new Set([...common].filter((a) => archs.has(a))) : archs;
  }
  return [...(common ?? [])].sort();
}

/** What the controller decided for a gated pod. */
export type Placement =
  | { kind: 'Placed'; architectures: string[]; inspections: Inspection[] }
  | { kind: 'Failed'; reason: string; message: string; fallback?: string }
  | { kind: 'Released'; message: string };

/** The result annotation: what Berth read, so that `kubectl get pod -o yaml` explains the affinity. */
export function resultText(architectures: string[], inspections: Inspection[], atAdmission = false): string {
  return JSON.stringify({
    architectures,
    ...(atAdmission ? { placedAt: 'admission' } : {}),
    images: inspections.map((i) => ({
      image: i.image,
      digest: i.digest,
      platforms: i.platforms.map(platformText),
    })),
  });
}

/** Each image's architectures for the pod's OS, for messages: `a:1 (amd64), b:2 (none for linux)`. */
export const imagesText = (inspections: Inspection[], os: string): string =>
  inspections
    .map((i) => {
      const archs = new Set(i.platforms.filter((p) => p.os === os).map((p) => p.architecture));
      return `${i.image} (${[...archs].sort().join(', ') || `none for ${os}`})`;
    })
    .join(', ');

function withArchRequirement(terms: NodeSelectorTerm[] | undefined, values: string[]): NodeSelectorTerm[] {
  const requirement = { key: ARCH_LABEL, operator: 'In', values };
  // No required term yet: one term, ours. Otherwise ours joins every term (while gated, a term may
  // gain requirements but no term may be added: an added term would widen an OR).
  if (!terms?.length) return [{ matchExpressions: [requirement] }];
  return terms.map((t) => ({ ...t, matchExpressions: [...(t.matchExpressions ?? []), { ...requirement }] }));
}

/** The preferred term Berth adds for one of a policy's preferred architectures. */
const preferredTerm = (p: { architecture: string; weight: number }): PreferredTerm => ({
  weight: p.weight,
  preference: { matchExpressions: [{ key: ARCH_LABEL, operator: 'In', values: [p.architecture] }] },
});

function withPreferred(
  have: PreferredTerm[] | undefined,
  architectures: string[],
  preferred: ArchPlacementSpec['preferredArchitectures'],
): PreferredTerm[] | undefined {
  const add = (preferred ?? []).filter((p) => architectures.includes(p.architecture)).map(preferredTerm);
  return add.length ? [...(have ?? []), ...add] : have;
}

/** Taints mode: while some live policy says it, every node carries its architecture's taint. */
export const nodesTainted = (policies: Policy[]): boolean =>
  policies.some((p) => p.spec.mode === 'Taints' && !p.deleting);

/** The toleration of the Taints mode's taint on nodes of one architecture. */
export const archToleration = (architecture: string): Toleration => ({
  key: ARCH_TAINT,
  operator: 'Equal',
  value: architecture,
  effect: 'NoSchedule',
});

/** The taint Taints mode keeps on a node: its architecture, from its label or its kubelet's report. */
export function nodeArchTaint(
  node: KubeObject & { status?: { nodeInfo?: Record<string, string> } },
): NodeTaint[] {
  const arch = node.metadata?.labels?.[ARCH_LABEL] ?? node.status?.nodeInfo?.['architecture'];
  return arch ? [{ key: ARCH_TAINT, value: arch, effect: 'NoSchedule' }] : [];
}

/** How a pod is placed: its policy's mode and preferences, and whether the nodes carry the arch taint. */
export type PlaceOptions = Pick<ArchPlacementSpec, 'mode' | 'preferredArchitectures'> & {
  /** Some live Taints policy keeps the taint on every node (nodesTainted), whatever the pod's own mode. */
  archTainted?: boolean;
};

/**
 * The one JSON patch that places a gated pod and takes Berth's gate off (other gates stay), valid
 * only on the version read. Placed: `kubernetes.io/arch In <architectures>` in every required term
 * (an impossible value when none is common), preferred terms, or in Taints mode the tolerations of
 * those architectures. Failed: released as it is, or placed on the fallback architecture. A pod
 * released unplaced where nodes carry the arch taint tolerates it whatever its value, so that it
 * may go anywhere, as without Berth.
 */
export function placePatch(
  pod: ArchPod,
  placement: Placement,
  spec: PlaceOptions = { mode: 'NodeAffinity' },
): JsonPatchOp[] {
  // Guarded on what it overwrites and on the images it was decided from, not on the resourceVersion:
  // the scheduler marks a gated pod SchedulingGated right after creation, which must not fail it.
  const images = (['initContainers', 'containers'] as const).flatMap((list) =>
    (pod.spec[list] ?? []).map((c, i): JsonPatchOp => ({
      op: 'test',
      path: `/spec/${list}/${i}/image`,
      value: c.image,
    })),
  );
  return [...images, ...guarded(pod, mutate(pod, placed(pod, placement, spec)))];
}

/** The pod placed (or released) as `placement` says, Berth's gate off. */
function placed(pod: ArchPod, placement: Placement, spec: PlaceOptions): ArchPod {
  const out = editable(pod);
  const meta = out.metadata;
  const annotations: Record<string, string> = { ...meta.annotations };
  let state: PodState;
  let architectures: string[] | undefined;
  switch (placement.kind) {
    case 'Placed':
      state = 'Placed';
      architectures = placement.architectures;
      annotations[RESULT_ANNOTATION] = resultText(placement.architectures, placement.inspections);
      delete annotations[FAILURE_ANNOTATION];
      break;
    case 'Failed':
      state = 'Failed';
      architectures = placement.fallback === undefined ? undefined : [placement.fallback];
      annotations[FAILURE_ANNOTATION] = `${placement.reason}: ${placement.message}`;
      break;
    case 'Released':
      state = 'Released';
      annotations[FAILURE_ANNOTATION] = placement.message;
  }
  meta.annotations = annotations;
  meta.labels = { ...meta.labels, [STATE_LABEL]: state };
  if (architectures) {
    const s = out.spec;
    const values = architectures.length ? architectures : [NO_COMMON_ARCHITECTURE];
    // The taints' tolerations: in Taints mode instead of affinity, and beside it while another
    // policy keeps every node tainted (placed where it may run, and let on).
    if ((spec.mode === 'Taints' || spec.archTainted) && architectures.length) {
      const have = s.tolerations ?? [];
      const add = architectures
        .map(archToleration)
        .filter(
          (t) => !have.some((h) => tolerates(h, { key: ARCH_TAINT, value: t.value, effect: 'NoSchedule' })),
        );
      if (add.length) s.tolerations = [...have, ...add];
    }
    // Affinity but in Taints mode, where none in common is the impossible value all the same.
    if (spec.mode !== 'Taints' || !architectures.length) {
      const affinity = (s.affinity = { ...s.affinity });
      const node = (affinity.nodeAffinity = { ...affinity.nodeAffinity });
      node.requiredDuringSchedulingIgnoredDuringExecution = {
        ...node.requiredDuringSchedulingIgnoredDuringExecution,
        nodeSelectorTerms: withArchRequirement(required(pod), values),
      };
      const preferred = withPreferred(
        node.preferredDuringSchedulingIgnoredDuringExecution,
        architectures,
        spec.preferredArchitectures,
      );
      if (preferred) node.preferredDuringSchedulingIgnoredDuringExecution = preferred;
    }
  } else if (spec.mode === 'Taints' || spec.archTainted) {
    const have = out.spec.tolerations ?? [];
    const taint = { key: ARCH_TAINT, effect: 'NoSchedule' };
    // Whatever the value: an Equal toleration of one architecture is not enough.
    if (!have.some((h) => h.operator === 'Exists' && tolerates(h, taint)))
      out.spec.tolerations = [...have, { ...taint, operator: 'Exists' }];
  }
  const gates = (out.spec.schedulingGates ?? []).filter((g) => g.name !== SCHEDULING_GATE);
  if (gates.length) out.spec.schedulingGates = gates;
  else delete out.spec.schedulingGates;
  return out;
}

/**
 * A gated pod's policy is gone or being deleted: the gate comes off, the pod as it is (tolerating
 * the arch taint when its policy was in Taints mode or nodes carry the taint for another).
 */
export const releasePatch = (pod: ArchPod, why: string, spec?: PlaceOptions): JsonPatchOp[] =>
  placePatch(pod, { kind: 'Released', message: why }, spec);

/**
 * Why a gated pod is released unplaced, its policy (named by its annotation, `name`) gone or going;
 * a pod whose annotation someone took off names none.
 */
export function unplacedRelease(
  name: string | undefined,
  policy: Pick<Policy, 'deleting'> | undefined,
): string {
  if (name === undefined)
    return `no ${POLICY_ANNOTATION} annotation names its ArchPlacement: released unplaced`;
  return `ArchPlacement ${name} ${policy ? 'is being deleted' : 'does not exist'}: released unplaced`;
}

/** A pod's transient failures so far, until it is placed or given up on. */
export interface Retries {
  /** Retries used (`onFailure.retries`). */
  attempts: number;
  /** When the pod first waited out a registry's Retry-After (ms since the epoch). */
  pausedSince?: number;
}

/**
 * How long after its first one a pod keeps waiting out registries' pauses without using its retries:
 * the longest pause the registry client honours, so one full pause fits.
 */
export const MAX_PAUSED_MS = MAX_RETRY_AFTER_MS;

/** The registry refused the credentials, or hid the repository as not found. */
export const refusedByRegistry = (err: Pick<InspectionError, 'reason'>): boolean =>
  err.reason === 'Unauthorized' || err.reason === 'NotFound';

/**
 * After a failed inspection: when to try the pod again and its retries then, or undefined to give
 * up (Failed: released or placed on the fallback). A transient failure waits 1 s, doubling to 30 s,
 * for at most `maxRetries` retries. A registry that asked to wait (Retry-After) is waited out as
 * asked without using a retry, until MAX_PAUSED_MS after the pod's first pause: each try in a pause
 * fails at once, and the backoff alone would spend every retry in seconds (with no retries at all,
 * the policy asked to act at once, and nothing is waited out). A refusal or a not-found
 * while a pull secret the pod names was missing or unreadable is transient too: the secret may come
 * next (applied with its workload), and reading anonymously says nothing of the image.
 */
export function nextTry(
  err: Pick<InspectionError, 'reason' | 'transient' | 'retryAt'>,
  retries: Retries,
  maxRetries: number,
  ctx: { now: number; secretsMissing: boolean },
): { afterMs: number; retries: Retries } | undefined {
  if (!err.transient && !(refusedByRegistry(err) && ctx.secretsMissing)) return undefined;
  const pausedSince = retries.pausedSince ?? ctx.now;
  if (
    maxRetries > 0 &&
    err.retryAt !== undefined &&
    err.retryAt > ctx.now &&
    err.retryAt - pausedSince <= MAX_PAUSED_MS
  )
    return { afterMs: err.retryAt - ctx.now, retries: { ...retries, pausedSince } };
  if (retries.attempts >= maxRetries) return undefined;
  return {
    afterMs: Math.min(1000 * 2 ** retries.attempts, 30_000),
    retries: { ...retries, attempts: retries.attempts + 1 },
  };
}

/** Berth's own annotations on the pods it gated, beside the state label. */
export const RECORD_ANNOTATIONS = [POLICY_ANNOTATION, RESULT_ANNOTATION, FAILURE_ANNOTATION];

/**
 * Uninstalling: the state label and the annotations Berth wrote come off an ungated pod (its affinity
 * or tolerations stay: the apiserver lets no one remove them from a pod that may be scheduled).
 */
export function recordsPatch(pod: ArchPod): JsonPatchOp[] {
  const out = structuredClone(pod);
  const meta = (out.metadata ??= {});
  if (meta.labels) delete meta.labels[STATE_LABEL];
  for (const a of RECORD_ANNOTATIONS) if (meta.annotations) delete meta.annotations[a];
  return guarded(pod, mutate(pod, out));
}

/** What a pod stands for in its policy's status. */
export interface Standing {
  state: PodState;
  /** Placed: the architectures it may run on (empty: none in common). */
  architectures?: string[];
  /** Failed: the reason, as the failure annotation starts. */
  reason?: string;
}

/** The pod's standing, read from what Berth wrote on it (so a restarted Berth counts the same). */
export function standingOf(pod: ArchPod): { policy: string; standing: Standing } | undefined {
  const policy = pod.metadata?.annotations?.[POLICY_ANNOTATION];
  const state = pod.metadata?.labels?.[STATE_LABEL];
  if (!policy || (state !== 'Gated' && state !== 'Placed' && state !== 'Failed' && state !== 'Released'))
    return undefined;
  // A gate that is still there wins over a label someone else set.
  if (gated(pod)) return { policy, standing: { state: 'Gated' } };
  if (state === 'Placed') {
    let architectures: string[] = [];
    try {
      const r = JSON.parse(pod.metadata?.annotations?.[RESULT_ANNOTATION] ?? '{}') as {
        architectures?: unknown;
      };
      if (Array.isArray(r.architectures))
        architectures = r.architectures.filter((a) => typeof a === 'string');
    } catch {
      // A result someone else rewrote counts as none in common.
    }
    return { policy, standing: { state, architectures } };
  }
  if (state === 'Failed') {
    const reason = pod.metadata?.annotations?.[FAILURE_ANNOTATION]?.split(':')[0] ?? 'Unknown';
    return { policy, standing: { state, reason } };
  }
  return { policy, standing: { state } };
}

export interface Report {
  gated: number;
  placed: number;
  failed: number;
  /** Placed pods whose architectures no node has (none in common included), by architecture set. */
  unschedulable: Map<string, number>;
  /** Failed pods by reason. */
  failures: Map<string, number>;
}

/** A policy's counts and problems from its pods' standings and the architectures the nodes have. */
export function report(standings: Standing[], nodeArchitectures: ReadonlySet<string>): Report {
  const r: Report = { gated: 0, placed: 0, failed: 0, unschedulable: new Map(), failures: new Map() };
  for (const s of standings) {
    if (s.state === 'Gated') r.gated++;
    else if (s.state === 'Failed') {
      r.failed++;
      r.failures.set(s.reason ?? 'Unknown', (r.failures.get(s.reason ?? 'Unknown') ?? 0) + 1);
    } else if (s.state === 'Placed') {
      r.placed++;
      const archs = s.architectures ?? [];
      if (!archs.some((a) => nodeArchitectures.has(a))) {
        const k = archs.join(', ') || 'none in common';
        r.unschedulable.set(k, (r.unschedulable.get(k) ?? 0) + 1);
      }
    }
  }
  return r;
}

/** The architectures of the nodes, as their labels (or kubelets) say. */
export function nodeArchitectures(
  nodes: (KubeObject & { status?: { nodeInfo?: Record<string, string> } })[],
): Set<string> {
  const out = new Set<string>();
  for (const n of nodes) for (const t of nodeArchTaint(n)) out.add(t.value!);
  return out;
}
