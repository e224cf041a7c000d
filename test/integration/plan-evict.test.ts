// test-driver: alone — its labels controller writes every NodeLabelRule's labels under Berth's field
// manager, and would act on the rules of the files beside it.
//
// Evictions, plan against actual: `berth plan -f` of a NodeLabelRule change that takes a derived
// label (evictOnRemoval) off a node says which pods go, per namespace and PodDisruptionBudget; after
// `kubectl apply` of the same file the evictor (with the real disruption controller and kwok) evicts
// exactly those pods, and no other.
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { stringify } from 'yaml';
import { installCrds } from '../../src/cli/install.ts';
import { NodeLabelRule } from '../../src/labels/crd.ts';
import { selectorMatches } from '../../src/policy/match/selector.ts';
import { ensureBinaries } from '../../src/sandbox/build.ts';
import { Resources, type KubeObject } from '../../src/runtime/api/meta.ts';
import { Manager } from '../../src/runtime/manager/manager.ts';
import {
  addNodes,
  createNamespace,
  deleteNamespace,
  deleteNodes,
  kubectl,
  podManifest,
  testSandbox,
  uniqueName,
} from '../helpers/cluster.ts';
import { startEvictor, untouched as untouchedPod } from '../helpers/evict.ts';
import { runPlan } from '../helpers/plan.ts';
import { holdsFor, waitFor } from '../helpers/wait.ts';

const sandbox = testSandbox();
const client = sandbox.client();
const id = uniqueName('plan-ev');
const D = `${id}.example.com`;
const dir = mkdtempSync(join(tmpdir(), 'berth-plan-evict-'));
const nodes: string[] = [];
const namespaces: string[] = [];
let manager: Manager | undefined;
let kubectlPath: string;

const PDB = Resources.podDisruptionBudgets;
type Pod = KubeObject & { spec: { nodeName?: string }; status?: { phase?: string } };

before(async () => {
  await installCrds(client);
  kubectlPath = (await ensureBinaries()).kubectl;
  manager = await startEvictor(sandbox);
});

after(async () => {
  await manager?.stop();
  for (const name of [id, `${id}-drain`]) await client.delete(NodeLabelRule.ref, name).catch(() => {});
  for (const ns of namespaces) await deleteNamespace(client, ns);
  await deleteNodes(client, nodes);
  client.close();
});

/** The rule: its derived label on every node with the input, or (narrowed) only on those kept too. */
const rule = (narrowed: boolean) => ({
  apiVersion: NodeLabelRule.apiVersion,
  kind: 'NodeLabelRule',
  metadata: { name: id },
  spec: {
    match: {
      allOf: [
        { label: `${D}/input`, operator: 'Exists' },
        ...(narrowed ? [{ label: `${D}/keep`, operator: 'Exists' }] : []),
      ],
    },
    labels: { [`${D}/derived`]: 'true' },
    evictOnRemoval: { afterSeconds: 1 },
  },
});

const file = (name: string, obj: object) => {
  const path = join(dir, name);
  writeFileSync(path, stringify(obj));
  return path;
};

const plan = (...args: string[]) => runPlan(sandbox.kubeconfigPath, '--controllers=labels', ...args);

async function runningPod(
  ns: string,
  name: string,
  node: string,
  app: string,
  needs: boolean,
  tolerations?: unknown[],
): Promise<Pod> {
  const p = podManifest({
    name,
    namespace: ns,
    nodeName: node,
    labels: { app },
    ...(needs ? { nodeSelector: { [`${D}/derived`]: 'true' } } : {}),
    ...(tolerations ? { tolerations } : {}),
  });
  await client.create(Resources.pods, p);
  return waitFor(`pod ${ns}/${name} running`, async () => {
    const got = await client.get<Pod>(Resources.pods, name, ns);
    return got.status?.phase === 'Running' && got;
  });
}

const untouched = (p: Pod) =>
  untouchedPod(client, p.metadata!.namespace!, p.metadata!.name!, p.metadata!.uid!);

test('a rule narrowed off a node: the plan names the pods evicted, per namespace and budget, and exactly those go', async () => {
  const [kept] = await addNodes(client, {
    prefix: `${id}-kept`,
    labels: { [`${D}/input`]: 'true', [`${D}/keep`]: 'true' },
  });
  const [lost] = await addNodes(client, { prefix: `${id}-lost`, labels: { [`${D}/input`]: 'true' } });
  nodes.push(kept!, lost!);
  kubectl(sandbox, kubectlPath, ['apply', '-f', file('wide.yaml', rule(false))]);
  await waitFor('the derived label on both nodes', async () =>
    (await Promise.all(nodes.map((n) => client.get(Resources.nodes, n)))).every(
      (n) => n.metadata?.labels?.[`${D}/derived`] === 'true',
    ),
  );
  const [shop, lab] = [await createNamespace(client, 'shop'), await createNamespace(client, 'lab')];
  namespaces.push(shop, lab);
  // A budget that lets every pod of app=a go (minAvailable: the pods have no controller, so the
  // disruption controller cannot compute maxUnavailable): the plan counts the pods it covers.
  await client.create(PDB, {
    apiVersion: 'policy/v1',
    kind: 'PodDisruptionBudget',
    metadata: { name: 'budget', namespace: shop },
    spec: { minAvailable: 0, selector: { matchLabels: { app: 'a' } } },
  });
  const pods = await Promise.all([
    runningPod(shop, 'a-lost', lost!, 'a', true),
    runningPod(shop, 'a-kept', kept!, 'a', true),
    runningPod(shop, 'b-lost', lost!, 'b', true),
    runningPod(lab, 'c-lost', lost!, 'c', true),
    // On the node, but needing no derived label: it stays.
    runningPod(lab, 'free', lost!, 'c', false),
  ]);

  await waitFor('the disruption controller allowing the budget its disruptions', async () => {
    const b = await client.get<KubeObject & { status?: { disruptionsAllowed?: number } }>(
      PDB,
      'budget',
      shop,
    );
    return (b.status?.disruptionsAllowed ?? 0) >= 2;
  });
  const narrowed = file('narrowed.yaml', rule(true));
  const { status, plan: p } = plan('-f', narrowed);
  assert.equal(status, 2);
  const planned = p.effects
    .filter((e) => e.kind === 'Pod' && e.op === '!')
    .map((e) => e.name)
    .sort();
  assert.deepEqual(planned, [`${lab}/c-lost`, `${shop}/a-lost`, `${shop}/b-lost`].sort());
  assert.deepEqual(p.evictions, { namespaces: { [shop]: 2, [lab]: 1 }, budgets: { [`${shop}/budget`]: 1 } });
  assert.deepEqual(
    p.warnings.filter((w) => w.startsWith('PodDisruptionBudget')),
    [],
    'the budget allows every eviction it covers',
  );
  assert.ok(
    p.effects.some((e) => e.kind === 'Node' && e.name === lost && e.op === '-'),
    'the node loses the label',
  );

  kubectl(sandbox, kubectlPath, ['apply', '-f', narrowed]);
  const byName = (name: string) => pods.find((x) => `${x.metadata!.namespace}/${x.metadata!.name}` === name)!;
  await waitFor(
    'the planned pods evicted',
    async () => (await Promise.all(planned.map((n) => untouched(byName(n))))).every((u) => !u),
    {
      timeoutMs: 60_000,
      observe: async () => ({
        node: (await client.get(Resources.nodes, lost!)).metadata?.labels,
        events: (
          await client.list<KubeObject & { note?: string }>(Resources.events, { namespace: shop })
        ).items.map((e) => e.note),
      }),
    },
  );
  const others = pods.filter((x) => !planned.includes(`${x.metadata!.namespace}/${x.metadata!.name}`));
  // Past the rule's delay (1 s) more than once: no other pod goes.
  await holdsFor(
    'the pods the plan left out untouched',
    async () => (await Promise.all(others.map(untouched))).every(Boolean),
    5000,
  );
  // What went, counted as the plan counts: per namespace, per budget covering it.
  const budget = (await client.get<KubeObject & { spec: { selector: object } }>(PDB, 'budget', shop)).spec
    .selector;
  const went = planned.map(byName);
  const actual = {
    namespaces: Object.fromEntries(
      [shop, lab].map((ns) => [ns, went.filter((x) => x.metadata!.namespace === ns).length]),
    ),
    budgets: {
      [`${shop}/budget`]: went.filter(
        (x) => x.metadata!.namespace === shop && selectorMatches(budget, x.metadata?.labels),
      ).length,
    },
  };
  assert.deepEqual(actual, p.evictions);
});

test("a rule's NoExecute taint: the plan names the pods that do not tolerate it, and the taint manager evicts exactly those", async () => {
  const [node] = await addNodes(client, { prefix: `${id}-drain`, labels: { [`${D}/drain-me`]: 'true' } });
  nodes.push(node!);
  const ns = await createNamespace(client, 'drain');
  namespaces.push(ns);
  const taint = { key: `${D}/drain`, value: 'now', effect: 'NoExecute' };
  const pods = await Promise.all([
    runningPod(ns, 'plain', node!, 'a', false),
    runningPod(ns, 'tolerant', node!, 'a', false, [
      { key: taint.key, operator: 'Exists', effect: 'NoExecute' },
    ]),
  ]);
  const drain = file('drain.yaml', {
    apiVersion: NodeLabelRule.apiVersion,
    kind: 'NodeLabelRule',
    metadata: { name: `${id}-drain` },
    spec: {
      match: { allOf: [{ label: `${D}/drain-me`, operator: 'Exists' }] },
      taints: [taint],
      acknowledgeNoExecute: true,
    },
  });
  const { status, plan: p } = plan('-f', drain);
  assert.equal(status, 2);
  assert.deepEqual(
    p.effects.filter((e) => e.kind === 'Pod').map((e) => `${e.name}: ${e.what}`),
    [`${ns}/plain: evicted by taint ${taint.key}:NoExecute`],
  );
  assert.deepEqual(p.evictions, { namespaces: { [ns]: 1 }, budgets: {} });
  assert.ok(
    p.warnings.some((w) => w.startsWith('this change would evict 1 pod(s)')),
    p.warnings.join('\n'),
  );

  kubectl(sandbox, kubectlPath, ['apply', '-f', drain]);
  await waitFor(
    'the pod that does not tolerate the taint evicted',
    async () => !(await untouched(pods[0]!)),
    {
      timeoutMs: 60_000,
    },
  );
  await holdsFor('the tolerating pod untouched', () => untouched(pods[1]!), 5000);
});
