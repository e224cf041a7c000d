// test-driver: alone — its Berth runs the labels controllers, which would act on the NodeLabelRules
// of other files.
//
// Issue 59, as a tenant: a namespace user (`edit` in one namespace of its own, minted as `berth
// sandbox user` does) rewrites an annotation and a label of its own pod with distinct values, again
// and again, then deletes the pod. Berth caches every pod, slimmed; what it shares between cached
// objects (its table of interned strings, berth_interned_characters) must hold none of those values
// beyond the pod's life, and never the large ones at all.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, test } from 'node:test';
import { KubeClient } from '../../src/runtime/client/client.ts';
import { Resources } from '../../src/runtime/api/meta.ts';
import { startBerth, type BerthProcess } from '../helpers/berth.ts';
import {
  createNamespace,
  deleteNamespace,
  testSandbox,
  uniqueName,
  untilAllowed,
} from '../helpers/cluster.ts';
import { waitFor } from '../helpers/wait.ts';

const sandbox = testSandbox();
const client = sandbox.client();
const id = uniqueName('tmem');
const REWRITES = 40;
const VALUE_BYTES = 100 * 1024;
/** Room for what other objects of the sandbox bring meanwhile: far below one rewrite's value. */
const SLACK = 64 * 1024;
let berth: BerthProcess | undefined;
let ns = '';
let tenant: KubeClient;

before(async () => {
  ns = await createNamespace(client, id);
  await client.create(Resources.roleBindings, {
    apiVersion: 'rbac.authorization.k8s.io/v1',
    kind: 'RoleBinding',
    metadata: { name: `${id}-edit`, namespace: ns },
    roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'edit' },
    subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: id }],
  });
  tenant = KubeClient.fromFile(await sandbox.mintUser(id));
  await untilAllowed(tenant, ns, 'patch', 'pods');
  berth = await startBerth(sandbox, ['--controllers=labels'], { capture: true });
});

after(async () => {
  await berth?.stop();
  await deleteNamespace(client, ns);
});

const interned = () => berth!.metric('berth_interned_characters');
const cachedPods = () => berth!.metric('berth_informer_objects', (l) => l.includes('resource="pods"'));
/**
 * No pod left in a namespace being emptied, and Berth's cache holds as many pods as the cluster.
 * Files run before this one may still be deleting their namespaces' pods: counts taken meanwhile
 * would pass figures those deletions make, or meet one by chance.
 */
const settledCluster = async () => {
  const [namespaces, pods] = await Promise.all([
    client.list(Resources.namespaces),
    client.list(Resources.pods),
  ]);
  const emptying = new Set(
    namespaces.items.filter((n) => n.metadata?.deletionTimestamp).map((n) => n.metadata!.name),
  );
  return (
    !pods.items.some((p) => emptying.has(p.metadata?.namespace)) && (await cachedPods()) === pods.items.length
  );
};

test("a tenant's rewritten annotations and labels are not kept beyond its pod", async () => {
  await waitFor(
    'no pod left to delete in namespaces being emptied, and Berth caching every pod',
    settledCluster,
    {
      timeoutMs: 120_000,
    },
  );
  const pods = await cachedPods();
  const baseline = await interned();
  const name = 'churn';
  await tenant.create(Resources.pods, {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: ns, labels: { rev: 'r0' } },
    // Never scheduled: Berth caches it all the same.
    spec: { nodeSelector: { [`${id}.test/none`]: 'true' }, containers: [{ name: 'c', image: 'pause:1' }] },
  });
  await waitFor(`Berth caching pod ${ns}/${name}`, async () => (await cachedPods()) === pods + 1);
  let peak = baseline;
  for (let i = 1; i <= REWRITES; i++) {
    const value = randomBytes(VALUE_BYTES / 2).toString('hex');
    await tenant.patch(
      Resources.pods,
      name,
      {
        metadata: {
          labels: { rev: `r${i}-${randomBytes(16).toString('hex')}` },
          // One no capability reads, and one arch reads whose value is over what it keeps.
          annotations: { [`${id}.test/blob`]: value, 'arch.berth.dev/result': value },
        },
      },
      { namespace: ns, type: 'merge' },
    );
    peak = Math.max(peak, await interned());
  }
  await tenant.delete(Resources.pods, name, ns, { gracePeriodSeconds: 0 });
  // Its deletion seen, every rewrite before it was too.
  await waitFor(`Berth seeing pod ${ns}/${name} deleted`, async () => (await cachedPods()) === pods);
  const after = await interned();
  assert.ok(
    after <= baseline + SLACK,
    `${REWRITES} rewrites of ${VALUE_BYTES}-byte values, the pod deleted: Berth interns ${after - baseline} characters more than before it`,
  );
  assert.ok(
    peak <= baseline + SLACK,
    `while the pod was rewritten, Berth interned up to ${peak - baseline} characters more than before it`,
  );
});
