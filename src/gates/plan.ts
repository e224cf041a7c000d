// `berth plan` of NodeStartupGates: the nodes each gate would hold now (its taint on) or let go
// (its taint off), decided by decideGates over every gate as the controller does, and the unbound
// pods that cannot land on a node it holds while they wait.
import { emptyPart, type PlanContext, type PlanPart } from '../policy/plan.ts';
import { tolerates, type Toleration } from '../policy/nodes/taints.ts';
import { slimNode, slimPod } from '../policy/slim.ts';
import { Resources, type KubeObject } from '../runtime/api/meta.ts';
import { parseGates, type Gate } from './decide/parse.ts';
import { decideGates } from './decide/state.ts';
import { formatTaint, holds } from '../policy/nodes/write.ts';
import { NodeStartupGate } from './crd.ts';

type PodWithTolerations = KubeObject & {
  spec?: { nodeName?: string; tolerations?: Toleration[] };
  status?: { phase?: string };
};

/**
 * The effects of a change of gates on nodes and their pods. A gate not yet created counts as
 * created now, as the API would stamp it: nodes already there predate it and only its backfill
 * holds them.
 */
export function planGates(
  current: KubeObject[],
  change: KubeObject[],
  deleting: boolean,
  nodes: KubeObject[],
  all: PodWithTolerations[],
  now: number,
): PlanPart {
  const pods = all.map(slimPod);
  const part = emptyPart();
  const named = new Set(change.map((o) => o.metadata!.name!));
  const stamped = change.map((o) => ({
    ...o,
    metadata: {
      ...o.metadata,
      creationTimestamp: o.metadata?.creationTimestamp ?? new Date(now).toISOString(),
    },
  }));
  const kept = current.filter((o) => !named.has(o.metadata!.name!));
  const { gates, problems } = parseGates(deleting ? kept : [...kept, ...stamped]);
  for (const [name, p] of problems)
    if (named.has(name)) part.errors.push(`NodeStartupGate ${name} would be ${p.reason}: ${p.message}`);
  const before = parseGates(current).gates;
  const unbound = all.filter((p) => !p.spec?.nodeName && p.status?.phase === 'Pending');
  const heldBy = new Map<string, number>();
  for (const full of nodes) {
    const node = slimNode(full);
    const name = node.metadata!.name!;
    const on = pods.filter((p) => p.spec.nodeName === name);
    const decisions = decideGates(gates, node, on, now);
    for (const [i, d] of decisions.entries()) {
      const g = gates[i]!;
      const tainted = holds(node.spec.taints, g.spec.taint);
      const held = d.taint === true || (d.taint === undefined && tainted);
      if (held) heldBy.set(g.name, (heldBy.get(g.name) ?? 0) + 1);
      if (held && !tainted)
        part.effects.push({
          kind: 'Node',
          name,
          op: '+',
          what: `taint ${formatTaint(g.spec.taint)}: held, ${d.why}${d.unmet.length ? `; waiting for ${d.unmet.join(', ')}` : ''}`,
          by: `NodeStartupGate ${g.name}`,
        });
      else if (d.taint === false && tainted)
        part.effects.push({
          kind: 'Node',
          name,
          op: '-',
          what: `taint ${formatTaint(g.spec.taint)}: released, ${d.why}`,
          by: `NodeStartupGate ${g.name}`,
        });
    }
    // A gate deleted: Berth takes its taint back from the nodes it holds.
    if (deleting)
      for (const g of before.filter((b) => named.has(b.name)))
        if (g.keys.gatedAt in (node.metadata?.annotations ?? {}) && holds(node.spec.taints, g.spec.taint))
          part.effects.push({
            kind: 'Node',
            name,
            op: '-',
            what: `taint ${formatTaint(g.spec.taint)}: the gate is gone`,
            by: `NodeStartupGate ${g.name}`,
          });
  }
  waitingPods(
    part,
    gates.filter((x) => named.has(x.name)),
    heldBy,
    nodes.length,
    unbound,
  );
  return part;
}

/** The pending pods that would wait on the changed gates, by how many nodes each gate would hold. */
function waitingPods(
  part: PlanPart,
  changed: Gate[],
  heldBy: Map<string, number>,
  nodeCount: number,
  unbound: PodWithTolerations[],
): void {
  for (const g of changed) {
    const n = heldBy.get(g.name) ?? 0;
    const taint = { ...g.spec.taint, value: g.spec.taint.value ?? '' };
    const waiting = unbound.filter((p) => !(p.spec?.tolerations ?? []).some((t) => tolerates(t, taint)));
    if (n && n === nodeCount) {
      part.warnings.push(
        `NodeStartupGate ${g.name} would hold every node (${n}): no pod that does not tolerate it schedules`,
      );
      for (const p of waiting)
        part.effects.push({
          kind: 'Pod',
          name: `${p.metadata?.namespace}/${p.metadata?.name}`,
          op: '!',
          what: 'scheduling delayed: every node is held',
          by: `NodeStartupGate ${g.name}`,
        });
    } else if (n && waiting.length)
      part.unknown.push(
        `NodeStartupGate ${g.name}: ${waiting.length} pending pod(s) do not tolerate it; whether they wait depends on where the scheduler puts them`,
      );
  }
}

export async function planGateObjects(ctx: PlanContext): Promise<PlanPart> {
  const [current, nodes, pods] = await Promise.all([
    ctx.client.list(NodeStartupGate.ref).then((l) => l.items),
    ctx.client.list(Resources.nodes).then((l) => l.items),
    ctx.client
      .list(Resources.pods, { query: { fieldSelector: 'status.phase!=Succeeded,status.phase!=Failed' } })
      .then((l) => l.items as PodWithTolerations[]),
  ]);
  return planGates(current, ctx.objects, ctx.deleting, nodes, pods, Date.now());
}
