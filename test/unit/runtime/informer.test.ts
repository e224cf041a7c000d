// The informer's list-and-watch loop against a fake client: what needs no apiserver.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { Resources } from '../../../src/runtime/api/meta.ts';
import { Informer } from '../../../src/runtime/cache/informer.ts';
import { ApiError, type KubeClient } from '../../../src/runtime/client/client.ts';

/** A client listing `items` (namespaces) and answering every watch with `watch`. */
function fakeClient(watch: (opts: { signal: AbortSignal }) => AsyncGenerator<never>, items: unknown[] = []) {
  return {
    request: () =>
      Promise.resolve({ apiVersion: 'v1', kind: 'NamespaceList', metadata: { resourceVersion: '1' }, items }),
    stream: (_path: string, opts: { signal: AbortSignal }) => watch(opts),
  } as unknown as KubeClient;
}

/** How many watches an informer opens in a second against `watch`, its backoff starting at 20 ms. */
async function watchesInASecond(watch: () => AsyncGenerator<never>): Promise<number> {
  let watches = 0;
  const informer = new Informer({
    client: fakeClient(() => {
      watches++;
      return watch();
    }),
    ref: Resources.namespaces,
    backoff: { initialMs: 20, maxMs: 10_000 },
  });
  informer.start();
  await informer.waitForSync();
  await sleep(1_000);
  await informer.stop();
  return watches;
}

test('watches that keep failing are retried with a growing backoff, not at the first delay', async () => {
  // An apiserver that lists but refuses every watch (throttled, restarting).
  // eslint-disable-next-line require-yield
  const watches = await watchesInASecond(async function* () {
    throw new ApiError(500, 'InternalError', 'watch refused', {});
  });
  // 20, 40, 80, 160, 320 ms (±20%) fit in a second: five or six watches, where a backoff reset before
  // every watch would send one every 20 ms.
  assert.ok(watches >= 4 && watches <= 8, `${watches} watches in a second`);
});

test('a watch the server closes at once with no event is backed off as a failure, not reopened back to back', async () => {
  // A proxy answering every watch with an empty 200: backed off as above, where reopening at once
  // made thousands.
  const watches = await watchesInASecond(async function* () {
    yield* [];
  });
  assert.ok(watches >= 4 && watches <= 8, `${watches} watches in a second`);
});

test('a handler that throws on a replay or a resync is logged; the informer and the other handlers go on', async () => {
  const ns = (name: string) => ({
    apiVersion: 'v1',
    kind: 'Namespace',
    metadata: { name, resourceVersion: '1' },
  });
  // A watch that stays open, quiet, until the informer stops.
  const client = fakeClient(
    async function* (opts) {
      await new Promise((resolve) => opts.signal.addEventListener('abort', resolve, { once: true }));
      yield* [];
    },
    [ns('a'), ns('b')],
  );
  const informer = new Informer({ client, ref: Resources.namespaces, resyncMs: 50 });
  informer.start();
  await informer.waitForSync();
  const thrower = () => {
    throw new Error('a map function bug');
  };
  // Replayed as adds at once: it must not throw out of addEventHandler.
  informer.addEventHandler({ onAdd: thrower, onUpdate: thrower });
  const seen: string[] = [];
  informer.addEventHandler({ onUpdate: (_a, b) => seen.push(b.metadata!.name!) });
  // The resync runs on (an unhandled rejection here would end the test process).
  await sleep(300);
  await informer.stop();
  assert.ok(seen.filter((n) => n === 'a').length >= 2, `resynced ${seen.join(',')}`);
});

test('the lifecycle hears each object enter and leave the cache: replaced, deleted, the informer stopped', async () => {
  const ns = (name: string, rv: string) => ({
    apiVersion: 'v1',
    kind: 'Namespace',
    metadata: { name, resourceVersion: rv },
  });
  const client = fakeClient(
    async function* (opts) {
      yield* [
        { type: 'MODIFIED', object: ns('a', '2') },
        { type: 'MODIFIED', object: ns('a', '2') },
        { type: 'DELETED', object: ns('b', '3') },
        { type: 'ADDED', object: ns('c', '4') },
      ] as never[];
      await new Promise((resolve) => opts.signal.addEventListener('abort', resolve, { once: true }));
    },
    [ns('a', '1'), ns('b', '1')],
  );
  const heard: string[] = [];
  const at = (o: { metadata?: { name?: string; resourceVersion?: string } }) =>
    `${o.metadata!.name}@${o.metadata!.resourceVersion}`;
  const informer = new Informer({
    client,
    ref: Resources.namespaces,
    lifecycle: { cached: (o) => heard.push(`+${at(o)}`), dropped: (o) => heard.push(`-${at(o)}`) },
  });
  informer.start();
  await informer.waitForSync();
  while (!informer.get('c')) await sleep(5);
  await informer.stop();
  // A version the cache holds already (a@2 twice) is not cached again.
  assert.deepEqual(heard, ['+a@1', '+b@1', '+a@2', '-a@1', '-b@1', '+c@4', '-a@2', '-c@4']);
});
