// test-driver: alone — it runs the labels, gates and agents controllers, which would act on the
// policies of other files running at the same time.
//
// `berth plan -f FILE` against the real control plane, then `kubectl apply -f` of the same file with
// Berth's controllers running: what the controllers did to this file's nodes is what the plan said,
// exactly (labels, taints, held nodes), and deleting it undoes what `plan --delete` said.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, test } from 'node:test';
import { parse } from 'yaml';
import type { Explanation } from '../../src/explain.ts';
import type { PolicyKit } from '../../src/policy/kit.ts';
import type { Effect } from '../../src/policy/plan.ts';
import { installCrds } from '../../src/cli/install.ts';
import { ensureBinaries } from '../../src/sandbox/build.ts';
import { packageRoot } from '../../src/sandbox/paths.ts';
import { NodeStartupGate } from '../../src/gates/crd.ts';
import { NodeLabelRule } from '../../src/labels/crd.ts';
import { Resources, type KubeObject } from '../../src/runtime/api/meta.ts';
import { berthClient, everyCapability, removeEverything, runBerthCli } from '../helpers/berth.ts';
import { addNodes, kubectl, testSandbox, uniqueName } from '../helpers/cluster.ts';
import { manifests, runPlan } from '../helpers/plan.ts';
import { waitFor } from '../helpers/wait.ts';

const sandbox = testSandbox();
const client = sandbox.client();
const id = uniqueName('plan');
const D = `${id}.example.com`;
let kit: PolicyKit | undefined;
let kubectlPath: string;
const nodes: string[] = [];

before(async () => {
  await installCrds(client);
  kubectlPath = (await ensureBinaries()).kubectl;
  nodes.push(
    ...(await addNodes(client, { prefix: `${id}-gpu`, count: 2, labels: { [`${D}/gpu`]: 'a100' } })),
    ...(await addNodes(client, { prefix: `${id}-cpu`, count: 1, labels: { [`${D}/pool`]: 'cpu' } })),
  );
  kit = await everyCapability(await berthClient(sandbox));
});

after(async () => {
  await removeEverything(client, kit?.manager, nodes, [
    { ref: NodeLabelRule.ref, name: id },
    { ref: NodeStartupGate.ref, name: id },
  ]);
  client.close();
});

const file = manifests('berth-plan-');

const plan = (...args: string[]) => runPlan(sandbox.kubeconfigPath, ...args);

/** The plan's effects on this file's nodes, as `op kind key=value` per node, sorted. */
const planned = (effects: Effect[]) =>
  Object.fromEntries(
    nodes.map((n) => [
      n,
      effects
        .filter((e) => e.kind === 'Node' && e.name === n)
        .map((e) => `${e.op} ${e.what.split(':')[0]!.replace(/=.*$/, '')}`)
        .sort(),
    ]),
  );

/** What the nodes carry of this file's domain and gate: labels and taints by key. */
async function carried(): Promise<Record<string, string[]>> {
  const out: Record<string, string[]> = {};
  for (const n of nodes) {
    const node = await client.get<KubeObject & { spec?: { taints?: { key: string; effect: string }[] } }>(
      Resources.nodes,
      n,
    );
    out[n] = [
      ...Object.keys(node.metadata?.labels ?? {})
        .filter((k) => k.startsWith(`${D}/derived`))
        .map((k) => `label ${k}`),
      ...(node.spec?.taints ?? []).filter((t) => t.key.startsWith(D)).map((t) => `taint ${t.key}`),
    ].sort();
  }
  return out;
}

const rule = {
  apiVersion: 'berth.dev/v1alpha1',
  kind: 'NodeLabelRule',
  metadata: { name: id },
  spec: {
    match: { anyOf: [{ label: `${D}/gpu`, operator: 'Exists' }] },
    labels: { [`${D}/derived`]: 'true' },
    taints: [{ key: `${D}/derived-taint`, value: 'x', effect: 'NoSchedule' }],
  },
};
const gate = {
  apiVersion: 'berth.dev/v1alpha1',
  kind: 'NodeStartupGate',
  metadata: { name: id },
  spec: {
    taint: { key: `${D}/warmup`, value: 'wait', effect: 'NoSchedule' },
    nodeSelector: { matchLabels: { [`${D}/pool`]: 'cpu' } },
    backfill: true,
    requirements: { pods: [{ namespace: 'kube-system', daemonSet: `${id}-never` }] },
  },
};

test('a rule and a gate: the plan says exactly what the controllers then do, and --delete what goes', async () => {
  const path = file('change.yaml', [rule, gate]);
  const before = plan('-f', path);
  assert.equal(before.status, 2, 'changes: exit code 2');
  const want = planned(before.plan.effects);
  const [gpu0, gpu1, cpu] = nodes as [string, string, string];
  // Rendered first as the plan's ops: the nodes then carry what the plan added.
  assert.deepEqual(want[gpu0], [`+ label ${D}/derived`, `+ taint ${D}/derived-taint`]);
  assert.deepEqual(want[gpu1], want[gpu0]);
  assert.deepEqual(want[cpu], [`+ taint ${D}/warmup`]);

  kubectl(sandbox, kubectlPath, ['apply', '-f', path]);
  const gained = Object.fromEntries(
    Object.entries(want).map(([n, ops]) => [n, ops.map((o) => o.slice(2)).sort()]),
  );
  await waitFor('the nodes carry what the plan said', async () => {
    const now = await carried();
    return JSON.stringify(now) === JSON.stringify(gained) ? now : undefined;
  });
  assert.equal(plan('-f', path).status, 0, 'applied: nothing more would change');

  // explain says the same of each policy: the rule's node, and the nodes the gate holds.
  const explain = (...args: string[]) => {
    const r = runBerthCli(['explain', ...args, '--kubeconfig', sandbox.kubeconfigPath]);
    assert.equal(r.status, 0, r.stderr);
    return parse(r.stdout) as Explanation;
  };
  const ruleSaid = explain('nodelabelrule', id, '--node', gpu0, '-o', 'json');
  assert.deepEqual(
    ruleSaid.subjects?.map((s) => `${s.name} ${s.in} ${s.why.at(-2)}`),
    [`${gpu0} true sets label ${D}/derived=true`],
  );
  const gateSaid = explain('nodestartupgate', id, '-o', 'yaml');
  assert.deepEqual(
    gateSaid.subjects?.filter((s) => s.in).map((s) => s.name),
    [cpu],
  );

  const undo = plan('-f', path, '--delete');
  assert.equal(undo.status, 2);
  assert.deepEqual(
    planned(undo.plan.effects),
    Object.fromEntries(Object.entries(gained).map(([n, ops]) => [n, ops.map((o) => `- ${o}`)])),
  );
  // Not waiting for the gate's finalizer here: the controllers that release it run in this process.
  kubectl(sandbox, kubectlPath, ['delete', '--wait=false', '-f', path]);
  await waitFor('the nodes carry nothing of the file', async () => {
    const now = await carried();
    return Object.values(now).every((v) => v.length === 0) ? now : undefined;
  });
});

test('kubectl berth plan: the plugin kubectl finds on PATH says what berth plan says, with its exit code', () => {
  // As `npm install -g` puts it on PATH: kubectl-berth, run by the node on PATH (Node 24 here).
  const bin = mkdtempSync(join(tmpdir(), 'berth-plugin-'));
  symlinkSync(join(packageRoot(), 'bin', 'berth.js'), join(bin, 'kubectl-berth'));
  const path = file('plugin.yaml', [rule]);
  const r = spawnSync(
    kubectlPath,
    ['berth', 'plan', '-f', path, '--kubeconfig', sandbox.kubeconfigPath, '-o', 'json'],
    {
      encoding: 'utf8',
      env: { ...process.env, PATH: [bin, dirname(process.execPath), process.env['PATH']].join(':') },
    },
  );
  assert.equal(r.status, 2, r.stderr);
  assert.deepEqual(JSON.parse(r.stdout), plan('-f', path).plan);
});
