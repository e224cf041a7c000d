// agents-node: keeps, on each node, one claim annotation per owner of the workload pods it hosts and
// the agent label while any claim exists; what the node carries is each AgentPlacement's standing on
// it, for agents-status (controllers/status.ts).
import type { ApplyNodeWriter } from '../../policy/nodes/apply.ts';
import {
  annotationsChanged,
  changed,
  generationChanged,
  labelsChanged,
  managedFieldsChanged,
  ownersChanged,
  valueChanged,
} from '../../policy/predicates.ts';
import { podsOn, type SlimNode, type SlimPod } from '../../policy/slim.ts';
import type { KubeObject } from '../../runtime/api/meta.ts';
import { PolicyNodeReconciler } from '../../policy/reconciler.ts';
import { Controller, type FirstPass, type Result } from '../../runtime/controller/controller.ts';
import { claimingPlacements, claimKey, decideNode, podFinished } from '../decide.ts';
import type { Agents } from '../setup.ts';
import { countClaimWrites } from '../metrics.ts';
import { AGENT_KEYS } from '../types.ts';
import type { PlacementStanding, StatusWriter } from './status.ts';

// A claim change on a node written less than CLAIM_QUIET_MS ago waits until it is this old, so that
// the changes of a burst go out together; a quiet node is written at once. Every claim is on its
// node within this window plus one write and its watch event, which the 1 s bound leaves room for
// (decision 0005).
export const CLAIM_WRITE_WINDOW_MS = 400;
// How long a node stays busy after a write: in a churn most changes come to a node written longer
// ago than this and go at once, while the claims of a burst (one every second or so per node)
// coalesce (decision 0005).
export const CLAIM_QUIET_MS = 1000;
// Node reconciles at once: a pass is mostly a write's round trip, so the workers bound how many
// writes are on their way, not how many go (the window does); with 16, claims of a burst waited
// a second for a worker (decision 0005).
export const AGENT_WORKERS = 64;

/** A change of key ownership by a higher-ranked capability (a startup gate): placements are checked again. */
export const outranked = (c: { rank: number }): boolean => c.rank < AGENT_KEYS.rank;

export class NodeReconciler extends PolicyNodeReconciler<Agents, ApplyNodeWriter, StatusWriter> {
  private lookup = (
    apiVersion: string,
    kind: string,
    namespace: string,
    name: string,
  ): KubeObject | undefined => {
    if (apiVersion === 'apps/v1' && kind === 'ReplicaSet')
      return this.ctx.replicaSets.get(`${namespace}/${name}`);
    if (apiVersion === 'batch/v1' && kind === 'Job') return this.ctx.jobs.get(`${namespace}/${name}`);
    return undefined;
  };

  private namespaceLabels = (ns: string) => this.ctx.namespaces.get(ns)?.metadata?.labels;

  /** The claims a node should carry; a placement being deleted claims nothing any more. */
  decide(nodeName: string) {
    return decideNode(
      podsOn(this.ctx.pods, nodeName),
      claimingPlacements(this.ctx.parsed()),
      this.namespaceLabels,
      this.lookup,
      this.ctx.berthNamespace,
    );
  }

  protected async reconcileNode(node: SlimNode, name: string): Promise<Result | void> {
    const placements = this.ctx.placements();
    const decision = this.decide(name);
    // A write the apiserver refuses is still a standing (so status is written, and says so), then retried.
    const write = await this.writer.trySync(node, decision.desired);
    if (write.wrote) {
      const prefixes = placements.map((p) => p.spec.claimAnnotationPrefix);
      const isClaim = (k: string) => prefixes.some((p) => k.startsWith(p));
      countClaimWrites(node.metadata?.annotations ?? {}, write.annotations, isClaim);
    }
    const failed = write.refused?.message;
    // Claims wait for the node's write spacing, or the loop breaker held keys back: sync again then.
    const retry = write.retryAfterMs === undefined ? undefined : { requeueAfterMs: write.retryAfterMs };
    const foreign = new Set(write.foreign.map((f) => `${f.kind}/${f.key}`));
    // The node as cached: a write just made comes back through the informer and is counted then.
    const labels = node.metadata?.labels ?? {};
    const annotations = node.metadata?.annotations ?? {};
    const standings = new Map<string, PlacementStanding>();
    for (const [placement, r] of decision.placements) {
      const spec = placements.find((p) => p.name === placement)!.spec;
      const s: PlacementStanding = {
        claims: new Set(),
        labelled: false,
        pending: 0,
        blocked: undefined,
        rejected: r.rejected,
        // Its failure if the write was for it: claims to put on, or its label or claims to take off.
        failed:
          failed &&
          (r.claims.size > 0 ||
            labels[spec.nodeLabel.key] !== undefined ||
            Object.keys(annotations).some((k) => k.startsWith(spec.claimAnnotationPrefix)))
            ? failed
            : undefined,
      };
      for (const [uid, c] of r.claims) {
        const key = claimKey(spec, uid);
        if (annotations[key] === c.owner.description) s.claims.add(uid);
        else if (foreign.has(`annotation/${key}`))
          s.blocked = `annotation ${key} on node ${name} is set to another value by another field manager; Berth leaves it alone`;
        else s.pending++;
      }
      if (r.claims.size > 0) {
        const { key, value } = spec.nodeLabel;
        if (!r.labelled)
          s.blocked = `label ${key} on node ${name} is set to another value by another AgentPlacement`;
        else if (foreign.has(`label/${key}`))
          s.blocked = `label ${key} on node ${name} is set to another value by another field manager; Berth leaves it alone`;
        else if (labels[key] === value) s.labelled = true;
        else s.pending++;
      }
      standings.set(placement, s);
    }
    this.status.set(name, standings);
    if (write.refused) {
      this.ctx.events.event(node, 'Warning', 'WriteFailed', 'Place', write.refused.message);
      throw write.refused.error;
    }
    return retry;
  }
}

/**
 * The agents-node controller: a node's own changes, and those of the pods on it, bring it back; so do
 * what names a pod's owner (its namespace's labels, an adoption), a placement's change, and a key a
 * gate takes (every node). Its first pass is the one its status writer waits for.
 */
export function setupNodeReconciler(
  a: Agents,
  reconciler: NodeReconciler,
  opts: { workers: number; firstPass: FirstPass },
): Controller {
  const nodesOfPods = (pods: SlimPod[]) => [
    ...new Set(pods.flatMap((p) => (p.spec.nodeName ? [p.spec.nodeName] : []))),
  ];
  const allNodes = () => a.nodes.keys();
  const ownerChanged = changed(ownersChanged);
  const controller = new Controller({ name: 'agents-node', logger: a.log, reconciler, ...opts })
    .watch(a.pods, (p) => p.spec.nodeName, { update: podChanged })
    .watch(a.nodes, (n) => n.metadata!.name!, { update: nodeChanged })
    .watch(a.placementObjects, allNodes, { update: changed(generationChanged) })
    .watch(a.keys, (c) => (outranked(c) ? allNodes() : []))
    .watch(
      a.namespaces,
      (ns) => nodesOfPods(a.pods.list().filter((p) => p.metadata?.namespace === ns.metadata?.name)),
      { update: changed(labelsChanged) },
    )
    // An adoption changes who owns the pods of a ReplicaSet or Job.
    .watch(a.replicaSets, (rs) => nodesOfPods(a.pods.byIndex('controllerUid', rs.metadata!.uid!)), {
      update: ownerChanged,
    })
    .watch(a.jobs, (j) => nodesOfPods(a.pods.byIndex('controllerUid', j.metadata!.uid!)), {
      update: ownerChanged,
    });
  a.manager.add(controller);
  return controller;
}

/**
 * Pod changes that can change a node's claims: not the status updates of a pod starting, which
 * are most of a pod's events.
 */
export const podChanged = changed<SlimPod>(
  valueChanged((p) => p.spec.nodeName),
  valueChanged(podFinished),
  labelsChanged,
  ownersChanged,
);

/** Node changes that matter: its labels and annotations (claims), and what Berth owns. */
export const nodeChanged = changed<SlimNode>(labelsChanged, annotationsChanged, managedFieldsChanged);
