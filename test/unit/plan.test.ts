// berth plan's reading of manifests and its text: every document, lists unwrapped, bad ones named.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseManifests, planText, reversed } from '../../src/plan.ts';

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

test('documents are read as kubectl reads them (YAML 1.1): yes is a boolean, not a string', () => {
  const { objects } = parseManifests(
    'kind: NodeLabelRule\nmetadata: {name: a}\nspec: {labels: {a: yes, b: "yes"}}\n',
    'f',
  );
  assert.deepEqual((objects[0] as { spec?: unknown }).spec, { labels: { a: true, b: 'yes' } });
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

test('a plan of deleting, reversed, says what the objects do now; the pods deleting them evicts are only counted', () => {
  const now = reversed({
    changes: true,
    effects: [
      { kind: 'Node', name: 'n1', op: '-', what: 'label a=b', by: 'NodeLabelRule r' },
      { kind: 'Node', name: 'n1', op: '~', what: 'label c: x -> y', by: 'NodeLabelRule r' },
      { kind: 'Pod', name: 'ns/p', op: '!', what: 'evicted 60 s after label a goes', by: 'NodeLabelRule r' },
    ],
    evictions: { namespaces: { ns: 1 }, budgets: {} },
    warnings: ['this change would evict 1 pod(s): ns 1', 'current rule skipped: x'],
    unknown: [],
    errors: [],
  });
  assert.deepEqual(
    now.effects.map((e) => `${e.op} ${e.what}`),
    ['+ label a=b', '~ label c: y -> x'],
  );
  assert.equal(now.evictions, undefined);
  assert.deepEqual(now.warnings, ['current rule skipped: x']);
  assert.deepEqual(now.unknown, ['deleting them would evict 1 pod(s): berth plan --delete says which']);
  assert.equal(planText(now, true)[0], 'what these do now, to 1 object(s) (nothing was written)');
  assert.equal(planText(reversed({ ...now, effects: [], changes: false }), true)[0], 'they do nothing now');
});
