import assert from 'node:assert/strict';
import { test } from 'node:test';
import { nodeTerms, podTerms } from '../../../src/gates/webhook.ts';
import { gate } from './fixtures.ts';

const selector = { matchLabels: { pool: 'gpu' } };

test('the Node webhook is sent the nodes of the enforced gates, none for a dry run or a gate being deleted', () => {
  const enforced = gate('a', { nodeSelector: selector });
  assert.deepEqual(nodeTerms([enforced]), [{ objectSelector: selector }]);
  assert.deepEqual(nodeTerms([gate('b', { nodeSelector: selector, dryRun: true })]), []);
  assert.deepEqual(
    nodeTerms([
      { ...enforced, deleting: true },
      { ...enforced, enforced: false },
    ]),
    [],
  );
  assert.deepEqual(nodeTerms([]), []);
});

test('the Pod webhook is sent every pod with nodeName while a gate could hold a node, none otherwise', () => {
  assert.deepEqual(podTerms([gate('a')]), [{}]);
  assert.deepEqual(podTerms([gate('a', { nodeNamePods: 'Warn' })]), [{}]);
  assert.deepEqual(podTerms([gate('a', { taint: { key: 'k', effect: 'PreferNoSchedule' } })]), []);
  assert.deepEqual(podTerms([{ ...gate('a'), enforced: false }]), []);
  assert.deepEqual(podTerms([{ ...gate('a'), deleting: true }]), []);
  // A dry run holds no node: nothing for its Pod webhook to refuse or warn about.
  assert.deepEqual(podTerms([gate('a', { dryRun: true })]), []);
  assert.deepEqual(podTerms([gate('a', { dryRun: true }), gate('b')]), [{}]);
  assert.deepEqual(podTerms([]), []);
});
