import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Controller } from '../../../src/runtime/controller/controller.ts';
import { Trigger } from '../../../src/runtime/controller/trigger.ts';

/** A controller that records the keys it reconciles, each resolving `seen` once it has. */
function recording(name: string) {
  const keys: string[] = [];
  const waiters: { n: number; resolve: () => void }[] = [];
  const controller = new Controller({
    name,
    reconciler: {
      reconcile: async (key) => {
        keys.push(key);
        for (const w of waiters.filter((w) => keys.length >= w.n)) w.resolve();
      },
    },
  });
  const seen = (n: number) =>
    new Promise<void>((resolve) => (keys.length >= n ? resolve() : waiters.push({ n, resolve })));
  return { controller, keys, seen };
}

test(
  'a trigger enqueues what it is sent in the controllers that reconcile on it',
  { timeout: 5000 },
  async () => {
    const trigger = new Trigger();
    const a = recording('trigger-a');
    const b = recording('trigger-b');
    a.controller.reconcileOn(trigger);
    b.controller.reconcileOn(trigger);
    await Promise.all([a.controller.start(), b.controller.start()]);
    try {
      trigger.send('ns/one');
      trigger.send(['ns/two', 'ns/three']);
      await Promise.all([a.seen(3), b.seen(3)]);
      assert.deepEqual(a.keys, ['ns/one', 'ns/two', 'ns/three']);
      assert.deepEqual(b.keys, a.keys, 'every controller on the trigger gets every key');
    } finally {
      await Promise.all([a.controller.stop(), b.controller.stop()]);
    }
  },
);

test(
  'a key sent before any controller reconciles on the trigger is kept for the first',
  { timeout: 5000 },
  async () => {
    const trigger = new Trigger();
    trigger.send('early');
    trigger.sendAfter('late', 30);
    const a = recording('trigger-early');
    a.controller.reconcileOn(trigger);
    await a.controller.start();
    try {
      await a.seen(1);
      assert.deepEqual(a.keys, ['early'], 'the delayed key waits its delay');
      await a.seen(2);
      assert.deepEqual(a.keys, ['early', 'late']);
    } finally {
      await a.controller.stop();
    }
  },
);

test(
  'sendAfter queues the key once its delay has passed, once however often it is sent',
  { timeout: 5000 },
  async () => {
    const trigger = new Trigger();
    const a = recording('trigger-after');
    a.controller.reconcileOn(trigger);
    await a.controller.start();
    try {
      const sent = performance.now();
      trigger.sendAfter('k', 60);
      trigger.sendAfter('k', 200);
      await a.seen(1);
      const waited = performance.now() - sent;
      assert.ok(waited >= 55 && waited < 190, `the earliest delay wins (waited ${waited.toFixed(0)} ms)`);
      await new Promise((r) => setTimeout(r, 250));
      assert.deepEqual(a.keys, ['k'], 'the later delay of a waiting key adds nothing');
    } finally {
      await a.controller.stop();
    }
  },
);

test('keys sent at low priority wait behind normal ones, also when sent before a controller connects', async () => {
  const trigger = new Trigger();
  trigger.send(['early-low'], { priority: 'low' });
  trigger.send('early');
  const { controller } = recording('trigger-priority');
  controller.reconcileOn(trigger);
  trigger.send(['low-1', 'low-2'], { priority: 'low' });
  trigger.send('normal');
  const order: string[] = [];
  while (controller.queue.len() > 0) {
    const item = await controller.queue.get();
    if (item.shutdown) break;
    order.push(item.key);
    controller.queue.done(item.key);
  }
  assert.deepEqual(order, ['early', 'normal', 'early-low', 'low-1', 'low-2']);
});
