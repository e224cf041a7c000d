// The controller's workers without an apiserver: keys added by hand, a reconciler the test drives.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { KubeObject } from '../../../src/runtime/api/meta.ts';
import type { EventHandler } from '../../../src/runtime/cache/informer.ts';
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

/** A source of objects, as an informer: a late handler gets every object as an add of the initial list. */
function fakeSource(objs: KubeObject[]) {
  const handlers: EventHandler<KubeObject>[] = [];
  return {
    handlers,
    addEventHandler(h: EventHandler<KubeObject>) {
      handlers.push(h);
      for (const o of objs) h.onAdd?.(o, true);
    },
    waitForSync: () => Promise.resolve(),
  };
}

const obj = (name: string, resourceVersion = '1'): KubeObject => ({ metadata: { name, resourceVersion } });

/** Every key the controller's queue holds, in the order its workers would get them. */
async function queued(controller: Controller): Promise<string[]> {
  const keys: string[] = [];
  while (controller.queue.len() > 0) {
    const item = await controller.queue.get();
    if (item.shutdown) break;
    keys.push(item.key);
    controller.queue.done(item.key);
  }
  return keys;
}

const idle = () =>
  new Controller({ name: 'priority-test', reconciler: { reconcile: () => Promise.resolve() } });

test('the initial list is queued low: a change after it is reconciled first, even behind 20,000 keys', async () => {
  const nodes = fakeSource(Array.from({ length: 20_000 }, (_, i) => obj(`node-${i}`)));
  const controller = idle().watch(nodes, (o) => o.metadata!.name);
  const [h] = nodes.handlers;
  h!.onAdd!(obj('new'), false);
  h!.onUpdate!(obj('node-19999', '1'), obj('node-19999', '2'));
  const keys = await queued(controller);
  assert.deepEqual(keys.slice(0, 3), ['new', 'node-19999', 'node-0']);
  assert.equal(keys.length, 20_001);
});

test('a resync (the same object, or the same resourceVersion) is queued low; a change or a delete is not', async () => {
  const source = fakeSource([]);
  const controller = idle().watch(source, (o) => o.metadata!.name);
  const [h] = source.handlers;
  const a = obj('resync');
  h!.onUpdate!(a, a);
  h!.onUpdate!(obj('same-rv', '5'), obj('same-rv', '5'));
  h!.onUpdate!(obj('changed', '5'), obj('changed', '6'));
  h!.onDelete!(obj('deleted'));
  assert.deepEqual(await queued(controller), ['changed', 'deleted', 'resync', 'same-rv']);
});

test('a policy of the initial list mapped to every node queues them low; one created later, normally', async () => {
  const nodes = Array.from({ length: 3 }, (_, i) => `node-${i}`);
  const policies = fakeSource([obj('old-policy')]);
  const objects = fakeSource([obj('object')]);
  const controller = idle()
    .watch(policies, () => nodes)
    .watch(objects, (o) => o.metadata!.name);
  objects.handlers[0]!.onAdd!(obj('created'), false);
  assert.deepEqual(await queued(controller), ['created', 'node-0', 'node-1', 'node-2', 'object']);
  for (const k of ['object', ...nodes]) controller.queue.add(k, { priority: 'low' });
  policies.handlers[0]!.onAdd!(obj('new-policy'), false);
  assert.deepEqual(await queued(controller), [...nodes, 'object']);
});
