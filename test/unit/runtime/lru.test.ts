import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { Lru } from '../../../src/runtime/lru.ts';

describe('Lru', () => {
  test('holds at most max entries and evicts the least recently used', () => {
    const evicted: number[] = [];
    const lru = new Lru<number>(3, (v) => evicted.push(v));
    lru.set('a', 1);
    lru.set('b', 2);
    lru.set('c', 3);
    assert.equal(lru.get('a'), 1); // now b is the oldest
    lru.set('d', 4);
    assert.equal(lru.size, 3);
    assert.deepEqual(evicted, [2]);
    assert.equal(lru.peek('b'), undefined);
    assert.equal(lru.peek('c'), 3); // peek does not refresh c
    lru.set('e', 5);
    assert.deepEqual(evicted, [2, 3]);
    lru.set('a', 10); // replacing is not evicting
    assert.deepEqual(evicted, [2, 3]);
    assert.equal(lru.get('a'), 10);
  });
});
