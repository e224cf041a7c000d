// The test helpers that tell a settled state from a write still landing.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { settles, unchangedFor } from '../../helpers/wait.ts';

/** A read that answers `values` in turn, then the last one for good. */
const answers = (...values: number[]) => {
  let i = 0;
  return async () => values[Math.min(i++, values.length - 1)]!;
};

test('settles returns the answer that stopped changing, not the first', async () => {
  assert.equal(await settles('x', answers(1, 2, 3), { quietMs: 150, intervalMs: 10 }), 3);
});

test('settles takes an absent answer as an answer', async () => {
  assert.equal(await settles('x', async () => undefined, { quietMs: 50, intervalMs: 10 }), undefined);
});

test('settles times out on an answer that keeps changing, saying what it saw last', async () => {
  let i = 0;
  await assert.rejects(
    settles('a counter', async () => i++, { quietMs: 100, intervalMs: 10, timeoutMs: 300 }),
    /a counter to settle \(the same for 100 ms\); last observed:\n\d+/,
  );
});

test('unchangedFor fails on a change after the state settled', async () => {
  const start = Date.now();
  // Quiet for the first second, then rewritten.
  const read = async () => (Date.now() - start < 1300 ? 'v1' : 'v2');
  await assert.rejects(unchangedFor('the object', read, 1000), /expected the object to hold for 1000 ms/);
  await unchangedFor('the object', read, 300);
});
