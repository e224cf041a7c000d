import assert from 'node:assert/strict';
import { test } from 'node:test';
import { WriteSpacing, WriteWindow } from '../../../src/runtime/controller/spacing.ts';

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

test('with a burst, that many writes go at once after a quiet spell, then one per interval', () => {
  const s = new WriteSpacing(500, 2);
  assert.equal(s.wait('a', 0), 0);
  s.wrote('a', 0);
  assert.equal(s.wait('a', 100), 0, 'the second of a pair goes at once');
  s.wrote('a', 100);
  // 0.2 of a token left: 0.8 of an interval to wait.
  assert.equal(s.wait('a', 100), 400);
  assert.equal(s.wait('a', 500), 0);
  s.wrote('a', 500);
  assert.equal(s.wait('a', 500), 500, 'a key that keeps changing is written once per interval');
  assert.equal(s.wait('a', 2000), 0);
  s.wrote('a', 2000);
  assert.equal(s.wait('a', 2000), 0, 'a quiet spell fills the bucket again');
  s.wrote('a', 2000);
  assert.equal(s.wait('a', 2000), 500, 'never more than the burst');
});

test('a window writes a quiet key at once and holds a busy one until its first change is a window old', () => {
  const s = new WriteWindow(400, 1000);
  assert.equal(s.wait('a', 0), 0, 'never written: at once');
  s.wrote('a', 0);
  assert.equal(s.wait('a', 300), 400, 'written 300 ms ago: the change waits a window');
  assert.equal(s.wait('a', 500), 200, 'a later change waits only for the first');
  assert.equal(s.wait('a', 700), 0);
  s.wrote('a', 700);
  s.wait('a', 800);
  s.settled('a');
  assert.equal(s.wait('a', 1100), 400, 'an undone change no longer counts; a new one waits its own window');
  s.wrote('a', 1500);
  assert.equal(s.wait('a', 2500), 0, 'quiet for a second: at once');
  assert.equal(s.wait('b', 2500), 0, 'keys apart from each other');
  s.forget('a');
  assert.equal(s.wait('a', 2600), 0, 'a forgotten key is new again');
});
