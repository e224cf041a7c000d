// The informer's list-and-watch loop against a fake client: what needs no apiserver.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { Resources } from '../../../src/runtime/api/meta.ts';
import { Informer } from '../../../src/runtime/cache/informer.ts';
import { ApiError, type KubeClient } from '../../../src/runtime/client/client.ts';

type StreamOptions = { signal: AbortSignal; query: Record<string, unknown> };

/**
 * A client listing `items` (namespaces) and answering every watch with `watch`; a watch asking for
 * the initial state (WatchList) is refused as by an apiserver without it.
 */
function fakeClient(watch: (opts: StreamOptions) => AsyncGenerator<never>, items: unknown[] = []) {
  return {
    request: () =>
      Promise.resolve({ apiVersion: 'v1', kind: 'NamespaceList', metadata: { resourceVersion: '1' }, items }),
    stream: (_path: string, opts: StreamOptions) =>
      opts.query['sendInitialEvents'] ? refuseWatchList() : watch(opts),
  } as unknown as KubeClient;
}

// eslint-disable-next-line require-yield
async function* refuseWatchList(): AsyncGenerator<never> {
  throw new ApiError(
    422,
    'Invalid',
    'sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled',
    {},
  );
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

/** A Namespace at a resourceVersion, as a watch or a WatchList stream sends it. */
const ns = (name: string, rv: string) => ({
  apiVersion: 'v1',
  kind: 'Namespace',
  metadata: { name, resourceVersion: rv },
});
/** The bookmark that ends a WatchList's initial events. */
const end = (rv: string) => ({
  type: 'BOOKMARK',
  object: {
    kind: 'Namespace',
    metadata: { resourceVersion: rv, annotations: { 'k8s.io/initial-events-end': 'true' } },
  },
});

test('the lifecycle hears each object enter and leave the cache: replaced, deleted, the informer stopped', async () => {
  const client = fakeClient(
    async function* (opts) {
      yield* [
        { type: 'MODIFIED', object: ns('a', '2') },
        { type: 'MODIFIED', object: ns('a', '2') },
        { type: 'DELETED', object: ns('b', '3') },
        { type: 'ADDED', object: ns('c', '4') },
      ] as never[];
      if (!opts.signal.aborted)
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
  // Stopped twice, it lets go once; started again, it holds what it kept, and stopped again lets go
  // of each once more: every object left as often as it entered.
  await informer.stop();
  informer.start();
  await informer.stop();
  const times = (sign: string, o: string) => heard.filter((h) => h === `${sign}${o}`).length;
  for (const o of new Set(heard.map((h) => h.slice(1)))) assert.equal(times('+', o), times('-', o), o);
  assert.deepEqual(heard.slice(8), ['+a@2', '+c@4', '-a@2', '-c@4']);
});

test('the initial state streamed (WatchList) fills the cache as it comes, syncs at its bookmark, and a second one deletes what it no longer holds', async () => {
  const queries: Record<string, unknown>[] = [];
  const gate = Promise.withResolvers<void>();
  const streams = [
    // The first: a and b, then (once the test has looked) the bookmark, then 410 Gone.
    async function* () {
      yield* [
        { type: 'ADDED', object: ns('a', '7') },
        { type: 'ADDED', object: ns('b', '5') },
      ];
      await gate.promise;
      yield* [end('9'), { type: 'ERROR', object: { code: 410, message: 'too old' } }];
    },
    // The second, after 410: only b is left.
    async function* (opts: StreamOptions) {
      yield* [{ type: 'ADDED', object: ns('b', '5') }, end('12')];
      await new Promise((resolve) => opts.signal.addEventListener('abort', resolve, { once: true }));
    },
  ];
  const client = {
    request: () => assert.fail('a list was sent where the watch streams the state'),
    stream: (_path: string, opts: StreamOptions) => {
      queries.push(opts.query);
      return streams[queries.length - 1]!(opts);
    },
  } as unknown as KubeClient;
  const deleted: string[] = [];
  const informer = new Informer({ client, ref: Resources.namespaces });
  informer.addEventHandler({ onDelete: (o) => deleted.push(o.metadata!.name!) });
  informer.start();
  while (informer.size < 2) await sleep(5);
  // Cached as they came, yet not synced before the bookmark, nor resumable from an object's version.
  assert.equal(informer.hasSynced(), false);
  assert.equal(informer.lastSyncResourceVersion, '');
  gate.resolve();
  await informer.waitForSync();
  while (queries.length < 2 || informer.get('a')) await sleep(5);
  await informer.stop();
  assert.deepEqual(deleted, ['a']);
  assert.equal(informer.lastSyncResourceVersion, '12');
  for (const q of queries) {
    assert.equal(q['sendInitialEvents'], true);
    assert.equal(q['resourceVersionMatch'], 'NotOlderThan');
    assert.equal(q['resourceVersion'], undefined);
  }
});

/** A handler that records each add as name:true (in the initial list) or name:false (news). */
function addsSeen() {
  const seen: string[] = [];
  return {
    seen,
    handler: {
      onAdd: (o: { metadata?: { name?: string } }, initial?: boolean) =>
        seen.push(`${o.metadata!.name}:${initial === true}`),
    },
  };
}

test('adds of the first list are in the initial list, those of the watch are not, and a late handler replay is', async () => {
  const ns = (name: string) => ({
    apiVersion: 'v1',
    kind: 'Namespace',
    metadata: { name, resourceVersion: '1' },
  });
  const client = fakeClient(
    async function* (opts) {
      yield* [{ type: 'ADDED', object: ns('c') }] as never[];
      await new Promise((resolve) => opts.signal.addEventListener('abort', resolve, { once: true }));
    },
    [ns('a'), ns('b')],
  );
  const informer = new Informer({ client, ref: Resources.namespaces });
  const early = addsSeen();
  informer.addEventHandler(early.handler);
  informer.start();
  while (!informer.get('c')) await sleep(5);
  const late = addsSeen();
  informer.addEventHandler(late.handler);
  await informer.stop();
  assert.deepEqual(early.seen, ['a:true', 'b:true', 'c:false']);
  assert.deepEqual(late.seen, ['a:true', 'b:true', 'c:true']);
});

test('adds of a streamed initial state (WatchList) are in the initial list; those of a relist after 410 are news', async () => {
  const streams = [
    async function* () {
      yield* [{ type: 'ADDED', object: ns('a', '7') }, end('8'), { type: 'ADDED', object: ns('b', '9') }];
      yield { type: 'ERROR', object: { code: 410, message: 'too old' } };
    },
    // After 410: c was created while the watch was down.
    async function* (opts: StreamOptions) {
      yield* [
        { type: 'ADDED', object: ns('a', '7') },
        { type: 'ADDED', object: ns('b', '9') },
      ];
      yield* [{ type: 'ADDED', object: ns('c', '11') }, end('12')];
      await new Promise((resolve) => opts.signal.addEventListener('abort', resolve, { once: true }));
    },
  ];
  let opened = 0;
  const client = {
    request: () => assert.fail('a list was sent where the watch streams the state'),
    stream: (_path: string, opts: StreamOptions) => streams[opened++]!(opts),
  } as unknown as KubeClient;
  const informer = new Informer({ client, ref: Resources.namespaces });
  const adds = addsSeen();
  informer.addEventHandler(adds.handler);
  informer.start();
  while (!informer.get('c')) await sleep(5);
  await informer.stop();
  assert.deepEqual(adds.seen, ['a:true', 'b:false', 'c:false']);
});
