import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  newlyHolds,
  sameConditions,
  setCondition,
  type Condition,
} from '../../../src/runtime/api/conditions.ts';

const t0 = new Date('2026-01-01T00:00:00Z');
const t1 = new Date('2026-01-01T00:05:00Z');

test('lastTransitionTime moves only when the status changes', () => {
  let c = setCondition(undefined, { type: 'Ready', status: 'False', reason: 'A', message: 'a' }, t0);
  assert.equal(c[0]!.lastTransitionTime, '2026-01-01T00:00:00Z');
  c = setCondition(c, { type: 'Ready', status: 'False', reason: 'B', message: 'b' }, t1);
  assert.equal(c[0]!.lastTransitionTime, '2026-01-01T00:00:00Z', 'same status: time kept, reason updated');
  assert.equal(c[0]!.reason, 'B');
  c = setCondition(c, { type: 'Ready', status: 'True', reason: 'C', message: 'c' }, t1);
  assert.equal(c[0]!.lastTransitionTime, '2026-01-01T00:05:00Z');
  c = setCondition(c, { type: 'Other', status: 'True', reason: 'D', message: '' }, t1);
  assert.deepEqual(
    c.map((x) => x.type),
    ['Ready', 'Other'],
  );
});

test('sameConditions ignores transition times, order and key order (as the apiserver returns them)', () => {
  const ours: Condition[] = [
    {
      type: 'Ready',
      status: 'True',
      reason: 'R',
      message: 'm',
      observedGeneration: 2,
      lastTransitionTime: 'x',
    },
    {
      type: 'Invalid',
      status: 'False',
      reason: 'V',
      message: '',
      observedGeneration: 2,
      lastTransitionTime: 'x',
    },
  ];
  const fromApi = JSON.parse(
    '[{"lastTransitionTime":"y","message":"","observedGeneration":2,"reason":"V","status":"False","type":"Invalid"},' +
      '{"lastTransitionTime":"y","message":"m","observedGeneration":2,"reason":"R","status":"True","type":"Ready"}]',
  ) as Condition[];
  assert.equal(sameConditions(ours, fromApi), true);
  assert.equal(sameConditions(ours, [{ ...fromApi[0]!, observedGeneration: 3 }, fromApi[1]!]), false);
  assert.equal(sameConditions(ours, fromApi.slice(1)), false);
  assert.equal(sameConditions(undefined, []), true);
});

test('newlyHolds: a condition that turns bad, or says something new while bad, once', () => {
  const c = (status: 'True' | 'False', reason: string, message: string): Condition => ({
    type: 'Invalid',
    status,
    reason,
    message,
    lastTransitionTime: '2024-01-01T00:00:00Z',
  });
  const valid = [c('False', 'Valid', '')];
  const bad = [c('True', 'InvalidSpec', 'a')];
  assert.equal(newlyHolds(valid, bad, 'Invalid', 'True'), bad[0]);
  assert.equal(newlyHolds(undefined, bad, 'Invalid', 'True'), bad[0]);
  assert.equal(newlyHolds(bad, bad, 'Invalid', 'True'), undefined, 'said already');
  assert.equal(newlyHolds(bad, [c('True', 'InvalidSpec', 'b')], 'Invalid', 'True')?.message, 'b');
  assert.equal(newlyHolds(bad, valid, 'Invalid', 'True'), undefined, 'recovered');
  assert.equal(newlyHolds(valid, bad, 'Invalid', 'True', 'Other'), undefined, 'another reason');
  assert.equal(newlyHolds(valid, bad, 'Ready', 'True'), undefined, 'another type');
});
