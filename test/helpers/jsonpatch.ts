import assert from 'node:assert/strict';
import type { JsonPatchOp } from '../../src/runtime/api/jsonpatch.ts';

// A small RFC 6902 applier that fails on operations that would not apply cleanly, and on a failed test.
export function applyJsonPatch(doc: unknown, ops: JsonPatchOp[]): unknown {
  let root = structuredClone(doc);
  for (const op of ops) {
    if (op.path === '') {
      assert.equal(op.op, 'replace');
      root = structuredClone((op as { value: unknown }).value);
      continue;
    }
    const tokens = op.path
      .slice(1)
      .split('/')
      .map((t) => t.replaceAll('~1', '/').replaceAll('~0', '~'));
    const last = tokens.pop()!;
    let parent = root as Record<string, unknown> | unknown[];
    for (const token of tokens) {
      const next = (parent as Record<string, unknown>)[token];
      assert.ok(typeof next === 'object' && next !== null, `${op.path}: no container at ${token}`);
      parent = next as Record<string, unknown> | unknown[];
    }
    if (op.op === 'test') {
      const actual = Array.isArray(parent) ? parent[Number(last)] : parent[last];
      assert.deepEqual(actual, op.value, `test ${op.path} failed`);
      continue;
    }
    if (Array.isArray(parent)) {
      const index = last === '-' ? parent.length : Number(last);
      assert.ok(Number.isInteger(index) && index <= parent.length, `${op.path}: bad index`);
      if (op.op === 'add') parent.splice(index, 0, structuredClone(op.value));
      else {
        assert.ok(index < parent.length, `${op.path}: no such item`);
        if (op.op === 'remove') parent.splice(index, 1);
        else parent[index] = structuredClone(op.value);
      }
    } else {
      if (op.op !== 'add') assert.ok(Object.hasOwn(parent, last), `${op.path}: no such member`);
      if (op.op === 'remove') delete parent[last];
      else parent[last] = structuredClone(op.value);
    }
  }
  return root;
}
