// The informer's list-and-watch loop against a fake client: what needs no apiserver.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { Resources } from '../../../src/runtime/api/meta.ts';
import { Informer } from '../../../src/runtime/cache/informer.ts';
import { ApiError, type KubeClient } from '../../../src/runtime/client/client.ts';

test('watches that keep failing are retried with a growing backoff, not at the first delay', async () => {
  let watches = 0;
  const client = {
    request: () =>
      Promise.resolve({
        apiVersion: 'v1',
        kind: 'NamespaceList',
        metadata: { resourceVersion: '1' },
        items: [],
      }),
    // An apiserver that lists but refuses every watch (throttled, restarting).
    // eslint-disable-next-line require-yield
    stream: async function* () {
      watches++;
      throw new ApiError(500, 'InternalError', 'watch refused', {});
    },
  } as unknown as KubeClient;
  const informer = new Informer({
    client,
    ref: Resources.namespaces,
    backoff: { initialMs: 20, maxMs: 10_000 },
  });
  informer.start();
  await informer.waitForSync();
  await sleep(1_000);
  await informer.stop();
  // 20, 40, 80, 160, 320 ms (±20%) fit in a second: five or six watches, where a backoff reset before
  // every watch would send one every 20 ms.
  assert.ok(watches >= 4 && watches <= 8, `${watches} watches in a second`);
});
