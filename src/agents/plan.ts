// `berth plan` of AgentPlacements: the label and claim annotations each node would gain or lose,
// decided by decideNode over every placement that claims (claimingPlacements), as agents-node
// decides, before and after the change; placements refused as the controller refuses them
// (checkOwnership); and what waitForAgent would do to new pods, as the webhook decides.
import { emptyPart, type PlanContext, type PlanPart } from '../policy/plan.ts';
import type { KeyPattern } from '../policy/nodes/ownership.ts';
import { Resources, type KubeObject } from '../runtime/api/meta.ts';
import {
  checkOwnership,
  claimingPlacements,
  claimKey,
  decideNode,
  type NodeClaims,
  type ParsedPlacement,
  type Placement,
} from './decide.ts';
import { parsePlacements } from './parse.ts';
import { loadView, lookupIn, previewPlacements, type ClusterView } from './explain.ts';
import { AgentPlacement } from './crd.ts';

const by = (name: string) => `AgentPlacement ${name}`;

/** Most pods named per placement whose owner makes no valid claim key. */
const SHOWN_REJECTED = 5;

/** What a node carries by placement: `label KEY` and `annotation KEY` → the value and who writes it. */
function written(d: NodeClaims, placements: Placement[]): Map<string, { value: string; by: string }> {
  const out = new Map<string, { value: string; by: string }>();
  for (const [name, r] of d.placements) {
    const spec = placements.find((p) => p.name === name)!.spec;
    if (r.claims.size && r.labelled)
      out.set(`label ${spec.nodeLabel.key}`, { value: spec.nodeLabel.value, by: name });
    for (const [uid, c] of r.claims)
      out.set(`annotation ${claimKey(spec, uid)}`, { value: c.owner.description, by: name });
  }
  return out;
}

/** What the placements of a change would do, against the cluster's placements, pods and nodes. */
export interface PlacementChange {
  /** The cluster's AgentPlacements as they are. */
  current: KubeObject[];
  /** The change's AgentPlacements, as they would be applied (or deleted). */
  change: KubeObject[];
  deleting: boolean;
  view: ClusterView;
  nodes: string[];
  /** KeyOwnership.violations of the agents' keys: a placement on a gate's keys is Invalid. */
  owned: (keys: KeyPattern[]) => string[];
  berthNamespace: string;
}

export function planPlacements(c: PlacementChange): PlanPart {
  const part = emptyPart();
  const current = parsePlacements(c.current).parsed;
  const candidates = parsePlacements(c.change);
  const named = new Set(c.change.map((o) => o.metadata!.name!));
  if (!c.deleting)
    for (const [name, error] of candidates.errors)
      part.errors.push(`${by(name)} would be Invalid and apply nothing: ${error}`);
  const before = checkOwnership(current, c.owned);
  const after = checkOwnership(
    [...current.filter((p) => !named.has(p.name)), ...(c.deleting ? [] : candidates.parsed)],
    c.owned,
  );
  for (const p of after) {
    if (!p.problems.length) continue;
    if (named.has(p.name))
      part.errors.push(`${by(p.name)} would be Invalid and apply nothing: ${p.problems.join('; ')}`);
    else if (!before.find((b) => b.name === p.name)?.problems.length)
      part.warnings.push(
        `${by(p.name)} would become Invalid and give up its claims: ${p.problems.join('; ')}`,
      );
  }
  const [was, will] = [claimingPlacements(before), claimingPlacements(after)];
  const byNode = new Map<string, ClusterView['pods']>();
  for (const p of c.view.pods)
    if (p.spec.nodeName) byNode.set(p.spec.nodeName, [...(byNode.get(p.spec.nodeName) ?? []), p]);
  const decide = (node: string, placements: Placement[]) =>
    decideNode(
      byNode.get(node) ?? [],
      placements,
      (ns) => c.view.namespaces.get(ns),
      lookupIn(c.view),
      c.berthNamespace,
    );
  const claimed = new Map<string, number>();
  const rejected = new Map<string, string[]>();
  for (const node of c.nodes) {
    const d = decide(node, will);
    const [old, now] = [written(decide(node, was), was), written(d, will)];
    for (const key of new Set([...old.keys(), ...now.keys()])) {
      const [b, a] = [old.get(key), now.get(key)];
      if (b?.value === a?.value) continue;
      part.effects.push({
        kind: 'Node',
        name: node,
        op: !b ? '+' : !a ? '-' : '~',
        what: b && a ? `${key}: ${b.value} -> ${a.value}` : `${key}=${(a ?? b)!.value}`,
        by: by((a ?? b)!.by),
      });
    }
    for (const [name, r] of d.placements) {
      if (r.claims.size) claimed.set(name, (claimed.get(name) ?? 0) + 1);
      rejected.set(name, [...(rejected.get(name) ?? []), ...r.rejected]);
    }
  }
  if (c.deleting) return part;
  for (const p of will.filter((x) => named.has(x.name))) {
    const n = claimed.get(p.name) ?? 0;
    if (c.nodes.length > 1 && n === c.nodes.length)
      part.warnings.push(
        `${by(p.name)} would claim every node (${n}): each would carry ${p.spec.nodeLabel.key}=${p.spec.nodeLabel.value}`,
      );
    const without = rejected.get(p.name) ?? [];
    for (const why of without.slice(0, SHOWN_REJECTED))
      part.unknown.push(`${by(p.name)}: no claim for ${why}`);
    if (without.length > SHOWN_REJECTED)
      part.unknown.push(`${by(p.name)}: ${without.length - SHOWN_REJECTED} more pod(s) without a claim`);
    if (p.spec.finalizer)
      part.unknown.push(
        `${by(p.name)}: the owners of its claims would carry finalizer ${p.spec.finalizer.name} (where Berth may patch their kind); the plan does not list them`,
      );
    if (p.spec.waitForAgent) {
      const w = waitForAgent(c, p);
      (w.every ? part.warnings : part.unknown).push(w.line);
    }
  }
  return part;
}

/**
 * waitForAgent acts on pods yet to be created, as the webhook decides: `every` when it would hold
 * every pod the placement selects now, were they created again (a warning); otherwise how many,
 * as what the plan cannot know for sure.
 */
function waitForAgent(c: PlacementChange, p: ParsedPlacement): { every: boolean; line: string } {
  const [preview] = previewPlacements(c.view, [p], c.berthNamespace);
  const { selectedPods: selected, wouldMutate: mutated = 0 } = preview!;
  const port = p.spec.waitForAgent!.port;
  if (selected > 0 && mutated === selected)
    return {
      every: true,
      line: `${by(p.name)}: waitForAgent: every pod it selects (${selected} now) would, created again, wait for the agent on port ${port} before it starts`,
    };
  return {
    every: false,
    line: `${by(p.name)}: waitForAgent: ${mutated} of the ${selected} pod(s) it selects now would, created again, wait for the agent on port ${port}; which pods are created next is not known`,
  };
}

export async function planAgentPlacements(ctx: PlanContext): Promise<PlanPart> {
  const [current, view, nodes, owners] = await Promise.all([
    ctx.client.list(AgentPlacement.ref).then((l) => l.items),
    loadView(ctx.client),
    ctx.client.list(Resources.nodes).then((l) => l.items.map((n) => n.metadata!.name!)),
    ctx.keys(),
  ]);
  return planPlacements({
    current,
    change: ctx.objects,
    deleting: ctx.deleting,
    view,
    nodes,
    owned: (keys) => owners.violations('agents', keys),
    berthNamespace: ctx.berthNamespace,
  });
}
