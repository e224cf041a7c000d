// What every policy kind's explanation shares: its counts and conditions read from status, the
// since-when of a condition in the units a reader takes in at once, and the text `berth explain`
// prints of in and out subjects (the first 20 of each side, -o json for the rest).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { explanationText } from '../../../src/explain.ts';
import { age, conditionLine, since, statusSaid } from '../../../src/policy/explain.ts';
import type { Condition } from '../../../src/runtime/api/conditions.ts';

const now = new Date('2026-11-27T12:00:00Z');
const ago = (s: number) => new Date(now.getTime() - s * 1000).toISOString();

test('statusSaid: the whole-number fields but observedGeneration are counts; conditions as they are, none as []', () => {
  const conditions = [
    { type: 'Ready', status: 'True', reason: 'Reconciled', message: '', lastTransitionTime: ago(5) },
  ];
  assert.deepEqual(
    statusSaid({
      apiVersion: 'x/v1',
      kind: 'X',
      status: { observedGeneration: 4, matchedNodes: 3, waiting: 0, ratio: 0.5, mode: 'on', conditions },
    } as never),
    { conditions, counts: { matchedNodes: 3, waiting: 0 } },
  );
  assert.deepEqual(statusSaid({ apiVersion: 'x/v1', kind: 'X' }), { conditions: [], counts: {} });
});

test('age: seconds below 2 minutes, then minutes, hours, days; never negative; unknown as ?', () => {
  assert.deepEqual(
    [0, 119, 120, 7199, 7200, 172_799, 172_800, -30].map((s) => age(ago(s), now)),
    ['0s', '119s', '2m', '119m', '2h', '47h', '2d', '0s'],
  );
  assert.equal(age(undefined, now), '?');
  assert.equal(age('not a time', now), '?');
  assert.equal(since(ago(90), now), `since ${ago(90)} (90s ago)`);
  assert.equal(since(undefined, now), 'since (unknown)');
});

test('a condition line: type, status, reason, since-when, and its message when it has one', () => {
  const c: Condition = {
    type: 'Ready',
    status: 'False',
    reason: 'Invalid',
    message: 'spec.x: bad',
    lastTransitionTime: ago(3600),
  };
  assert.equal(
    conditionLine(c, now),
    `  Ready: False (Invalid) since ${c.lastTransitionTime} (60m ago): spec.x: bad`,
  );
  assert.equal(
    conditionLine({ ...c, message: '' }, now),
    `  Ready: False (Invalid) since ${c.lastTransitionTime} (60m ago)`,
  );
});

test('the text: no status yet said as such; subjects in then out, 20 of each side, the rest counted', () => {
  const subjects = Array.from({ length: 23 }, (_, i) => ({
    kind: 'Node',
    name: `n${i}`,
    in: i < 22,
    why: i === 0 ? ['matches', 'label a=b'] : [],
  }));
  const text = explanationText(
    { kind: 'NodeLabelRule', name: 'r', conditions: [], counts: {}, subjects, lines: ['  the end'] },
    now,
  );
  assert.deepEqual(text.slice(0, 5), [
    'NodeLabelRule r',
    '  no status yet (Berth not running, or not caught up)',
    '  acts on 22 node(s):',
    '    Node n0: matches',
    '      label a=b',
  ]);
  assert.equal(text.filter((l) => l.startsWith('    Node ')).length, 21);
  assert.ok(text.includes('    (+2 more: -o json lists them all)'), text.join('\n'));
  assert.deepEqual(text.slice(-3), ['  leaves alone 1 node(s):', '    Node n22', '  the end']);
  // A namespaced object is titled NAMESPACE/NAME; no conditions at all (a kind without status) says nothing of them.
  assert.deepEqual(explanationText({ kind: 'Pod', name: 'p', namespace: 'shop', lines: [] }, now), [
    'Pod shop/p',
  ]);
});
