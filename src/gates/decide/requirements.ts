// What a gate asks of a node and its pods: whether it selects the node, which pods it waits for and
// whether they are done, and what the node still lacks.
import { selectorMatches, selectorText } from '../../policy/match/selector.ts';
import type { SlimNode, SlimPod } from '../../policy/slim.ts';
import { findCondition, hasCondition } from '../../runtime/api/conditions.ts';
import { EXEMPT_LABEL, type PodRequirement } from '../types.ts';
import type { Gate } from './parse.ts';

/** Whether the gate applies to a node with these labels (its exclusions and the exempt label win). */
export function selects(gate: Pick<Gate, 'spec'>, labels: Record<string, string> | undefined): boolean {
  if (labels?.[EXEMPT_LABEL] === 'true') return false;
  if (!selectorMatches(gate.spec.nodeSelector, labels)) return false;
  return !(gate.spec.excludeNodeSelectors ?? []).some((s) => selectorMatches(s, labels));
}

const ownerKinds = (p: SlimPod) => (p.metadata?.ownerReferences ?? []).map((o) => o.kind);
const terminal = (p: SlimPod) => p.status.phase === 'Succeeded' || p.status.phase === 'Failed';

/** The pods that make a node busy: anything running that is not a DaemonSet or static (mirror) pod. */
export function workloadPods(pods: SlimPod[]): SlimPod[] {
  return pods.filter(
    (p) =>
      !p.metadata?.deletionTimestamp &&
      !terminal(p) &&
      !ownerKinds(p).some((k) => k === 'DaemonSet' || k === 'Node'),
  );
}

/**
 * A pod is done initialising when it is Ready or has Succeeded (a run-to-completion init), or when
 * it says so with the ready annotation; readiness Annotation makes the annotation the only signal.
 * The default keeps gates written before `readiness` working as they did.
 */
export function podDone(
  p: SlimPod,
  readyAnnotation: string | undefined,
  readiness: PodRequirement['readiness'] = readyAnnotation ? 'Either' : 'Ready',
): boolean {
  if (readiness !== 'Ready' && readyAnnotation && p.metadata?.annotations?.[readyAnnotation] === 'true')
    return true;
  if (readiness === 'Annotation') return false;
  return p.status.phase === 'Succeeded' || (p.status.phase === 'Running' && podReady(p));
}

export const podReady = (p: SlimPod): boolean => hasCondition(p, 'Ready');

export function describeRequirement(r: PodRequirement): string {
  if (r.daemonSet) return `pods of DaemonSet ${r.namespace}/${r.daemonSet}`;
  return `pods ${selectorText(r.selector)}${r.namespace ? ` in ${r.namespace}` : ''}`;
}

/** The node's pods a requirement waits for (pods being deleted do not count). */
export function requiredPods(r: PodRequirement, pods: SlimPod[]): SlimPod[] {
  return pods.filter((p) => {
    if (p.metadata?.deletionTimestamp) return false;
    if (r.namespace && p.metadata?.namespace !== r.namespace) return false;
    if (r.daemonSet) {
      return (p.metadata?.ownerReferences ?? []).some(
        (o) => o.kind === 'DaemonSet' && o.name === r.daemonSet,
      );
    }
    return selectorMatches(r.selector, p.metadata?.labels);
  });
}

/** What the node still lacks before the gate may release it; empty when every requirement holds. */
export function unmetRequirements(gate: Pick<Gate, 'spec'>, node: SlimNode, pods: SlimPod[]): string[] {
  const unmet: string[] = [];
  for (const r of gate.spec.requirements.pods ?? []) {
    const mine = requiredPods(r, pods);
    if (mine.length === 0) {
      unmet.push(`${describeRequirement(r)}: none on the node yet`);
      continue;
    }
    const waiting = mine.filter((p) => !podDone(p, r.readyAnnotation, r.readiness));
    if (waiting.length) {
      const names = waiting
        .slice(0, 3)
        .map((p) => `${p.metadata?.namespace}/${p.metadata?.name} (${p.status.phase ?? 'Pending'})`);
      const lacking =
        r.readiness === 'Annotation'
          ? `without ${r.readyAnnotation ?? 'the ready annotation'}=true`
          : 'not Ready';
      unmet.push(
        `${describeRequirement(r)}: ${names.join(', ')}${waiting.length > 3 ? ` and ${waiting.length - 3} more` : ''} ${lacking}`,
      );
    }
  }
  for (const c of gate.spec.requirements.nodeConditions ?? []) {
    const actual = findCondition(node.status.conditions, c.type)?.status;
    if (actual !== c.status)
      unmet.push(`node condition ${c.type} is ${actual ?? 'absent'}, needs ${c.status}`);
  }
  return unmet;
}

/**
 * The node's pods that no gate requires and that have started (or run to the end): what ran on a
 * node before its gates released it, as the DaemonSets that tolerate every taint do. Static pods
 * (their mirrors) run whatever the API says, so they are left out.
 */
export function startedEarly(gates: Gate[], pods: SlimPod[]): string[] {
  return pods
    .filter(
      (p) =>
        !p.metadata?.deletionTimestamp &&
        p.status.phase !== undefined &&
        p.status.phase !== 'Pending' &&
        !ownerKinds(p).includes('Node') &&
        !gates.some((g) => (g.spec.requirements.pods ?? []).some((r) => requiredPods(r, [p]).length)),
    )
    .map((p) => `${p.metadata?.namespace}/${p.metadata?.name}`);
}
