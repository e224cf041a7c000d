// The manager's set of clusters without an apiserver: clients point at a closed port, sources are
// fakes the test drives. What needs a real apiserver is in test/integration/clusters.test.ts.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { EventHandler } from '../../../src/runtime/cache/informer.ts';
import { KubeClient, NotLeaderError } from '../../../src/runtime/client/client.ts';
import { Cluster } from '../../../src/runtime/cluster/cluster.ts';
import { localCluster } from '../../../src/runtime/cluster/key.ts';
import type { ClusterSet, Provider } from '../../../src/runtime/cluster/provider.ts';
import { Controller, type Source } from '../../../src/runtime/controller/controller.ts';
import { Manager } from '../../../src/runtime/manager/manager.ts';
import { Resources } from '../../../src/runtime/api/meta.ts';

const timeout = { timeout: 20_000 };

/** A client of an apiserver that is not there: nothing here may need one to answer. */
function deadClient(): KubeClient {
  return new KubeClient({
    server: 'https://127.0.0.1:1',
    resolve: () => Promise.resolve({ tls: { rejectUnauthorized: false }, headers: {} }),
  });
}

const offline = { metricsBindAddress: '0', healthBindAddress: '0' };

/** A source the test feeds: it syncs when told and, like an informer, replays what it holds to a late handler. */
class FakeSource implements Source<string> {
  readonly objects = new Set<string>();
  private readonly handlers: EventHandler<string>[] = [];
  private synced = Promise.withResolvers<void>();
  addEventHandler(h: EventHandler<string>): void {
    this.handlers.push(h);
    for (const o of this.objects) h.onAdd?.(o);
  }
  waitForSync(signal?: AbortSignal): Promise<void> {
    return new Promise((resolve, reject) => {
      void this.synced.promise.then(resolve);
      signal?.addEventListener('abort', () => reject(signal.reason), { once: true });
    });
  }
  sync(): void {
    this.synced.resolve();
  }
  add(o: string): void {
    this.objects.add(o);
    for (const h of this.handlers) h.onAdd?.(o);
  }
}

/** A controller watching a fake source on every cluster; cell keys ask to be reconciled again soon. */
function watchingController(manager: Manager) {
  const reconciled: string[] = [];
  const sources = new Map<string, FakeSource>();
  const reconcile = async (key: string) => {
    reconciled.push(key);
    return key.startsWith('cluster://') ? { requeueAfterMs: 20 } : {};
  };
  const controller = new Controller({ name: 'fake-clusters', reconciler: { reconcile } }).watchClusters(
    (cluster) => {
      const s = new FakeSource();
      sources.set(cluster.name, s);
      return s;
    },
    (o) => o,
  );
  manager.add(controller);
  return { controller, sources, reconciled };
}

test(
  'a controller watches every engaged cluster with keys that carry it; a disengaged cluster leaves no key and no watch',
  timeout,
  async () => {
    const manager = new Manager({ client: deadClient(), ...offline });
    const { controller, sources, reconciled } = watchingController(manager);
    const cell = new Cluster({ name: 'cell', client: deadClient() });
    await manager.start();
    try {
      manager.engage(cell);
      assert.deepEqual([...sources.keys()], [localCluster, 'cell']);
      const local = sources.get(localCluster)!;
      const remote = sources.get('cell')!;
      local.add('ns/a');
      remote.add('ns/b');
      // Nothing of a cluster flows before its sources synced, then all of it does.
      local.sync();
      await waitUntil(() => reconciled.includes('ns/a'));
      assert.ok(!reconciled.some((k) => k.startsWith('cluster://')));
      remote.sync();
      await waitUntil(() => reconciled.filter((k) => k === 'cluster://cell/ns/b').length >= 2);
      assert.equal(manager.cluster('cell'), cell);

      await manager.disengage('cell');
      assert.deepEqual(manager.clusterNames, [localCluster]);
      assert.throws(() => manager.cluster('cell'), /not engaged/);
      assert.throws(() => cell.informer(Resources.configMaps), /has been stopped/);
      assert.equal(controller.queue.len() + controller.queue.waitingLen(), 0);
      const before = reconciled.length;
      remote.add('ns/c');
      local.add('ns/d');
      await waitUntil(() => reconciled.includes('ns/d'));
      await sleep(100);
      assert.deepEqual(reconciled.slice(before), ['ns/d'], 'nothing of the cell after it left');
    } finally {
      await manager.stop();
    }
  },
);

test(
  "a cluster's keys flow only once every source the controller watches there has synced",
  timeout,
  async () => {
    const manager = new Manager({ client: deadClient(), ...offline });
    const reconciled: string[] = [];
    const made = new Map<string, FakeSource[]>();
    const source = (cluster: Cluster) => {
      const s = new FakeSource();
      made.set(cluster.name, [...(made.get(cluster.name) ?? []), s]);
      return s;
    };
    manager.add(
      new Controller({ name: 'two-sources', reconciler: { reconcile: async (k) => void reconciled.push(k) } })
        .watchClusters(source, (o) => o)
        .watchClusters(source, (o) => o),
    );
    const cell = new Cluster({ name: 'cell', client: deadClient() });
    await manager.start();
    try {
      manager.engage(cell);
      const [first, second] = made.get('cell')!;
      assert.equal(made.get('cell')!.length, 2, 'each source made once per cluster');
      first!.add('ns/a');
      first!.sync();
      await sleep(100);
      assert.ok(!reconciled.some((k) => k.startsWith('cluster://cell/')), 'its second source has not synced');
      second!.sync();
      await waitUntil(() => reconciled.includes('cluster://cell/ns/a'));
    } finally {
      await manager.stop();
    }
  },
);

test(
  'a cluster joins once: duplicates, the local cluster leaving and joining a stopped manager are refused',
  timeout,
  async () => {
    const manager = new Manager({ client: deadClient(), ...offline });
    assert.throws(
      () => manager.engage(new Cluster({ name: localCluster, client: deadClient() })),
      /engaged already/,
    );
    await assert.rejects(manager.disengage(localCluster), /cannot be disengaged/);
    await manager.disengage('never-engaged');
    // An Aware that fails undoes the engagement: no cluster half engaged.
    let aborted: AbortSignal | undefined;
    manager.addRunnable({
      name: 'picky',
      needLeaderElection: false,
      start: async () => {},
      engage(cluster, signal) {
        if (cluster.name === 'bad') {
          aborted = signal;
          throw new Error('cannot work there');
        }
      },
    });
    assert.throws(
      () => manager.engage(new Cluster({ name: 'bad', client: deadClient() })),
      /cannot work there/,
    );
    assert.equal(aborted?.aborted, true);
    assert.deepEqual(manager.clusterNames, [localCluster]);
    await manager.start();
    await manager.stop();
    assert.throws(() => manager.engage(new Cluster({ name: 'late', client: deadClient() })), /stopping/);
  },
);

test(
  'with leader election, every engaged cluster writes only while this replica leads',
  timeout,
  async () => {
    const manager = new Manager({
      client: deadClient(),
      ...offline,
      leaderElection: { namespace: 'kube-system', name: 'clusters-test', retryPeriodMs: 100 },
    });
    await manager.start();
    try {
      // The lease cannot be had from an apiserver that is not there: this replica never leads.
      const cell = new Cluster({ name: 'cell', client: deadClient() });
      manager.engage(cell);
      const cm = { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'x', namespace: 'default' } };
      for (const c of [manager.client(), cell.client])
        await assert.rejects(c.create(Resources.configMaps, cm), NotLeaderError);
    } finally {
      await manager.stop();
    }
  },
);

test(
  'a provider engages clusters while the manager runs; /readyz says which have not synced, and stays ready',
  timeout,
  async () => {
    let provided: { set: ClusterSet; signal: AbortSignal } | undefined;
    const provider: Provider = {
      name: 'test',
      async run(set, signal) {
        provided = { set, signal };
      },
    };
    const manager = new Manager({
      client: deadClient(),
      providers: [provider],
      metricsBindAddress: '0',
      healthBindAddress: '127.0.0.1:0',
    });
    // An informer on every cluster: one whose apiserver cannot be reached never syncs.
    manager.addRunnable({
      name: 'reader',
      needLeaderElection: false,
      start: async () => {},
      engage: (cluster) => void (cluster.name !== localCluster && cluster.informer(Resources.configMaps)),
    });
    await manager.start();
    const readyz = async () => {
      const r = await fetch(`http://127.0.0.1:${manager.healthPort}/readyz`);
      return { status: r.status, body: await r.text() };
    };
    try {
      assert.equal((await readyz()).status, 200);
      assert.equal(provided?.set, manager);
      const ghost = new Cluster({ name: 'ghost', client: deadClient() });
      provided.set.engage(ghost);
      assert.deepEqual(await readyz(), {
        status: 200,
        body: 'ok\nwarning: cluster ghost: informer caches have not synced; its controllers wait for it\n',
      });
      assert.equal(manager.hasSynced(), false);
      await provided.set.disengage('ghost');
      assert.equal((await readyz()).status, 200);
      provided.set.engage(new Cluster({ name: 'ghost2', client: deadClient() }));
    } finally {
      await manager.stop();
    }
    assert.equal(provided.signal.aborted, true);
    assert.throws(() => manager.cluster('ghost2').informer(Resources.nodes), /has been stopped/);
  },
);

test(
  '/readyz is not ready until every always-on runnable has started (a webhook server listening)',
  timeout,
  async () => {
    const manager = new Manager({
      client: deadClient(),
      metricsBindAddress: '0',
      healthBindAddress: '127.0.0.1:0',
    });
    let listening!: () => void;
    manager.addRunnable({
      name: 'webhooks',
      needLeaderElection: false,
      start: () => new Promise<void>((resolve) => (listening = resolve)),
    });
    const started = manager.start();
    try {
      while (!manager.healthPort) await sleep(10);
      const readyz = async () => {
        const r = await fetch(`http://127.0.0.1:${manager.healthPort}/readyz`);
        return { status: r.status, body: await r.text() };
      };
      assert.deepEqual(await readyz(), { status: 503, body: 'starting: webhooks\n' });
      listening();
      await started;
      assert.equal((await readyz()).status, 200);
    } finally {
      await manager.stop();
    }
  },
);

test(
  'a provider added to the manager runs once, from start or at once when added later, until stop',
  timeout,
  async () => {
    const runs: string[] = [];
    const signals: AbortSignal[] = [];
    const provider = (name: string): Provider => ({
      name,
      async run(set, signal) {
        runs.push(name);
        signals.push(signal);
        assert.ok(set instanceof Manager);
      },
    });
    const manager = new Manager({
      client: deadClient(),
      providers: [provider('given')],
      metricsBindAddress: '0',
      healthBindAddress: '0',
    });
    manager.addProvider(provider('before'));
    assert.deepEqual(runs, [], 'nothing runs before start');
    await manager.start();
    try {
      assert.deepEqual(runs, ['given', 'before']);
      manager.addProvider(provider('after'));
      assert.deepEqual(runs, ['given', 'before', 'after']);
      assert.ok(signals.every((s) => !s.aborted));
    } finally {
      await manager.stop();
    }
    assert.ok(signals.every((s) => s.aborted));
  },
);

async function waitUntil(cond: () => boolean, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await sleep(10);
  }
}

test('a cluster is known while engaged or a provider has it, unknown while one cannot tell', () => {
  const provider = (name: string, knows?: (c: string) => boolean | undefined): Provider => ({
    name,
    run: () => Promise.resolve(),
    ...(knows ? { knows } : {}),
  });
  const bare = new Manager({ client: deadClient(), ...offline });
  assert.equal(bare.clusterKnown(localCluster), true);
  // No provider to ask: nothing is said gone.
  assert.equal(bare.clusterKnown('cell-gone'), undefined);
  const cells = new Map<string, boolean | undefined>([['cell-a', true]]);
  const manager = new Manager({
    client: deadClient(),
    ...offline,
    providers: [provider('cells', (c) => (cells.has(c) ? cells.get(c) : false))],
  });
  assert.equal(manager.clusterKnown('cell-a'), true);
  assert.equal(manager.clusterKnown('cell-gone'), false);
  cells.set('cell-listing', undefined);
  assert.equal(manager.clusterKnown('cell-listing'), undefined);
  // A provider that cannot say keeps every cluster it might have.
  manager.addProvider(provider('other'));
  assert.equal(manager.clusterKnown('cell-gone'), undefined);
});

test('the local cluster serves every namespace; another only one a provider says it serves', () => {
  const bare = new Manager({ client: deadClient(), ...offline });
  assert.equal(bare.clusterServes(localCluster, 'shop'), true);
  // No provider to ask: nothing is served, so nothing of another cluster counts.
  assert.equal(bare.clusterServes('cell-a', 'shop'), false);
  const manager = new Manager({
    client: deadClient(),
    ...offline,
    providers: [
      { name: 'silent', run: () => Promise.resolve() },
      { name: 'cells', run: () => Promise.resolve(), serves: (c, ns) => c === 'cell-a' && ns === 'shop' },
    ],
  });
  assert.equal(manager.clusterServes('cell-a', 'shop'), true);
  assert.equal(manager.clusterServes('cell-a', 'payments'), false);
  assert.equal(manager.clusterServes('cell-b', 'shop'), false);
});
