// Who owns what in an object, read from its managedFields: the keys a field manager set, and those
// set by the others. Pure, so the decisions that compare them (node writers, claims) need no client.
import type { KubeObject } from './meta.ts';

interface ManagedFieldsEntry {
  manager?: string;
  operation?: string;
  subresource?: string;
  fieldsV1?: Record<string, unknown>;
}

/** The keys under `path` one managedFields entry owns; for list-maps the `k:{...}` identities. */
function entryKeys(entry: ManagedFieldsEntry | undefined, path: string[]): string[] {
  let node: unknown = entry?.fieldsV1;
  for (const p of path) node = (node as Record<string, unknown> | undefined)?.[`f:${p}`];
  if (!node || typeof node !== 'object') return [];
  return Object.keys(node)
    .filter((k) => k.startsWith('f:') || k.startsWith('k:'))
    .map((k) => (k.startsWith('f:') ? k.slice(2) : k));
}

/**
 * The keys under `path` (e.g. ['metadata', 'labels']) that `manager` owns through Apply (or,
 * given, another operation), read from managedFields. For list-maps such as spec.taints the keys
 * are the `k:{...}` identities.
 */
export function ownedKeys(
  obj: KubeObject,
  manager: string,
  path: string[],
  subresource = '',
  operation: 'Apply' | 'Update' = 'Apply',
): string[] {
  const entries = (obj.metadata?.managedFields ?? []) as ManagedFieldsEntry[];
  const entry = entries.find(
    (e) => e.manager === manager && e.operation === operation && (e.subresource ?? '') === subresource,
  );
  return entryKeys(entry, path);
}

/**
 * The keys under `path` that a manager other than `manager`'s Apply owns, by any operation: an
 * apply that changes one of them conflicts, so a controller that never forces leaves it be.
 */
export function othersKeys(obj: KubeObject, manager: string, path: string[]): Set<string> {
  const entries = (obj.metadata?.managedFields ?? []) as ManagedFieldsEntry[];
  return new Set(
    entries
      .filter((e) => !(e.manager === manager && e.operation === 'Apply' && !e.subresource))
      .flatMap((e) => entryKeys(e, path)),
  );
}
