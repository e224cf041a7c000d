// labels-node: decides each node's derived labels, annotations and taints from every rule and
// applies them under Berth's field manager when they differ; what it found is each NodeLabelRule's
// standing on that node, for labels-rule-status (controllers/status.ts).
import type { ApplyNodeWriter } from '../../policy/nodes/apply.ts';
import {
  annotationsChanged,
  changed,
  deletionChanged,
  generationChanged,
  labelsChanged,
  managedFieldsChanged,
  nodeInfoChanged,
  taintsChanged,
} from '../../policy/predicates.ts';
import { PolicyNodeReconciler } from '../../policy/reconciler.ts';
import type { SlimNode } from '../../policy/slim.ts';
import { Controller, type FirstPass, type Result, type Source } from '../../runtime/controller/controller.ts';
import { decide, ruleNameOf, tracedOutputs } from '../decide/nodes.ts';
import { keepHeld } from '../files.ts';
import type { Labels } from '../setup.ts';
import { nodeView } from '../match.ts';
import type { Rule } from '../types.ts';
import type { RuleStanding, StatusWriter } from './status.ts';

/** Rules from NodeLabelRules are named after them; the others (rule files) have no status. */
const CR_RULE_PREFIX = ruleNameOf('');

export class NodeReconciler extends PolicyNodeReconciler<Labels, ApplyNodeWriter, StatusWriter> {
  protected override forget(name: string): void {
    super.forget(name);
    this.ctx.derived.delete(name);
  }

  protected async reconcileNode(node: SlimNode, name: string): Promise<Result | void> {
    const decision = decide(nodeView(node), this.ctx.rules());
    this.ctx.recordDerived(node, decision);
    // A write the apiserver refuses is still a standing (so status is written, and says so), then retried.
    const written = await this.writer.trySync(node, keepHeld(decision, this.ctx.files?.holds() ?? [], node));
    const failed = written.refused?.message;
    const foreign = tracedOutputs(decision, written.foreign);

    // Each NodeLabelRule's standing on this node, for its status.
    const standings = new Map<string, RuleStanding>();
    const standing = (rule: string): RuleStanding | undefined => {
      if (!rule.startsWith(CR_RULE_PREFIX)) return undefined;
      const cr = rule.slice(CR_RULE_PREFIX.length);
      let s = standings.get(cr);
      if (!s) {
        s = {
          matched: false,
          applied: false,
          conflict: undefined,
          invalid: undefined,
          missing: false,
          failed: undefined,
        };
        standings.set(cr, s);
      }
      return s;
    };
    for (const c of decision.conflicts) {
      const text = `${c.kind} ${c.key}: ${[c.winner, ...c.losers].map((o) => `${o.rule} sets "${o.value}"`).join(', ')}; ${c.winner.rule} wins (rules apply in name order)`;
      for (const o of [c.winner, ...c.losers]) {
        const s = standing(o.rule);
        if (s) s.conflict = text;
      }
    }
    for (const f of foreign) {
      const s = standing(f.rule);
      if (s)
        // A label or annotation set to another value, or a taint that was never (or is no longer) Berth's.
        s.conflict = `${f.kind} ${f.key} on node ${name} is held by another field manager; Berth leaves it alone`;
    }
    const matched = [...decision.matches].filter(([, m]) => m.matched).map(([r]) => r);
    const blocked = new Set([...foreign, ...decision.conflicts.flatMap((c) => c.losers)].map((o) => o.rule));
    for (const e of decision.renderErrors) {
      blocked.add(e.rule);
      const s = standing(e.rule);
      if (s) s.invalid = `node ${name}: ${e.message}`;
    }
    for (const e of decision.missingInputs) {
      const s = standing(e.rule);
      if (s) s.missing = true;
    }
    for (const r of matched) {
      const s = standing(r);
      if (s) {
        s.matched = true;
        s.applied = !blocked.has(r) && !failed;
      }
    }
    // A failed write is the failure of every rule it wrote for: those that match, and those whose
    // values it was taking off (recordDerived keeps them while the node carries them).
    if (failed)
      for (const r of new Set([...matched, ...(this.ctx.derived.get(name)?.values() ?? [])])) {
        const s = standing(r);
        if (s) s.failed = failed;
      }
    this.status.set(name, standings);
    if (written.refused) {
      this.ctx.events.event(node, 'Warning', 'WriteFailed', 'Label', written.refused.message);
      throw written.refused.error;
    }
    // The loop breaker held keys back: write them once it lets go.
    if (written.retryAfterMs !== undefined) return { requeueAfterMs: written.retryAfterMs };
  }
}

/**
 * The labels-node controller: a node's changes bring it back; a rule's, or a change of who owns
 * which key, every node. Its first pass is the one its status writer waits for.
 */
export function setupNodeReconciler(
  l: Labels,
  reconciler: NodeReconciler,
  opts: { workers: number; firstPass: FirstPass },
): Controller {
  const allNodes = () => l.nodes.keys();
  const controller = new Controller({ name: 'labels-node', logger: l.log, reconciler, ...opts })
    .watch(l.nodes, (n) => n.metadata!.name!, { update: nodeChanged })
    .watch(l.ruleObjects, allNodes, { update: changed(generationChanged) })
    .watch(l.keys, allNodes);
  if (l.files) controller.watch(l.files as Source<Rule>, allNodes).watch(l.files.holdChanges, allNodes);
  l.manager.add(controller);
  return controller;
}

/** Node events that can change a decision: labels, annotations, taints, node info, deletion, what Berth owns. */
const nodeChanged = changed<SlimNode>(
  generationChanged,
  deletionChanged,
  labelsChanged,
  annotationsChanged,
  taintsChanged,
  nodeInfoChanged,
  managedFieldsChanged,
);
