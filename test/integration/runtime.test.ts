// The controller runtime against apiserver failures. These tests kill kube-apiserver, so they run on
// a private sandbox of their own rather than the run's shared one.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { randomBytes } from 'node:crypto';
import { Controller } from '../../src/runtime/controller/controller.ts';
import { Informer, keyOf } from '../../src/runtime/cache/informer.ts';
import type { KubeClient } from '../../src/runtime/client/client.ts';
import { Manager } from '../../src/runtime/manager/manager.ts';
import { registry } from '../../src/runtime/observability/metrics.ts';
import { Resources, type KubeObject } from '../../src/runtime/api/meta.ts';
import { Sandbox } from '../../src/sandbox/sandbox.ts';
import { createNamespace } from '../helpers/cluster.ts';
import { holdsFor, waitFor } from '../helpers/wait.ts';

const sandbox = new Sandbox(`rt-${randomBytes(3).toString('hex')}`);
let client: KubeClient;

before(async () => {
  await sandbox.up({ fresh: true });
  client = sandbox.client();
});

after(async () => {
  client?.close();
  await sandbox.destroy();
});

type ConfigMap = KubeObject & { data?: Record<string, string> };

const configMap = (
  namespace: string,
  name: string,
  data: Record<string, string>,
  labels = {},
): ConfigMap => ({
  apiVersion: 'v1',
  kind: 'ConfigMap',
  metadata: { name, namespace, labels },
  data,
});

async function restartApiserver(): Promise<void> {
  await sandbox.stopProcess('kube-apiserver', 'SIGKILL');
  sandbox.startProcess('kube-apiserver');
  await sandbox.waitHealthy('kube-apiserver');
}

const metricValue = async (name: string, labels: Record<string, string>): Promise<number> => {
  const m = (await registry.getSingleMetric(name)?.get())?.values ?? [];
  return m
    .filter((v) => Object.entries(labels).every(([k, val]) => v.labels[k] === val))
    .reduce((a, v) => a + v.value, 0);
};

describe('controller runtime under apiserver failures', () => {
  test('a controller resumes after kube-apiserver is killed and restarted: no missed update, no duplicate write', async () => {
    const ns = await createNamespace(client, 'mirror');
    // The controller keeps `<name>-mirror` equal to each labelled source ConfigMap and counts its writes.
    // Side effects: applies that changed a mirror. Right after a restart the controller may apply
    // once more from a cache that has not caught up with its own last write; with server-side
    // apply that repeat is idempotent (no new resourceVersion), so it is not a side effect.
    const writes: string[] = [];
    const lastVersion = new Map<string, string>();
    const manager = new Manager({
      client,
      metricsBindAddress: '0',
      healthBindAddress: '0',
    });
    const sources = manager.informer<ConfigMap>(Resources.configMaps, {
      namespace: ns,
      labelSelector: 'berth.test/mirror=source',
      idleTimeoutMs: 5000,
    });
    const mirrors = manager.informer<ConfigMap>(Resources.configMaps, {
      namespace: ns,
      labelSelector: 'berth.test/mirror=copy',
      idleTimeoutMs: 5000,
    });
    const controller = new Controller({
      name: 'test-mirror',
      reconciler: {
        async reconcile(key) {
          const src = sources.get(key);
          if (!src) return;
          const mirror = mirrors.get(`${key}-mirror`);
          if (mirror && JSON.stringify(mirror.data) === JSON.stringify(src.data)) return;
          const name = `${src.metadata!.name}-mirror`;
          const written = await client.apply(
            Resources.configMaps,
            configMap(ns, name, src.data ?? {}, { 'berth.test/mirror': 'copy' }),
            { fieldManager: 'berth-test-mirror' },
          );
          if (written.metadata?.resourceVersion !== lastVersion.get(name))
            writes.push(`${key}=${JSON.stringify(src.data)}`);
          lastVersion.set(name, written.metadata!.resourceVersion!);
        },
      },
    })
      .watch(sources, keyOf)
      .watch(mirrors, (m) => keyOf(m).replace(/-mirror$/, ''));
    manager.add(controller);
    await manager.start();
    try {
      const names = ['a', 'b', 'c', 'd', 'e'];
      for (const n of names)
        await client.create(
          Resources.configMaps,
          configMap(ns, n, { v: '1' }, { 'berth.test/mirror': 'source' }),
        );
      const converged = (expected: Record<string, string>) => async () => {
        const list = (
          await client.list<ConfigMap>(Resources.configMaps, {
            namespace: ns,
            query: { labelSelector: 'berth.test/mirror=copy' },
          })
        ).items;
        return names.every(
          (n) => list.find((m) => m.metadata?.name === `${n}-mirror`)?.data?.['v'] === (expected[n] ?? '1'),
        );
      };
      // The mirrors can be listed before the last apply's answer reaches the controller.
      await waitFor(
        'five mirrors, their writes answered',
        async () => (await converged({})()) && writes.length >= 5,
        {
          observe: () => writes,
        },
      );
      // A failed hold names the writes it saw.
      const writesStay = (n: number) => () => (assert.equal(writes.length, n, writes.join(', ')), true);
      await holdsFor('one write each', writesStay(5), 1000);
      const restartsBefore = await metricValue('berth_informer_watch_restarts_total', {
        resource: 'configmaps',
      });

      await restartApiserver();
      // Updates made as soon as the apiserver is back must reach the controller through the resumed watches.
      for (const n of ['b', 'd']) {
        await client.patch(Resources.configMaps, n, { data: { v: '2' } }, { namespace: ns });
      }
      await waitFor(
        'mirrors of b and d updated, their writes answered',
        async () => (await converged({ b: '2', d: '2' })()) && writes.length >= 7,
        { timeoutMs: 60_000, observe: () => writes },
      );
      assert.ok(
        (await metricValue('berth_informer_watch_restarts_total', { resource: 'configmaps' })) >
          restartsBefore,
        'the watches restarted',
      );
      // Exactly one write per change: 5 creations, 2 updates; nothing repeated after the reconnect.
      await holdsFor('no further writes', writesStay(7), 2000);
      assert.deepEqual(writes.slice(5).sort(), [`${ns}/b={"v":"2"}`, `${ns}/d={"v":"2"}`]);
    } finally {
      await manager.stop();
    }
  });

  test('after etcd compaction a resumed watch gets 410 and the relist delivers the deletes that happened meanwhile', async () => {
    const ns = await createNamespace(client, 'gone');
    const informer = new Informer<ConfigMap>({
      client,
      ref: Resources.configMaps,
      namespace: ns,
      backoff: { initialMs: 200, maxMs: 2000 },
    });
    const deleted: string[] = [];
    const added: string[] = [];
    informer.addEventHandler({ onAdd: (o) => added.push(keyOf(o)), onDelete: (o) => deleted.push(keyOf(o)) });
    for (const n of ['keep', 'drop-1', 'drop-2', 'drop-3'])
      await client.create(Resources.configMaps, configMap(ns, n, { v: '1' }));
    informer.start();
    await informer.waitForSync();
    await waitFor('four configmaps (and kube-root-ca.crt) cached', () => informer.size === 5);
    const relistsBefore = await metricValue('berth_informer_relists_total', { resource: 'configmaps' });

    // Disconnect the informer, change the world, and make its resourceVersion unservable: compact
    // etcd, and restart the apiserver so its watch cache cannot serve the old version either.
    await informer.stop();
    const staleRv = informer.lastSyncResourceVersion;
    for (const n of ['drop-1', 'drop-2', 'drop-3']) await client.delete(Resources.configMaps, n, ns);
    await client.create(Resources.configMaps, configMap(ns, 'new', { v: '1' }));
    const revision = await sandbox.compactEtcd();
    assert.ok(revision > Number(staleRv));
    await restartApiserver();

    informer.start();
    try {
      await waitFor(
        'the three deletes and the add',
        () => deleted.length === 3 && added.includes(`${ns}/new`),
        {
          timeoutMs: 30_000,
          observe: () => ({ deleted, added, keys: informer.keys() }),
        },
      );
      assert.deepEqual(deleted.sort(), [`${ns}/drop-1`, `${ns}/drop-2`, `${ns}/drop-3`]);
      assert.ok(informer.get(`${ns}/keep`));
      assert.equal(informer.get(`${ns}/drop-1`), undefined);
      assert.ok(
        (await metricValue('berth_informer_relists_total', { resource: 'configmaps' })) > relistsBefore,
      );
    } finally {
      await informer.stop();
    }
  });
});
