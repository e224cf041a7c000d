// JSON Patch (RFC 6902): the patches webhooks return and compare-and-swap writers send.
import type { KubeObject } from './meta.ts';

/** One RFC 6902 operation; mutate() produces add, replace and remove. */
export type JsonPatchOp =
  { op: 'add' | 'replace' | 'test'; path: string; value: unknown } | { op: 'remove'; path: string };

/**
 * Removes item `index` of the list at `list`, guarded by a test that the item (or its `field`) still
 * is `value`: if the list changed since it was read, the patch fails rather than remove another's item.
 */
export const removeItem = (list: string, index: number, value: unknown, field?: string): JsonPatchOp[] => [
  { op: 'test', path: `${list}/${index}${field ? `/${escapeKey(field)}` : ''}`, value },
  { op: 'remove', path: `${list}/${index}` },
];

/** A plain JSON object (not an array, not null). */
export const isRecord = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

/** A key as one segment of a JSON Pointer (RFC 6901). */
export const escapeKey = (key: string): string => key.replaceAll('~', '~0').replaceAll('/', '~1');

// Keys whose value is undefined do not exist once serialized, so they count as absent.
const has = (o: Record<string, unknown>, key: string): boolean =>
  Object.hasOwn(o, key) && o[key] !== undefined;

function jsonEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (Array.isArray(a) || Array.isArray(b)) {
    return (
      Array.isArray(a) && Array.isArray(b) && a.length === b.length && a.every((v, i) => jsonEqual(v, b[i]))
    );
  }
  if (!isRecord(a) || !isRecord(b)) return false;
  const keys = Object.keys(a).filter((k) => has(a, k));
  return (
    keys.length === Object.keys(b).filter((k) => has(b, k)).length && keys.every((k) => jsonEqual(a[k], b[k]))
  );
}

function diff(before: unknown, after: unknown, at: string, ops: JsonPatchOp[]): void {
  if (jsonEqual(before, after)) return;
  if (isRecord(before) && isRecord(after)) {
    for (const key of Object.keys(before)) {
      if (has(before, key) && !has(after, key)) ops.push({ op: 'remove', path: `${at}/${escapeKey(key)}` });
    }
    for (const key of Object.keys(after)) {
      if (!has(after, key)) continue;
      const keyPath = `${at}/${escapeKey(key)}`;
      if (has(before, key)) diff(before[key], after[key], keyPath, ops);
      else ops.push({ op: 'add', path: keyPath, value: after[key] });
    }
    return;
  }
  // Items appended to an unchanged prefix; any other array change replaces the whole array.
  if (
    Array.isArray(before) &&
    Array.isArray(after) &&
    after.length > before.length &&
    before.every((v, i) => jsonEqual(v, after[i]))
  ) {
    for (const value of after.slice(before.length)) ops.push({ op: 'add', path: `${at}/-`, value });
    return;
  }
  ops.push({ op: 'replace', path: at, value: after });
}

/**
 * The JSON Patch that turns `before` into `after`: a handler mutates a copy of the request's object
 * and answers `{ allowed: true, patch: mutate(object, copy) }`.
 */
export function mutate(before: KubeObject, after: KubeObject): JsonPatchOp[] {
  const ops: JsonPatchOp[] = [];
  diff(before, after, '', ops);
  return ops;
}

/** The value a JSON Pointer names in `doc` (undefined when absent). */
function valueAt(doc: unknown, pointer: string): unknown {
  let at: unknown = doc;
  for (const raw of pointer.slice(1).split('/')) {
    const token = raw.replaceAll('~1', '/').replaceAll('~0', '~');
    if (Array.isArray(at)) at = at[Number(token)];
    else if (isRecord(at)) at = at[token];
    else return undefined;
  }
  return at;
}

/**
 * `ops` preceded by a test of every value they overwrite: what each replace or remove finds, and
 * the array each append extends, as `before` had them. A concurrent change to one of those fails
 * the patch; a change elsewhere (a status condition the scheduler sets, another writer's annotation)
 * does not, as a test of the resourceVersion would.
 */
export function guarded(before: unknown, ops: JsonPatchOp[]): JsonPatchOp[] {
  const tests = new Map<string, JsonPatchOp>();
  for (const op of ops) {
    const path = op.op === 'add' && op.path.endsWith('/-') ? op.path.slice(0, -2) : op.path;
    if (op.op === 'test' || (op.op === 'add' && path === op.path)) continue;
    tests.set(path, { op: 'test', path, value: valueAt(before, path) });
  }
  return [...tests.values(), ...ops];
}
