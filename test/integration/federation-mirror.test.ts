// test-driver: alone — the cells' Berths and the management plane's act on every Workload, Cell,
// Quota and Instance they see, so no other file's objects may be beside them.
//
// Mirrored Instances and quota across cells, against real control planes side by side: the run's
// sandbox is the management plane (cells, federation and quota), two more are cells in Dallas and
// London whose Berths run the workloads controllers with `--quota-source=management`. Every cell
// Instance of a Workload gets one read-only mirror upstream (its status within the bound, p50/p99
// printed), pruned when its instance goes; a Quota of 3 upstream holds across both cells, and a
// cell's new instance waits PendingEvaluation while the management plane's Berth is away; a cell down
// when that Berth starts holds the other cell's grants only for a bounded grace.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Cell } from '../../src/cells/crd.ts';
import { MIRRORED_CONDITION } from '../../src/federation/decide/mirror.ts';
import { NAMESPACE } from '../../src/policy/namespace.ts';
import {
  CITY_LABEL,
  PLACEMENT_LABEL,
  WORKLOAD_NAME_LABEL,
  type WorkloadObject,
} from '../../src/federation/types.ts';
import { Workload } from '../../src/federation/crd.ts';
import { findCondition, type Condition } from '../../src/runtime/api/conditions.ts';
import { Informer } from '../../src/runtime/cache/informer.ts';
import type { KubeClient } from '../../src/runtime/client/client.ts';
import type { InstanceObject } from '../../src/workloads/decide/instances.ts';
import { UNREAD_GRACE_MS } from '../../src/workloads/controllers/quota.ts';
import { type QuotaObject } from '../../src/workloads/decide/quota.ts';
import {
  MIRROR_CELL_LABEL,
  MIRROR_LABEL,
  SOURCE_ANNOTATION,
  SOURCE_UID_ANNOTATION,
} from '../../src/workloads/types.ts';
import { Instance, Quota, WorkloadDeployment } from '../../src/workloads/crd.ts';
import { untilWarning, uniqueName } from '../helpers/cluster.ts';
import { CITIES, startFederation, type City, type Federation } from '../helpers/federation.ts';
import { holdsFor, unchangedFor, waitFor } from '../helpers/wait.ts';

let fed: Federation;
let client: KubeClient;
const namespaces: string[] = [];

before(async () => {
  fed = await startFederation({
    cellArgs: ['--controllers=workloads', '--quota-source=management'],
    managementArgs: [
      '--controllers=cells,federation,quota',
      '--cell-probe-period=1',
      '--cell-unreachable-after=3',
    ],
  });
  client = fed.client;
});

after(async () => {
  await fed?.down(namespaces);
});

const template = { containers: [{ name: 'app', image: 'registry.example/web:1' }] };

async function applyWorkload(ns: string, name: string, placements: [string, City, number][]) {
  await client.apply(
    Workload.ref,
    {
      apiVersion: Workload.apiVersion,
      kind: Workload.kind,
      metadata: { name, namespace: ns },
      spec: {
        template,
        placements: placements.map(([p, city, n]) => ({
          name: p,
          cityCodes: [city],
          scaleSettings: { minReplicas: n },
        })),
      },
    },
    { fieldManager: 'test', force: true },
  );
}

/** The mirrors of a workload upstream, as `kubectl get inst -l federation.berth.dev/workload=NAME` lists them. */
const mirrorsOf = async (ns: string, workload: string) =>
  (
    await client.list<InstanceObject>(Instance.ref, {
      namespace: ns,
      query: { labelSelector: `${WORKLOAD_NAME_LABEL}=${workload}` },
    })
  ).items;
const cellInstances = async (city: City, ns: string) =>
  (await fed.cells[city].client.list<InstanceObject>(Instance.ref, { namespace: ns })).items;
const ready = (i: InstanceObject) => findCondition(i.status?.conditions, 'Ready')?.status === 'True';
const granted = (i: InstanceObject) => findCondition(i.status?.conditions, 'QuotaGranted');
const percentile = (xs: number[], p: number) =>
  [...xs].sort((a, b) => a - b)[Math.ceil((p / 100) * xs.length) - 1]!;

test("every cell instance of a Workload has one read-only mirror upstream: labelled, owned by the Workload, the cell's status, within the bound", async () => {
  const ns = await fed.namespace('mirror');
  namespaces.push(ns);
  const wl = uniqueName('web');
  await applyWorkload(ns, wl, [
    ['us', 'DFW', 2],
    ['eu', 'LHR', 1],
  ]);
  const w = await waitFor(
    'the workload Available with 3 ready instances',
    async () => {
      const w = await client.get<WorkloadObject>(Workload.ref, wl, ns);
      return (
        findCondition(w.status?.conditions, 'Available')?.status === 'True' &&
        w.status?.readyReplicas === 3 &&
        w
      );
    },
    { timeoutMs: 120_000 },
  );
  const mirrors = await waitFor(
    'three Ready mirrors upstream',
    async () => {
      const ms = await mirrorsOf(ns, wl);
      return ms.length === 3 && ms.every(ready) && ms;
    },
    { timeoutMs: 10_000, observe: () => mirrorsOf(ns, wl) },
  );
  for (const city of CITIES) {
    const cell = fed.cells[city];
    for (const inst of await cellInstances(city, ns)) {
      const m = mirrors.find((x) => x.metadata.name === `${cell.name}-${inst.metadata.name}`);
      assert.ok(m, `a mirror of ${city}'s ${inst.metadata.name}`);
      assert.equal(m.metadata.labels?.[MIRROR_LABEL], 'true');
      assert.equal(m.metadata.labels?.[MIRROR_CELL_LABEL], cell.name);
      assert.equal(m.metadata.labels?.[CITY_LABEL], city);
      assert.equal(m.metadata.labels?.[PLACEMENT_LABEL], city === 'DFW' ? 'us' : 'eu');
      assert.equal(m.metadata.annotations?.[SOURCE_UID_ANNOTATION], inst.metadata.uid);
      assert.deepEqual(
        m.metadata.ownerReferences?.map((o) => [o.kind, o.name, o.uid]),
        [['Workload', wl, w.metadata.uid]],
      );
      assert.deepEqual(m.spec, inst.spec);
      assert.equal(m.status?.podName, inst.status?.podName);
      assert.equal(m.status?.observedTemplateHash, inst.status?.observedTemplateHash);
      for (const t of ['Ready', 'Available', 'Programmed', 'QuotaGranted'])
        assert.equal(
          findCondition(m.status?.conditions, t)?.reason,
          findCondition(inst.status?.conditions, t)?.reason,
          t,
        );
      assert.equal(findCondition(m.status?.conditions, MIRRORED_CONDITION)?.status, 'True');
    }
  }

  // Settled: nothing is rewritten while nothing changes.
  const rvs = (ms: InstanceObject[]) =>
    ms
      .map((m) => m.metadata.resourceVersion)
      .sort()
      .join();
  await unchangedFor(
    'the mirrors, not rewritten while nothing changes',
    async () => rvs(await mirrorsOf(ns, wl)),
    3000,
  );

  // A cell instance's status change → its mirror, timed through a watch on each side.
  const dfw = fed.cells.DFW;
  const [source] = (await cellInstances('DFW', ns)).sort((a, b) => a.spec.ordinal - b.spec.ordinal);
  const mirrorName = `${dfw.name}-${source!.metadata.name}`;
  const seen = new Map<string, number>();
  const watch = new Informer<InstanceObject>({
    client,
    ref: Instance.ref,
    namespace: ns,
    labelSelector: MIRROR_LABEL,
  });
  const note = (m: InstanceObject) => {
    const probe = findCondition(m.status?.conditions, 'Probe')?.message;
    if (m.metadata.name === mirrorName && probe && !seen.has(probe)) seen.set(probe, performance.now());
  };
  watch.addEventHandler({ onAdd: note, onUpdate: (_, b) => note(b) });
  watch.start();
  await watch.waitForSync();
  const latencies: number[] = [];
  try {
    for (let n = 0; n < 20; n++) {
      const message = `probe ${n}`;
      const probe: Condition = {
        type: 'Probe',
        status: 'True',
        reason: 'Test',
        message,
        lastTransitionTime: new Date().toISOString().replace(/\.\d{3}Z$/, 'Z'),
      };
      // A condition of the test's own (the conditions are a list-map): Berth's own stay untouched.
      await dfw.client.apply(
        Instance.ref,
        {
          apiVersion: Instance.apiVersion,
          kind: Instance.kind,
          metadata: { name: source!.metadata.name, namespace: ns },
          status: { conditions: [probe] },
        },
        { fieldManager: 'test-probe', subresource: 'status', force: true },
      );
      const sent = performance.now();
      await waitFor(`the mirror to show ${message}`, () => seen.has(message), {
        timeoutMs: 5000,
        intervalMs: 5,
      });
      latencies.push(Math.max(0, seen.get(message)! - sent));
    }
  } finally {
    await watch.stop();
  }
  const p50 = percentile(latencies, 50);
  const p99 = percentile(latencies, 99);
  console.log(
    `cell instance status → mirror: p50 ${p50.toFixed(1)} ms, p99 ${p99.toFixed(1)} ms (${latencies.length} changes)`,
  );
  assert.ok(p99 <= 1000, `p99 ${p99} ms, over the 1 s bound`);

  // Scaled down: the mirror of the instance that went goes, the others stay.
  const before = await mirrorsOf(ns, wl);
  await applyWorkload(ns, wl, [
    ['us', 'DFW', 1],
    ['eu', 'LHR', 1],
  ]);
  const gone = `${dfw.name}-${wl}-us-dfw-1`;
  await waitFor(
    'the mirror of the instance scaled away deleted',
    async () => !(await mirrorsOf(ns, wl)).some((m) => m.metadata.name === gone),
    { timeoutMs: 60_000 },
  );
  const after = await mirrorsOf(ns, wl);
  assert.deepEqual(
    after.map((m) => m.metadata.uid).sort(),
    before
      .filter((m) => m.metadata.name !== gone)
      .map((m) => m.metadata.uid)
      .sort(),
    'the other mirrors are the same objects',
  );

  // The Workload deleted: its mirrors are collected with it (owner reference, same cluster).
  await client.delete(Workload.ref, wl, ns);
  await waitFor('the mirrors gone with the Workload', async () => (await mirrorsOf(ns, wl)).length === 0, {
    timeoutMs: 90_000,
    observe: () => mirrorsOf(ns, wl),
  });
});

test('a mirror is one create while its instances come up, and its status is not written per status of its instance (berth_api_writes_total)', async () => {
  const ns = await fed.namespace('mirror-writes');
  namespaces.push(ns);
  const wl = uniqueName('web');
  const management = fed.management()!;
  const host = fed.sandbox.client().server.host;
  const writes = (resource: string) =>
    management.metric(
      'berth_api_writes_total',
      (l) => l.includes(`resource="${resource}"`) && l.includes(`host="${host}"`),
    );
  const [applies, statuses] = [await writes('instances'), await writes('instances/status')];
  // Eight new instances at once: each one's statuses come while its mirror's create is on its way,
  // and a pass before the create's echo must not create it again.
  await applyWorkload(ns, wl, [
    ['us', 'DFW', 4],
    ['eu', 'LHR', 4],
  ]);
  await waitFor(
    'eight Ready mirrors upstream',
    async () => {
      const ms = await mirrorsOf(ns, wl);
      return ms.length === 8 && ms.every(ready);
    },
    { timeoutMs: 120_000, observe: () => mirrorsOf(ns, wl) },
  );
  assert.equal((await writes('instances')) - applies, 8, 'one apply (its create) per mirror');
  // Its status waits for its instance's first (decision 0032): one write, or two where a Pod took
  // longer than the instance's verdict wait to be Ready (a slow machine), never one per status.
  assert.ok((await writes('instances/status')) - statuses <= 16, 'at most two status writes per mirror');
});

test("a mirror's name held by another cell's instance (cell `a` + `b-c`, cell `a-b` + `c`) is neither overwritten nor pruned: the instance waits, with a Warning, until the name is free", async () => {
  const ns = await fed.namespace('mirror-taken');
  namespaces.push(ns);
  const wl = uniqueName('web');
  const dfw = fed.cells.DFW;
  // A cell `<dfw>-<wl>` whose instance `us-dfw-0` has the name the DFW instance `<wl>-us-dfw-0` will.
  const other = `${dfw.name}-${wl}`;
  const taken = `${other}-us-dfw-0`;
  await client.create(Cell.ref, {
    apiVersion: Cell.apiVersion,
    kind: Cell.kind,
    metadata: { name: other },
    spec: { kubeconfigSecretRef: { namespace: NAMESPACE, name: `cell-${other}-kubeconfig` }, locations: [] },
  });
  try {
    await client.create(Instance.ref, {
      apiVersion: Instance.apiVersion,
      kind: Instance.kind,
      metadata: {
        name: taken,
        namespace: ns,
        labels: { [MIRROR_LABEL]: 'true', [MIRROR_CELL_LABEL]: other },
        annotations: { [SOURCE_ANNOTATION]: 'us-dfw-0' },
      },
      spec: { template, templateHash: 'other', ordinal: 0 },
    });
    await applyWorkload(ns, wl, [['us', 'DFW', 1]]);
    await untilWarning(
      client,
      ns,
      {
        reason: 'MirrorNameTaken',
        regarding: wl,
        note: `its mirror's name ${taken} is that of instance us-dfw-0 of cell ${other}`,
      },
      120_000,
    );
    const held = await client.get<InstanceObject>(Instance.ref, taken, ns);
    assert.equal(held.metadata.labels?.[MIRROR_CELL_LABEL], other, 'not overwritten');
    assert.equal(held.metadata.annotations?.[SOURCE_ANNOTATION], 'us-dfw-0');
    assert.equal(held.spec.templateHash, 'other');
  } finally {
    // The other cell leaves: its mirror goes, and the name is the DFW instance's.
    await client.delete(Cell.ref, other);
  }
  await waitFor(
    "the DFW instance's mirror under the freed name",
    async () => {
      const m = await client.get<InstanceObject>(Instance.ref, taken, ns).catch(() => undefined);
      return (
        m?.metadata.labels?.[MIRROR_CELL_LABEL] === dfw.name && m.metadata.labels[WORKLOAD_NAME_LABEL] === wl
      );
    },
    { timeoutMs: 30_000 },
  );
});

test('a Quota of 3 upstream holds across both cells: 3 of 4 granted, the 4th QuotaExceeded, the Workload says so; mirrors are not counted', async () => {
  const ns = await fed.namespace('quota');
  namespaces.push(ns);
  const quota = 'budget';
  await client.create(Quota.ref, {
    apiVersion: Quota.apiVersion,
    kind: Quota.kind,
    metadata: { name: quota, namespace: ns },
    spec: { instances: 3 },
  });
  const wl = uniqueName('q');
  await applyWorkload(ns, wl, [
    ['us', 'DFW', 2],
    ['eu', 'LHR', 2],
  ]);
  const all = async () => [...(await cellInstances('DFW', ns)), ...(await cellInstances('LHR', ns))];
  const verdicts = async () =>
    (await all()).map((i) => `${i.metadata.name}: ${granted(i)?.reason ?? 'none'}`).sort();
  await waitFor(
    'four instances in the two cells, three granted, one QuotaExceeded',
    async () => {
      const is = await all();
      return (
        is.length === 4 &&
        is.filter((i) => granted(i)?.status === 'True').length === 3 &&
        is.filter((i) => granted(i)?.reason === 'QuotaExceeded').length === 1
      );
    },
    { timeoutMs: 120_000, observe: verdicts },
  );
  const w = await waitFor(
    'the Workload Available=False QuotaExceeded',
    async () => {
      const w = await client.get<WorkloadObject>(Workload.ref, wl, ns);
      return findCondition(w.status?.conditions, 'Available')?.reason === 'QuotaExceeded' && w;
    },
    { timeoutMs: 15_000 },
  );
  assert.equal(findCondition(w.status?.conditions, 'Available')?.status, 'False');
  // Every instance has its mirror by now, and the ledger counts the cells' instances only.
  await waitFor('four mirrors upstream', async () => (await mirrorsOf(ns, wl)).length === 4);
  const ledger = (await client.get<QuotaObject>(Quota.ref, quota, ns)).status;
  assert.equal(ledger?.used?.instances, 3);
  assert.deepEqual(
    [...new Set(ledger?.claims?.map((c) => c.cluster))].sort(),
    CITIES.map((c) => `cell-${fed.cells[c].name}`).sort(),
  );
  // Never a fourth grant.
  await holdsFor(
    'three grants, no more',
    async () => (await all()).filter((i) => granted(i)?.status === 'True').length === 3,
    3000,
  );

  // The management plane's Berth away: a new instance in a cell waits PendingEvaluation, never
  // granted there; back, it is decided upstream (the budget is used up: QuotaExceeded).
  const lhr = fed.cells.LHR.client;
  const byHand = `${uniqueName('byhand')}-0`;
  const instance = () => lhr.get<InstanceObject>(Instance.ref, byHand, ns);
  await fed.stopManagement();
  try {
    await lhr.create(WorkloadDeployment.ref, {
      apiVersion: WorkloadDeployment.apiVersion,
      kind: WorkloadDeployment.kind,
      metadata: { name: byHand.slice(0, -2), namespace: ns },
      spec: { template, replicas: 1 },
    });
    await waitFor(
      'the new instance waiting PendingEvaluation',
      async () =>
        findCondition((await instance()).status?.conditions, 'Ready')?.reason === 'PendingEvaluation',
      { timeoutMs: 30_000 },
    );
    await holdsFor(
      'no grant while the management plane is away',
      async () => !granted(await instance()),
      2000,
    );
  } finally {
    await fed.startManagement();
  }
  await waitFor(
    'the new instance decided upstream once it is back: QuotaExceeded',
    async () => granted(await instance())?.reason === 'QuotaExceeded',
    { timeoutMs: 30_000 },
  );
  await client.delete(Workload.ref, wl, ns);
});

test("a cell down when the management plane's Berth starts: grants in the other cell wait only the grace, the Quota names the cell not read; back, it is counted again", async () => {
  const ns = await fed.namespace('unread');
  namespaces.push(ns);
  await client.create(Quota.ref, {
    apiVersion: Quota.apiVersion,
    kind: Quota.kind,
    metadata: { name: 'budget', namespace: ns },
    spec: { instances: 5 },
  });
  const readyMessage = async () =>
    findCondition((await client.get<QuotaObject>(Quota.ref, 'budget', ns)).status?.conditions, 'Ready')
      ?.message ?? '';
  const lhr = fed.cells.LHR.sandbox;
  const unread = new RegExp(`cluster cell-${fed.cells.LHR.name} not read`);
  await fed.stopManagement();
  await lhr.stopProcess('kube-apiserver', 'SIGKILL');
  try {
    await fed.startManagement();
    const started = Date.now();
    const wl = uniqueName('u');
    await applyWorkload(ns, wl, [['us', 'DFW', 2]]);
    await waitFor(
      'both DFW instances granted while LHR is down',
      async () => {
        const is = await cellInstances('DFW', ns);
        return is.length === 2 && is.every((i) => granted(i)?.status === 'True');
      },
      { timeoutMs: UNREAD_GRACE_MS + 30_000, observe: () => cellInstances('DFW', ns) },
    );
    console.log(`DFW's instances granted ${Date.now() - started} ms after Berth started, LHR down`);
    assert.match(await readyMessage(), unread);
  } finally {
    lhr.startProcess('kube-apiserver');
    await lhr.waitHealthy('kube-apiserver');
  }
  await waitFor('the Quota reads every cell again', async () => !unread.test(await readyMessage()), {
    timeoutMs: 60_000,
    observe: readyMessage,
  });
});
