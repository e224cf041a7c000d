// Architecture-aware placement's pure decisions: which ArchPlacement places a pod (its namespace and
// pod selectors). No I/O, and no zod: the webhook thread decides with it (parse.ts reads the objects).
import { podSelected, podSelection } from '../../policy/namespace.ts';
import type { KubeObject } from '../../runtime/api/meta.ts';
import type { ArchPlacementSpec } from '../types.ts';

export interface Policy {
  name: string;
  spec: ArchPlacementSpec;
  /** Being deleted: it gates nothing new, and releases what it holds. */
  deleting: boolean;
}

/** The policy that places the pod: the first live one (by priority, then name) that selects it. */
export function choosePolicy(
  policies: Policy[],
  pod: KubeObject,
  namespace: string,
  namespaceLabels: Record<string, string> | undefined,
  berthNamespace: string,
): Policy | undefined {
  return policies.find(
    (p) =>
      !p.deleting && podSelected(namespace, pod.metadata?.labels, namespaceLabels, p.spec, berthNamespace),
  );
}

/**
 * Whether choosing the pod's policy turns on the labels of its namespace, not known yet: a live
 * policy whose namespaceSelector decides comes before any that selects the pod whatever they are.
 */
export function namespaceDecides(
  policies: Policy[],
  pod: KubeObject,
  namespace: string,
  berthNamespace: string,
): boolean {
  for (const p of policies) {
    if (p.deleting) continue;
    const selected = podSelection(namespace, pod.metadata?.labels, undefined, p.spec, berthNamespace);
    if (selected !== false) return selected === undefined;
  }
  return false;
}
