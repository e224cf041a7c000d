// Architecture-aware placement's pure decisions: the ArchPlacements parsed, and which one places a
// pod (its namespace and pod selectors). No I/O.
import { podSelected, podSelection } from '../../policy/namespace.ts';
import type { KubeObject } from '../../runtime/api/meta.ts';
import { ArchPlacement, type ArchPlacementSpec } from '../types.ts';

export interface Policy {
  name: string;
  spec: ArchPlacementSpec;
  /** Being deleted: it gates nothing new, and releases what it holds. */
  deleting: boolean;
}

/** Specs as parsed, by object uid: the spec changes only with the generation. */
export type ParseCache = Map<
  string,
  { generation: number | undefined; spec?: ArchPlacementSpec; error?: string }
>;

/** Every ArchPlacement that parses, highest priority first (ties by name), and the others' errors. */
export function parsePolicies(
  objs: KubeObject[],
  cache: ParseCache = new Map(),
): { policies: Policy[]; errors: Map<string, string> } {
  const policies: Policy[] = [];
  const errors = new Map<string, string>();
  const seen = new Set<string>();
  for (const obj of objs) {
    const name = obj.metadata!.name!;
    const uid = obj.metadata?.uid ?? name;
    seen.add(uid);
    let c = cache.get(uid);
    if (!c || c.generation !== obj.metadata?.generation) {
      const r = ArchPlacement.parse({
        ...obj,
        apiVersion: ArchPlacement.apiVersion,
        kind: ArchPlacement.kind,
      });
      c = r.success
        ? { generation: obj.metadata?.generation, spec: r.data.spec }
        : { generation: obj.metadata?.generation, error: r.error };
      cache.set(uid, c);
    }
    if (c.spec) policies.push({ name, spec: c.spec, deleting: !!obj.metadata?.deletionTimestamp });
    else errors.set(name, c.error!);
  }
  for (const uid of cache.keys()) if (!seen.has(uid)) cache.delete(uid);
  policies.sort(
    (a, b) => b.spec.priority - a.spec.priority || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0),
  );
  return { policies, errors };
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
