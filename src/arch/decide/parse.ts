// The ArchPlacements parsed from their objects, by the CRD's schema (so on the main thread only).
import type { KubeObject } from '../../runtime/api/meta.ts';
import { ArchPlacement } from '../crd.ts';
import type { ArchPlacementSpec } from '../types.ts';
import type { Policy } from './policies.ts';

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
