// test-driver: alone — the management plane's Berth acts on every Workload and Cell it sees.
//
// A cell joined with a kubeconfig scoped the way a platform team hands them out: it may write
// WorkloadDeployments but not create namespaces. Federation places a Workload there when the
// namespace exists in the cell, and says what to do when it does not, instead of a 403 for ever.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { joinCell, secretName } from '../../src/cells/cli.ts';
import { type CellObject } from '../../src/cells/types.ts';
import { Cell } from '../../src/cells/crd.ts';
import { installCrds } from '../../src/cli/install.ts';
import { type WorkloadObject } from '../../src/federation/types.ts';
import { Workload } from '../../src/federation/crd.ts';
import { NAMESPACE } from '../../src/policy/namespace.ts';
import { findCondition } from '../../src/runtime/api/conditions.ts';
import { Resources, type KubeObject } from '../../src/runtime/api/meta.ts';
import type { KubeClient } from '../../src/runtime/client/client.ts';
import { Sandbox } from '../../src/sandbox/sandbox.ts';
import { WorkloadDeployment } from '../../src/workloads/crd.ts';
import { startBerth, type BerthProcess } from '../helpers/berth.ts';
import { createNamespace, testSandbox, uniqueName, untilWarning } from '../helpers/cluster.ts';
import { waitFor } from '../helpers/wait.ts';

const sandbox = testSandbox();
const client = sandbox.client();
const cellSandbox = new Sandbox(process.env['BERTH_TEST_FED_SCOPED'] ?? 'fed-scoped');
let cellClient: KubeClient;
const CITY = 'SEA';
const cell = uniqueName('sea');
const user = uniqueName('scoped-cell');
const wl = uniqueName('web');
let berth: BerthProcess | undefined;
/** What `berth cells join` printed. */
let joined = '';
/** In the cell too (created there by its admin). */
let ns = '';
/** Only on the management plane. */
let nsMissing = '';

before(async () => {
  await installCrds(client);
  ns = await createNamespace(client, 'fedscoped');
  nsMissing = await createNamespace(client, 'fedscoped-missing');
  await cellSandbox.up({ fresh: true });
  cellClient = cellSandbox.client();
  await installCrds(cellClient);
  await cellClient.create(Resources.namespaces, {
    apiVersion: 'v1',
    kind: 'Namespace',
    metadata: { name: ns },
  });
  // Everything federation does in a cell but create namespaces.
  const role: KubeObject = {
    apiVersion: 'rbac.authorization.k8s.io/v1',
    kind: 'ClusterRole',
    metadata: { name: user },
    rules: [
      {
        apiGroups: ['berth.dev'],
        resources: ['workloaddeployments'],
        verbs: ['get', 'list', 'watch', 'create', 'update', 'patch', 'delete'],
      },
      { apiGroups: [''], resources: ['namespaces'], verbs: ['get', 'list', 'watch'] },
      // Instances (get, list, watch) are granted by the first test, which sees the cell without them.
    ],
  };
  await cellClient.create(Resources.clusterRoles, role);
  await cellClient.create(Resources.clusterRoleBindings, {
    apiVersion: 'rbac.authorization.k8s.io/v1',
    kind: 'ClusterRoleBinding',
    metadata: { name: user },
    roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: user },
    subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: user }],
  });
  joined = await joinCell(cell, {
    kubeconfig: await cellSandbox.mintUser(user),
    location: [CITY],
    namespaces: [ns, nsMissing],
    createNamespaces: true,
    managementKubeconfig: sandbox.kubeconfigPath,
    berthNamespace: NAMESPACE,
  });
  berth = await startBerth(sandbox, ['--controllers=cells,federation', '--cell-probe-period=1'], {
    capture: true,
  });
});

after(async () => {
  await berth?.stop();
  for (const n of [ns, nsMissing]) {
    // The workload's finalizer has nobody left to release it.
    await client
      .patch(Workload.ref, wl, { metadata: { finalizers: null } }, { namespace: n })
      .catch(() => {});
    await client.delete(Resources.namespaces, n).catch(() => {});
  }
  await client.delete(Cell.ref, cell).catch(() => {});
  await client.delete(Resources.secrets, secretName(cell), NAMESPACE).catch(() => {});
  cellClient?.close();
  await cellSandbox.destroy();
  client.close();
});

const applyWorkload = (namespace: string) =>
  client.apply(
    Workload.ref,
    {
      apiVersion: Workload.apiVersion,
      kind: Workload.kind,
      metadata: { name: wl, namespace },
      spec: {
        template: { containers: [{ name: 'app', image: 'registry.example/web:1' }] },
        placements: [{ name: 'us', cityCodes: [CITY], scaleSettings: { minReplicas: 1 } }],
      },
    },
    { fieldManager: 'test', force: true },
  );

test('a cell whose kubeconfig may not watch Instances: the join says so, the Cell is Ready=False AccessDenied with a Warning, and Ready once granted', async () => {
  assert.match(
    joined,
    /its credentials may not list instances, watch instances there \(README, Cells\), so it is not Ready$/,
  );
  const ready = async () =>
    findCondition((await client.get<CellObject>(Cell.ref, cell)).status?.conditions, 'Ready');
  await waitFor(
    'Ready=False AccessDenied naming what is missing',
    async () => {
      const r = await ready();
      return (
        r?.status === 'False' &&
        r.reason === 'AccessDenied' &&
        r.message.includes('may not list instances, watch instances:')
      );
    },
    { observe: ready, timeoutMs: 30_000 },
  );
  await untilWarning(client, 'default', { reason: 'AccessDenied', regarding: cell });
  await cellClient.patch(
    Resources.clusterRoles,
    user,
    [
      {
        op: 'add',
        path: '/rules/-',
        value: { apiGroups: ['berth.dev'], resources: ['instances'], verbs: ['get', 'list', 'watch'] },
      },
    ],
    { type: 'json' },
  );
  // Asked again at every probe (1 s) while denied.
  await waitFor('Ready=True once the role grants it', async () => (await ready())?.status === 'True', {
    observe: ready,
    timeoutMs: 15_000,
  });
});

test('a cell whose kubeconfig may not create namespaces: the Workload is placed in the namespace that exists there', async () => {
  await applyWorkload(ns);
  const placed = await waitFor(
    'the WorkloadDeployment in the cell',
    async () => {
      const names = (await cellClient.list(WorkloadDeployment.ref, { namespace: ns })).items.map(
        (d) => d.metadata!.name,
      );
      return names.length > 0 && names;
    },
    { timeoutMs: 30_000 },
  );
  assert.deepEqual(placed, [`${wl}-us-sea`]);
  // The status is written after the cell's WorkloadDeployment.
  await waitFor(
    'the Workload naming its cell',
    async () => {
      const w = await client.get<WorkloadObject>(Workload.ref, wl, ns);
      return w.status?.placements?.find((p) => p.name === 'us')?.cities?.[0]?.cell === cell;
    },
    { observe: async () => (await client.get<WorkloadObject>(Workload.ref, wl, ns)).status },
  );
});

test('a namespace the cell lacks and may not create: the log, the Workload and a Warning say to create it there', async () => {
  await applyWorkload(nsMissing);
  await waitFor(
    "Berth's log names the namespace and what to do",
    () =>
      berth!
        .output()
        .includes(`namespace ${nsMissing} does not exist in the cell, and creating it was refused (`),
    { timeoutMs: 30_000 },
  );
  // The Workload says so too, where its user looks: its Available condition and a Warning event.
  const refusal = new RegExp(
    `^${CITY}: cell ${cell} refused the WorkloadDeployment: namespace ${nsMissing} does not exist in the cell, and creating it was refused \\(.*forbidden`,
  );
  await waitFor("the Workload's Available condition names the refusal", async () => {
    const w = await client.get<WorkloadObject>(Workload.ref, wl, nsMissing);
    const available = findCondition(w.status?.conditions, 'Available');
    return (
      available?.status === 'False' && available.reason === 'CellRefused' && refusal.test(available.message)
    );
  });
  await untilWarning(client, nsMissing, { reason: 'CellRefused', regarding: wl });
  await cellClient.create(Resources.namespaces, {
    apiVersion: 'v1',
    kind: 'Namespace',
    metadata: { name: nsMissing },
  });
  await waitFor(
    'the WorkloadDeployment in the cell once its admin created the namespace',
    async () => (await cellClient.list(WorkloadDeployment.ref, { namespace: nsMissing })).items.length === 1,
    { timeoutMs: 60_000 },
  );
});

test('a cell that refuses to delete the copy holds the Workload: Released=False CellRefused and a Warning, until it may', async () => {
  const verbs = async (change: (v: string[]) => string[]) => {
    const role = await cellClient.get<KubeObject & { rules: { resources: string[]; verbs: string[] }[] }>(
      Resources.clusterRoles,
      user,
    );
    for (const r of role.rules) if (r.resources.includes('workloaddeployments')) r.verbs = change(r.verbs);
    await cellClient.patch(
      Resources.clusterRoles,
      user,
      [{ op: 'replace', path: '/rules', value: role.rules }],
      {
        type: 'json',
      },
    );
  };
  await verbs((v) => v.filter((x) => x !== 'delete'));
  try {
    await client.delete(Workload.ref, wl, ns);
    await waitFor('Released=False CellRefused naming the refusal', async () => {
      const w = await client.get<WorkloadObject>(Workload.ref, wl, ns);
      const released = findCondition(w.status?.conditions, 'Released');
      return (
        released?.status === 'False' &&
        released.reason === 'CellRefused' &&
        /could not all be deleted: cell .*forbidden/.test(released.message)
      );
    });
    await untilWarning(client, ns, { reason: 'CellRefused', regarding: wl });
    assert.equal((await cellClient.list(WorkloadDeployment.ref, { namespace: ns })).items.length, 1);
  } finally {
    await verbs((v) => [...v, 'delete']);
  }
  await waitFor(
    'the Workload gone once the cell may delete its copy',
    async () => (await client.list(Workload.ref, { namespace: ns })).items.length === 0,
    { timeoutMs: 60_000 },
  );
  assert.equal((await cellClient.list(WorkloadDeployment.ref, { namespace: ns })).items.length, 0);
});
