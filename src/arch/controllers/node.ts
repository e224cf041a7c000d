// arch-node, in Taints mode: each node carries its architecture's taint while a Taints policy lives.
import type { ApplyNodeWriter } from '../../policy/nodes/apply.ts';
import { annotationsChanged, changed, labelsChanged } from '../../policy/predicates.ts';
import { PolicyNodeReconciler } from '../../policy/reconciler.ts';
import type { SlimNode } from '../../policy/slim.ts';
import { Controller, type Result } from '../../runtime/controller/controller.ts';
import { nodeArchTaint, nodesTainted } from '../decide/patches.ts';
import type { Arch } from '../setup.ts';
import { policyChanged, type StatusWriter } from './status.ts';

export class NodeReconciler extends PolicyNodeReconciler<Arch, ApplyNodeWriter, StatusWriter> {
  /** Arch's standings are its pods', not its nodes'. */
  protected override forget(): void {}

  /** Taints mode: the node's architecture taint while some Taints policy lives, once every gated pod was seen. */
  protected async reconcileNode(node: SlimNode): Promise<Result | void> {
    const taints = nodesTainted(this.ctx.policies());
    // Tolerations before taints: until every gated pod has been through once, a taint could strand one.
    if (taints && !this.status.firstPassDone()) return { requeueAfterMs: 250 };
    const r = await this.writer.sync(node, {
      labels: {},
      annotations: {},
      taints: taints ? nodeArchTaint(node) : [],
    });
    if (r.retryAfterMs !== undefined) return { requeueAfterMs: r.retryAfterMs };
  }
}

/** The arch-node controller: a node's labels and annotations, and any policy's change, bring it back. */
export function setupNodeReconciler(a: Arch, reconciler: NodeReconciler): Controller {
  const controller = new Controller({ name: 'arch-node', workers: 4, logger: a.log, reconciler })
    .watch(a.nodes, (n) => n.metadata!.name!, { update: changed(labelsChanged, annotationsChanged) })
    .watch(a.policyObjects, () => a.nodes.keys(), { update: policyChanged });
  a.manager.add(controller);
  return controller;
}
