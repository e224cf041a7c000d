import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Controller, FirstPass } from '../../../src/runtime/controller/controller.ts';

test('the first pass is not done before the node cache has listed, however empty it looks', () => {
  const controller = new Controller({ name: 'firstpass-test', reconciler: { reconcile: async () => {} } });
  const pass = new FirstPass();
  let synced = false;
  let keys: string[] = [];
  const nodes = { keys: () => keys, hasSynced: () => synced };
  const results = new Map<string, unknown>();
  assert.equal(pass.complete(controller, results, nodes), false, 'an unlisted cache is not an empty cluster');
  synced = true;
  keys = ['n1', 'n2'];
  assert.equal(pass.complete(controller, results, nodes), false, 'n1 and n2 have no result yet');
  results.set('n1', 1).set('n2', 1);
  assert.equal(pass.complete(controller, results, nodes), true);
  results.clear();
  assert.equal(pass.complete(controller, results, nodes), true, 'once done, it stays done');
});
