// test-driver: alone — its labels controller writes every NodeLabelRule's labels under Berth's field
// manager, and would take the labels of labels.test.ts's rule files off its nodes.
// Eviction on removal against the real control plane: the real scheduler places and replaces pods,
// the real disruption controller keeps PodDisruptionBudgets, and kwok runs the pods.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { installCrds } from '../../src/cli/install.ts';
import { evictionMetrics } from '../../src/labels/metrics.ts';
import { labelsCapability } from '../../src/labels/index.ts';
import { NodeLabelRule } from '../../src/labels/crd.ts';
import { Resources, type KubeObject } from '../../src/runtime/api/meta.ts';
import { Manager } from '../../src/runtime/manager/manager.ts';
import {
  addNodes,
  createNamespace,
  deleteNamespace,
  deleteNodes,
  podManifest,
  testSandbox,
  uniqueName,
} from '../helpers/cluster.ts';
import { startEvictor, untouched as untouchedPod } from '../helpers/evict.ts';
import { holdsFor, sleep, waitFor } from '../helpers/wait.ts';

const sandbox = testSandbox();
const client = sandbox.client();
const nodes: string[] = [];
const rules: string[] = [];
const namespaces: string[] = [];
const systemPods: string[] = [];
let manager: Manager;

const PDB = Resources.podDisruptionBudgets;

type Pod = KubeObject & {
  spec: { nodeName?: string };
  status?: { phase?: string };
};
type Event = KubeObject & { reason: string; note: string; type: string; regarding: { name: string } };

before(async () => {
  await installCrds(client);
  manager = await startEvictor(sandbox);
});

after(async () => {
  await manager?.stop();
  await Promise.all(rules.map((r) => client.delete(NodeLabelRule.ref, r).catch(() => {})));
  await Promise.all(systemPods.map((p) => client.delete(Resources.pods, p, 'kube-system').catch(() => {})));
  await Promise.all(namespaces.map((n) => deleteNamespace(client, n)));
  await deleteNodes(client, nodes);
  client.close();
});

/** Nodes with an EdgeTPU (the input label), a rule deriving accelerators label from it, and a namespace. */
async function setup(count: number, evictOnRemoval: Record<string, unknown>) {
  const id = uniqueName('ev');
  const input = `${id}.example.com/usb-edgetpu`;
  const label = `${id}.example.com/edgetpu`;
  const names = await addNodes(client, { prefix: id, count, labels: { [input]: 'true' } });
  nodes.push(...names);
  rules.push(id);
  await client.apply(
    NodeLabelRule.ref,
    {
      apiVersion: NodeLabelRule.apiVersion,
      kind: 'NodeLabelRule',
      metadata: { name: id },
      spec: {
        match: { allOf: [{ label: input, operator: 'Exists' }] },
        labels: { [label]: 'true' },
        evictOnRemoval,
      },
    },
    { fieldManager: 'test-author', force: true },
  );
  await waitFor('the derived label on every node', async () =>
    (await Promise.all(names.map((n) => client.get(Resources.nodes, n)))).every(
      (n) => n.metadata?.labels?.[label] === 'true',
    ),
  );
  const ns = await createNamespace(client, id);
  namespaces.push(ns);
  const setInput = (node: string, on: boolean) =>
    client.patch(Resources.nodes, node, { metadata: { labels: { [input]: on ? 'true' : null } } });
  const derivedOn = async (node: string) =>
    (await client.get(Resources.nodes, node)).metadata?.labels?.[label] === 'true';
  return { id, rule: `nodelabelrule/${id}`, label, names, ns, setInput, derivedOn };
}

const needsLabel = (label: string) => ({
  nodeAffinity: {
    requiredDuringSchedulingIgnoredDuringExecution: {
      nodeSelectorTerms: [{ matchExpressions: [{ key: label, operator: 'In', values: ['true'] }] }],
    },
  },
});

async function createPod(ns: string, name: string, label: string, annotations: Record<string, string> = {}) {
  const p = podManifest({ name, namespace: ns, nodeSelector: { [label]: 'true' } });
  p.metadata!.annotations = annotations;
  await client.create(Resources.pods, p);
  return waitForRunning(ns, name);
}

const waitForRunning = (ns: string, name: string) =>
  waitFor(`pod ${ns}/${name} running`, async () => {
    const p = await client.get<Pod>(Resources.pods, name, ns);
    return p.status?.phase === 'Running' && p;
  });

const untouched = (ns: string, name: string, uid: string) => untouchedPod(client, ns, name, uid);

async function deploy(ns: string, app: string, label: string) {
  await client.create(Resources.deployments, {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name: app, namespace: ns },
    spec: {
      replicas: 1,
      selector: { matchLabels: { app } },
      template: {
        metadata: { labels: { app } },
        spec: {
          affinity: needsLabel(label),
          terminationGracePeriodSeconds: 0,
          containers: [{ name: 'main', image: 'registry.example/edgetpu-inference:1' }],
        },
      },
    },
  });
  return waitFor(`a running pod of ${app}`, async () => {
    const pods = await client.list<Pod>(Resources.pods, {
      namespace: ns,
      query: { labelSelector: `app=${app}` },
    });
    return pods.items.find((p) => p.status?.phase === 'Running' && !p.metadata?.deletionTimestamp);
  });
}

async function events(ns: string, regarding: string, reason: string): Promise<Event[]> {
  const list = await client.list<Event>(Resources.events, { namespace: ns });
  return list.items.filter((e) => e.regarding.name === regarding && e.reason === reason);
}

async function count(rule: string, result: string): Promise<number> {
  const m = await evictionMetrics.total.get();
  return m.values.find((v) => v.labels.rule === rule && v.labels.result === result)?.value ?? 0;
}

/**
 * The rule counted `times` evictions. The pod is marked for deletion before the Eviction's answer reaches
 * Berth, which counts it then: a test that saw the pod go may be a moment ahead of the count.
 */
async function evicted(rule: string, times = 1): Promise<void> {
  await waitFor(`${times} evictions counted`, async () => (await count(rule, 'evicted')) >= times);
  assert.equal(await count(rule, 'evicted'), times);
}

describe('eviction on removal of a derived label', () => {
  test('the seed EdgeTPU case: the pod is evicted after the delay and rescheduled onto a node that still has one', async () => {
    const s = await setup(2, { afterSeconds: 3 });
    const pod = await deploy(s.ns, 'inference', s.label);
    const from = pod.spec.nodeName!;
    const other = s.names.find((n) => n !== from)!;
    const removed = Date.now();
    await s.setInput(from, false);
    await waitFor('the derived label gone', async () => !(await s.derivedOn(from)));
    // Not before the delay.
    await holdsFor(
      'the pod untouched within the delay',
      () => untouched(s.ns, pod.metadata!.name!, pod.metadata!.uid!),
      removed + 2000 - Date.now(),
    );
    await waitFor(
      'the pod evicted',
      async () => !(await untouched(s.ns, pod.metadata!.name!, pod.metadata!.uid!)),
      { timeoutMs: 15_000 },
    );
    assert.ok(Date.now() - removed >= 3000, 'evicted no sooner than afterSeconds');
    const replacement = await waitFor(
      'a replacement running on the node that still has an EdgeTPU',
      async () => {
        const pods = await client.list<Pod>(Resources.pods, {
          namespace: s.ns,
          query: { labelSelector: 'app=inference' },
        });
        return pods.items.find((p) => p.metadata!.uid !== pod.metadata!.uid && p.status?.phase === 'Running');
      },
    );
    assert.equal(replacement.spec.nodeName, other);
    assert.equal(await count(s.rule, 'evicted'), 1);
    // Warning events on the pod, the node and the rule, naming the rule and the label.
    for (const [ns, name] of [
      [s.ns, pod.metadata!.name!],
      ['default', from],
      ['default', s.id],
    ] as const) {
      const [e] = await waitFor(`an EvictedOnRemoval event on ${name}`, async () => {
        const es = await events(ns, name, 'EvictedOnRemoval');
        return es.length > 0 && es;
      });
      assert.equal(e!.type, 'Warning');
      assert.match(e!.note, new RegExp(`rule ${s.rule}`));
      assert.ok(e!.note.includes(s.label), e!.note);
    }
  });

  test('a label back within the delay evicts nothing; gone for longer, it does', async () => {
    const s = await setup(1, { afterSeconds: 4 });
    const pod = await createPod(s.ns, 'app', s.label);
    const uid = pod.metadata!.uid!;
    await s.setInput(s.names[0]!, false);
    await waitFor('the derived label gone', async () => !(await s.derivedOn(s.names[0]!)));
    await s.setInput(s.names[0]!, true);
    await waitFor('the derived label back', () => s.derivedOn(s.names[0]!));
    await holdsFor('the pod untouched', () => untouched(s.ns, 'app', uid), 5000);
    assert.equal(await count(s.rule, 'evicted'), 0);

    await s.setInput(s.names[0]!, false);
    await waitFor('the pod evicted', async () => !(await untouched(s.ns, 'app', uid)), { timeoutMs: 15_000 });
    await evicted(s.rule);
  });

  test("a value the rule never derived on the node evicts nothing: an admin's label of the rule's key, removed by hand", async () => {
    const s = await setup(2, { afterSeconds: 2 });
    const [derived, byHand] = s.names as [string, string];
    // The rule stops matching the second node; an admin labels it by hand with the rule's key.
    await s.setInput(byHand, false);
    await waitFor("the rule's label gone from the second node", async () => !(await s.derivedOn(byHand)));
    await client.patch(Resources.nodes, byHand, { metadata: { labels: { [s.label]: 'true' } } });
    await client.create(
      Resources.pods,
      podManifest({ name: 'pinned', namespace: s.ns, nodeName: byHand, nodeSelector: { [s.label]: 'true' } }),
    );
    const uid = (await waitForRunning(s.ns, 'pinned')).metadata!.uid!;
    // The admin takes it off again: the pod no longer fits, but no rule derived that label there.
    await client.patch(Resources.nodes, byHand, { metadata: { labels: { [s.label]: null } } });
    await holdsFor('the pod untouched', () => untouched(s.ns, 'pinned', uid), 5000);
    assert.equal(await count(s.rule, 'evicted'), 0);
    // The rule's own removal on the first node still evicts.
    const pod = await createPod(s.ns, 'app', s.label);
    assert.equal(pod.spec?.nodeName, derived);
    await s.setInput(derived, false);
    await waitFor('the pod evicted', async () => !(await untouched(s.ns, 'app', pod.metadata!.uid!)), {
      timeoutMs: 15_000,
    });
    await evicted(s.rule);
  });

  test('a PodDisruptionBudget that blocks is honoured: refused, retried, reported, and evicted once it allows', async () => {
    const s = await setup(1, { afterSeconds: 1 });
    await client.create(PDB, {
      apiVersion: 'policy/v1',
      kind: 'PodDisruptionBudget',
      metadata: { name: 'keep-one', namespace: s.ns },
      spec: { minAvailable: 1, selector: { matchLabels: { app: 'guarded' } } },
    });
    const pod = await deploy(s.ns, 'guarded', s.label);
    const uid = pod.metadata!.uid!;
    await waitFor('the budget allows no disruption', async () => {
      const pdb = await client.get<
        KubeObject & { status?: { currentHealthy?: number; disruptionsAllowed?: number } }
      >(PDB, 'keep-one', s.ns);
      return pdb.status?.currentHealthy === 1 && pdb.status.disruptionsAllowed === 0;
    });
    await s.setInput(s.names[0]!, false);
    const [blocked] = await waitFor('an EvictionBlocked event on the pod', async () => {
      const es = await events(s.ns, pod.metadata!.name!, 'EvictionBlocked');
      return es.length > 0 && es;
    });
    assert.match(blocked!.note, /disruption budget/);
    await waitFor('a second refusal (retried)', async () => (await count(s.rule, 'blocked')) >= 2, {
      timeoutMs: 15_000,
    });
    assert.ok(await untouched(s.ns, pod.metadata!.name!, uid), 'never forced');
    assert.equal(await count(s.rule, 'evicted'), 0);

    await client.delete(PDB, 'keep-one', s.ns);
    await waitFor(
      'the pod evicted once the budget is gone',
      async () => !(await untouched(s.ns, pod.metadata!.name!, uid)),
      {
        timeoutMs: 20_000,
      },
    );
    await evicted(s.rule);
  });

  test('DaemonSet, kube-system and opted-out pods are untouched; the pod beside them is evicted', async () => {
    const s = await setup(1, { afterSeconds: 1 });
    const node = s.names[0]!;
    const system = uniqueName('ev-system');
    systemPods.push(system);
    await createPod('kube-system', system, s.label);
    const optedOut = await createPod(s.ns, 'opted-out', s.label, { 'berth.dev/evict-on-removal': 'false' });
    const plain = await createPod(s.ns, 'plain', s.label);
    await client.create(Resources.daemonSets, {
      apiVersion: 'apps/v1',
      kind: 'DaemonSet',
      metadata: { name: 'agent', namespace: s.ns },
      spec: {
        selector: { matchLabels: { app: 'agent' } },
        template: {
          metadata: { labels: { app: 'agent' } },
          spec: {
            nodeSelector: { [s.label]: 'true' },
            containers: [{ name: 'main', image: 'registry.example/agent:1' }],
          },
        },
      },
    });
    const ds = await waitFor('the DaemonSet pod running', async () => {
      const pods = await client.list<Pod>(Resources.pods, {
        namespace: s.ns,
        query: { labelSelector: 'app=agent' },
      });
      return pods.items.find((p) => p.status?.phase === 'Running');
    });
    const systemUid = (await client.get(Resources.pods, system, 'kube-system')).metadata!.uid!;

    await s.setInput(node, false);
    await waitFor(
      'the plain pod evicted',
      async () => !(await untouched(s.ns, 'plain', plain.metadata!.uid!)),
      { timeoutMs: 15_000 },
    );
    await sleep(1000);
    assert.ok(await untouched('kube-system', system, systemUid), 'the kube-system pod is untouched');
    assert.ok(await untouched(s.ns, 'opted-out', optedOut.metadata!.uid!), 'the opted-out pod is untouched');
    await evicted(s.rule);
    // The DaemonSet controller takes its pod off the node itself; Berth says nothing about it.
    assert.deepEqual(await events(s.ns, ds.metadata!.name!, 'EvictedOnRemoval'), []);
  });

  test('several pods evicted from a node: an event on each pod, one Event on the node and one on the rule', async () => {
    const s = await setup(1, { afterSeconds: 1 });
    const names = ['a', 'b', 'c'];
    const uids = await Promise.all(
      names.map(async (n) => (await createPod(s.ns, n, s.label)).metadata!.uid!),
    );
    await s.setInput(s.names[0]!, false);
    await waitFor(
      'every pod evicted',
      async () => !(await Promise.all(names.map((n, i) => untouched(s.ns, n, uids[i]!)))).some(Boolean),
      { timeoutMs: 15_000 },
    );
    for (const n of names)
      await waitFor(`an EvictedOnRemoval event on pod ${n}`, async () => {
        const es = await events(s.ns, n, 'EvictedOnRemoval');
        return es.length === 1 && es[0]!.note.includes(`pod ${s.ns}/${n}`);
      });
    // The node's and the rule's events name no pod, so the three evictions are one series each.
    await evicted(s.rule, 3);
    for (const name of [s.names[0]!, s.id]) {
      const es = await waitFor(`an EvictedOnRemoval Event on ${name}`, async () => {
        const es = await events('default', name, 'EvictedOnRemoval');
        return es.length > 0 && es;
      });
      assert.ok(es[0]!.note.includes(s.label) && es[0]!.note.includes(s.rule), es[0]!.note);
    }
    await holdsFor(
      'one EvictedOnRemoval Event on the node and one on the rule',
      async () =>
        (await events('default', s.names[0]!, 'EvictedOnRemoval')).length === 1 &&
        (await events('default', s.id, 'EvictedOnRemoval')).length === 1,
      1000,
    );
  });

  test('DryRun reports and evicts nothing', async () => {
    const s = await setup(1, { afterSeconds: 1, mode: 'DryRun' });
    const pod = await createPod(s.ns, 'app', s.label);
    await s.setInput(s.names[0]!, false);
    const [e] = await waitFor('a WouldEvict event on the pod', async () => {
      const es = await events(s.ns, 'app', 'WouldEvict');
      return es.length > 0 && es;
    });
    assert.equal(e!.type, 'Warning');
    assert.ok(e!.note.includes(s.label) && e!.note.includes(s.rule), e!.note);
    await holdsFor('the pod untouched', () => untouched(s.ns, 'app', pod.metadata!.uid!), 2000);
    assert.equal(await count(s.rule, 'dryrun'), 1);
    assert.equal(await count(s.rule, 'evicted'), 0);
    // berth explain pod says why, and what Berth did.
    const lines = await labelsCapability.explainPod!({
      client,
      object: await client.get(Resources.pods, 'app', s.ns),
      options: {},
      berthNamespace: 'berth-system',
    });
    assert.ok(
      lines.some((l) => l.includes(`needs label ${s.label}, derived by ${s.rule} (evictOnRemoval: DryRun`)),
      lines.join('\n'),
    );
    assert.ok(
      lines.some((l) =>
        l.includes(`no longer fits node ${s.names[0]}: label ${s.label} is gone; reported (DryRun)`),
      ),
      lines.join('\n'),
    );
    assert.ok(
      lines.some((l) => l.includes('WouldEvict: would evict pod')),
      lines.join('\n'),
    );
  });
});
