// test-driver: alone — the cells' Berths and the management plane's act on every Workload, Cell and
// WorkloadDeployment they see, so no other file's objects may be beside them.
//
// Federation against real control planes side by side: the run's sandbox is the management plane,
// two more (with kwok nodes) are cells in Dallas and London, joined with `berth cells join`, each
// with its own Berth running the workloads controllers (instances really run there as Pods), and the
// management plane's Berth runs cells and federation. A Workload with placements in DFW and LHR
// gets WorkloadDeployments in exactly those cells, Ready instances and totals upstream; a cell-side
// change shows upstream within a bound; a placement moved from LHR to DFW removes exactly that
// WorkloadDeployment; a city with no cell is NoMatchingLocation with a Warning; deleting the Workload
// removes its WorkloadDeployments from both cells, an unreachable cell holding it until it answers.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { cellsCommand, secretName } from '../../src/cells/cli.ts';
import { Cell, type CellObject } from '../../src/cells/types.ts';
import { installCrds } from '../../src/cli/install.ts';
import {
  CITY_LABEL,
  Workload,
  WORKLOAD_NAME_LABEL,
  WORKLOAD_UID_LABEL,
  type WorkloadObject,
} from '../../src/federation/types.ts';
import { NAMESPACE } from '../../src/policy/namespace.ts';
import { findCondition } from '../../src/runtime/api/conditions.ts';
import { Resources, type KubeObject } from '../../src/runtime/api/meta.ts';
import type { KubeClient } from '../../src/runtime/client/client.ts';
import { Sandbox } from '../../src/sandbox/sandbox.ts';
import type { InstanceObject } from '../../src/workloads/decide.ts';
import { DEPLOYMENT_LABEL, Instance, WorkloadDeployment } from '../../src/workloads/types.ts';
import type { DeploymentObject } from '../../src/federation/decide.ts';
import { startBerth, type BerthProcess } from '../helpers/berth.ts';
import { addNodes, createNamespace, testSandbox, uniqueName } from '../helpers/cluster.ts';
import { holdsFor, waitFor } from '../helpers/wait.ts';

const sandbox = testSandbox();
const client = sandbox.client();
const cities = {
  DFW: new Sandbox(process.env['BERTH_TEST_FED_DFW'] ?? 'fed-dfw'),
  LHR: new Sandbox(process.env['BERTH_TEST_FED_LHR'] ?? 'fed-lhr'),
};
type City = keyof typeof cities;
const cellName = { DFW: uniqueName('dfw'), LHR: uniqueName('lhr') };
const cellClients = {} as Record<City, KubeClient>;
const berths: BerthProcess[] = [];
const wl = uniqueName('web');
let ns = '';

before(async () => {
  await installCrds(client);
  ns = await createNamespace(client, 'fed');
  for (const city of ['DFW', 'LHR'] as const) {
    const sb = cities[city];
    await sb.up({ fresh: true });
    const c = sb.client();
    cellClients[city] = c;
    await installCrds(c);
    await addNodes(c, { prefix: `${city.toLowerCase()}-node`, count: 2 });
    berths.push(await startBerth(sb, ['--controllers=workloads']));
    await cellsCommand().parseAsync(
      [
        'join',
        cellName[city],
        `--kubeconfig=${sb.kubeconfigPath}`,
        `--location=${city}`,
        `--management-kubeconfig=${sandbox.kubeconfigPath}`,
      ],
      { from: 'user' },
    );
  }
  berths.push(
    await startBerth(
      sandbox,
      ['--controllers=cells,federation', '--cell-probe-period=1', '--cell-unreachable-after=3'],
      { capture: true },
    ),
  );
});

after(async () => {
  for (const b of berths) await b.stop();
  for (const city of ['DFW', 'LHR'] as const) {
    await client.delete(Cell.ref, cellName[city]).catch(() => {});
    await client.delete(Resources.secrets, secretName(cellName[city]), NAMESPACE).catch(() => {});
    cellClients[city]?.close();
    await cities[city].destroy();
  }
  // The workload's finalizer has nobody left to release it.
  const left = await client.get<WorkloadObject>(Workload.ref, wl, ns).catch(() => undefined);
  if (left)
    await client
      .patch(Workload.ref, wl, { metadata: { finalizers: null } }, { namespace: ns })
      .catch(() => {});
  await client.delete(Resources.namespaces, ns).catch(() => {});
  client.close();
});

const template = { containers: [{ name: 'app', image: 'registry.example/web:1' }] };

async function applyWorkload(placements: { name: string; cityCodes: string[]; minReplicas: number }[]) {
  await client.apply(
    Workload.ref,
    {
      apiVersion: Workload.apiVersion,
      kind: Workload.kind,
      metadata: { name: wl, namespace: ns },
      spec: {
        template,
        placements: placements.map((p) => ({
          name: p.name,
          cityCodes: p.cityCodes,
          scaleSettings: { minReplicas: p.minReplicas },
        })),
      },
    },
    { fieldManager: 'test', force: true },
  );
}

const workload = () => client.get<WorkloadObject>(Workload.ref, wl, ns);
/** The WorkloadDeployments in a cell's copy of the namespace, by name. */
async function deploymentsIn(city: City): Promise<DeploymentObject[]> {
  return (await cellClients[city].list<DeploymentObject>(WorkloadDeployment.ref, { namespace: ns })).items;
}
const names = async (city: City) => (await deploymentsIn(city)).map((d) => d.metadata.name!).sort();
async function readyInstances(city: City, deployment: string): Promise<number> {
  const list = await cellClients[city].list<InstanceObject>(Instance.ref, {
    namespace: ns,
    query: { labelSelector: `${DEPLOYMENT_LABEL}=${deployment}` },
  });
  return list.items.filter((i) => findCondition(i.status?.conditions, 'Ready')?.status === 'True').length;
}
const cityStatus = (w: WorkloadObject, placement: string, city: string) =>
  w.status?.placements?.find((p) => p.name === placement)?.cities?.find((c) => c.city === city);

type Event = KubeObject & {
  type?: string;
  reason?: string;
  note?: string;
  regarding?: { kind?: string; name?: string };
};
const workloadEvents = async () =>
  (await client.list<Event>(Resources.events, { namespace: ns })).items.filter(
    (e) => e.regarding?.kind === 'Workload' && e.regarding.name === wl,
  );

test('a Workload placed in DFW and LHR: a WorkloadDeployment in exactly each cell, instances Ready there, totals upstream', async () => {
  await applyWorkload([
    { name: 'us', cityCodes: ['DFW'], minReplicas: 2 },
    { name: 'eu', cityCodes: ['LHR'], minReplicas: 2 },
  ]);
  await waitFor(
    'the workload Available upstream with 4 ready instances',
    async () => {
      const w = await workload();
      return (
        findCondition(w.status?.conditions, 'Available')?.status === 'True' && w.status?.readyReplicas === 4
      );
    },
    { timeoutMs: 90_000 },
  );
  assert.deepEqual(await names('DFW'), [`${wl}-us-dfw`]);
  assert.deepEqual(await names('LHR'), [`${wl}-eu-lhr`]);
  assert.equal(await readyInstances('DFW', `${wl}-us-dfw`), 2);
  assert.equal(await readyInstances('LHR', `${wl}-eu-lhr`), 2);
  const w = await workload();
  const [dfw] = await deploymentsIn('DFW');
  assert.equal(dfw!.metadata.labels?.[WORKLOAD_UID_LABEL], w.metadata.uid);
  assert.equal(dfw!.metadata.labels?.[WORKLOAD_NAME_LABEL], wl);
  assert.equal(dfw!.metadata.labels?.[CITY_LABEL], 'DFW');
  assert.deepEqual(dfw!.spec.template, template);
  assert.equal(dfw!.spec.replicas, 2);
  assert.equal(w.status?.observedGeneration, w.metadata.generation);
  assert.deepEqual(
    {
      replicas: w.status?.replicas,
      ready: w.status?.readyReplicas,
      updated: w.status?.updatedReplicas,
      desired: w.status?.desiredReplicas,
    },
    { replicas: 4, ready: 4, updated: 4, desired: 4 },
  );
  assert.equal(cityStatus(w, 'us', 'DFW')?.cell, cellName.DFW);
  assert.equal(cityStatus(w, 'eu', 'LHR')?.cell, cellName.LHR);
  assert.equal(cityStatus(w, 'eu', 'LHR')?.readyReplicas, 2);
  await waitFor(
    'Progressing RolledOut',
    async () => findCondition((await workload()).status?.conditions, 'Progressing')?.reason === 'RolledOut',
  );
  // Settled: the status is written only when it changes, and the cells' objects are not rewritten.
  const [settled, dfwSettled] = await Promise.all([workload(), deploymentsIn('DFW')]);
  await holdsFor(
    'nothing rewritten while nothing changes',
    async () => {
      const [now, dfwNow] = await Promise.all([workload(), deploymentsIn('DFW')]);
      return (
        now.metadata.resourceVersion === settled.metadata.resourceVersion &&
        dfwNow[0]!.metadata.resourceVersion === dfwSettled[0]!.metadata.resourceVersion
      );
    },
    3000,
  );
});

test("a cell instance's change shows upstream within the bound, with the cell's own reason", async () => {
  const dfw = cellClients.DFW;
  const nodes = (await dfw.list(Resources.nodes)).items.map((n) => n.metadata!.name!);
  const cordon = (on: boolean) =>
    Promise.all(nodes.map((n) => dfw.patch(Resources.nodes, n, { spec: { unschedulable: on } })));
  await cordon(true);
  try {
    // Its Pod deleted with every node cordoned: the instance cannot come back Ready (Unschedulable).
    const pods = await dfw.list(Resources.pods, { namespace: ns });
    await dfw.delete(Resources.pods, pods.items[0]!.metadata!.name!, ns);
    let cellAt = 0;
    let upstreamAt = 0;
    await waitFor(
      'the change in the cell and upstream',
      async () => {
        const [cellWd, w] = await Promise.all([
          dfw.get<DeploymentObject>(WorkloadDeployment.ref, `${wl}-us-dfw`, ns),
          workload(),
        ]);
        if (!cellAt && cellWd.status?.readyReplicas === 1) cellAt = Date.now();
        if (!upstreamAt && cityStatus(w, 'us', 'DFW')?.readyReplicas === 1) upstreamAt = Date.now();
        return cellAt > 0 && upstreamAt > 0;
      },
      { timeoutMs: 60_000, intervalMs: 20 },
    );
    const latency = Math.max(0, upstreamAt - cellAt);
    console.log(`cell-side change visible upstream after ${latency} ms`);
    assert.ok(latency <= 5000, `upstream ${latency} ms after the cell`);
    await waitFor('the cell reason upstream', async () => {
      const w = await workload();
      const a = findCondition(w.status?.conditions, 'Available');
      return a?.status === 'False' && a.reason === 'Unschedulable' && w.status?.readyReplicas === 3;
    });
  } finally {
    await cordon(false);
  }
  await waitFor(
    'Available again',
    async () => findCondition((await workload()).status?.conditions, 'Available')?.status === 'True',
    { timeoutMs: 60_000 },
  );
});

test('a placement moved from LHR to DFW removes exactly that WorkloadDeployment; what federation did not make stays', async () => {
  // A WorkloadDeployment of a cell's own user, in the same namespace: never federation's to delete.
  await cellClients.LHR.apply(
    WorkloadDeployment.ref,
    {
      apiVersion: WorkloadDeployment.apiVersion,
      kind: WorkloadDeployment.kind,
      metadata: { name: `${wl}-local`, namespace: ns },
      spec: { template, replicas: 0 },
    },
    { fieldManager: 'test' },
  );
  await applyWorkload([
    { name: 'us', cityCodes: ['DFW'], minReplicas: 2 },
    { name: 'eu', cityCodes: ['DFW'], minReplicas: 1 },
  ]);
  await waitFor(
    'eu in DFW, gone from LHR',
    async () => {
      const [d, l] = await Promise.all([names('DFW'), names('LHR')]);
      return d.join() === [`${wl}-eu-dfw`, `${wl}-us-dfw`].join() && l.join() === `${wl}-local`;
    },
    { timeoutMs: 30_000 },
  );
  await waitFor(
    'the workload Available with 3 ready instances',
    async () => {
      const w = await workload();
      return (
        findCondition(w.status?.conditions, 'Available')?.status === 'True' && w.status?.readyReplicas === 3
      );
    },
    { timeoutMs: 60_000 },
  );
  const w = await workload();
  assert.equal(cityStatus(w, 'eu', 'LHR'), undefined);
  assert.equal(cityStatus(w, 'eu', 'DFW')?.cell, cellName.DFW);
  // The us deployment was never touched: the same object, the same instances.
  assert.equal(await readyInstances('DFW', `${wl}-us-dfw`), 2);
  await holdsFor(
    "the cell user's WorkloadDeployment stays",
    async () => (await names('LHR')).includes(`${wl}-local`),
    2000,
  );
});

test('a city with no cell: NoMatchingLocation with a Warning event, the other cities keep running', async () => {
  await applyWorkload([
    { name: 'us', cityCodes: ['DFW'], minReplicas: 2 },
    { name: 'eu', cityCodes: ['DFW'], minReplicas: 1 },
    { name: 'ap', cityCodes: ['NRT'], minReplicas: 1 },
  ]);
  await waitFor('NoMatchingLocation upstream', async () => {
    const a = findCondition((await workload()).status?.conditions, 'Available');
    return a?.status === 'False' && a.reason === 'NoMatchingLocation';
  });
  const w = await workload();
  assert.match(
    findCondition(w.status?.conditions, 'Available')!.message,
    /^NRT: no Location has city code NRT/,
  );
  assert.equal(cityStatus(w, 'ap', 'NRT')?.reason, 'NoMatchingLocation');
  assert.equal(w.status?.readyReplicas, 3);
  await waitFor('a Warning event', async () =>
    (await workloadEvents()).some((e) => e.type === 'Warning' && e.reason === 'NoMatchingLocation'),
  );
  assert.deepEqual(await names('DFW'), [`${wl}-eu-dfw`, `${wl}-us-dfw`]);
});

test('deleting the Workload: its WorkloadDeployments go from both cells; an unreachable cell holds it, saying so, until it answers', async () => {
  await applyWorkload([
    { name: 'us', cityCodes: ['DFW'], minReplicas: 1 },
    { name: 'eu', cityCodes: ['LHR'], minReplicas: 1 },
  ]);
  await waitFor('eu back in LHR', async () => (await names('LHR')).includes(`${wl}-eu-lhr`), {
    timeoutMs: 30_000,
  });
  const lhr = cities.LHR;
  await lhr.stopProcess('kube-apiserver', 'SIGKILL');
  try {
    await waitFor(
      'the LHR cell Unreachable',
      async () =>
        findCondition((await client.get<CellObject>(Cell.ref, cellName.LHR)).status?.conditions, 'Reachable')
          ?.status === 'False',
      { timeoutMs: 20_000 },
    );
    await client.delete(Workload.ref, wl, ns);
    await waitFor(
      'the DFW WorkloadDeployment gone, the workload held by LHR',
      async () => {
        const w = await workload();
        const held = findCondition(w.status?.conditions, 'Released');
        return (
          (await names('DFW')).length === 0 &&
          held?.status === 'False' &&
          held.reason === 'CellUnreachable' &&
          held.message.includes(cellName.LHR)
        );
      },
      { timeoutMs: 30_000 },
    );
    await holdsFor(
      'the workload held',
      async () => (await workload()).metadata?.deletionTimestamp !== undefined,
      2000,
    );
  } finally {
    lhr.startProcess('kube-apiserver');
    await lhr.waitHealthy('kube-apiserver');
  }
  await waitFor(
    "the workload gone, and its WorkloadDeployment from LHR; the cell user's stays",
    async () => {
      const gone = await workload().then(
        () => false,
        () => true,
      );
      return gone && (await names('LHR')).join() === `${wl}-local`;
    },
    { timeoutMs: 60_000 },
  );
});
