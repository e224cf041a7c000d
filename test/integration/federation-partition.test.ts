// test-driver: alone — the cells' Berths and the management plane's act on every Workload, Cell and
// Instance they see, so no other file's objects may be beside them.
//
// Partitions, against real control planes side by side (the run's sandbox is the management plane,
// two more are cells in Dallas and London, each with its own Berth). A cell's apiserver stopped: the
// cell is Reachable=False within the bound, the Workload Available=Unknown CellUnreachable with the
// last counts and since when, nothing deleted anywhere (mirrors kept, marked stale); the apiserver
// back: converged with the same instances (names and uids). The management plane's Berth stopped: a
// cell still heals a deleted Pod and its instances keep running; Berth back: the status is current.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { type CellObject } from '../../src/cells/types.ts';
import { Cell } from '../../src/cells/crd.ts';
import { MIRRORED_CONDITION } from '../../src/federation/decide/mirror.ts';
import { WORKLOAD_NAME_LABEL, type WorkloadObject } from '../../src/federation/types.ts';
import { Workload } from '../../src/federation/crd.ts';
import { findCondition } from '../../src/runtime/api/conditions.ts';
import { Resources, type KubeObject } from '../../src/runtime/api/meta.ts';
import type { KubeClient } from '../../src/runtime/client/client.ts';
import type { InstanceObject } from '../../src/workloads/decide/instances.ts';
import { Instance, WorkloadDeployment } from '../../src/workloads/crd.ts';
import { uniqueName } from '../helpers/cluster.ts';
import { startFederation, type City, type Federation } from '../helpers/federation.ts';
import { holdsFor, waitFor } from '../helpers/wait.ts';

let fed: Federation;
let client: KubeClient;
let ns = '';
const wl = uniqueName('web');
/** The bound of decision 17 with this run's flags: unreachable after 3 s, probed every 1 s, 3 s timeout. */
const UNREACHABLE_BOUND_MS = 3000 + 1000 + 3000;

before(async () => {
  fed = await startFederation({
    cellArgs: ['--controllers=workloads'],
    managementArgs: ['--controllers=cells,federation', '--cell-probe-period=1', '--cell-unreachable-after=3'],
  });
  client = fed.client;
  ns = await fed.namespace('part');
  await client.apply(
    Workload.ref,
    {
      apiVersion: Workload.apiVersion,
      kind: Workload.kind,
      metadata: { name: wl, namespace: ns },
      spec: {
        template: { containers: [{ name: 'app', image: 'registry.example/web:1' }] },
        placements: [
          { name: 'us', cityCodes: ['DFW'], scaleSettings: { minReplicas: 2 } },
          { name: 'eu', cityCodes: ['LHR'], scaleSettings: { minReplicas: 2 } },
        ],
      },
    },
    { fieldManager: 'test', force: true },
  );
});

after(async () => {
  await fed?.down(ns ? [ns] : []);
});

const workload = () => client.get<WorkloadObject>(Workload.ref, wl, ns);
const available = async () => findCondition((await workload()).status?.conditions, 'Available');
const mirrors = async () =>
  (
    await client.list<InstanceObject>(Instance.ref, {
      namespace: ns,
      query: { labelSelector: `${WORKLOAD_NAME_LABEL}=${wl}` },
    })
  ).items;
const list = async (city: City, ref: typeof Instance.ref) =>
  (await fed.cells[city].client.list<KubeObject>(ref, { namespace: ns })).items;
/** name=uid of what a cell holds, sorted: what must survive a partition unchanged. */
const identities = async (city: City) =>
  [...(await list(city, WorkloadDeployment.ref)), ...(await list(city, Instance.ref))]
    .map((o) => `${o.kind}/${o.metadata!.name}=${o.metadata!.uid}`)
    .sort();
const mirrorIds = async () => (await mirrors()).map((m) => `${m.metadata.name}=${m.metadata.uid}`).sort();
const reachable = async (city: City) =>
  findCondition(
    (await client.get<CellObject>(Cell.ref, fed.cells[city].name)).status?.conditions,
    'Reachable',
  );
const settled = async () => {
  const w = await workload();
  const ms = await mirrors();
  return (
    findCondition(w.status?.conditions, 'Available')?.status === 'True' &&
    w.status?.readyReplicas === 4 &&
    ms.length === 4 &&
    ms.every((m) => findCondition(m.status?.conditions, MIRRORED_CONDITION)?.status === 'True') &&
    ms.every((m) => findCondition(m.status?.conditions, 'Ready')?.status === 'True')
  );
};

test("a cell's apiserver stopped: Reachable=False within the bound, CellUnreachable with the last counts, nothing deleted anywhere; back: the same instances", async () => {
  await waitFor('the workload Available with 4 ready instances and 4 current mirrors', settled, {
    timeoutMs: 120_000,
    observe: async () => [(await workload()).status, await mirrorIds()],
  });
  const before = { DFW: await identities('DFW'), LHR: await identities('LHR'), mirrors: await mirrorIds() };
  assert.equal(before.LHR.length, 3, 'one WorkloadDeployment and two instances in LHR');

  const lhr = fed.cells.LHR.sandbox;
  await lhr.stopProcess('kube-apiserver', 'SIGKILL');
  const stopped = Date.now();
  try {
    await waitFor('LHR Reachable=False', async () => (await reachable('LHR'))?.status === 'False', {
      timeoutMs: UNREACHABLE_BOUND_MS + 5000,
    });
    const tookMs = Date.now() - stopped;
    console.log(
      `cell apiserver stopped → Reachable=False in ${tookMs} ms (bound ${UNREACHABLE_BOUND_MS} ms)`,
    );
    assert.ok(tookMs <= UNREACHABLE_BOUND_MS + 1000, `${tookMs} ms, past the bound`);

    const cond = await waitFor('the Workload Available=Unknown CellUnreachable', async () => {
      const c = await available();
      return c?.reason === 'CellUnreachable' && c;
    });
    assert.equal(cond.status, 'Unknown');
    const w = await workload();
    const city = w.status?.placements?.find((p) => p.name === 'eu')?.cities?.find((c) => c.city === 'LHR');
    assert.equal(city?.reason, 'CellUnreachable');
    assert.equal(city?.readyReplicas, 2, 'the last known counts are kept');
    assert.match(city?.message ?? '', /unreachable since \d{4}-/);

    // The mirrors of LHR stay, marked stale since LHR went silent; DFW's are current.
    const since = (await reachable('LHR'))!.lastTransitionTime;
    await waitFor(
      'the mirrors of LHR marked stale',
      async () => {
        const ms = await mirrors();
        const stale = ms.filter(
          (m) => findCondition(m.status?.conditions, MIRRORED_CONDITION)?.status === 'False',
        );
        return (
          stale.length === 2 &&
          stale.every(
            (m) =>
              m.metadata.labels?.['federation.berth.dev/city'] === 'LHR' &&
              findCondition(m.status?.conditions, MIRRORED_CONDITION)?.reason === 'CellUnreachable' &&
              findCondition(m.status?.conditions, MIRRORED_CONDITION)?.lastTransitionTime === since &&
              findCondition(m.status?.conditions, 'Ready')?.status === 'True',
          )
        );
      },
      { observe: () => mirrors() },
    );
    await holdsFor(
      'nothing deleted or re-created in DFW or upstream during the partition',
      async () =>
        JSON.stringify(await identities('DFW')) === JSON.stringify(before.DFW) &&
        JSON.stringify(await mirrorIds()) === JSON.stringify(before.mirrors),
      3000,
    );
  } finally {
    lhr.startProcess('kube-apiserver');
    await lhr.waitHealthy('kube-apiserver');
  }
  await waitFor('converged again: Available, 4 ready, mirrors current', settled, {
    timeoutMs: 60_000,
    observe: async () => [(await workload()).status, await mirrorIds()],
  });
  assert.deepEqual(
    await identities('LHR'),
    before.LHR,
    'the same WorkloadDeployment and instances in LHR, no duplicate',
  );
  assert.deepEqual(await identities('DFW'), before.DFW);
  assert.deepEqual(await mirrorIds(), before.mirrors, 'the same mirrors');
});

test("the management plane's Berth stopped: a cell heals a deleted Pod on its own; Berth back: the status is current", async () => {
  await waitFor('settled', settled, { timeoutMs: 60_000 });
  const dfw = fed.cells.DFW.client;
  const [inst] = (await list('DFW', Instance.ref)) as InstanceObject[];
  const podName = inst!.status!.podName!;
  const oldPod = await dfw.get(Resources.pods, podName, ns);
  await fed.stopManagement();
  try {
    await dfw.delete(Resources.pods, podName, ns);
    await waitFor(
      "the cell's Berth to make the Pod again and its instance Ready",
      async () => {
        const pod = await dfw.get(Resources.pods, podName, ns).catch(() => undefined);
        const i = await dfw.get<InstanceObject>(Instance.ref, inst!.metadata.name!, ns);
        return (
          pod !== undefined &&
          pod.metadata!.uid !== oldPod.metadata!.uid &&
          findCondition(i.status?.conditions, 'Ready')?.status === 'True'
        );
      },
      { timeoutMs: 60_000 },
    );
    for (const city of ['DFW', 'LHR'] as const) {
      const is = (await list(city, Instance.ref)) as InstanceObject[];
      assert.equal(is.length, 2);
      assert.ok(
        is.every((i) => findCondition(i.status?.conditions, 'Ready')?.status === 'True'),
        `${city} instances run`,
      );
    }
    // A change the management plane cannot see while its Berth is away.
    await dfw.apply(
      Instance.ref,
      {
        apiVersion: Instance.apiVersion,
        kind: Instance.kind,
        metadata: { name: inst!.metadata.name, namespace: ns },
        status: {
          conditions: [
            {
              type: 'Probe',
              status: 'True',
              reason: 'Test',
              message: 'while away',
              lastTransitionTime: new Date().toISOString().replace(/\.\d{3}Z$/, 'Z'),
            },
          ],
        },
      },
      { fieldManager: 'test-probe', subresource: 'status', force: true },
    );
  } finally {
    await fed.startManagement();
  }
  const mirrorName = `${fed.cells.DFW.name}-${inst!.metadata.name}`;
  await waitFor(
    'the mirror current again, with the change made while Berth was away',
    async () => {
      const m = await client.get<InstanceObject>(Instance.ref, mirrorName, ns);
      return findCondition(m.status?.conditions, 'Probe')?.message === 'while away';
    },
    { timeoutMs: 30_000 },
  );
  await waitFor('the Workload Available with 4 ready', settled, { timeoutMs: 30_000 });
});
