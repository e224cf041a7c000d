// `berth explain` and `berth plan` for agent placement: what placements claim, label
// and change, read from the cluster and decided by the same functions the controller and the
// webhook use. Writes nothing.
import type { KubeClient } from '../runtime/client/client.ts';
import { ownedKeys } from '../runtime/api/fields.ts';
import { slimPod, type SlimPod } from '../policy/slim.ts';
import { Resources, type KubeObject, type ResourceRef } from '../runtime/api/meta.ts';
import type { KeyClaim, KeyOwnership, KeyPattern } from '../policy/nodes/ownership.ts';
import {
  checkOwnership,
  decideNode,
  placementClaims,
  podSelected,
  type OwnerLookup,
  type ParsedPlacement,
  usablePlacements,
} from './decide.ts';
import { parsePlacements } from './parse.ts';
import { waitExemption, placementsForPod } from './admit.ts';
import { FIELD_MANAGER } from './types.ts';
import { AgentPlacement } from './crd.ts';
import { needsAcknowledgement } from './validate.ts';
import { nodesOf, type Said, type Subject } from '../policy/explain.ts';
import type { ExplainContext } from '../capability.ts';

const jobs: ResourceRef = { group: 'batch', version: 'v1', resource: 'jobs', kind: 'Job', namespaced: true };

/** What the decisions read: pods, namespace labels, and the ReplicaSets and Jobs that lead to owners. */
export interface ClusterView {
  pods: SlimPod[];
  namespaces: Map<string, Record<string, string>>;
  owners: Map<string, KubeObject>;
}

/** Reads the view of one node's pods, or of every pod. */
export async function loadView(client: KubeClient, nodeName?: string): Promise<ClusterView> {
  const pods = (
    await client.list(
      Resources.pods,
      nodeName ? { query: { fieldSelector: `spec.nodeName=${nodeName}` } } : {},
    )
  ).items.map(slimPod);
  const namespaces = new Map(
    (await client.list(Resources.namespaces)).items.map((n) => [n.metadata!.name!, n.metadata?.labels ?? {}]),
  );
  // One node: the ReplicaSets and Jobs of its pods' namespaces; the cluster: all of them at once.
  const scopes = nodeName ? [...new Set(pods.map((p) => p.metadata!.namespace!))] : [undefined];
  const owners = new Map<string, KubeObject>();
  for (const namespace of scopes) {
    for (const ref of [Resources.replicaSets, jobs]) {
      for (const o of (await client.list(ref, namespace ? { namespace } : {})).items)
        owners.set(`${ref.kind}/${o.metadata!.namespace}/${o.metadata!.name}`, o);
    }
  }
  return { pods, namespaces, owners };
}

export const lookupIn =
  (view: ClusterView): OwnerLookup =>
  (_v, kind, ns, n) =>
    view.owners.get(`${kind}/${ns}/${n}`);

/** The AgentPlacements of the cluster, parsed and validated. */
export async function clusterPlacements(client: KubeClient) {
  return parsePlacements((await client.list(AgentPlacement.ref)).items);
}

/**
 * `owned` (KeyOwnership.violations of the agents' keys): a placement whose keys a startup gate owns
 * is invalid, as the controller finds it.
 */
export async function explainNodeAgents(
  client: KubeClient,
  node: KubeObject,
  berthNamespace: string,
  owned?: (keys: KeyPattern[]) => string[],
): Promise<string[]> {
  const name = node.metadata!.name!;
  const listed = await clusterPlacements(client);
  const { errors } = listed;
  const parsed = owned ? checkOwnership(listed.parsed, owned) : listed.parsed;
  if (parsed.length === 0 && errors.size === 0) return ['Agent placement: no AgentPlacement'];
  const view = await loadView(client, name);
  const usable = usablePlacements(parsed);
  const d = decideNode(view.pods, usable, (ns) => view.namespaces.get(ns), lookupIn(view), berthNamespace);
  const out = [`Agent placement (field manager ${FIELD_MANAGER}):`];
  for (const [pname, problem] of [
    ...parsed.filter((p) => p.problems.length).map((p) => [p.name, p.problems.join('; ')] as const),
    ...errors,
  ]) {
    out.push(`  ${pname}: invalid, applies nothing: ${problem}`);
  }
  for (const [pname, r] of d.placements) {
    const spec = usable.find((p) => p.name === pname)!.spec;
    for (const why of r.rejected) out.push(`  ${pname}: no claim for ${why}`);
    if (r.claims.size === 0) {
      out.push(`  ${pname}: no counted pod on this node, so no claim and no ${spec.nodeLabel.key} label`);
      continue;
    }
    out.push(
      `  ${pname}: label ${spec.nodeLabel.key}=${spec.nodeLabel.value}${r.labelled ? '' : ' (held by another AgentPlacement with another value)'}`,
    );
    for (const [uid, c] of r.claims) {
      out.push(
        `    claim ${spec.claimAnnotationPrefix}${uid} (${c.owner.description}): ${c.pods.join(', ')}`,
      );
    }
  }
  const written = new Set(ownedKeys(node, FIELD_MANAGER, ['metadata', 'annotations']));
  const want = Object.keys(d.desired.annotations);
  const pending = [
    ...want.filter((k) => !written.has(k)).map((k) => `will add ${k}`),
    ...[...written].filter((k) => !want.includes(k)).map((k) => `will remove ${k}`),
  ];
  if (pending.length)
    out.push('  not yet applied (Berth not running, or catching up):', ...pending.map((p) => `    ${p}`));
  return out;
}

/** What one placement would do to the cluster as it is now. */
export interface PlacementPreview {
  name: string;
  /** Why it is Invalid and applies nothing; empty when usable. */
  problems: string[];
  /** Why it needed acknowledgeAllPods, when it has it. */
  acknowledged?: string;
  /** Pods its selectors select, bound or not. */
  selectedPods: number;
  /** Bound, unfinished, selected pods with an owner: what claims are made of. */
  claimedPods: number;
  claims: number;
  owners: number;
  /** Nodes that would carry at least one claim, and the label unless another placement holds it. */
  nodes: number;
  /** Owners left without a claim, with why (their UID makes no valid key). */
  rejected: string[];
  /** With waitForAgent: pods the webhook would give the init container, were they created now. */
  wouldMutate?: number;
}

/** Each placement on its own, against the pods of `view`: the numbers a dry run shows. */
export function previewPlacements(
  view: ClusterView,
  placements: ParsedPlacement[],
  berthNamespace: string,
): PlacementPreview[] {
  const byNode = new Map<string, SlimPod[]>();
  for (const p of view.pods) {
    if (!p.spec.nodeName) continue;
    const list = byNode.get(p.spec.nodeName) ?? [];
    list.push(p);
    byNode.set(p.spec.nodeName, list);
  }
  const nsLabels = (ns: string) => view.namespaces.get(ns);
  return placements.map((p) => {
    const ack = needsAcknowledgement(p.spec);
    const preview: PlacementPreview = {
      name: p.name,
      problems: p.problems,
      ...(ack && p.spec.acknowledgeAllPods ? { acknowledged: ack } : {}),
      selectedPods: 0,
      claimedPods: 0,
      claims: 0,
      owners: 0,
      nodes: 0,
      rejected: [],
    };
    if (p.problems.length) return preview;
    const owners = new Set<string>();
    for (const pods of byNode.values()) {
      const r = decideNode(pods, [p], nsLabels, lookupIn(view), berthNamespace).placements.get(p.name)!;
      preview.rejected.push(...r.rejected);
      if (r.claims.size === 0) continue;
      preview.nodes++;
      preview.claims += r.claims.size;
      for (const [uid, c] of r.claims) {
        owners.add(uid);
        preview.claimedPods += c.pods.length;
      }
    }
    preview.owners = owners.size;
    // As the webhook decides (exempt, then the placements that will claim it), for every pod as if
    // it were created now.
    let mutated = 0;
    for (const pod of view.pods) {
      const ns = pod.metadata?.namespace ?? '';
      if (!podSelected(ns, pod.metadata?.labels, nsLabels(ns), p.spec, berthNamespace)) continue;
      preview.selectedPods++;
      if (
        !waitExemption(pod, ns, berthNamespace) &&
        placementsForPod(pod, ns, nsLabels(ns), [p], berthNamespace).length
      )
        mutated++;
    }
    if (p.spec.waitForAgent) preview.wouldMutate = mutated;
    return preview;
  });
}

/**
 * `berth explain agentplacement NAME`: the nodes that host its counted pods (the claims and label
 * it gives each, or the other placement that holds the label) and those that do not, decided as
 * the controller does over every usable placement. The view's pods are those of `nodes`.
 */
export function explainPlacement(
  name: string,
  parsed: ParsedPlacement[],
  view: ClusterView,
  nodes: string[],
  berthNamespace: string,
): Said {
  const p = parsed.find((x) => x.name === name);
  if (!p) return { lines: ['  invalid, applies nothing'] };
  if (p.problems.length) return { lines: [`  invalid, applies nothing: ${p.problems.join('; ')}`] };
  const usable = usablePlacements(parsed);
  const subjects: Subject[] = nodes.map((node) => {
    const pods = view.pods.filter((x) => x.spec.nodeName === node);
    const d = decideNode(pods, usable, (ns) => view.namespaces.get(ns), lookupIn(view), berthNamespace);
    const r = d.placements.get(name)!;
    const { key, value } = p.spec.nodeLabel;
    const rejected = r.rejected.map((why) => `no claim for ${why}`);
    if (r.claims.size === 0)
      return { kind: 'Node', name: node, in: false, why: ['no counted pod here', ...rejected] };
    return {
      kind: 'Node',
      name: node,
      in: true,
      why: [
        r.labelled
          ? `label ${key}=${value}`
          : `no label ${key}: another AgentPlacement holds it with another value`,
        ...[...r.claims].map(
          ([uid, c]) =>
            `claim ${p.spec.claimAnnotationPrefix}${uid} (${c.owner.description}): ${c.pods.join(', ')}`,
        ),
        ...rejected,
      ],
    };
  });
  const [preview] = previewPlacements(view, [p], berthNamespace);
  const lines = [
    `  selects ${preview!.selectedPods} pod(s); ${preview!.claimedPods} counted, of ${preview!.owners} owner(s)`,
    ...(preview!.wouldMutate !== undefined
      ? [
          `  waitForAgent: ${preview!.wouldMutate} of its pods would wait for the agent, were they created now`,
        ]
      : []),
  ];
  return { subjects, lines };
}

/** Capability.keyClaims, as the controller claims: the keys of the usable placements, a gate's keys outranking theirs. */
export const listedKeyClaims = async (client: KubeClient, keys: KeyOwnership): Promise<KeyClaim[]> =>
  placementClaims(
    checkOwnership((await clusterPlacements(client)).parsed, (k) => keys.violations('agents', k)),
  );

/** `berth explain node`: the node's agent labels and claims, and why (Capability.explainNode). */
export async function explainNodeObject({
  client,
  object,
  berthNamespace,
  keys,
}: ExplainContext): Promise<string[]> {
  const owners = await keys?.();
  return explainNodeAgents(client, object, berthNamespace, owners && ((k) => owners.violations('agents', k)));
}

/** `berth explain agentplacement NAME`: which nodes it labels and claims, for which owners (ExplainKind.explain). */
export async function explainPlacementObject({
  client,
  object,
  berthNamespace,
  keys,
  focus,
}: ExplainContext): Promise<Said> {
  const owners = await keys?.();
  const listed = await clusterPlacements(client);
  const parsed = owners
    ? checkOwnership(listed.parsed, (k) => owners.violations('agents', k))
    : listed.parsed;
  const [view, nodes] = await Promise.all([loadView(client, focus?.node), nodesOf(client, focus)]);
  const name = object.metadata!.name!;
  const said = explainPlacement(
    name,
    parsed,
    view,
    nodes.map((n) => n.metadata!.name!),
    berthNamespace,
  );
  const error = listed.errors.get(name);
  return error ? { ...said, lines: [`  invalid, applies nothing: ${error}`] } : said;
}
