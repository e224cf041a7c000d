// guarded(): a patch fails when a value it overwrites changed since it was read, and only then.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { guarded, mutate, type JsonPatchOp } from '../../../src/runtime/api/jsonpatch.ts';
import type { KubeObject } from '../../../src/runtime/api/meta.ts';
import { applyJsonPatch } from '../../helpers/jsonpatch.ts';
import { withSeed } from '../../helpers/prng.ts';

const applies = (doc: unknown, ops: JsonPatchOp[]): boolean => {
  try {
    applyJsonPatch(doc, ops);
    return true;
  } catch {
    return false;
  }
};

describe('guarded', () => {
  test('tests what a replace or remove overwrites and the array an append extends; not a new key', () => {
    const before = {
      metadata: { annotations: { a: '1' } },
      spec: { gates: [{ name: 'x' }, { name: 'y' }], list: [1], affinity: { k: 'v' } },
    } as unknown as KubeObject;
    const after = structuredClone(before) as unknown as {
      metadata: { annotations: Record<string, string> };
      spec: { gates?: unknown[]; list: number[]; affinity: { k: string } };
    };
    after.metadata.annotations['b'] = '2';
    after.spec.gates = [{ name: 'y' }];
    after.spec.list.push(2);
    after.spec.affinity.k = 'w';
    const ops = guarded(before, mutate(before, after as unknown as KubeObject));
    assert.deepEqual(
      ops.filter((o) => o.op === 'test'),
      [
        { op: 'test', path: '/spec/gates', value: [{ name: 'x' }, { name: 'y' }] },
        { op: 'test', path: '/spec/list', value: [1] },
        { op: 'test', path: '/spec/affinity/k', value: 'v' },
      ],
    );
    // A status change, or another writer's annotation, does not fail it; a changed gate list does.
    assert.ok(applies({ ...before, status: { conditions: [{ type: 'PodScheduled' }] } }, ops));
    assert.ok(applies({ ...before, metadata: { annotations: { a: '1', c: '3' } } }, ops));
    assert.ok(!applies({ ...before, spec: { ...(before['spec'] as object), gates: [{ name: 'y' }] } }, ops));
  });

  test('generated documents: the guarded patch applies to what it was built from, and fails once an overwritten value changes', () =>
    withSeed('guarded patches', (r) => {
      const value = (depth: number): unknown => {
        const x = r.next();
        if (depth > 2 || x < 0.4) return r.int(3);
        if (x < 0.7) return Array.from({ length: r.int(3) }, () => value(depth + 1));
        return Object.fromEntries(
          Array.from({ length: 1 + r.int(3) }, (_, i) => [`k${i}`, value(depth + 1)]),
        );
      };
      for (let i = 0; i < 500; i++) {
        const before = { spec: value(0) } as unknown as KubeObject;
        const after = { spec: value(0) } as unknown as KubeObject;
        const ops = guarded(before, mutate(before, after));
        assert.deepEqual(applyJsonPatch(before, ops), after);
        const overwrites = ops.some((o) => o.op === 'replace' || o.op === 'remove' || o.path.endsWith('/-'));
        assert.equal(
          ops.some((o) => o.op === 'test'),
          overwrites,
          'a test exactly when something is overwritten',
        );
        for (const t of ops.filter((o) => o.op === 'test')) {
          // Change the tested value: the patch must no longer apply.
          const changed = applyJsonPatch(before, [{ op: 'replace', path: t.path, value: 'changed' }]);
          assert.ok(!applies(changed, ops), `a change at ${t.path} went unnoticed`);
        }
      }
    }));
});
