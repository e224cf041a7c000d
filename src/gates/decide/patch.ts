// What the gates write to a node: the controller's compare-and-swap patch, and the keys a decision
// changes (for the loop breaker). The admission patch of a joining node is in ../admit.ts.
import { nodeKey, type NodeKey } from '../../policy/nodes/loopbreaker.ts';
import { casPatch } from '../../policy/nodes/cas.ts';
import { holds, nodeTaint, taintId } from '../../policy/nodes/write.ts';
import type { SlimNode } from '../../policy/slim.ts';
import type { JsonPatchOp } from '../../runtime/api/jsonpatch.ts';
import type { Gate } from './parse.ts';
import type { GateDecision } from './state.ts';

/**
 * The keys of the node a decision changes, for the loop breaker: the gate's taint (by key) when it
 * goes on or comes off, and every annotation it sets to a new value or removes.
 */
export function decisionKeys(node: SlimNode, gate: Gate, d: GateDecision): NodeKey[] {
  const keys: NodeKey[] = [];
  const tainted = holds(node.spec.taints, gate.spec.taint);
  if ((d.taint === true && !tainted) || (d.taint === false && tainted))
    keys.push(nodeKey('taint', gate.spec.taint.key));
  if (d.formerTaint) keys.push(nodeKey('taint', d.formerTaint.key));
  const have = node.metadata?.annotations ?? {};
  for (const [k, v] of Object.entries(d.annotations)) {
    if (v === null ? k in have : have[k] !== v) keys.push(nodeKey('annotation', k));
  }
  return keys;
}

/**
 * The JSON patch that brings a node to the gates' decisions. It is a compare-and-swap: the taints
 * are tested against what the cache saw before they are replaced, and every annotation removed is
 * tested first, so a concurrent change by anyone else fails the patch (422) instead of being lost.
 * (A taint the webhook put on belongs to the node's creator in managedFields, so server-side apply
 * could not take it off without forcing; see docs/decisions/0006.)
 */
export function nodePatch(node: SlimNode, gates: Gate[], decisions: GateDecision[]): JsonPatchOp[] {
  const current = node.spec.taints ?? [];
  const taintOf = (d: GateDecision) => gates.find((g) => g.name === d.gate)!.spec.taint;
  const wanted = decisions.filter((d) => d.taint === true).map(taintOf);
  let next = current;
  for (const t of wanted) if (!holds(next, t)) next = [...next, nodeTaint(t)];
  // A taint one gate wants is never taken off by another (a conflicting gate with the same taint).
  const off = [
    ...decisions.filter((d) => d.taint === false).map(taintOf),
    ...decisions.flatMap((d) => d.formerTaint ?? []),
  ];
  for (const t of off) {
    if (holds(next, t) && !holds(wanted, t)) next = next.filter((x) => taintId(x) !== taintId(t));
  }
  return casPatch(
    node,
    next !== current ? next : undefined,
    decisions.flatMap((d) => Object.entries(d.annotations)),
  );
}
