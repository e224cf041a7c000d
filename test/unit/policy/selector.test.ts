import assert from 'node:assert/strict';
import { test } from 'node:test';
import { selectorMatches } from '../../../src/policy/match/selector.ts';

test('label selectors follow metav1.LabelSelector semantics', () => {
  assert.equal(selectorMatches(undefined, {}), true);
  assert.equal(selectorMatches({}, { a: '1' }), true);
  assert.equal(selectorMatches({ matchLabels: { a: '1' } }, { a: '1', b: '2' }), true);
  assert.equal(selectorMatches({ matchLabels: { a: '1' } }, { a: '2' }), false);
  assert.equal(
    selectorMatches({ matchExpressions: [{ key: 'a', operator: 'In', values: ['1', '2'] }] }, { a: '2' }),
    true,
  );
  assert.equal(
    selectorMatches({ matchExpressions: [{ key: 'a', operator: 'In', values: ['1'] }] }, {}),
    false,
  );
  assert.equal(
    selectorMatches({ matchExpressions: [{ key: 'a', operator: 'NotIn', values: ['1'] }] }, {}),
    true,
  );
  assert.equal(
    selectorMatches({ matchExpressions: [{ key: 'a', operator: 'NotIn', values: ['1'] }] }, { a: '1' }),
    false,
  );
  assert.equal(selectorMatches({ matchExpressions: [{ key: 'a', operator: 'Exists' }] }, { a: '' }), true);
  assert.equal(
    selectorMatches({ matchExpressions: [{ key: 'a', operator: 'DoesNotExist' }] }, { a: '' }),
    false,
  );
  assert.equal(
    selectorMatches(
      { matchLabels: { a: '1' }, matchExpressions: [{ key: 'b', operator: 'Exists' }] },
      { a: '1' },
    ),
    false,
  );
});
