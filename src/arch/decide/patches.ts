// Architecture-aware placement's pure decisions: the one pod patch that gates, places (affinity or
// tolerations, result, state) or releases a pod, and what a placement at admission says of itself.
// No I/O.
import { isDeepStrictEqual } from 'node:util';
import { type Inspection } from '../../registry/types.ts';
import type { NodeTaint } from '../../policy/nodes/write.ts';
import { tolerates, type Toleration } from '../../policy/nodes/taints.ts';
import { guarded, mutate, type JsonPatchOp } from '../../runtime/api/jsonpatch.ts';
import type { KubeObject } from '../../runtime/api/meta.ts';
import {
  ARCH_LABEL,
  ARCH_TAINT,
  FAILURE_ANNOTATION,
  POLICY_ANNOTATION,
  RESULT_ANNOTATION,
  SCHEDULING_GATE,
  STATE_LABEL,
  type ArchPlacementSpec,
  type PodState,
} from '../types.ts';
import { hasSchedulingGate } from '../../policy/pods.ts';
import {
  type ArchPod,
  NO_COMMON_ARCHITECTURE,
  requiredTerms,
  type NodeSelectorTerm,
  type PreferredTerm,
} from './pods.ts';
import { type Policy } from './policies.ts';
import { intersection, resultText, podImages, type Placement } from './images.ts';

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
  const terms = requiredTerms(pod);
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
        nodeSelectorTerms: withArchRequirement(requiredTerms(pod), values),
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
