// A policy's row on the page (policy/view.ts): its status counts, and each condition with its tone.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { policyRow } from '../../../src/policy/view.ts';

test('policyRow: each condition with its tone, Invalid=False and Conflicting=False good, Ready=False bad', () => {
  const row = policyRow('NodeStartupGate', {
    apiVersion: 'berth.dev/v1alpha1',
    kind: 'NodeStartupGate',
    metadata: { name: 'warmup' },
    status: {
      observedGeneration: 1,
      held: 2,
      conditions: [
        { type: 'Invalid', status: 'False', reason: 'Valid' },
        { type: 'Conflicting', status: 'True', reason: 'TaintTaken', message: 'm' },
        { type: 'Ready', status: 'False', reason: 'Conflicting' },
        { type: 'RequiredPodsSchedulable', status: 'Unknown', reason: 'NotRead' },
      ],
    },
  });
  assert.deepEqual(row.counts, { held: 2 });
  assert.deepEqual(
    row.conditions.map((c) => `${c.type}=${c.status} ${c.tone}`),
    [
      'Invalid=False good',
      'Conflicting=True bad',
      'Ready=False bad',
      'RequiredPodsSchedulable=Unknown unknown',
    ],
  );
});
