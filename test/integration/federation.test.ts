// test-driver: alone — the cells' Berths and the management plane's act on every Workload, Cell and
// WorkloadDeployment they see, so no other file's objects may be beside them.
//
// Federation against real control planes side by side: the run's sandbox is the management plane,
// three more (with kwok nodes) are cells in Dallas, London and Tokyo, joined with `berth cells join`,
// each with its own Berth running the workloads controllers (instances really run there as Pods),
// and the management plane's Berth runs cells and federation. A Workload with placements in DFW and
// LHR gets WorkloadDeployments in exactly those cells, Ready instances and totals upstream; a
// cell-side change shows upstream within a bound; a progressive rollout updates the three cells one
// at a time, each after the one before is Available, and a template that cannot run stops it after
// the first; a city removed from a placement is drained only once the new city is Available; a
// Location relabelled moves a selector placement; with failover opted in, a city whose cell stays
// unreachable moves to another cell serving it; a placement moved from LHR to DFW removes exactly
// that WorkloadDeployment; a city with no cell is NoMatchingLocation with a Warning; deleting the
// Workload removes its WorkloadDeployments from every cell, an unreachable cell holding it until it
// answers; a copy of a Workload gone from the management plane is deleted where this plane wrote it
// (through whichever Cell), never where another plane did, nor written over where another plane's
// copy holds the name.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { secretName } from '../../src/cells/cli.ts';
import { type CellObject } from '../../src/cells/types.ts';
import { Cell } from '../../src/cells/crd.ts';
import { installCrds } from '../../src/cli/install.ts';
import {
  CELL_UID_LABEL,
  CITY_LABEL,
  PLACEMENT_LABEL,
  PLANE_LABEL,
  type Rollout,
  WORKLOAD_NAME_LABEL,
  WORKLOAD_NAMESPACE_LABEL,
  WORKLOAD_UID_LABEL,
  type WorkloadObject,
} from '../../src/federation/types.ts';
import { Workload } from '../../src/federation/crd.ts';
import { NAMESPACE } from '../../src/policy/namespace.ts';
import { findCondition, type Condition } from '../../src/runtime/api/conditions.ts';
import { Resources, type KubeObject } from '../../src/runtime/api/meta.ts';
import type { KubeClient } from '../../src/runtime/client/client.ts';
import { type LocationObject } from '../../src/cells/types.ts';
import { Location } from '../../src/cells/crd.ts';
import { Sandbox } from '../../src/sandbox/sandbox.ts';
import { MISSING_IMAGE_HOST } from '../../src/sandbox/stages.ts';
import { templateHash } from '../../src/workloads/decide/revisions.ts';
import type { InstanceObject } from '../../src/workloads/decide/instances.ts';
import { DEPLOYMENT_LABEL } from '../../src/workloads/types.ts';
import { Instance, WorkloadDeployment } from '../../src/workloads/crd.ts';
import type { DeploymentObject } from '../../src/federation/decide/placement.ts';
import { runBerthCli, startBerth, type BerthProcess } from '../helpers/berth.ts';
import {
  addNodes,
  createNamespace,
  refuseByPolicy,
  testSandbox,
  uniqueName,
  untilWarning,
} from '../helpers/cluster.ts';
import { joinAsCell } from '../helpers/federation.ts';
import { holdsFor, sleep, unchangedFor, waitFor } from '../helpers/wait.ts';

const sandbox = testSandbox();
const client = sandbox.client();
const cities = {
  DFW: new Sandbox(process.env['BERTH_TEST_FED_DFW'] ?? 'fed-dfw'),
  LHR: new Sandbox(process.env['BERTH_TEST_FED_LHR'] ?? 'fed-lhr'),
  NRT: new Sandbox(process.env['BERTH_TEST_FED_NRT'] ?? 'fed-nrt'),
};
type City = keyof typeof cities;
const CITIES = ['DFW', 'LHR', 'NRT'] as const;
const cellName = { DFW: uniqueName('dfw'), LHR: uniqueName('lhr'), NRT: uniqueName('nrt') };
const cellClients = {} as Record<City, KubeClient>;
const berths: BerthProcess[] = [];
const wl = uniqueName('web');
let ns = '';

before(async () => {
  await installCrds(client);
  ns = await createNamespace(client, 'fed');
  for (const city of CITIES) {
    const sb = cities[city];
    await sb.up({ fresh: true });
    const c = sb.client();
    cellClients[city] = c;
    await installCrds(c);
    // Made by the cell's admin, so that it outlives the file's Workloads (Berth deletes only a
    // namespace it made, once nothing maps there): later tests write into it as another would.
    await c.create(Resources.namespaces, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns } });
    await addNodes(c, { prefix: `${city.toLowerCase()}-node`, count: 2 });
    berths.push(await startBerth(sb, ['--controllers=workloads']));
    await joinAsCell(sb, cellName[city], city, sandbox, [ns]);
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
  for (const city of CITIES) {
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

const image = (i: string) => ({ containers: [{ name: 'app', image: i }] });
const template = image('registry.example/web:1');

async function applyWorkload(
  placements: {
    name: string;
    cityCodes?: string[];
    locationSelector?: { matchLabels: Record<string, string> };
    minReplicas: number;
    failover?: { afterSeconds: number };
  }[],
  o: { template?: typeof template; rollout?: Partial<Rollout> } = {},
) {
  await client.apply(
    Workload.ref,
    {
      apiVersion: Workload.apiVersion,
      kind: Workload.kind,
      metadata: { name: wl, namespace: ns },
      spec: {
        template: o.template ?? template,
        ...(o.rollout ? { rollout: o.rollout } : {}),
        placements: placements.map((p) => ({
          name: p.name,
          ...(p.cityCodes ? { cityCodes: p.cityCodes } : {}),
          ...(p.locationSelector ? { locationSelector: p.locationSelector } : {}),
          scaleSettings: { minReplicas: p.minReplicas },
          ...(p.failover ? { failover: p.failover } : {}),
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
  assert.equal(dfw!.metadata.labels?.[PLANE_LABEL], await thisPlane(), "this plane's identity");
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
  // Where it runs, as `berth explain workload` tells a user of the management plane.
  const explained = runBerthCli([
    'explain',
    'workload',
    `${ns}/${wl}`,
    `--kubeconfig=${sandbox.kubeconfigPath}`,
  ]);
  assert.equal(explained.status, 0, explained.stderr);
  for (const [city, placement] of [
    ['DFW', 'us'],
    ['LHR', 'eu'],
  ] as const) {
    assert.match(explained.stdout, new RegExp(`${city}: cell ${cellName[city]}, 2 of 2 Ready, 2 up to date`));
    assert.match(
      explained.stdout,
      new RegExp(`berth explain wd ${ns}/${wl}-${placement}-${city.toLowerCase()} `),
    );
  }
  await waitFor(
    'Progressing RolledOut',
    async () => findCondition((await workload()).status?.conditions, 'Progressing')?.reason === 'RolledOut',
  );
  // Settled: the status is written only when it changes, and the cells' objects are not rewritten.
  await unchangedFor(
    'the Workload and its copy in DFW, not rewritten while nothing changes',
    async () => {
      const [w, dfw] = await Promise.all([workload(), deploymentsIn('DFW')]);
      return [w.metadata.resourceVersion, dfw.map((d) => d.metadata.resourceVersion)];
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
    { name: 'ap', cityCodes: ['SIN'], minReplicas: 1 },
  ]);
  await waitFor('NoMatchingLocation upstream', async () => {
    const a = findCondition((await workload()).status?.conditions, 'Available');
    return a?.status === 'False' && a.reason === 'NoMatchingLocation';
  });
  const w = await workload();
  assert.match(
    findCondition(w.status?.conditions, 'Available')!.message,
    /^SIN: no Location has city code SIN/,
  );
  assert.equal(cityStatus(w, 'ap', 'SIN')?.reason, 'NoMatchingLocation');
  assert.equal(w.status?.readyReplicas, 3);
  await waitFor('a Warning event', async () =>
    (await workloadEvents()).some((e) => e.type === 'Warning' && e.reason === 'NoMatchingLocation'),
  );
  assert.deepEqual(await names('DFW'), [`${wl}-eu-dfw`, `${wl}-us-dfw`]);
});

const three = [
  { name: 'us', cityCodes: ['DFW'], minReplicas: 1 },
  { name: 'eu', cityCodes: ['LHR'], minReplicas: 1 },
  { name: 'ap', cityCodes: ['NRT'], minReplicas: 1 },
];
const placementIn: Record<City, string> = { DFW: 'us', LHR: 'eu', NRT: 'ap' };
const v2 = image('registry.example/web:2');
const wdIn = (city: City, name: string) =>
  cellClients[city].get<DeploymentObject>(WorkloadDeployment.ref, name, ns).catch(() => undefined);
/** Whether a cell's WorkloadDeployment observed its spec and has all its instances Available on it. */
const servesAll = (d: DeploymentObject | undefined) =>
  !!d &&
  d.status?.observedGeneration === d.metadata.generation &&
  findCondition(d.status?.conditions, 'Available')?.status === 'True' &&
  d.status?.updatedReplicas === d.spec.replicas;
/** Each city's WorkloadDeployment of `three`: the template hash applied, and whether it serves it. */
async function cellStates(): Promise<Record<City, { hash?: string; serves: boolean }>> {
  const states = await Promise.all(
    CITIES.map(async (c) => {
      const d = await wdIn(c, `${wl}-${placementIn[c]}-${c.toLowerCase()}`);
      return [c, { hash: d?.spec.workloadRef?.templateHash, serves: servesAll(d) }] as const;
    }),
  );
  return Object.fromEntries(states) as Record<City, { hash?: string; serves: boolean }>;
}
/**
 * What a rollout wait shows when it times out: the Workload's conditions and rollout, in each cell
 * its WorkloadDeployments' spec hash, conditions and instances' Ready conditions, and the last
 * lines the management plane's Berth printed.
 */
async function federationState(): Promise<unknown> {
  const text = (cs: Condition[] | undefined) =>
    cs?.map((c) => `${c.type}=${c.status} ${c.reason}: ${c.message}`);
  const w = await workload();
  const cells = await Promise.all(
    CITIES.map(async (c) => {
      const instances = (await cellClients[c].list<InstanceObject>(Instance.ref, { namespace: ns })).items;
      return [
        c,
        (await deploymentsIn(c)).map((d) => ({
          name: d.metadata.name,
          hash: d.spec.workloadRef?.templateHash,
          generation: `${d.status?.observedGeneration}/${d.metadata.generation}`,
          conditions: text(d.status?.conditions),
          instances: instances
            .filter((i) => i.metadata.labels?.[DEPLOYMENT_LABEL] === d.metadata.name)
            .map((i) => {
              const ready = findCondition(i.status?.conditions, 'Ready');
              return `${i.metadata.name} Ready=${ready?.status} ${ready?.reason}`;
            }),
        })),
      ] as const;
    }),
  );
  return {
    conditions: text(w.status?.conditions),
    readyReplicas: w.status?.readyReplicas,
    rollout: w.status?.rollout,
    cells: Object.fromEntries(cells),
    // The management plane's Berth is captured: its warnings (a write that keeps failing) say why.
    berth: berths.at(-1)?.output().trim().split('\n').slice(-20),
  };
}
const rolledOut = async (ready: number) => {
  const w = await workload();
  return (
    findCondition(w.status?.conditions, 'Available')?.status === 'True' &&
    findCondition(w.status?.conditions, 'Progressing')?.reason === 'RolledOut' &&
    w.status?.readyReplicas === ready
  );
};

test('a progressive rollout across three cells: one cell at a time, each after the one before is Available and soaked', async () => {
  await applyWorkload(three);
  await waitFor('Available in three cities, rolled out', () => rolledOut(3), {
    timeoutMs: 90_000,
    observe: federationState,
  });
  const h2 = templateHash(v2);
  await applyWorkload(three, {
    template: v2,
    rollout: { type: 'Progressive', maxConcurrency: 1, minSuccessTime: 2 },
  });
  const startedAt: Partial<Record<City, number>> = {};
  const servesAt: Partial<Record<City, number>> = {};
  const violations: string[] = [];
  let soaking = '';
  await waitFor(
    'every cell on the new template, the workload RolledOut',
    async () => {
      const [s, w] = await Promise.all([cellStates(), workload()]);
      const now = Date.now();
      // Observed, not inferred: never two cells on the new template that do not serve it yet.
      const rolling = CITIES.filter((c) => s[c].hash === h2 && !s[c].serves);
      if (rolling.length > 1) violations.push(`${rolling.join(' and ')} rolling at once`);
      for (const c of CITIES) {
        if (s[c].hash === h2) startedAt[c] ??= now;
        if (s[c].hash === h2 && s[c].serves) servesAt[c] ??= now;
      }
      const p = findCondition(w.status?.conditions, 'Progressing');
      if (p?.reason === 'RollingOut' && p.message.includes('to soak until')) soaking = p.message;
      return CITIES.every((c) => servesAt[c]) && (await rolledOut(3));
    },
    { timeoutMs: 120_000, intervalMs: 50 },
  );
  assert.deepEqual(violations, []);
  // In placement order, each after the one before served the new template and soaked 2 s.
  assert.ok(startedAt.DFW! < startedAt.LHR! && startedAt.LHR! < startedAt.NRT!, JSON.stringify(startedAt));
  assert.ok(startedAt.LHR! - servesAt.DFW! >= 1500, `LHR ${startedAt.LHR! - servesAt.DFW!} ms after DFW`);
  assert.ok(startedAt.NRT! - servesAt.LHR! >= 1500, `NRT ${startedAt.NRT! - servesAt.LHR!} ms after LHR`);
  assert.match(
    soaking,
    new RegExp(`^\\d of 3 cells updated to template ${h2}, waiting for \\w+/\\w+ to soak until`),
  );
  const w = await workload();
  assert.deepEqual(
    w.status?.rollout?.cells?.map((c) => [c.name, c.state]),
    [
      ['us/DFW', 'Updated'],
      ['eu/LHR', 'Updated'],
      ['ap/NRT', 'Updated'],
    ],
  );
  assert.equal(w.status?.updatedReplicas, 3);

  // A hand edit of a copy's template in a cell (kubectl edit there) is taken back, not run as rolled out.
  const dfw = `${wl}-${placementIn.DFW}-dfw`;
  await cellClients.DFW.patch(
    WorkloadDeployment.ref,
    dfw,
    [{ op: 'replace', path: '/spec/template/containers/0/image', value: 'registry.example/web:edited' }],
    { namespace: ns, type: 'json', fieldManager: 'kubectl-edit' },
  );
  await waitFor(
    "the cell's copy back on the Workload's template",
    async () => (await wdIn('DFW', dfw))?.spec.template.containers[0]?.image === v2.containers[0]!.image,
    { timeoutMs: 10_000 },
  );
});

test('a template the cells cannot run stops the rollout after the first cell: the others keep theirs, RolloutStopped with a Warning', async () => {
  const bad = image(`${MISSING_IMAGE_HOST}/web:3`);
  const [h2, h3] = [templateHash(v2), templateHash(bad)];
  const rollout = { type: 'Progressive' as const, maxConcurrency: 1 };
  await applyWorkload(three, { template: bad, rollout });
  await waitFor(
    'Progressing=False RolloutStopped naming us/DFW',
    async () => {
      const p = findCondition((await workload()).status?.conditions, 'Progressing');
      return (
        p?.status === 'False' &&
        p.reason === 'RolloutStopped' &&
        p.message.includes('us/DFW ImageUnavailable')
      );
    },
    { timeoutMs: 60_000 },
  );
  const kept = async () => {
    const s = await cellStates();
    return s.DFW.hash === h3 && s.LHR.hash === h2 && s.NRT.hash === h2 && s.LHR.serves && s.NRT.serves;
  };
  assert.ok(await kept(), JSON.stringify(await cellStates()));
  await holdsFor('LHR and NRT keep the old template', kept, 3000, 200);
  const w = await workload();
  assert.match(
    findCondition(w.status?.conditions, 'Progressing')!.message,
    /eu\/LHR, ap\/NRT keep the old template$/,
  );
  assert.deepEqual(
    w.status?.rollout?.cells?.map((c) => [c.name, c.state, c.reason]),
    [['us/DFW', 'Failed', 'ImageUnavailable']],
  );
  await waitFor('a Warning event', async () =>
    (await workloadEvents()).some((e) => e.type === 'Warning' && e.reason === 'RolloutStopped'),
  );
  // Back to the template the other cells run: DFW returns to it, the rollout is done.
  await applyWorkload(three, { template: v2, rollout });
  await waitFor('RolledOut again', () => rolledOut(3), {
    timeoutMs: 90_000,
    observe: federationState,
  });
});

/** An admission policy in a cell refusing every deletion of a WorkloadDeployment; removed by the function returned. */
const refuseDeletions = (
  city: City,
  name: string,
  probe: () => Promise<unknown>,
): Promise<() => Promise<void>> =>
  refuseByPolicy(
    cellClients[city],
    name,
    [{ apiGroups: ['berth.dev'], operations: ['DELETE'], resources: ['workloaddeployments'] }],
    'false',
    'deletions kept back by the test',
    probe,
  );

test('a city removed from a placement is drained only once the new city is Available, Draining meanwhile; a deletion the cell refuses is CellRefused until it goes', async () => {
  // LHR refuses the deletion when its turn comes: an admission policy, in force before anything moves
  // (a dry-run deletion of the copy there is refused).
  const allow = await refuseDeletions('LHR', `${wl}-keep`, () =>
    cellClients.LHR.delete(WorkloadDeployment.ref, `${wl}-eu-lhr`, ns, { dryRun: ['All'] }),
  );
  // eu moves from LHR to NRT while NRT's nodes are cordoned: the new city cannot serve yet.
  const nrt = cellClients.NRT;
  const nodes = (await nrt.list(Resources.nodes)).items.map((n) => n.metadata!.name!);
  const cordon = (on: boolean) =>
    Promise.all(nodes.map((n) => nrt.patch(Resources.nodes, n, { spec: { unschedulable: on } })));
  await cordon(true);
  try {
    await applyWorkload(
      [
        { name: 'us', cityCodes: ['DFW'], minReplicas: 1 },
        { name: 'eu', cityCodes: ['NRT'], minReplicas: 1 },
        { name: 'ap', cityCodes: ['NRT'], minReplicas: 1 },
      ],
      { template: v2 },
    );
    await waitFor('LHR Draining upstream, NRT Unschedulable', async () => {
      const w = await workload();
      return (
        cityStatus(w, 'eu', 'LHR')?.reason === 'Draining' &&
        cityStatus(w, 'eu', 'NRT')?.reason === 'Unschedulable'
      );
    });
    const w = await workload();
    assert.equal(
      cityStatus(w, 'eu', 'LHR')?.message,
      'removed from the placement; deleted once NRT is Available',
    );
    assert.equal(cityStatus(w, 'eu', 'LHR')?.readyReplicas, 1);
    await holdsFor('eu serving in LHR', async () => servesAll(await wdIn('LHR', `${wl}-eu-lhr`)), 2000, 200);
  } finally {
    await cordon(false);
  }
  try {
    // NRT serves: LHR's turn to go, which its cell refuses. The Workload says so, and where.
    await waitFor(
      'eu in LHR CellRefused upstream, with a Warning',
      async () => {
        const w = await workload();
        const available = findCondition(w.status?.conditions, 'Available');
        return (
          cityStatus(w, 'eu', 'LHR')?.reason === 'CellRefused' &&
          available?.reason === 'CellRefused' &&
          /^LHR: removed from the placement; cell .* refused its deletion: .*deletions kept back by the test/.test(
            available.message,
          ) &&
          (await workloadEvents()).some(
            (e) =>
              e.type === 'Warning' &&
              e.reason === 'CellRefused' &&
              !!e.note?.includes('refused its deletion'),
          )
        );
      },
      { timeoutMs: 60_000, observe: federationState },
    );
    assert.notEqual(findCondition((await workload()).status?.conditions, 'Progressing')?.reason, 'RolledOut');
  } finally {
    await allow();
  }
  const violations: string[] = [];
  await waitFor(
    'eu gone from LHR',
    async () => {
      const [lhr, moved] = await Promise.all([names('LHR'), wdIn('NRT', `${wl}-eu-nrt`)]);
      if (lhr.includes(`${wl}-eu-lhr`)) return false;
      if (!servesAll(moved)) violations.push('LHR drained before NRT served');
      return true;
    },
    { timeoutMs: 60_000, intervalMs: 50 },
  );
  assert.deepEqual(violations, []);
  await waitFor(
    'Available, nothing Draining',
    async () => {
      const w = await workload();
      return (await rolledOut(3)) && cityStatus(w, 'eu', 'LHR') === undefined;
    },
    { observe: federationState },
  );
});

test('a Location relabelled moves a selector placement; a selector matching none is NoMatchingLocation', async () => {
  const TIER = 'test.berth.dev/tier';
  const locations = (await client.list<LocationObject>(Location.ref)).items;
  const locationOf = (city: City) => locations.find((l) => l.spec.cityCode === city)!.metadata.name!;
  const label = (city: City, value: string | null) =>
    client.patch(Location.ref, locationOf(city), { metadata: { labels: { [TIER]: value } } });
  const sel = [
    { name: 'us', cityCodes: ['DFW'], minReplicas: 1 },
    { name: 'sel', locationSelector: { matchLabels: { [TIER]: 'gold' } }, minReplicas: 1 },
  ];
  await label('DFW', 'gold');
  try {
    await applyWorkload(sel, { template: v2 });
    await waitFor(
      'sel in DFW, Available',
      async () => (await names('DFW')).includes(`${wl}-sel-dfw`) && (await rolledOut(2)),
      { timeoutMs: 60_000, observe: federationState },
    );
    // LHR selected first, then DFW no longer: DFW drains once LHR serves.
    await label('LHR', 'gold');
    await label('DFW', null);
    await waitFor(
      'sel moved to LHR, gone from DFW',
      async () =>
        (await names('LHR')).includes(`${wl}-sel-lhr`) &&
        !(await names('DFW')).includes(`${wl}-sel-dfw`) &&
        (await rolledOut(2)),
      { timeoutMs: 60_000, observe: federationState },
    );
    const w = await workload();
    assert.equal(cityStatus(w, 'sel', 'LHR')?.cell, cellName.LHR);
    assert.equal(cityStatus(w, 'sel', 'DFW'), undefined);
    assert.equal(await readyInstances('LHR', `${wl}-sel-lhr`), 1);
    await label('LHR', null);
    await waitFor('no city for sel: NoMatchingLocation, its WorkloadDeployment gone', async () => {
      const a = findCondition((await workload()).status?.conditions, 'Available');
      return (
        a?.reason === 'NoMatchingLocation' &&
        a.message === 'placement sel: its locationSelector matches no Location' &&
        !(await names('LHR')).includes(`${wl}-sel-lhr`)
      );
    });
  } finally {
    await label('DFW', null);
    await label('LHR', null);
  }
});

test('failover, opt-in: a city whose cell stays unreachable moves to another cell of the city; the old one goes once it answers', async () => {
  await applyWorkload([
    { name: 'us', cityCodes: ['DFW'], minReplicas: 1 },
    { name: 'eu', cityCodes: ['LHR'], minReplicas: 1, failover: { afterSeconds: 1 } },
  ]);
  await waitFor(
    'eu in LHR, Available',
    async () => (await names('LHR')).includes(`${wl}-eu-lhr`) && (await rolledOut(2)),
    { timeoutMs: 60_000, observe: federationState },
  );
  // The Tokyo cell serves London too, from now on: the city stays where it is (sticky).
  const serve = (locations: string[]) =>
    client.patch(Cell.ref, cellName.NRT, { spec: { locations } }, { fieldManager: 'test' });
  await serve(['NRT', 'LHR']);
  try {
    await holdsFor('eu stays in LHR', async () => !(await names('NRT')).includes(`${wl}-eu-lhr`), 1500, 200);
    const lhr = cities.LHR;
    await lhr.stopProcess('kube-apiserver', 'SIGKILL');
    try {
      await waitFor(
        'eu failed over to the NRT cell, Available upstream',
        async () => {
          const w = await workload();
          return (
            (await names('NRT')).includes(`${wl}-eu-lhr`) &&
            cityStatus(w, 'eu', 'LHR')?.cell === cellName.NRT &&
            (await rolledOut(2))
          );
        },
        { timeoutMs: 30_000, observe: federationState },
      );
      assert.equal(await readyInstances('NRT', `${wl}-eu-lhr`), 1);
    } finally {
      lhr.startProcess('kube-apiserver');
      await lhr.waitHealthy('kube-apiserver');
    }
    await waitFor(
      'the old WorkloadDeployment gone from LHR once it answers',
      async () => !(await names('LHR')).includes(`${wl}-eu-lhr`),
      {
        timeoutMs: 60_000,
      },
    );
    assert.equal(cityStatus(await workload(), 'eu', 'LHR')?.cell, cellName.NRT);
  } finally {
    await serve(['NRT']);
  }
});

test('deleting the Workload: its WorkloadDeployments go from every cell; an unreachable cell holds it, saying so, until it answers', async () => {
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

/** A WorkloadDeployment in a cell as a plane would write it for Workload `workload` (of uid `uid`). */
const copy = (
  name: string,
  o: { workload: string; uid: string; cellUid: string; plane: string },
): DeploymentObject => ({
  apiVersion: WorkloadDeployment.apiVersion,
  kind: WorkloadDeployment.kind,
  metadata: {
    name,
    namespace: ns,
    labels: {
      [WORKLOAD_NAMESPACE_LABEL]: ns,
      [WORKLOAD_NAME_LABEL]: o.workload,
      [WORKLOAD_UID_LABEL]: o.uid,
      [PLACEMENT_LABEL]: 'us',
      [CITY_LABEL]: 'DFW',
      [CELL_UID_LABEL]: o.cellUid,
      [PLANE_LABEL]: o.plane,
    },
  },
  spec: { template, replicas: 0, instanceManagementPolicy: 'OrderedReady', progressDeadlineSeconds: 600 },
});
/** This management plane's identity, as Berth writes it on its copies. */
const thisPlane = async () => (await client.get(Resources.namespaces, 'kube-system')).metadata!.uid!;

test('a copy of a Workload gone from the management plane is deleted where this plane wrote it, through this Cell or an earlier one, not where another plane did', async () => {
  // As a cell not listed when the Workload's finalizer ran would keep it, or a finalizer taken off
  // by hand: a WorkloadDeployment whose Workload no longer exists upstream.
  const dfwUid = (await client.get<CellObject>(Cell.ref, cellName.DFW)).metadata!.uid!;
  const plane = await thisPlane();
  const gone = { workload: `${wl}-gone`, uid: 'a-gone-uid' };
  for (const [name, o] of [
    [`${wl}-gone-ours`, { ...gone, cellUid: dfwUid, plane }],
    // Written through a Cell of DFW since deleted and joined again: its uid is not the Cell's now.
    [`${wl}-gone-earlier-cell`, { ...gone, cellUid: 'an-earlier-cell-uid', plane }],
    [`${wl}-gone-theirs`, { ...gone, cellUid: dfwUid, plane: 'another-plane' }],
  ] as const)
    await cellClients.DFW.apply(WorkloadDeployment.ref, copy(name, o), { fieldManager: 'berth-federation' });
  await waitFor(
    'the copies this plane wrote deleted',
    async () => {
      const there = await names('DFW');
      return !there.includes(`${wl}-gone-ours`) && !there.includes(`${wl}-gone-earlier-cell`);
    },
    { timeoutMs: 30_000, observe: () => names('DFW') },
  );
  // The Workload is gone: the Cell says what was deleted there.
  await waitFor('a LeftoverDeleted event on the DFW Cell', async () =>
    (await client.list<Event>(Resources.events, { namespace: 'default' })).items.find(
      (e) =>
        e.reason === 'LeftoverDeleted' &&
        e.regarding?.name === cellName.DFW &&
        e.note?.includes(`${ns}/${wl}-gone-ours deleted: its Workload ${ns}/${wl}-gone is gone`),
    ),
  );
  await holdsFor(
    "another plane's copy stays",
    async () => (await names('DFW')).includes(`${wl}-gone-theirs`),
    2000,
  );
  await cellClients.DFW.delete(WorkloadDeployment.ref, `${wl}-gone-theirs`, ns);
});

/**
 * A Workload targeting a name `holder` already holds in DFW: NameTaken upstream (its message
 * naming whose: `whose`) with a Warning, the holder left as it is (`unchanged`), and this plane's
 * copy written there once the holder is deleted (within `freedWithinMs`).
 */
async function nameTaken(o: {
  name: string;
  holder: DeploymentObject;
  fieldManager: string;
  whose: string;
  unchanged: (d: DeploymentObject) => boolean;
  freedWithinMs: number;
}): Promise<void> {
  const { name } = o;
  const deployment = o.holder.metadata.name!;
  await cellClients.DFW.apply(WorkloadDeployment.ref, o.holder, {
    fieldManager: o.fieldManager,
    force: true,
  });
  // Seen by the management Berth's watch of the cell before the Workload exists: a copy made in the
  // same instant as its first apply is not known to be there (decision 0018).
  await sleep(1000);
  const taken = () => client.get<WorkloadObject>(Workload.ref, name, ns);
  await client.apply(
    Workload.ref,
    {
      apiVersion: Workload.apiVersion,
      kind: Workload.kind,
      metadata: { name, namespace: ns },
      spec: { template, placements: [{ name: 'us', cityCodes: ['DFW'], scaleSettings: { minReplicas: 1 } }] },
    },
    { fieldManager: 'test', force: true },
  );
  try {
    await waitFor('NameTaken upstream', async () => {
      const a = findCondition((await taken()).status?.conditions, 'Available');
      return a?.reason === 'NameTaken' && a.message.includes(o.whose) && a;
    });
    await untilWarning(client, ns, { reason: 'NameTaken', regarding: name });
    await holdsFor(
      'the holder, not written over',
      async () =>
        o.unchanged(await cellClients.DFW.get<DeploymentObject>(WorkloadDeployment.ref, deployment, ns)),
      2000,
    );
    await cellClients.DFW.delete(WorkloadDeployment.ref, deployment, ns);
    const plane = await thisPlane();
    await waitFor(
      "this plane's copy written in its place",
      async () => {
        const d = await cellClients.DFW.get<DeploymentObject>(WorkloadDeployment.ref, deployment, ns).catch(
          () => undefined,
        );
        return d?.metadata.labels?.[PLANE_LABEL] === plane && d.spec.replicas === 1;
      },
      { timeoutMs: o.freedWithinMs },
    );
  } finally {
    await client.delete(Workload.ref, name, ns).catch(() => {});
  }
  await waitFor(
    'the Workload gone, and its copy from DFW',
    async () =>
      !(await names('DFW')).includes(deployment) &&
      (await taken().then(
        () => false,
        () => true,
      )),
    { timeoutMs: 30_000 },
  );
}

test("a name another plane's copy holds in a cell: NameTaken with a Warning, that copy left as it is, and written once it goes", async () => {
  const name = `${wl}-taken`;
  await nameTaken({
    name,
    holder: copy(`${name}-us-dfw`, {
      workload: name,
      uid: 'their-workload-uid',
      cellUid: 'their-cell-uid',
      plane: 'another-plane',
    }),
    fieldManager: 'berth-federation',
    whose: "another management plane's",
    unchanged: (d) =>
      d.metadata.labels?.[PLANE_LABEL] === 'another-plane' &&
      d.metadata.labels[WORKLOAD_UID_LABEL] === 'their-workload-uid' &&
      d.spec.replicas === 0,
    // Its deletion brings back the Workload it held back (and the one its labels name), well before
    // the 30 s look again.
    freedWithinMs: 10_000,
  });
});

test('a WorkloadDeployment made by hand in a cell at the name a Workload targets, with the very fields Berth would apply: NameTaken, left as it is, written once it goes', async () => {
  const name = `${wl}-hand`;
  // Without federation's labels: a part-1 user's own, which the management Berth's watch does not
  // select. Its fields equal what Berth applies (no workloadRef, which needs the Workload's uid), so
  // an apply would raise no conflict and take it over.
  const mine = copy(`${name}-us-dfw`, { workload: name, uid: '', cellUid: '', plane: '' });
  mine.metadata.labels = { team: 'cell-local' };
  mine.spec.replicas = 1;
  await nameTaken({
    name,
    holder: mine,
    fieldManager: 'someone',
    whose: "not a Workload's copy (it has none of federation's labels)",
    unchanged: (d) =>
      d.metadata.labels?.['team'] === 'cell-local' &&
      !d.metadata.labels[PLANE_LABEL] &&
      d.spec.workloadRef === undefined &&
      !d.metadata.managedFields?.some((f) => (f as { manager?: string }).manager === 'berth-federation'),
    // Its deletion is in the watch of the cell's other WorkloadDeployments: no 30 s look again needed.
    freedWithinMs: 10_000,
  });
});
