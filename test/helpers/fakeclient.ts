// Stand-in KubeClients for unit tests of writers: a recorder of server-side apply bodies, and one
// node kept as the apiserver would keep it under JSON patches.
import { ApiError, type KubeClient } from '../../src/runtime/client/client.ts';
import type { KubeObject } from '../../src/runtime/api/meta.ts';
import type { JsonPatchOp } from '../../src/runtime/api/jsonpatch.ts';
import { applyJsonPatch } from './jsonpatch.ts';

/** Records every server-side apply body and answers with a fresh resourceVersion, as the apiserver would. */
export function applyRecorder(): { client: KubeClient; applied: KubeObject[] } {
  const applied: KubeObject[] = [];
  const client = {
    apply: (_ref: unknown, body: KubeObject) => {
      applied.push(body);
      return Promise.resolve({ metadata: { resourceVersion: String(applied.length + 1) } });
    },
  } as unknown as KubeClient;
  return { client, applied };
}

/**
 * One node as the apiserver keeps it, for unit tests of compare-and-swap writes: a JSON patch
 * applies whole or not at all (a failed test answers 422), every write is a new resourceVersion,
 * and `edit` is someone else's write in between.
 */
export function nodeServer(node: KubeObject): {
  client: KubeClient;
  patches: JsonPatchOp[][];
  readonly node: KubeObject | undefined;
  edit(change: (node: KubeObject) => void): void;
  remove(): void;
} {
  let stored: KubeObject | undefined = structuredClone(node);
  let version = Number(node.metadata?.resourceVersion ?? '1');
  const stamp = (n: KubeObject) => {
    n.metadata = { ...n.metadata, resourceVersion: String(++version) };
    return n;
  };
  const patches: JsonPatchOp[][] = [];
  const client = {
    patch: (_ref: unknown, name: string, ops: JsonPatchOp[]) => {
      patches.push(ops);
      if (stored?.metadata?.name !== name)
        return Promise.reject(new ApiError(404, 'NotFound', `nodes "${name}" not found`, {}));
      try {
        stored = stamp(applyJsonPatch(stored, ops) as KubeObject);
      } catch (e) {
        return Promise.reject(new ApiError(422, 'Invalid', `nodes "${name}" is invalid: ${String(e)}`, {}));
      }
      return Promise.resolve(structuredClone(stored));
    },
  } as unknown as KubeClient;
  return {
    client,
    patches,
    get node() {
      return structuredClone(stored);
    },
    edit(change) {
      const next = structuredClone(stored!);
      change(next);
      stored = stamp(next);
    },
    remove() {
      stored = undefined;
    },
  };
}
