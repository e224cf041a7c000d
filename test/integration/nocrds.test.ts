// A user of the seed's labeller runs Berth with a rule directory and nothing else: no `berth install`.
// What can work without a CRD works, what cannot says so (readiness body, metric, error log), and
// a CRD installed later is picked up at once. Runs on private sandboxes, which never had the CRDs.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { installCrds } from '../../src/cli/install.ts';
import { NodeLabelRule } from '../../src/labels/crd.ts';
import { capabilities } from '../../src/capabilities.ts';
import { isNotFound, type KubeClient } from '../../src/runtime/client/client.ts';
import { crdName, Resources, type KubeObject } from '../../src/runtime/api/meta.ts';
import { Sandbox } from '../../src/sandbox/sandbox.ts';
import { berthKubeconfig, startBerth, type BerthProcess } from '../helpers/berth.ts';
import { addNodes, uniqueName } from '../helpers/cluster.ts';
import { waitFor } from '../helpers/wait.ts';

let sandbox = new Sandbox(uniqueName('nocrd'));
let client: KubeClient;
let berth: BerthProcess | undefined;
const crdNames = capabilities.flatMap((c) => c.kinds.map(crdName));

/** Starts `sandbox` afresh, without Berth's CRDs, with a node of the seed's USB EdgeTPU and a plain one. */
async function upWithNodes(): Promise<void> {
  await sandbox.up({ fresh: true });
  client = sandbox.client();
  await addNodes(client, {
    prefix: 'usb',
    count: 1,
    labels: { 'feature.node.kubernetes.io/usb-fe_1a6e_089a.present': 'true' },
  });
  await addNodes(client, { prefix: 'plain', count: 1 });
}

before(upWithNodes);

after(async () => {
  await berth?.stop();
  client?.close();
  await sandbox.destroy();
});

const labelsOf = async (node: string) => (await client.get(Resources.nodes, node)).metadata?.labels ?? {};

async function readyz(): Promise<{ status: number; body: string }> {
  const r = await fetch(`http://127.0.0.1:${berth!.healthPort}/readyz`);
  return { status: r.status, body: await r.text() };
}

function labelDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'berth-labels-'));
  mkdirSync(join(dir, 'accelerators'));
  writeFileSync(
    join(dir, 'accelerators', 'edgetpu'),
    'feature.node.kubernetes.io/usb-fe_1a6e_089a.present\n',
  );
  return dir;
}

describe('berth run on a cluster without its CRDs', () => {
  test('rule files label nodes; readiness, a metric and an error log name the missing CRDs', async () => {
    for (const n of crdNames) await assert.rejects(client.get(Resources.crds, n), (e) => isNotFound(e));
    // Default flags: every capability on, as a user who never read about --controllers would run it.
    berth = await startBerth(sandbox, [`--label-dir=${labelDir()}`], { capture: true });

    await waitFor(
      'usb-0 labelled from the rule file',
      async () => (await labelsOf('usb-0'))['accelerators/edgetpu'] === 'true',
      {
        observe: () => labelsOf('usb-0'),
      },
    );
    assert.equal((await labelsOf('plain-0'))['accelerators/edgetpu'], undefined);

    const r = await readyz();
    assert.equal(r.status, 200, r.body);
    for (const [crd, capability] of [
      ['nodelabelrules.berth.dev', 'labels'],
      ['nodestartupgates.berth.dev', 'gates'],
      ['agentplacements.berth.dev', 'agents'],
    ]) {
      assert.match(r.body, new RegExp(`CRD ${crd} is not installed: the ${capability} capability`));
      assert.equal(await berth.metric('berth_crd_missing', (l) => l.includes(`crd="${crd}"`)), 1, crd);
    }
    const errorLines = berth
      .output()
      .split('\n')
      .filter((l) => l.includes('"level":"error"') && l.includes('is not installed'));
    assert.ok(
      errorLines.some((l) => l.includes('nodelabelrules.berth.dev') && l.includes('berth install')),
      `no error-level log line names the missing CRD and berth install:\n${berth.output().slice(-3000)}`,
    );
  });

  test('CRDs installed while Berth runs are picked up at once: a NodeLabelRule applies', async () => {
    assert.ok(berth, 'the previous test started Berth');
    await installCrds(client);
    const rule: KubeObject = {
      apiVersion: 'berth.dev/v1alpha1',
      kind: 'NodeLabelRule',
      metadata: { name: 'plain' },
      spec: {
        match: { allOf: [{ field: 'name', operator: 'In', values: ['plain-0'] }] },
        labels: { 'example.com/plain': 'yes' },
      },
    };
    await client.apply(NodeLabelRule.ref, rule, { fieldManager: 'test', force: true });
    await waitFor(
      'plain-0 labelled by the NodeLabelRule',
      async () => (await labelsOf('plain-0'))['example.com/plain'] === 'yes',
      {
        timeoutMs: 10_000,
        observe: () => labelsOf('plain-0'),
      },
    );
    // The file rule is still in force, and the readiness body and metric no longer warn.
    assert.equal((await labelsOf('usb-0'))['accelerators/edgetpu'], 'true');
    await waitFor('no missing CRD reported', async () => !(await readyz()).body.includes('not installed'));
    assert.equal(await berth.metric('berth_crd_missing'), 0);
    await berth.stop();
    berth = undefined;
  });

  test('berth run --install-crds installs the CRDs itself', async () => {
    // On a cluster that never had Berth's CRDs. Deleting them from the one above, just after they
    // were installed, waits on the apiserver's CRD cleanup, which CI saw stall past 90 s ("could not
    // list instances: storage is (re)initializing"): not what this test is about.
    client.close();
    await sandbox.destroy();
    sandbox = new Sandbox(uniqueName('nocrd'));
    await upWithNodes();
    for (const n of crdNames) await assert.rejects(client.get(Resources.crds, n), (e) => isNotFound(e));
    // Its identity's roles with the CRD writes --install-crds needs, as its user grants them.
    const kubeconfig = await berthKubeconfig(sandbox, { name: 'berth-install-crds', installCrds: true });
    berth = await startBerth(sandbox, ['--install-crds'], { kubeconfig });
    for (const n of crdNames) await client.get(Resources.crds, n);
    assert.doesNotMatch((await readyz()).body, /not installed/);
    await client.apply(
      NodeLabelRule.ref,
      {
        apiVersion: 'berth.dev/v1alpha1',
        kind: 'NodeLabelRule',
        metadata: { name: 'usb' },
        spec: {
          match: { allOf: [{ field: 'name', operator: 'In', values: ['usb-0'] }] },
          labels: { 'example.com/usb': 'yes' },
        },
      },
      { fieldManager: 'test', force: true },
    );
    await waitFor(
      'usb-0 labelled by the NodeLabelRule',
      async () => (await labelsOf('usb-0'))['example.com/usb'] === 'yes',
      {
        timeoutMs: 10_000,
      },
    );
  });
});
