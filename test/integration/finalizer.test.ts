// The kit's finalizer flow (src/policy/finalizer.ts) against the real apiserver, on ConfigMaps: its
// server-side apply of `finalizers: [name]` owns that entry only, so another manager's finalizer
// stays through the add and the removal; a name another manager also applied comes off by the
// guarded patch once released; and why one field manager keeps one name: a second name applied by
// the same manager takes the first off. No controller runs: the flow is called as a reconcile does.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { finalizer, type FinalizerRef } from '../../src/policy/finalizer.ts';
import { Resources, type KubeObject } from '../../src/runtime/api/meta.ts';
import { createNamespace, deleteNamespace, testSandbox, uniqueName } from '../helpers/cluster.ts';

const client = testSandbox().client();
const ref = Resources.configMaps;
let ns: string;

before(async () => {
  ns = await createNamespace(client, 'finalizer');
});
after(async () => {
  // What the tests left on (other managers' finalizers) comes off, so that the namespace can go.
  for (const cm of (await client.list<KubeObject>(ref, { namespace: ns })).items)
    await client.patch(ref, cm.metadata!.name!, { metadata: { finalizers: null } }, { namespace: ns });
  await deleteNamespace(client, ns);
  client.close();
});

const get = (name: string) => client.get<KubeObject>(ref, name, ns);
const own = (name: string, fieldManager = 'berth-test'): FinalizerRef => ({
  name,
  client,
  ref,
  fieldManager,
});

/** A ConfigMap carrying `finalizers`, written by another manager (kubectl). */
async function configMap(finalizers: string[]): Promise<KubeObject> {
  const name = uniqueName('cm');
  return client.apply(
    ref,
    { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name, namespace: ns, finalizers } },
    { fieldManager: 'kubectl' },
  );
}

/** Deletes it (it stays, being deleted, while finalizers are on) and reads it back. */
async function deleting(o: KubeObject): Promise<KubeObject> {
  await client.delete(ref, o.metadata!.name!, ns);
  return get(o.metadata!.name!);
}

test('added before apply and removed after release, another manager’s finalizer untouched throughout', async () => {
  const o = await configMap(['example.com/theirs']);
  const f = own('berth.dev/hold');
  let sawOnApply: string[] = [];
  await finalizer(f, o, {
    apply: async () => {
      sawOnApply = (await get(o.metadata!.name!)).metadata?.finalizers ?? [];
    },
    cleanup: async () => 'released',
  });
  assert.deepEqual(sawOnApply, ['example.com/theirs', 'berth.dev/hold'], 'on before apply ran');
  const d = await deleting(await get(o.metadata!.name!));
  let cleanups = 0;
  await finalizer(f, d, {
    cleanup: async () => (++cleanups === 1 ? {} : 'released'),
  });
  assert.deepEqual(
    (await get(o.metadata!.name!)).metadata?.finalizers,
    ['example.com/theirs', 'berth.dev/hold'],
    'kept until released',
  );
  await finalizer(f, await get(o.metadata!.name!), {
    cleanup: async () => (++cleanups === 1 ? {} : 'released'),
  });
  assert.deepEqual(
    (await get(o.metadata!.name!)).metadata?.finalizers,
    ['example.com/theirs'],
    'only its own came off',
  );
});

test('a finalizer another manager also applied (a manifest carried it) comes off once released', async () => {
  const o = await deleting(await configMap(['berth.dev/hold', 'example.com/theirs']));
  await finalizer(own('berth.dev/hold'), o, { cleanup: async () => 'released' });
  assert.deepEqual((await get(o.metadata!.name!)).metadata?.finalizers, ['example.com/theirs']);
});

test('one name per owner: a second name applied by the same field manager takes the first off', async () => {
  const o = await configMap([]);
  const noop = { apply: async () => {}, cleanup: async () => 'released' as const };
  await finalizer(own('berth.dev/first'), o, noop);
  assert.deepEqual((await get(o.metadata!.name!)).metadata?.finalizers, ['berth.dev/first']);
  await finalizer(own('berth.dev/second'), await get(o.metadata!.name!), noop);
  assert.deepEqual(
    (await get(o.metadata!.name!)).metadata?.finalizers,
    ['berth.dev/second'],
    'the first is gone, and with it what it guarded: hence one name per field manager',
  );
  // Under managers of their own, both stay.
  await finalizer(own('berth.dev/first', 'berth-test-other'), await get(o.metadata!.name!), noop);
  assert.deepEqual((await get(o.metadata!.name!)).metadata?.finalizers, [
    'berth.dev/second',
    'berth.dev/first',
  ]);
});
