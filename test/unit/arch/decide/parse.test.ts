import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { parsePolicies } from '../../../../src/arch/decide/parse.ts';

describe('parsePolicies', () => {
  const obj = (name: string, s: Record<string, unknown>, extra: Record<string, unknown> = {}) => ({
    apiVersion: 'berth.dev/v1alpha1',
    kind: 'ArchPlacement',
    metadata: { name, uid: name, generation: 1, ...extra },
    spec: s,
  });

  test('highest priority first, ties by name; invalid specs reported by name', () => {
    const { policies, errors } = parsePolicies([
      obj('b', { priority: 5 }),
      obj('a', { priority: 5 }),
      obj('z', { priority: 10 }),
      obj('low', {}),
      obj('bad', { mode: 'Sideways' }),
    ]);
    assert.deepEqual(
      policies.map((p) => p.name),
      ['z', 'a', 'b', 'low'],
    );
    assert.deepEqual([...errors.keys()], ['bad']);
    assert.equal(policies[3]!.spec.mode, 'NodeAffinity');
    assert.deepEqual(policies[3]!.spec.onFailure, { action: 'Release', retries: 3 });
  });
});
