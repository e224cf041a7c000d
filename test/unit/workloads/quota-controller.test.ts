// The quota controller against a stand-in apiserver (lists answered, watches silent, writes
// recorded): what it releases from a ledger, and how it retries a grant it could not write.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setImmediate as nextTurn, setTimeout as sleep } from 'node:timers/promises';
import type { KubeObject } from '../../../src/runtime/api/meta.ts';
import { ApiError, type KubeClient } from '../../../src/runtime/client/client.ts';
import { Manager } from '../../../src/runtime/manager/manager.ts';
import {
  QuotaReconciler,
  setupQuotaReconciler,
  type QuotaReconcilerOptions,
} from '../../../src/workloads/controllers/quota.ts';
import type { QuotaClaim, QuotaStatus } from '../../../src/workloads/types.ts';

const T0 = '2030-01-01T00:00:00Z';
const template = { containers: [{ name: 'app', image: 'x', resources: { requests: { cpu: '1' } } }] };
const instance = (name: string): KubeObject => ({
  metadata: { name, namespace: 'shop', uid: `uid-${name}`, creationTimestamp: T0, resourceVersion: '1' },
  spec: { template, templateHash: 'h', ordinal: 0 },
});
const claim = (cluster: string, name: string): QuotaClaim => ({
  cluster,
  name,
  uid: `uid-${name}`,
  milliCPU: 1000,
  memoryBytes: 0,
  grantedAt: T0,
});

/** An apiserver holding `objects` by resource (instances, quotas, instancetypes): writes are recorded, applies answered by `apply`. */
function apiserver(objects: Record<string, KubeObject[]>, apply: () => Promise<KubeObject>) {
  const puts: QuotaStatus[] = [];
  const applies: KubeObject[] = [];
  const client = {
    request: (method: string, path: string, opts: { body?: KubeObject & { status: QuotaStatus } }) => {
      if (method === 'PUT') {
        puts.push(opts.body!.status);
        return Promise.resolve({ ...opts.body, metadata: { ...opts.body!.metadata, resourceVersion: '9' } });
      }
      const resource = path.split('/').at(-1)!;
      return Promise.resolve({
        kind: 'List',
        metadata: { resourceVersion: '1' },
        items: objects[resource] ?? [],
      });
    },
    // A watch that stays open and silent until it is stopped.
    async *stream(_path: string, opts: { signal?: AbortSignal; query?: Record<string, unknown> }) {
      // An apiserver without WatchList: the informers list.
      if (opts.query?.['sendInitialEvents']) throw new ApiError(422, 'Invalid', 'no WatchList', {});
      await new Promise((resolve) => opts.signal?.addEventListener('abort', resolve, { once: true }));
      yield* [];
    },
    // Answered on a later turn, as a socket would be.
    apply: async (_ref: unknown, body: KubeObject) => {
      applies.push(body);
      await nextTurn();
      return apply();
    },
    close: () => {},
  } as unknown as KubeClient;
  return { client, puts, applies };
}

async function running(
  server: ReturnType<typeof apiserver>,
  opts: QuotaReconcilerOptions = {},
  workers = false,
) {
  const manager = new Manager({ client: server.client, metricsBindAddress: '0', healthBindAddress: '0' });
  const quota = new QuotaReconciler(manager, opts);
  const controller = setupQuotaReconciler(manager, quota, opts);
  manager.cluster().start();
  await manager.cluster().waitForCacheSync();
  const stop = new AbortController();
  if (workers) await controller.start(stop.signal);
  return {
    quota,
    async stop() {
      stop.abort();
      if (workers) await controller.stop();
      await manager.cluster().stop();
    },
  };
}

test('a claim in a cluster that no longer exists is released; one whose cluster may exist is kept', async () => {
  const budget: KubeObject = {
    metadata: { name: 'budget', namespace: 'shop', uid: 'q', creationTimestamp: T0, resourceVersion: '1' },
    spec: { instances: 1 },
    status: { claims: [claim('cell-gone', 'web-0')] },
  };
  const ok = () => Promise.resolve({ metadata: { resourceVersion: '2' } });
  // A deleted Cell's cluster: released, and the local instance takes its place.
  const cases: [string, ((c: string) => boolean | undefined) | undefined, string[]][] = [
    ['gone', () => false, ['local/web-1']],
    // Not known yet (the Cells not listed), the Cell exists but is unreachable, or no one says.
    ['not known', () => undefined, ['cell-gone/web-0']],
    ['exists', () => true, ['cell-gone/web-0']],
    ['no source', undefined, ['cell-gone/web-0']],
  ];
  for (const [what, clusterExists, claims] of cases) {
    const server = apiserver({ quotas: [budget], instances: [instance('web-1')] }, ok);
    const r = await running(server, clusterExists ? { clusterExists } : {});
    try {
      await r.quota.reconcile('shop');
      assert.deepEqual(
        server.puts.at(-1)?.claims?.map((c) => `${c.cluster}/${c.name}`),
        claims,
        what,
      );
    } finally {
      await r.stop();
    }
  }
});

test('a grant that cannot be written is retried with a growing backoff, not at once', async () => {
  let refuse = true;
  const server = apiserver({ instances: [instance('web-0')] }, () =>
    refuse
      ? Promise.reject(new ApiError(403, 'Forbidden', 'instances "web-0" is forbidden', {}))
      : Promise.resolve({ metadata: { resourceVersion: '2' } }),
  );
  const r = await running(server, {}, true);
  try {
    await sleep(700);
    // 5, 10, 20, ... 320 ms apart: eight tries in 700 ms (a tight loop makes thousands).
    const tries = server.applies.length;
    assert.ok(tries >= 4 && tries <= 12, `${tries} tries in 700 ms`);
    refuse = false;
    await sleep(1500);
    const written = server.applies.length;
    assert.ok(written > tries, 'retried until written');
    await sleep(300);
    assert.equal(server.applies.length, written, 'written once it went through');
  } finally {
    await r.stop();
  }
});
