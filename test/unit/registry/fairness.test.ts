import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { setImmediate as tick } from 'node:timers/promises';
import { FairSemaphore } from '../../../src/registry/fairness.ts';

/** Acquires in the background, recording the order of grants under `name`. */
const taker = (s: FairSemaphore, order: string[]) => (flow: string, name: string, signal?: AbortSignal) =>
  s.acquire(flow, signal).then((release) => (order.push(name), release));

describe('FairSemaphore', () => {
  test('a flow holds at most its share: the rest stays free for other flows', async () => {
    const s = new FairSemaphore(4, 2);
    const order: string[] = [];
    const take = taker(s, order);
    const a = [take('a', 'a1'), take('a', 'a2'), take('a', 'a3'), take('a', 'a4')];
    await tick();
    assert.deepEqual(order, ['a1', 'a2']);
    assert.equal(s.held, 2);
    assert.equal(s.waiting, 2);
    assert.equal(s.wouldWait('a'), 'share');
    assert.equal(s.wouldWait('b'), undefined);
    // Another flow is granted at once, past the first flow's waiters.
    const b = [take('b', 'b1'), take('b', 'b2')];
    await tick();
    assert.deepEqual(order, ['a1', 'a2', 'b1', 'b2']);
    assert.equal(s.wouldWait('c'), 'limit');
    (await a[0]!)();
    await tick();
    assert.deepEqual(order.slice(4), ['a3']);
    for (const r of [...a.slice(1, 3), ...b]) (await r)();
    (await a[3]!)();
    assert.equal(s.held, 0);
    assert.equal(s.waiting, 0);
  });

  test('a freed seat goes to the waiting flow holding the fewest; of two as few, the one waiting longest', async () => {
    const s = new FairSemaphore(4, 4);
    const order: string[] = [];
    const take = taker(s, order);
    const held = [take('a', 'a1'), take('a', 'a2'), take('a', 'a3'), take('b', 'b1')];
    await tick();
    // Waiting, in this order: a (holding 3), c (holding none), b (holding 1), d (holding none).
    const waiting = [take('a', 'a4'), take('c', 'c1'), take('b', 'b2'), take('d', 'd1')];
    await tick();
    assert.equal(s.waiting, 4);
    // b's seat first: c, b and d hold none, and c waits longest; then a's, one by one.
    for (const r of [held[3]!, ...held.slice(0, 3)]) {
      (await r)();
      await tick();
    }
    assert.deepEqual(order.slice(4), ['c1', 'b2', 'd1', 'a4']);
    for (const r of waiting) (await r)();
    assert.equal(s.held, 0);
  });

  test('weights: a flow’s bytes bounded by its share; one above the share waits for all of it', async () => {
    const s = new FairSemaphore(100, 40);
    const a1 = await s.acquire('a', undefined, 30);
    let big: (() => void) | undefined;
    const bigP = s.acquire('a', undefined, 1000).then((r) => (big = r));
    await tick();
    assert.equal(big, undefined, 'waits for its flow’s 30');
    assert.equal(s.heldBy('a'), 30);
    const b1 = await s.acquire('b', undefined, 40);
    assert.equal(s.held, 70);
    a1();
    await bigP;
    assert.equal(s.heldBy('a'), 40, 'taken as the whole share');
    big!();
    b1();
    assert.equal(s.held, 0);
  });

  test('the fairest waiter that does not fit is not overtaken by a smaller one of another flow', async () => {
    const s = new FairSemaphore(10, 10);
    const held = await s.acquire('x', undefined, 8);
    const order: string[] = [];
    const a = s.acquire('a', undefined, 5).then((r) => (order.push('a'), r));
    await tick();
    const b = s.acquire('b', undefined, 1).then((r) => (order.push('b'), r));
    await tick();
    assert.deepEqual(order, []);
    held();
    await tick();
    assert.deepEqual(order, ['a', 'b']);
    (await a)();
    (await b)();
  });

  test('a waiter that gives up leaves its queue, and an idle flow is forgotten', async () => {
    const s = new FairSemaphore(1, 1);
    const hold = await s.acquire('a');
    const ac = new AbortController();
    const gaveUp = s.acquire('b', ac.signal);
    const next = s.acquire('c');
    await tick();
    ac.abort(new Error('gone'));
    await assert.rejects(gaveUp, /gone/);
    assert.equal(s.waiting, 1);
    assert.equal(s.wouldWait('b'), 'limit', 'b holds and wants nothing: no longer at its share');
    hold();
    hold();
    (await next)();
    assert.equal(s.held, 0);
    assert.equal(s.heldBy('c'), 0);
    assert.equal(s.wouldWait('a'), undefined);
    await assert.rejects(s.acquire('a', AbortSignal.abort(new Error('already'))), /already/);
  });

  test('a share above the limit is the limit; limits below 1 are refused', () => {
    assert.throws(() => new FairSemaphore(0, 1), /at least 1/);
    assert.throws(() => new FairSemaphore(1, 0), /at least 1/);
    const s = new FairSemaphore(2, 5);
    assert.equal(s.wouldWait('a', 3), undefined);
  });
});
