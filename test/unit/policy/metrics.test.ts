import assert from 'node:assert/strict';
import { test } from 'node:test';
import { policyMetrics, recordConditions } from '../../../src/policy/metrics.ts';
import { agentMetrics, countClaimWrites } from '../../../src/agents/metrics.ts';

const series = async (name: string) =>
  (await policyMetrics.condition.get()).values
    .filter((v) => v.labels['name'] === name)
    .map((v) => `${v.labels['type']}/${v.labels['status']}=${v.value}`)
    .sort();

test('a policy condition is one series per status, 1 for the one that holds; a condition or policy gone takes its series', async () => {
  recordConditions('NodeStartupGate', 'g', [
    { type: 'Invalid', status: 'True' },
    { type: 'Ready', status: 'False' },
  ]);
  assert.deepEqual(await series('g'), ['Invalid/False=0', 'Invalid/True=1', 'Ready/False=1', 'Ready/True=0']);
  recordConditions('NodeStartupGate', 'g', [{ type: 'Ready', status: 'True' }]);
  assert.deepEqual(await series('g'), ['Ready/False=0', 'Ready/True=1']);
  recordConditions('NodeStartupGate', 'g', undefined);
  assert.deepEqual(await series('g'), []);
});

test('claims written are new or changed claim keys, cleared are claim keys no longer written; other keys do not count', async () => {
  const count = async () =>
    Object.fromEntries((await agentMetrics.claims.get()).values.map((v) => [v.labels['action'], v.value]));
  const before = await count();
  countClaimWrites(
    { 'c/a': 'x', 'c/b': 'y', 'c/gone': 'z', other: '1' },
    { 'c/a': 'x', 'c/b': 'changed', 'c/new': 'w', other: '2' },
    (k) => k.startsWith('c/'),
  );
  const after = await count();
  assert.equal((after['written'] ?? 0) - (before['written'] ?? 0), 2);
  assert.equal((after['cleared'] ?? 0) - (before['cleared'] ?? 0), 1);
});
