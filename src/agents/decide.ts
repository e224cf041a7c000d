// Pure decisions of agent placement: which pods count, who owns them, and what claims and label a
// node should carry. The controller feeds these from its caches and applies the result; the webhook
// thread decides with them too, so they load no zod (parse.ts reads the objects).
import type { NodeOutputs } from '../policy/nodes/write.ts';
import type { KeyClaim, KeyPattern } from '../policy/nodes/ownership.ts';
import type { SlimPod } from '../policy/slim.ts';
import type { KubeObject, OwnerReference } from '../runtime/api/meta.ts';
import { ownedKeys } from '../runtime/api/fields.ts';
import type { AgentPlacementSpec } from './types.ts';
import { claimKeyProblem } from './validate.ts';
import { podSelected } from '../policy/namespace.ts';

// Pod selection is the kit's, shared with architecture-aware placement.
export { podSelected } from '../policy/namespace.ts';

export interface Placement {
  name: string;
  spec: AgentPlacementSpec;
}

/** A placement as read from its object: `problems` (empty when usable) make it Invalid. */
export interface ParsedPlacement<O extends KubeObject = KubeObject> extends Placement {
  obj: O;
  problems: string[];
}

/** The pool a pod belongs to: the UID its claim is keyed by, and how to find it for the finalizer. */
export interface Owner {
  uid: string;
  /** What the claim annotation's value says: "Deployment/ns/web", or the namespace for uidLabel owners. */
  description: string;
  ref?: { apiVersion: string; kind: string; namespace?: string; name: string };
}

/** Finds an owner object in a cache (ReplicaSets and Jobs, to walk up to their own owners). */
export type OwnerLookup = (
  apiVersion: string,
  kind: string,
  namespace: string,
  name: string,
) => KubeObject | undefined;

const TERMINAL = new Set(['Succeeded', 'Failed']);

/** The pod has succeeded or failed: it no longer needs the agent. */
export const podFinished = (pod: SlimPod): boolean => TERMINAL.has(pod.status.phase ?? '');

/** A pod counts while it is bound to a node and not finished, and the placement selects it. */
export function podCounts(
  pod: SlimPod,
  namespaceLabels: Record<string, string> | undefined,
  spec: AgentPlacementSpec,
  berthNamespace: string,
): boolean {
  if (!pod.spec.nodeName || podFinished(pod)) return false;
  return podSelected(
    pod.metadata?.namespace ?? '',
    pod.metadata?.labels,
    namespaceLabels,
    spec,
    berthNamespace,
  );
}

const controllerOf = (obj: KubeObject): OwnerReference | undefined =>
  obj.metadata?.ownerReferences?.find((o) => o.controller);

// Kinds whose own controller is the real owner: a Deployment's ReplicaSet, a CronJob's Job.
const INTERMEDIATE = new Set(['apps/v1/ReplicaSet', 'batch/v1/Job']);

/** The owner of a pod under a placement's owner rule, or undefined when it has none. */
export function ownerOf(pod: KubeObject, spec: AgentPlacementSpec, lookup: OwnerLookup): Owner | undefined {
  const ns = pod.metadata?.namespace ?? '';
  if (spec.owner.uidLabel) {
    const uid = pod.metadata?.labels?.[spec.owner.uidLabel];
    if (!uid) return undefined;
    const ref =
      spec.owner.kind && spec.owner.apiVersion
        ? { apiVersion: spec.owner.apiVersion, kind: spec.owner.kind }
        : undefined;
    return { uid, description: ref ? `${ref.kind}/${ns}` : ns };
  }
  const direct = controllerOf(pod);
  if (!direct) return undefined;
  let ref: OwnerReference = direct;
  // Walk up through intermediate controllers whose owners are in the cache.
  for (let depth = 0; depth < 4 && INTERMEDIATE.has(`${ref.apiVersion}/${ref.kind}`); depth++) {
    const obj = lookup(ref.apiVersion, ref.kind, ns, ref.name);
    const up = obj && obj.metadata?.uid === ref.uid ? controllerOf(obj) : undefined;
    if (!up) break;
    ref = up;
  }
  return {
    uid: ref.uid,
    description: `${ref.kind}/${ns}/${ref.name}`,
    ref: { apiVersion: ref.apiVersion, kind: ref.kind, namespace: ns, name: ref.name },
  };
}

export const claimKey = (spec: AgentPlacementSpec, ownerUid: string): string =>
  `${spec.claimAnnotationPrefix}${ownerUid}`;

/**
 * The claim a pod the placement selects makes once it runs on a node: its owner, with why the
 * claim key is refused when it is; none when the pod has no owner. The node controller
 * (decideNode) and the wait-for-agent webhook both decide by it.
 */
export function claimOf(
  pod: KubeObject,
  spec: AgentPlacementSpec,
  lookup: OwnerLookup,
): { owner: Owner; rejected?: string } | undefined {
  const owner = ownerOf(pod, spec, lookup);
  if (!owner) return undefined;
  // A uidLabel value is any label value: one that makes no valid key must not fail the node's write.
  const rejected = claimKeyProblem(spec.claimAnnotationPrefix, owner.uid);
  return rejected ? { owner, rejected } : { owner };
}

export interface PlacementOnNode {
  /** Owner UID → the owner and the pods behind its claim. */
  claims: Map<string, { owner: Owner; pods: string[] }>;
  /** False when another placement took the label key with another value (name order decides). */
  labelled: boolean;
  /** Owners left without a claim because `<prefix><UID>` is no valid annotation key, and why. */
  rejected: string[];
}

export interface NodeClaims {
  /** What Berth's agents field manager should own on the node. */
  desired: NodeOutputs;
  placements: Map<string, PlacementOnNode>;
}

/**
 * One claim per distinct owner among the node's counted pods, and the node label exactly when at
 * least one claim exists. Placements are taken in name order, so a clash on the label key always
 * resolves the same way.
 */
export function decideNode(
  pods: SlimPod[],
  placements: Placement[],
  namespaceLabels: (ns: string) => Record<string, string> | undefined,
  lookup: OwnerLookup,
  berthNamespace: string,
): NodeClaims {
  const desired: NodeOutputs = { labels: {}, annotations: {}, taints: [] };
  const result = new Map<string, PlacementOnNode>();
  for (const p of [...placements].sort((a, b) => (a.name < b.name ? -1 : 1))) {
    const claims = new Map<string, { owner: Owner; pods: string[] }>();
    const rejected = new Set<string>();
    for (const pod of pods) {
      if (!podCounts(pod, namespaceLabels(pod.metadata?.namespace ?? ''), p.spec, berthNamespace)) continue;
      const claim = claimOf(pod, p.spec, lookup);
      if (!claim) continue;
      if (claim.rejected) {
        rejected.add(`pod ${pod.metadata?.namespace}/${pod.metadata?.name}: ${claim.rejected}`);
        continue;
      }
      const c = claims.get(claim.owner.uid) ?? { owner: claim.owner, pods: [] };
      c.pods.push(`${pod.metadata?.namespace}/${pod.metadata?.name}`);
      claims.set(claim.owner.uid, c);
    }
    let labelled = false;
    if (claims.size > 0) {
      for (const [uid, c] of claims) desired.annotations[claimKey(p.spec, uid)] = c.owner.description;
      const { key, value } = p.spec.nodeLabel;
      if (!(key in desired.labels) || desired.labels[key] === value) {
        desired.labels[key] = value;
        labelled = true;
      }
    }
    result.set(p.name, { claims, labelled, rejected: [...rejected] });
  }
  return { desired, placements: result };
}

/**
 * The owner UIDs whose claims under `prefix` the node carries and `fieldManager` owns: the claims
 * it takes off when their pods go. A claim annotation someone else set is never Berth's to prune,
 * so no owner's deletion may wait for it.
 */
export function claimedOwners(node: KubeObject, prefix: string, fieldManager: string): string[] {
  return ownedKeys(node, fieldManager, ['metadata', 'annotations']).flatMap((k) =>
    k.startsWith(prefix) && k.length > prefix.length ? [k.slice(prefix.length)] : [],
  );
}

/** The node keys a placement writes: its label, and its claim annotations (a prefix). */
export const placementKeys = (p: Placement): KeyClaim[] => {
  const owner = `AgentPlacement ${p.name}`;
  return [
    { pattern: { kind: 'label', key: p.spec.nodeLabel.key }, owner },
    { pattern: { kind: 'annotation', prefix: p.spec.claimAnnotationPrefix }, owner },
  ];
};

/**
 * The placements with, among their problems, the keys a capability that outranks them owns (a
 * startup gate's): `owned` is what KeyOwnership.violations says of the agents' keys; and a claim
 * prefix that overlaps one of a placement first by name (one starts with the other): their claims
 * could not be told apart on a node, and one's finalizer would follow the other's owners. Only a
 * usable placement holds its prefix.
 */
export function checkOwnership<O extends KubeObject>(
  parsed: ParsedPlacement<O>[],
  owned: (keys: KeyPattern[]) => string[],
): ParsedPlacement<O>[] {
  const outranked = parsed.map((p) => owned(placementKeys(p).map((c) => c.pattern)));
  // Only a placement that claims anything holds its prefix (an invalid one leaves its keys to others).
  const holding = parsed
    .filter((p, i) => p.problems.length === 0 && outranked[i]!.length === 0)
    .sort((a, b) => (a.name < b.name ? -1 : 1));
  return parsed.map((p, i) => {
    const prefix = p.spec.claimAnnotationPrefix;
    const earlier = holding.find(
      (o) =>
        o.name < p.name &&
        (o.spec.claimAnnotationPrefix.startsWith(prefix) || prefix.startsWith(o.spec.claimAnnotationPrefix)),
    );
    const why = [
      ...outranked[i]!,
      ...(earlier
        ? [
            `claimAnnotationPrefix "${prefix}" overlaps "${earlier.spec.claimAnnotationPrefix}" of AgentPlacement ${earlier.name} (first by name): claims could not be told apart`,
          ]
        : []),
    ];
    return why.length ? { ...p, problems: [...p.problems, ...why] } : p;
  });
}

/** The usable placements: those with no problem (validatePlacement, checkOwnership). */
export const usablePlacements = <O extends KubeObject>(parsed: ParsedPlacement<O>[]): ParsedPlacement<O>[] =>
  parsed.filter((p) => p.problems.length === 0);

/**
 * The placements that claim now: the usable ones not being deleted (a deleted placement's claims
 * go before it does). The node controller and `berth plan` decide by these.
 */
export const claimingPlacements = <O extends KubeObject>(
  parsed: ParsedPlacement<O>[],
): ParsedPlacement<O>[] => usablePlacements(parsed).filter((p) => !p.obj.metadata?.deletionTimestamp);

/**
 * What the agents claim on nodes: the keys of every usable placement. An invalid or outranked one
 * claims nothing, so a derived-label rule may still write what it names.
 */
export const placementClaims = (parsed: ParsedPlacement[]): KeyClaim[] =>
  usablePlacements(parsed).flatMap((p) => placementKeys(p));
