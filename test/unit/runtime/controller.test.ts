// The controller's workers without an apiserver: keys added by hand, a reconciler the test drives.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { Controller } from '../../../src/runtime/controller/controller.ts';

test('stop waits for the reconciles running and leaves the backlog', async () => {
  const reconciled: string[] = [];
  const controller = new Controller({
    name: 'stop-test',
    workers: 1,
    reconciler: {
      reconcile: async (key) => {
        reconciled.push(key);
        await sleep(50);
      },
    },
  });
  for (let i = 0; i < 10; i++) controller.queue.add(`k${i}`);
  await controller.start();
  await sleep(10);
  await controller.stop();
  assert.deepEqual(reconciled, ['k0']);
});

test('a controller without a worker is refused when it is made', () => {
  for (const workers of [0, Number.NaN, 1.5])
    assert.throws(
      () => new Controller({ name: 'none', workers, reconciler: { reconcile: () => Promise.resolve() } }),
      /workers must be a whole number of at least 1/,
    );
});

test('a backlog of reconciles that read only caches lets timers in while it runs, not only after', async () => {
  const keys = 20_000;
  let reconciled = 0;
  const controller = new Controller({
    name: 'backlog-test',
    workers: 4,
    // A reconcile that finds nothing to write: no I/O, it resolves at once.
    reconciler: { reconcile: () => (reconciled++, Promise.resolve()) },
  });
  for (let i = 0; i < keys; i++) controller.queue.add(`k${i}`);
  // A timer due at once (the Lease's renewal, say) must fire while the backlog still runs.
  const atTimer = new Promise<number>((resolve) => setTimeout(() => resolve(reconciled), 0));
  await controller.start();
  const seen = await atTimer;
  while (reconciled < keys) await sleep(5);
  await controller.stop();
  assert.ok(seen < keys, `the timer fired only after all ${keys} reconciles`);
});
