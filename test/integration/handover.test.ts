// Issue 60, a leader hand-over: a standby's controllers queue every change they see while another
// replica leads. When it wins the Lease, the changes that leader had time to act on go to the first
// pass (the low lane), and a change of the last moments of its term comes first. Two managers in
// this process, each with a controller over the ConfigMaps of one namespace, on the shared sandbox.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { keyOf } from '../../src/runtime/cache/informer.ts';
import { Controller } from '../../src/runtime/controller/controller.ts';
import { Manager } from '../../src/runtime/manager/manager.ts';
import { Resources } from '../../src/runtime/api/meta.ts';
import { createNamespace, deleteNamespace, testSandbox, uniqueName } from '../helpers/cluster.ts';
import { sleep, waitFor } from '../helpers/wait.ts';

const sandbox = testSandbox();
const client = sandbox.client();
let ns = '';
const lease = uniqueName('handover');

before(async () => {
  ns = await createNamespace(client, 'handover');
});

after(async () => {
  await deleteNamespace(client, ns);
  client.close();
});

/** A replica: its manager, and the keys its controller reconciled, in order. */
function replica(identity: string) {
  const manager = new Manager({
    client: sandbox.client(),
    metricsBindAddress: '0',
    healthBindAddress: '127.0.0.1:0',
    leaderElection: { namespace: ns, name: lease, identity, retryPeriodMs: 500 },
  });
  const reconciled: string[] = [];
  const informer = manager.informer(Resources.configMaps, { namespace: ns });
  manager.add(
    new Controller({
      name: `handover-${identity}`,
      reconciler: {
        reconcile(key) {
          reconciled.push(key.split('/')[1]!);
          return Promise.resolve({});
        },
      },
    }).watch(informer, keyOf),
  );
  return { manager, informer, reconciled };
}

const configMap = (name: string) => ({
  apiVersion: 'v1',
  kind: 'ConfigMap',
  metadata: { name, namespace: ns },
});

test("a new leader acts first on the change of the old one's last moments, then on those it acted on", async () => {
  const a = replica('a');
  await a.manager.start();
  await waitFor('a leading', () => a.manager.isLeader());
  const b = replica('b');
  await b.manager.start();
  // The changes below must reach b's controller as changes, not as its initial list.
  await b.informer.waitForSync();
  try {
    const old = Array.from({ length: 20 }, (_, i) => `old-${i}`);
    for (const name of old) await client.create(Resources.configMaps, configMap(name));
    await waitFor('a acting on the changes', () => old.every((n) => a.reconciled.includes(n)));
    await waitFor('b seeing the changes', () => old.every((n) => b.informer.get(`${ns}/${n}`)));
    // Past the hand-over margin (5 s), with renewals of a's seen by b since (every 0.5 s).
    await sleep(6_500);
    await client.create(Resources.configMaps, configMap('late'));
    await waitFor('b seeing the late change', () => b.informer.get(`${ns}/late`));
    await a.manager.stop();
    await waitFor('b leading', () => b.manager.isLeader(), { timeoutMs: 10_000 });
    await waitFor('b acting on every change', () => [...old, 'late'].every((n) => b.reconciled.includes(n)));
    const order = b.reconciled.filter((n) => n === 'late' || old.includes(n));
    assert.equal(order[0], 'late', `b's reconciles: ${order.join(', ')}`);
    assert.deepEqual(order.slice(1), old, 'the older changes follow, in the order they came');
  } finally {
    await Promise.all([a.manager.stop(), b.manager.stop()]);
  }
});
