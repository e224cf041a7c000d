// test-driver: alone — the cells' Berths and the management plane's act on every Workload, Cell,
// Quota and Instance they see, so no other file's objects may be beside them.
//
// `berth plan -f FILE` on a management plane with two cells, then `kubectl apply -f` of the same
// file with Berth running: the instances made in each cell, and which of them the Quota across cells
// grants or leaves waiting, are what the plan said, exactly; a Quota raised grants what the plan said;
// `plan --delete` of the Workload says every instance goes, and they do. A Location relabelled out of
// a selector drains that city; a Cell deleted leaves what runs in it and takes its mirrors here.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { Plan } from '../../src/plan.ts';
import { ensureBinaries } from '../../src/sandbox/build.ts';
import { findCondition } from '../../src/runtime/api/conditions.ts';
import type { InstanceObject } from '../../src/workloads/decide/instances.ts';
import { Instance, Quota } from '../../src/workloads/crd.ts';
import { Workload } from '../../src/federation/crd.ts';
import { type CellObject, type LocationObject } from '../../src/cells/types.ts';
import { Cell, Location } from '../../src/cells/crd.ts';
import { kubectl, uniqueName } from '../helpers/cluster.ts';
import { CITIES, startFederation, type Federation } from '../helpers/federation.ts';
import { manifests, runPlan } from '../helpers/plan.ts';
import { waitFor } from '../helpers/wait.ts';

const CONTROLLERS = '--controllers=cells,federation,quota';
let fed: Federation;
let ns = '';
let kubectlPath: string;
const file = manifests('berth-plan-fed-');

before(async () => {
  kubectlPath = (await ensureBinaries()).kubectl;
  fed = await startFederation({
    cellArgs: ['--controllers=workloads', '--quota-source=management'],
    managementArgs: [CONTROLLERS, '--cell-probe-period=1', '--cell-unreachable-after=3'],
  });
  ns = await fed.namespace('planfed');
});

after(async () => {
  await fed?.down(ns ? [ns] : []);
});

const plan = (...args: string[]) => runPlan(fed.sandbox.kubeconfigPath, CONTROLLERS, ...args);

/** The plan's instances, as `NAME cell=C quota=granted|waits`, sorted; those it deletes as `- NAME`. */
function planned(p: Plan, cellOf: (what: string) => string): string[] {
  return p.effects
    .filter((e) => e.kind === 'Instance')
    .map((e) =>
      e.op === '-'
        ? `- ${e.name.split('/')[1]}`
        : `${e.name.split('/')[1]} cell=${cellOf(e.what)} quota=${/quota granted/.test(e.what) ? 'granted' : /waits for quota/.test(e.what) ? 'waits' : '?'}`,
    )
    .sort();
}

/** A Workload of `placements`, as a user writes it. */
const workloadDoc = (name: string, placements: unknown[]) => ({
  apiVersion: Workload.apiVersion,
  kind: Workload.kind,
  metadata: { name, namespace: ns },
  spec: { template: { containers: [{ name: 'app', image: 'registry.example/web:1' }] }, placements },
});

const cellIn = (what: string) => /in cell (\S+)/.exec(what)?.[1] ?? '?';

/** What the cells run: each instance with its cell and its QuotaGranted verdict, sorted. */
async function running(): Promise<string[]> {
  const out: string[] = [];
  for (const city of CITIES) {
    const cell = fed.cells[city];
    const list = await cell.client.list<InstanceObject>(Instance.ref, { namespace: ns });
    for (const i of list.items) {
      const q = findCondition(i.status?.conditions, 'QuotaGranted');
      const verdict = q?.status === 'True' ? 'granted' : q?.reason === 'QuotaExceeded' ? 'waits' : '?';
      out.push(`${i.metadata.name} cell=${cell.name} quota=${verdict}`);
    }
  }
  return out.sort();
}

test('a Workload under a Quota across cells: the instances per cell and what the Quota grants or blocks are what the plan said; a Quota raised, a new template rolled, and the Workload deleted, likewise', async () => {
  const wl = uniqueName('web');
  const quota = {
    apiVersion: Quota.apiVersion,
    kind: Quota.kind,
    metadata: { name: 'budget', namespace: ns },
    spec: { instances: 3 },
  };
  kubectl(fed.sandbox, kubectlPath, ['apply', '-f', file('quota.yaml', [quota])]);
  const workload = workloadDoc(wl, [
    { name: 'us', cityCodes: ['DFW'], scaleSettings: { minReplicas: 3 } },
    { name: 'eu', cityCodes: ['LHR'], scaleSettings: { minReplicas: 1 } },
  ]);
  const path = file('workload.yaml', [workload]);
  const first = plan('-f', path);
  assert.equal(first.status, 2, 'changes: exit code 2');
  const dfw = fed.cells.DFW.name;
  const lhr = fed.cells.LHR.name;
  const want = planned(first.plan, cellIn);
  // Oldest first, three fit: the third in Dallas waits (and the plan knows which: one cell makes it).
  assert.deepEqual(want, [
    `${wl}-eu-lhr-0 cell=${lhr} quota=granted`,
    `${wl}-us-dfw-0 cell=${dfw} quota=granted`,
    `${wl}-us-dfw-1 cell=${dfw} quota=granted`,
    `${wl}-us-dfw-2 cell=${dfw} quota=waits`,
  ]);
  assert.deepEqual(
    first.plan.effects
      .filter((e) => e.kind === 'WorkloadDeployment')
      .map((e) => `${e.op} ${e.name} ${cellIn(e.what)}`)
      .sort(),
    [`+ ${ns}/${wl}-eu-lhr ${lhr}`, `+ ${ns}/${wl}-us-dfw ${dfw}`],
  );
  assert.ok(
    first.plan.warnings.some(
      (w) => w.includes(`Workload ${ns}/${wl} would exceed its quota`) && w.includes(`${wl}-us-dfw-2`),
    ),
    first.plan.warnings.join('\n'),
  );

  kubectl(fed.sandbox, kubectlPath, ['apply', '-f', path]);
  await waitFor(
    'the cells run what the plan said, granted and waiting as it said',
    async () => JSON.stringify(await running()) === JSON.stringify(want),
    { timeoutMs: 180_000, observe: running },
  );

  // The Quota raised: the waiting instance is granted, as planned.
  const raised = file('raised.yaml', [{ ...quota, spec: { instances: 4 } }]);
  const more = plan('-f', raised);
  assert.equal(more.status, 2);
  assert.deepEqual(
    more.plan.effects.filter((e) => e.kind === 'Instance').map((e) => `${e.op} ${e.name} ${e.what}`),
    [`+ ${ns}/${wl}-us-dfw-2 quota granted (cell ${dfw})`],
  );
  kubectl(fed.sandbox, kubectlPath, ['apply', '-f', raised]);
  const granted = want.map((l) => l.replace('quota=waits', 'quota=granted'));
  await waitFor(
    'every instance granted',
    async () => JSON.stringify(await running()) === JSON.stringify(granted),
    { timeoutMs: 120_000, observe: running },
  );
  await waitFor(
    'applied and mirrored: planning the same Workload again changes nothing (exit code 0)',
    async () => plan('-f', path).status === 0,
    { timeoutMs: 60_000, observe: async () => plan('-f', path).plan },
  );

  // A new template: every instance rolled, in each cell, one at a time, each granted again.
  const v2 = file('v2.yaml', [
    {
      ...workload,
      spec: {
        ...workload.spec,
        template: { containers: [{ name: 'app', image: 'registry.example/web:2' }] },
      },
    },
  ]);
  const roll = plan('-f', v2);
  assert.equal(roll.status, 2);
  const hash = /rolled to template (\S+?);/.exec(
    roll.plan.effects.find((e) => e.op === '~' && e.kind === 'Instance')?.what ?? '',
  )?.[1];
  assert.deepEqual(
    roll.plan.effects
      .filter((e) => e.kind === 'Instance')
      .map((e) => `${e.op} ${e.name.split('/')[1]} ${cellIn(e.what)} ${/quota granted/.test(e.what)}`)
      .sort(),
    granted.map((l) => `~ ${l.split(' ')[0]} ${l.split(' ')[1]!.slice('cell='.length)} true`),
  );
  kubectl(fed.sandbox, kubectlPath, ['apply', '-f', v2]);
  const onTemplate = async () => {
    const out: string[] = [];
    for (const city of CITIES) {
      const list = await fed.cells[city].client.list<InstanceObject>(Instance.ref, { namespace: ns });
      for (const i of list.items)
        if (
          i.spec.templateHash === hash &&
          findCondition(i.status?.conditions, 'QuotaGranted')?.status === 'True'
        )
          out.push(i.metadata.name!);
    }
    return out.sort();
  };
  await waitFor(
    'every instance rolled to the planned template and granted',
    async () =>
      JSON.stringify(await onTemplate()) === JSON.stringify(granted.map((l) => l.split(' ')[0]).sort()),
    { timeoutMs: 180_000, observe: onTemplate },
  );

  // Deleting the Workload: every instance goes, with a warning, and they do.
  const undo = plan('-f', v2, '--delete');
  assert.equal(undo.status, 2);
  assert.deepEqual(
    planned(undo.plan, cellIn),
    granted.map((l) => `- ${l.split(' ')[0]}`),
  );
  assert.ok(
    undo.plan.warnings.some((w) => w.startsWith(`Workload ${ns}/${wl} would lose every instance (4`)),
    undo.plan.warnings.join('\n'),
  );
  kubectl(fed.sandbox, kubectlPath, ['delete', '--wait=false', '-f', v2]);
  await waitFor('no instance left in the cells', async () => (await running()).length === 0, {
    timeoutMs: 120_000,
    observe: running,
  });
});

test("a Location relabelled out of a Workload's selector, then a Cell deleted: the plan says what goes, and what is left in the cell", async () => {
  const tier = `${uniqueName('t')}.example.com/tier`;
  const lhr = fed.cells.LHR;
  const found = (await fed.client.list<LocationObject>(Location.ref)).items.find(
    (l) => l.spec.cityCode === 'LHR',
  )!;
  const location = (value: string) => ({
    apiVersion: Location.apiVersion,
    kind: Location.kind,
    metadata: { name: found.metadata.name, labels: { ...found.metadata.labels, [tier]: value } },
    spec: found.spec,
  });
  kubectl(fed.sandbox, kubectlPath, ['apply', '-f', file('gold.yaml', [location('gold')])]);
  const selected = uniqueName('sel');
  const pinned = uniqueName('pin');
  const workloads = file('workloads.yaml', [
    workloadDoc(selected, [
      {
        name: 'gold',
        locationSelector: { matchLabels: { [tier]: 'gold' } },
        scaleSettings: { minReplicas: 1 },
      },
    ]),
    workloadDoc(pinned, [{ name: 'eu', cityCodes: ['LHR'], scaleSettings: { minReplicas: 1 } }]),
  ]);
  kubectl(fed.sandbox, kubectlPath, ['apply', '-f', workloads]);
  const both = [
    `${pinned}-eu-lhr-0 cell=${lhr.name} quota=granted`,
    `${selected}-gold-lhr-0 cell=${lhr.name} quota=granted`,
  ].sort();
  await waitFor(
    'both workloads run in London',
    async () => JSON.stringify(await running()) === JSON.stringify(both),
    {
      timeoutMs: 120_000,
      observe: running,
    },
  );
  const mirrors = async () =>
    (await fed.client.list<InstanceObject>(Instance.ref, { namespace: ns })).items
      .map((m) => `${ns}/${m.metadata.name}`)
      .sort();
  await waitFor('both mirrored upstream', async () => (await mirrors()).length === 2, { observe: mirrors });

  const silver = file('silver.yaml', [location('silver')]);
  const relabel = plan('-f', silver);
  assert.equal(relabel.status, 2);
  assert.deepEqual(
    relabel.plan.effects.map((e) => `${e.op} ${e.kind} ${e.name}`),
    [`- WorkloadDeployment ${ns}/${selected}-gold-lhr`, `- Instance ${ns}/${selected}-gold-lhr-0`],
  );
  assert.ok(
    relabel.plan.warnings.some((w) =>
      w.startsWith(`Workload ${ns}/${selected} would lose every instance (1`),
    ),
    relabel.plan.warnings.join('\n'),
  );
  kubectl(fed.sandbox, kubectlPath, ['apply', '-f', silver]);
  const left = [`${pinned}-eu-lhr-0 cell=${lhr.name} quota=granted`];
  await waitFor(
    'only the pinned workload runs',
    async () => JSON.stringify(await running()) === JSON.stringify(left),
    {
      timeoutMs: 120_000,
      observe: running,
    },
  );
  await waitFor('one mirror left upstream', async () => (await mirrors()).length === 1, { observe: mirrors });

  // The Cell deleted: Berth no longer reaches it, so what runs there stays; its mirrors here go.
  const cell = await fed.client.get<CellObject>(Cell.ref, lhr.name);
  const cellFile = file('cell.yaml', [
    { apiVersion: Cell.apiVersion, kind: Cell.kind, metadata: { name: lhr.name }, spec: cell.spec },
  ]);
  const undo = plan('-f', cellFile, '--delete');
  assert.equal(undo.status, 2);
  const mirrored = await mirrors();
  assert.deepEqual(
    undo.plan.effects.map((e) => `${e.op} ${e.kind} ${e.name}`),
    mirrored.map((m) => `- Instance ${m}`),
  );
  assert.ok(
    undo.plan.warnings.some((w) =>
      w.startsWith(`Cell ${lhr.name} would be removed with 1 running instance(s)`),
    ),
    undo.plan.warnings.join('\n'),
  );
  assert.ok(
    undo.plan.warnings.some((w) =>
      w.startsWith(`would run nowhere: Workload ${ns}/${pinned} placement eu city LHR: NoMatchingLocation`),
    ),
    undo.plan.warnings.join('\n'),
  );
  kubectl(fed.sandbox, kubectlPath, ['delete', '-f', cellFile]);
  await waitFor('its mirrors gone upstream', async () => (await mirrors()).length === 0, {
    timeoutMs: 60_000,
    observe: mirrors,
  });
  assert.deepEqual(await running(), left, 'what ran in the cell is left there');
});
