// test-driver: alone — it runs the labels, gates and agents controllers, which would act on the
// policies of other files running at the same time.
//
// `berth plan -f FILE` of an AgentPlacement against the real control plane, then `kubectl apply -f`
// of the same file with Berth's controllers running: the label and claims the nodes then carry are
// exactly what the plan said, and deleting the placement takes back what `plan --delete` said.
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { stringify } from 'yaml';
import { AgentPlacement } from '../../src/agents/crd.ts';
import { installCrds } from '../../src/cli/install.ts';
import type { Plan } from '../../src/plan.ts';
import type { PolicyKit } from '../../src/policy/kit.ts';
import type { Effect } from '../../src/policy/plan.ts';
import { Informer } from '../../src/runtime/cache/informer.ts';
import { Resources, type KubeObject } from '../../src/runtime/api/meta.ts';
import { ensureBinaries } from '../../src/sandbox/build.ts';
import { berthClient, everyCapability, removeEverything, runBerthCli } from '../helpers/berth.ts';
import { runPlan } from '../helpers/plan.ts';
import {
  addNodes,
  createNamespace,
  deleteNamespace,
  kubectl,
  podManifest,
  testSandbox,
  uniqueName,
} from '../helpers/cluster.ts';

const sandbox = testSandbox();
const client = sandbox.client();
const id = uniqueName('plan-ag');
const D = `${id}.example.com`;
const LABEL = `${D}/agent`;
const CLAIM = `${D}/claim.`;
const POOL = `${D}/pool`;
let kit: PolicyKit | undefined;
let kubectlPath: string;
let ns: string;
const nodes: string[] = [];
const dir = mkdtempSync(join(tmpdir(), 'berth-plan-agents-'));
const watch = new Informer<KubeObject>({
  client,
  ref: Resources.nodes,
  labelSelector: `${D}/plan=agents`,
  resyncMs: 0,
});

before(async () => {
  await installCrds(client);
  kubectlPath = (await ensureBinaries()).kubectl;
  ns = await createNamespace(client, 'plan-ag');
  nodes.push(...(await addNodes(client, { prefix: id, count: 3, labels: { [`${D}/plan`]: 'agents' } })));
  const [n0, n1] = nodes as [string, string];
  // Pools a and b on the first node, a on the second; the third hosts none of the placement's pods.
  for (const [name, node, pool] of [
    ['a-0', n0, 'a'],
    ['b-0', n0, 'b'],
    ['a-1', n1, 'a'],
  ] as const)
    await client.create(
      Resources.pods,
      podManifest({ name, namespace: ns, nodeName: node, labels: { app: id, [POOL]: pool } }),
    );
  await client.create(
    Resources.pods,
    podManifest({ name: 'other', namespace: ns, nodeName: nodes[2]!, labels: { app: 'other', [POOL]: 'c' } }),
  );
  watch.start();
  await watch.waitForSync();
  kit = await everyCapability(await berthClient(sandbox));
});

after(async () => {
  await watch.stop();
  await deleteNamespace(client, ns);
  await removeEverything(client, kit?.manager, nodes, [{ ref: AgentPlacement.ref, name: id }]);
  client.close();
});

const placement = {
  apiVersion: AgentPlacement.apiVersion,
  kind: 'AgentPlacement',
  metadata: { name: id },
  spec: {
    podSelector: { matchLabels: { app: id } },
    owner: { uidLabel: POOL },
    nodeLabel: { key: LABEL, value: 'here' },
    claimAnnotationPrefix: CLAIM,
  },
};

const plan = (...args: string[]) => runPlan(sandbox.kubeconfigPath, ...args);

/** The plan's effects on this file's nodes: `op label|annotation KEY=VALUE` per node, sorted. */
const planned = (effects: Effect[]) =>
  Object.fromEntries(
    nodes.map((n) => [
      n,
      effects
        .filter((e) => e.kind === 'Node' && e.name === n)
        .map((e) => `${e.op} ${e.what} (${e.by})`)
        .sort(),
    ]),
  );

/** What the nodes carry of this placement, from the watch: `label|annotation KEY=VALUE`, sorted. */
const carried = () =>
  Object.fromEntries(
    nodes.map((n) => {
      const m = watch.get(n)?.metadata;
      return [
        n,
        [
          ...Object.entries(m?.labels ?? {})
            .filter(([k]) => k === LABEL)
            .map(([k, v]) => `label ${k}=${v}`),
          ...Object.entries(m?.annotations ?? {})
            .filter(([k]) => k.startsWith(CLAIM))
            .map(([k, v]) => `annotation ${k}=${v}`),
        ].sort(),
      ];
    }),
  );

/** Resolves once the watched nodes carry `want`, checked on each of their events. */
function nodesCarry(want: Record<string, string[]>, timeoutMs = 60_000): Promise<void> {
  const ok = () => JSON.stringify(carried()) === JSON.stringify(want);
  return new Promise((resolve, reject) => {
    let done = false;
    const timer = setTimeout(() => {
      done = true;
      reject(
        new Error(`nodes never carried ${JSON.stringify(want)}; they carry ${JSON.stringify(carried())}`),
      );
    }, timeoutMs);
    const check = () => {
      if (done || !ok()) return;
      done = true;
      clearTimeout(timer);
      resolve();
    };
    watch.addEventHandler({ onAdd: check, onUpdate: check, onDelete: check });
    check();
  });
}

test('an AgentPlacement: the plan says exactly which label and claims the nodes then carry, and --delete what goes', async () => {
  const path = join(dir, 'placement.yaml');
  writeFileSync(path, stringify(placement));
  const first = plan('-f', path);
  assert.equal(first.status, 2, 'changes: exit code 2');
  assert.deepEqual([first.plan.errors, first.plan.warnings], [[], []]);
  const [n0, n1, n2] = nodes as [string, string, string];
  const by = `(AgentPlacement ${id})`;
  const want = planned(first.plan.effects);
  assert.deepEqual(want, {
    [n0]: [
      `+ annotation ${CLAIM}a=${ns} ${by}`,
      `+ annotation ${CLAIM}b=${ns} ${by}`,
      `+ label ${LABEL}=here ${by}`,
    ],
    [n1]: [`+ annotation ${CLAIM}a=${ns} ${by}`, `+ label ${LABEL}=here ${by}`],
    [n2]: [],
  });

  kubectl(sandbox, kubectlPath, ['apply', '-f', path]);
  const gained = Object.fromEntries(
    Object.entries(want).map(([n, ops]) => [n, ops.map((o) => o.slice(2, -by.length - 1)).sort()]),
  );
  await nodesCarry(gained);
  assert.equal(plan('-f', path).status, 0, 'applied: nothing more would change');

  // The deprecated `berth agents test NAME`: what the placement does now, the plan of deleting it
  // the other way round; it exits 0 as it always did.
  const legacy = runBerthCli(['agents', 'test', id, '--kubeconfig', sandbox.kubeconfigPath, '-o', 'json']);
  assert.equal(legacy.status, 0, legacy.stderr);
  assert.match(legacy.stderr, /^berth: deprecated: use berth plan --delete -f /);
  assert.deepEqual(planned((JSON.parse(legacy.stdout) as Plan).effects), want);

  const undo = plan('-f', path, '--delete');
  assert.equal(undo.status, 2);
  assert.deepEqual(
    planned(undo.plan.effects),
    Object.fromEntries(Object.entries(want).map(([n, ops]) => [n, ops.map((o) => `-${o.slice(1)}`)])),
  );
  kubectl(sandbox, kubectlPath, ['delete', '-f', path]);
  await nodesCarry(Object.fromEntries(nodes.map((n) => [n, []])));
  assert.equal(plan('-f', path, '--delete').status, 0, 'deleted: deleting it again changes nothing');
});

test('a placement Berth would refuse is an error, exit code 1, and plans nothing', async () => {
  const path = join(dir, 'refused.yaml');
  writeFileSync(
    path,
    [
      placement,
      {
        ...placement,
        metadata: { name: `${id}-z` },
        spec: { ...placement.spec, claimAnnotationPrefix: `${CLAIM}z.` },
      },
    ]
      .map((o) => stringify(o))
      .join('---\n'),
  );
  const r = runBerthCli(['plan', '-f', path, '--kubeconfig', sandbox.kubeconfigPath]);
  assert.equal(r.status, 1, r.stdout + r.stderr);
  assert.match(
    r.stdout,
    new RegExp(
      `error: AgentPlacement ${id}-z would be Invalid and apply nothing: claimAnnotationPrefix .* overlaps`,
    ),
  );
});
