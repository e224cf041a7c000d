// berth plan's reading of manifests and its text: every document, lists unwrapped, bad ones named.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseManifests, planText } from '../../src/plan.ts';

test('documents are read, lists unwrapped, and one without a name is an error', () => {
  const { objects, errors } = parseManifests(
    'kind: NodeLabelRule\nmetadata: {name: a}\n---\nkind: List\nitems: [{kind: Cell, metadata: {name: c}}]\n---\nkind: Quota\n',
    'f.yaml',
  );
  assert.deepEqual(
    objects.map((o) => `${o.kind}/${o.metadata?.name}`),
    ['NodeLabelRule/a', 'Cell/c'],
  );
  assert.deepEqual(errors, ['f.yaml: a document without kind or metadata.name']);
});

test('the text groups effects by object and prints warnings and unknowns', () => {
  const lines = planText({
    changes: true,
    effects: [
      { kind: 'Node', name: 'n1', op: '+', what: 'label a=b', by: 'NodeLabelRule r' },
      { kind: 'Node', name: 'n1', op: '-', what: 'taint t:NoSchedule=x', by: 'NodeLabelRule r' },
    ],
    warnings: ['every node (1) would be tainted t:NoSchedule'],
    unknown: ['Workload w: berth plan does not plan this kind'],
    errors: [],
    evictions: { namespaces: { shop: 2 }, budgets: { 'shop/web': 1 } },
  });
  assert.deepEqual(lines, [
    '1 object(s) would change (nothing was written)',
    'Node n1',
    '  + label a=b  (NodeLabelRule r)',
    '  - taint t:NoSchedule=x  (NodeLabelRule r)',
    'evictions by namespace: shop 2',
    'evictions by PodDisruptionBudget: shop/web 1',
    'warning: every node (1) would be tainted t:NoSchedule',
    'unknown: Workload w: berth plan does not plan this kind',
  ]);
});
