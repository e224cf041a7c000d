import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Controller, FirstPass } from '../../../src/runtime/controller/controller.ts';

test('the first pass is not done before the node cache has listed, however empty it looks', () => {
  let synced = false;
  let keys: string[] = [];
  const results = new Map<string, unknown>();
  const pass = new FirstPass(results, { keys: () => keys, hasSynced: () => synced });
  new Controller({ name: 'firstpass-test', reconciler: { reconcile: async () => {} }, firstPass: pass });
  assert.equal(pass.complete(), false, 'an unlisted cache is not an empty cluster');
  synced = true;
  keys = ['n1', 'n2'];
  assert.equal(pass.complete(), false, 'n1 and n2 have no result yet');
  results.set('n1', 1).set('n2', 1);
  assert.equal(pass.complete(), true);
  results.clear();
  assert.equal(pass.complete(), true, 'once done, it stays done');
});

test('the first pass waits for its controller: no controller, or keys still queued, is no pass', () => {
  const results = new Map<string, unknown>([['n1', 1]]);
  const pass = new FirstPass(results, { keys: () => ['n1'], hasSynced: () => true });
  assert.equal(pass.complete(), false, 'no controller has been through the nodes');
  const controller = new Controller({
    name: 'firstpass-queued',
    reconciler: { reconcile: async () => {} },
    firstPass: pass,
  });
  controller.queue.add('n1');
  assert.equal(pass.complete(), false, 'n1 is queued again: its result is not its last');
  assert.throws(
    () =>
      new Controller({ name: 'firstpass-other', reconciler: { reconcile: async () => {} }, firstPass: pass }),
    /one controller/,
  );
});
