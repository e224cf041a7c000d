// The AgentPlacements parsed from their objects, by the CRD's schema (so on the main thread only),
// with what makes each unusable.
import type { KubeObject } from '../runtime/api/meta.ts';
import { type AgentPlacementSpec } from './types.ts';
import { AgentPlacement } from './crd.ts';
import { validatePlacement } from './validate.ts';
import type { ParsedPlacement } from './decide.ts';

/** Specs as parsed, by object uid: the spec changes only with the generation, not with a status write. */
export type ParseCache = Map<
  string,
  { generation: number | undefined; spec?: AgentPlacementSpec; problems: string[]; error?: string }
>;

/**
 * Every AgentPlacement that parses, with what makes it unusable (see validatePlacement), and the
 * parse errors of the others by name. With a cache, only new generations are parsed again.
 */
export function parsePlacements<O extends KubeObject>(
  objs: O[],
  cache: ParseCache = new Map(),
): { parsed: ParsedPlacement<O>[]; errors: Map<string, string> } {
  const parsed: ParsedPlacement<O>[] = [];
  const errors = new Map<string, string>();
  const seen = new Set<string>();
  for (const obj of objs) {
    const name = obj.metadata!.name!;
    const uid = obj.metadata?.uid ?? name;
    const generation = obj.metadata?.generation;
    seen.add(uid);
    let c = cache.get(uid);
    if (!c || c.generation !== generation) {
      const r = AgentPlacement.parse({
        ...obj,
        apiVersion: AgentPlacement.apiVersion,
        kind: AgentPlacement.kind,
      });
      c = r.success
        ? { generation, spec: r.data.spec, problems: validatePlacement(r.data.spec) }
        : { generation, problems: [], error: r.error };
      cache.set(uid, c);
    }
    if (c.spec) parsed.push({ name, spec: c.spec, obj, problems: c.problems });
    else errors.set(name, c.error!);
  }
  for (const uid of cache.keys()) if (!seen.has(uid)) cache.delete(uid);
  return { parsed, errors };
}
