// test-driver: alone — Berth's workloads controllers act on every WorkloadDeployment, Instance and
// Quota in the cluster.
//
// `berth plan -f FILE` of a WorkloadDeployment and its namespace's Quota in one cluster, then
// `kubectl apply -f` of the same file with Berth's workloads controllers running: the instances made
// and which of them the Quota grants or leaves waiting are what the plan said, exactly; a scale down
// deletes what it said; `--delete` says every instance goes, and they do.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { installCrds } from '../../src/cli/install.ts';
import type { Plan } from '../../src/plan.ts';
import { findCondition } from '../../src/runtime/api/conditions.ts';
import { ensureBinaries } from '../../src/sandbox/build.ts';
import type { InstanceObject } from '../../src/workloads/decide/instances.ts';
import { Instance, Quota, WorkloadDeployment } from '../../src/workloads/crd.ts';
import { startBerth, type BerthProcess } from '../helpers/berth.ts';
import {
  addNodes,
  createNamespace,
  deleteNamespace,
  deleteNodes,
  kubectl,
  testSandbox,
  uniqueName,
} from '../helpers/cluster.ts';
import { manifests, runPlan } from '../helpers/plan.ts';
import { waitFor } from '../helpers/wait.ts';

const sandbox = testSandbox();
const client = sandbox.client();
const id = uniqueName('planwd');
let ns = '';
let nodes: string[] = [];
let berth: BerthProcess | undefined;
let kubectlPath: string;
const file = manifests('berth-plan-wd-');

before(async () => {
  await installCrds(client);
  kubectlPath = (await ensureBinaries()).kubectl;
  nodes = await addNodes(client, { prefix: id, count: 2 });
  ns = await createNamespace(client, id);
  berth = await startBerth(sandbox, ['--controllers=workloads']);
});

after(async () => {
  await berth?.stop();
  if (ns) await deleteNamespace(client, ns);
  await deleteNodes(client, nodes);
  client.close();
});

const plan = (...args: string[]) => runPlan(sandbox.kubeconfigPath, ...args);

/** The plan's instances as `NAME quota=granted|waits`, and those it deletes as `- NAME`, sorted. */
const planned = (p: Plan) =>
  p.effects
    .filter((e) => e.kind === 'Instance')
    .map((e) =>
      e.op === '-'
        ? `- ${e.name.split('/')[1]}`
        : `${e.name.split('/')[1]} quota=${/quota granted/.test(e.what) ? 'granted' : /waits for quota/.test(e.what) ? 'waits' : '?'}`,
    )
    .sort();

/** The instances here, with their QuotaGranted verdict, sorted. */
async function running(): Promise<string[]> {
  const list = await client.list<InstanceObject>(Instance.ref, { namespace: ns });
  return list.items
    .map((i) => {
      const q = findCondition(i.status?.conditions, 'QuotaGranted');
      return `${i.metadata.name} quota=${q?.status === 'True' ? 'granted' : q?.reason === 'QuotaExceeded' ? 'waits' : '?'}`;
    })
    .sort();
}

const deployment = (replicas: number) => ({
  apiVersion: WorkloadDeployment.apiVersion,
  kind: WorkloadDeployment.kind,
  metadata: { name: 'web', namespace: ns },
  spec: { replicas, template: { containers: [{ name: 'app', image: 'registry.example/web:1' }] } },
});

test('a WorkloadDeployment under a Quota: the plan says which instances are made, granted and left waiting, and what a scale down and --delete remove', async () => {
  const quota = {
    apiVersion: Quota.apiVersion,
    kind: Quota.kind,
    metadata: { name: 'budget', namespace: ns },
    spec: { instances: 2 },
  };
  kubectl(sandbox, kubectlPath, ['apply', '-f', file('quota.yaml', [quota])]);
  const path = file('wd.yaml', [deployment(3)]);
  const first = plan('-f', path);
  assert.equal(first.status, 2);
  const want = planned(first.plan);
  assert.deepEqual(want, ['web-0 quota=granted', 'web-1 quota=granted', 'web-2 quota=waits']);
  assert.ok(
    first.plan.warnings.some((w) =>
      w.startsWith(`WorkloadDeployment ${ns}/web would exceed its quota: web-2 wait`),
    ),
    first.plan.warnings.join('\n'),
  );
  kubectl(sandbox, kubectlPath, ['apply', '-f', path]);
  await waitFor(
    'the instances and verdicts the plan said',
    async () => JSON.stringify(await running()) === JSON.stringify(want),
    {
      timeoutMs: 120_000,
      observe: running,
    },
  );

  const smaller = file('wd1.yaml', [deployment(1)]);
  const down = plan('-f', smaller);
  assert.equal(down.status, 2);
  assert.deepEqual(planned(down.plan), ['- web-1', '- web-2']);
  kubectl(sandbox, kubectlPath, ['apply', '-f', smaller]);
  await waitFor(
    'scaled down as planned',
    async () => JSON.stringify(await running()) === JSON.stringify(['web-0 quota=granted']),
    {
      timeoutMs: 120_000,
      observe: running,
    },
  );
  await waitFor('applied: planning it again changes nothing', async () => plan('-f', smaller).status === 0, {
    observe: async () => plan('-f', smaller).plan,
  });

  const undo = plan('-f', smaller, '--delete');
  assert.equal(undo.status, 2);
  assert.deepEqual(planned(undo.plan), ['- web-0']);
  assert.ok(
    undo.plan.warnings.includes(`WorkloadDeployment ${ns}/web would lose every instance (1)`),
    undo.plan.warnings.join('\n'),
  );
  kubectl(sandbox, kubectlPath, ['delete', '-f', smaller]);
  await waitFor('no instance left', async () => (await running()).length === 0, {
    timeoutMs: 120_000,
    observe: running,
  });
});
