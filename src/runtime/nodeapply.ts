// Writing a controller's share of a Node — labels, annotations, taints — with server-side apply,
// shared by every capability that decorates nodes. Each controller owns its keys through its own
// field manager; what it owns is read back from managedFields, so it writes only when its share
// differs, never touches keys another manager set to other values, and never recreates a node.
import { applyTarget, isObjectGone, ownedKeys } from './apply.ts';
import type { EventHandler } from './informer.ts';
import type { KubeClient } from './kube.ts';
import { nodeWriteMetrics } from './metrics.ts';
import { Resources, type KubeObject } from './types.ts';

export interface NodeTaint {
  key: string;
  value?: string;
  effect: string;
}

/** What a controller wants on a node. */
export interface NodeOutputs {
  labels: Record<string, string>;
  annotations: Record<string, string>;
  taints: NodeTaint[];
}

/** A node's labels, annotations and taints, and which of them one field manager owns. */
export interface NodeState extends NodeOutputs {
  owned: { labels: string[]; annotations: string[]; taints: string[] };
}

export type NodeOutputKind = 'label' | 'annotation' | 'taint';

export const taintId = (t: { key: string; effect: string }): string => `${t.key}:${t.effect}`;

export function nodeState(node: KubeObject, manager: string): NodeState {
  const taints = ((node['spec'] as { taints?: NodeTaint[] } | undefined)?.taints ?? []).map((t) => ({
    ...t,
  }));
  return {
    labels: node.metadata?.labels ?? {},
    annotations: node.metadata?.annotations ?? {},
    taints,
    owned: {
      labels: ownedKeys(node, manager, ['metadata', 'labels']),
      annotations: ownedKeys(node, manager, ['metadata', 'annotations']),
      // List-map identities come as k:{"effect":"NoSchedule","key":"x"}.
      taints: ownedKeys(node, manager, ['spec', 'taints']).map((k) =>
        taintId(JSON.parse(k.slice(2)) as NodeTaint),
      ),
    },
  };
}

export interface NodePlan extends NodeOutputs {
  /** True when the node already carries exactly this manager's share: nothing to write. */
  inSync: boolean;
  /** Keys held back because another field manager set them to a different value. */
  foreign: { kind: NodeOutputKind; key: string }[];
}

/**
 * What to apply: the desired outputs minus the keys another manager already set to a different
 * value (a controller never fights for them, and never forces), and whether the node is already there.
 */
export function planNodeApply(state: NodeState, desired: NodeOutputs): NodePlan {
  const foreign: NodePlan['foreign'] = [];
  const keep = (
    kind: NodeOutputKind,
    want: Record<string, string>,
    have: Record<string, string>,
    owned: Set<string>,
  ) => {
    const out: Record<string, string> = {};
    for (const [k, v] of Object.entries(want)) {
      if (k in have && have[k] !== v && !owned.has(k)) foreign.push({ kind, key: k });
      else out[k] = v;
    }
    return out;
  };
  const ownedLabels = new Set(state.owned.labels);
  const ownedAnnotations = new Set(state.owned.annotations);
  const ownedTaints = new Set(state.owned.taints);
  const labels = keep('label', desired.labels, state.labels, ownedLabels);
  const annotations = keep('annotation', desired.annotations, state.annotations, ownedAnnotations);
  const current = new Map(state.taints.map((t) => [taintId(t), t]));
  const taints = desired.taints.filter((t) => {
    const cur = current.get(taintId(t));
    if (cur && (cur.value ?? '') !== (t.value ?? '') && !ownedTaints.has(taintId(t))) {
      foreign.push({ kind: 'taint', key: taintId(t) });
      return false;
    }
    return true;
  });
  const sameKeys = (owned: Set<string>, want: string[]) =>
    owned.size === want.length && want.every((k) => owned.has(k));
  const inSync =
    sameKeys(ownedLabels, Object.keys(labels)) &&
    Object.entries(labels).every(([k, v]) => state.labels[k] === v) &&
    sameKeys(ownedAnnotations, Object.keys(annotations)) &&
    Object.entries(annotations).every(([k, v]) => state.annotations[k] === v) &&
    sameKeys(ownedTaints, taints.map(taintId)) &&
    taints.every((t) => (current.get(taintId(t))?.value ?? '') === (t.value ?? ''));
  return { inSync, labels, annotations, taints, foreign };
}

/**
 * Applies one field manager's share of nodes. After each write it expects to see that write come
 * back through the node informer: until it has, a reconcile (on a cache older than the write) that
 * arrives at the same plan sends nothing, while a different plan is written at once.
 */
export class NodeWriter {
  private readonly client: () => KubeClient;
  readonly fieldManager: string;
  private readonly expected = new Map<string, { plan: string; resourceVersion: string; seen: boolean }>();

  constructor(
    client: () => KubeClient,
    fieldManager: string,
    nodes: { addEventHandler(h: EventHandler<KubeObject>): void },
  ) {
    this.client = client;
    this.fieldManager = fieldManager;
    // Watch events come in order: once the write's own version has been seen, the cache is newer.
    const observe = (n: KubeObject) => {
      const e = this.expected.get(n.metadata?.name ?? '');
      if (e && n.metadata?.resourceVersion === e.resourceVersion) e.seen = true;
    };
    nodes.addEventHandler({ onAdd: observe, onUpdate: (_old, n) => observe(n) });
  }

  /** Brings the node to `desired` if it is not there; returns the plan (foreign keys included). */
  async sync(node: KubeObject, desired: NodeOutputs): Promise<NodePlan & { wrote: boolean }> {
    const name = node.metadata!.name!;
    const state = nodeState(node, this.fieldManager);
    const plan = planNodeApply(state, desired);
    if (plan.inSync) {
      this.expected.delete(name);
      return { ...plan, wrote: false };
    }
    const key = JSON.stringify([plan.labels, plan.annotations, plan.taints]);
    const e = this.expected.get(name);
    // A write that changed nothing keeps the version the cache already had: that counts as seen.
    if (e && node.metadata?.resourceVersion === e.resourceVersion) e.seen = true;
    if (e && !e.seen && e.plan === key) return { ...plan, wrote: false };

    const body = applyTarget(Resources.nodes, node);
    body.metadata.labels = plan.labels;
    body.metadata.annotations = plan.annotations;
    // Only claim spec.taints when this manager taints, or still owns a taint it must drop.
    if (plan.taints.length > 0 || state.owned.taints.length > 0) body['spec'] = { taints: plan.taints };
    let written: KubeObject;
    try {
      nodeWriteMetrics.writes.inc({ field_manager: this.fieldManager });
      written = await this.client().apply(Resources.nodes, body, { fieldManager: this.fieldManager });
    } catch (e) {
      // The node was deleted meanwhile: the uid precondition refused to recreate it.
      if (isObjectGone(e)) {
        this.forget(name);
        return { ...plan, wrote: false };
      }
      // Any other conflict: another manager wrote one of these keys after our cache saw the node.
      // The retry (with backoff) sees that write and holds the key back.
      throw e;
    }
    this.expected.set(name, {
      plan: key,
      resourceVersion: written.metadata?.resourceVersion ?? '',
      seen: false,
    });
    return { ...plan, wrote: true };
  }

  forget(name: string): void {
    this.expected.delete(name);
  }
}
