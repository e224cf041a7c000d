import assert from 'node:assert/strict';
import { test } from 'node:test';
import { WriteSpacing } from '../../../src/runtime/controller/spacing.ts';

test('a key never written may be written at once; after a write it waits the rest of the interval', () => {
  const s = new WriteSpacing(250);
  assert.equal(s.wait('a', 1000), 0);
  s.wrote('a', 1000);
  assert.equal(s.wait('a', 1000), 250);
  assert.equal(s.wait('a', 1100), 150);
  assert.equal(s.wait('a', 1250), 0);
  assert.equal(s.wait('a', 5000), 0);
  assert.equal(s.wait('b', 1100), 0, 'keys are spaced apart from each other');
  assert.equal(s.wait('a', 1100, 1000), 900, 'a write spaced otherwise');
  s.forget('a');
  assert.equal(s.wait('a', 1100), 0, 'a forgotten key is new again');
});
