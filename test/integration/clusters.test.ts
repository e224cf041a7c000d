// Clusters as values against two real control planes side by side: the run's sandbox is the local
// cluster, a second, smaller one (no nodes) is a cell that joins and leaves while the manager runs.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { Informer } from '../../src/runtime/cache/informer.ts';
import { keyOf } from '../../src/runtime/cache/informer.ts';
import type { KubeClient } from '../../src/runtime/client/client.ts';
import { Cluster } from '../../src/runtime/cluster/cluster.ts';
import { localCluster, splitClusterKey } from '../../src/runtime/cluster/key.ts';
import { Controller } from '../../src/runtime/controller/controller.ts';
import { Manager } from '../../src/runtime/manager/manager.ts';
import { Resources, type KubeObject } from '../../src/runtime/api/meta.ts';
import { Sandbox } from '../../src/sandbox/sandbox.ts';
import { createNamespace, deleteNamespace, testSandbox, uniqueName } from '../helpers/cluster.ts';
import { holdsFor, waitFor } from '../helpers/wait.ts';

type ConfigMap = KubeObject & { data?: Record<string, string> };

const sandbox = testSandbox();
const cellSandbox = new Sandbox(process.env['BERTH_TEST_CELL_SANDBOX'] ?? `${sandbox.name}-cell`);
const client = sandbox.client();
let cellClient: KubeClient;
const namespaces: [KubeClient, string][] = [];

before(async () => {
  await cellSandbox.up({ fresh: true });
  cellClient = cellSandbox.client();
});

after(async () => {
  for (const [c, ns] of namespaces) await deleteNamespace(c, ns);
  client.close();
  cellClient?.close();
  await cellSandbox.destroy();
});

const source = (namespace: string, name: string): ConfigMap => ({
  apiVersion: 'v1',
  kind: 'ConfigMap',
  metadata: { name, namespace, labels: { 'berth.test/clusters': 'source' } },
  data: { v: '1' },
});

/** Namespaced ConfigMap watches open on the cell's apiserver (its own and ours). */
async function configMapWatches(c: KubeClient): Promise<number> {
  const text = await c.request<string>('GET', '/metrics');
  const line = text
    .split('\n')
    .find(
      (l) =>
        l.startsWith('apiserver_longrunning_requests{') &&
        l.includes('resource="configmaps"') &&
        l.includes('scope="namespace"') &&
        l.includes('verb="WATCH"'),
    );
  return line ? Number(line.split(' ').at(-1)) : 0;
}

test('a cell engaged while the manager runs is reconciled with keys that carry it; disengaged, it leaves no informer, key or watch behind', async () => {
  const nsLocal = await createNamespace(client, 'clusters');
  namespaces.push([client, nsLocal]);
  const nsCell = await createNamespace(cellClient, 'clusters');
  namespaces.push([cellClient, nsCell]);
  const namespaceOf = (cluster: string) => (cluster === localCluster ? nsLocal : nsCell);

  const manager = new Manager({
    client: sandbox.client(),
    metricsBindAddress: '0',
    healthBindAddress: '127.0.0.1:0',
    leaderElection: { namespace: nsLocal, name: uniqueName('clusters'), retryPeriodMs: 500 },
  });
  // The controller copies each source ConfigMap into `<name>-seen` in the object's own cluster,
  // naming that cluster, and records an Event about it there. A cell key asks to be reconciled
  // again a little later, so that some of its keys are always waiting in the queue.
  const informers = new Map<string, Informer<ConfigMap>>();
  const reconciled: string[] = [];
  const controller = new Controller({
    name: 'clusters-test',
    reconciler: {
      async reconcile(queueKey) {
        reconciled.push(queueKey);
        const { cluster, key } = splitClusterKey(queueKey);
        const obj = informers.get(cluster)?.get(key);
        if (!obj) return;
        const c = manager.cluster(cluster);
        await c.client.apply(
          Resources.configMaps,
          {
            apiVersion: 'v1',
            kind: 'ConfigMap',
            metadata: { name: `${obj.metadata!.name}-seen`, namespace: obj.metadata!.namespace! },
            data: { cluster },
          },
          { fieldManager: 'berth-clusters-test' },
        );
        c.recorder('clusters-test').event(obj, 'Normal', 'Seen', 'Reconcile', `seen in cluster ${cluster}`);
        return cluster === localCluster ? {} : { requeueAfterMs: 300 };
      },
    },
  }).watchClusters((cluster) => {
    const inf = cluster.informer<ConfigMap>(Resources.configMaps, {
      namespace: namespaceOf(cluster.name),
      labelSelector: 'berth.test/clusters=source',
    });
    informers.set(cluster.name, inf);
    return inf;
  }, keyOf);
  manager.add(controller);
  await manager.start();
  const readyz = async () => {
    const r = await fetch(`http://127.0.0.1:${manager.healthPort}/readyz`);
    return { status: r.status, body: await r.text() };
  };
  const seen = async (c: KubeClient, ns: string, name: string) =>
    (await c.get<ConfigMap>(Resources.configMaps, `${name}-seen`, ns).catch(() => undefined))?.data?.[
      'cluster'
    ];
  const events = async (c: KubeClient, ns: string) =>
    (
      await c.list<KubeObject & { reason?: string; regarding?: { name?: string } }>(Resources.events, {
        namespace: ns,
      })
    ).items
      .filter((e) => e.reason === 'Seen')
      .map((e) => e.regarding?.name);

  try {
    await waitFor('the lease', () => manager.isLeader());
    await client.create(Resources.configMaps, source(nsLocal, 'a'));
    await waitFor(
      'a seen in the local cluster',
      async () => (await seen(client, nsLocal, 'a')) === localCluster,
    );
    assert.ok(reconciled.includes(`${nsLocal}/a`), 'a local key stays as it is');

    const watchesBefore = await configMapWatches(cellClient);
    const cell = new Cluster({ name: 'cell', client: cellSandbox.client() });
    manager.engage(cell);
    assert.deepEqual(manager.clusterNames, [localCluster, 'cell']);
    await cellClient.create(Resources.configMaps, source(nsCell, 'b'));
    await waitFor('b seen in the cell', async () => (await seen(cellClient, nsCell, 'b')) === 'cell');
    assert.ok(
      reconciled.includes(`cluster://cell/${nsCell}/b`),
      `cell keys carry the cell: ${reconciled.join(' ')}`,
    );
    // Written and recorded in the object's own cluster, through the cell's fenced client.
    assert.equal(await seen(client, nsCell, 'b'), undefined);
    await waitFor('the Event about b in the cell', async () =>
      (await events(cellClient, nsCell)).includes('b'),
    );
    assert.deepEqual(await events(client, nsLocal), ['a']);
    assert.deepEqual(await readyz(), { status: 200, body: 'ok\n' });
    assert.ok((await configMapWatches(cellClient)) > watchesBefore, 'the cell informer watches the cell');
    await waitFor('a cell key waiting in the queue', () => controller.queue.waitingLen() > 0);
    const cellInformer = informers.get('cell')!;

    await manager.disengage('cell');
    assert.deepEqual(manager.clusterNames, [localCluster]);
    assert.throws(() => manager.cluster('cell'), /not engaged/);
    assert.equal(controller.queue.waitingLen() + controller.queue.len(), 0, 'the cell keys left the queue');
    await waitFor(
      'the cell watch closed',
      async () => (await configMapWatches(cellClient)) === watchesBefore,
    );
    const reconciledBefore = reconciled.length;
    await cellClient.create(Resources.configMaps, source(nsCell, 'c'));
    await client.create(Resources.configMaps, source(nsLocal, 'd'));
    await waitFor(
      'd seen in the local cluster',
      async () => (await seen(client, nsLocal, 'd')) === localCluster,
    );
    await holdsFor(
      'nothing of the cell after it left',
      async () =>
        cellInformer.get(`${nsCell}/c`) === undefined &&
        reconciled.slice(reconciledBefore).every((k) => splitClusterKey(k).cluster === localCluster) &&
        (await seen(cellClient, nsCell, 'c')) === undefined,
      1500,
    );
    assert.deepEqual(await readyz(), { status: 200, body: 'ok\n' });
  } finally {
    await manager.stop();
  }
});
