// test-driver: alone — the cells' Berths and the management plane's act on every Workload, Cell and
// WorkloadDeployment they see, so no other file's objects may be beside them.
//
// What the Workload upstream says while its cells work (issue 50): right after a template change,
// before a cell has observed it, the Workload keeps the cell's ready count and Available (its
// instances still serve); an image a cell cannot pull shows upstream with the pull error itself.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { type WorkloadObject } from '../../src/federation/types.ts';
import { Workload } from '../../src/federation/crd.ts';
import { findCondition } from '../../src/runtime/api/conditions.ts';
import { MISSING_IMAGE_HOST } from '../../src/sandbox/stages.ts';
import type { DeploymentObject } from '../../src/federation/decide/placement.ts';
import { WorkloadDeployment } from '../../src/workloads/crd.ts';
import { startBerth } from '../helpers/berth.ts';
import { startFederation, type Federation } from '../helpers/federation.ts';
import { uniqueName } from '../helpers/cluster.ts';
import { holdsFor, waitFor } from '../helpers/wait.ts';

const CELL_ARGS = ['--controllers=workloads'];
let fed: Federation;
let ns = '';

before(async () => {
  fed = await startFederation({
    cellArgs: CELL_ARGS,
    managementArgs: ['--controllers=cells,federation', '--cell-probe-period=1', '--cell-unreachable-after=3'],
  });
  ns = await fed.namespace('rollup');
});

after(async () => {
  await fed?.down(ns ? [ns] : []);
});

const apply = (name: string, image: string, minReplicas: number) =>
  fed.client.apply(
    Workload.ref,
    {
      apiVersion: Workload.apiVersion,
      kind: Workload.kind,
      metadata: { name, namespace: ns },
      spec: {
        template: { containers: [{ name: 'app', image }] },
        placements: [{ name: 'us', cityCodes: ['DFW'], scaleSettings: { minReplicas } }],
      },
    },
    { fieldManager: 'test', force: true },
  );
const workload = (name: string) => fed.client.get<WorkloadObject>(Workload.ref, name, ns);
const cond = (w: WorkloadObject, type: string) => findCondition(w.status?.conditions, type);
const summary = (w: WorkloadObject) => ({
  generation: w.metadata.generation,
  observed: w.status?.observedGeneration,
  ready: w.status?.readyReplicas,
  updated: w.status?.updatedReplicas,
  available: `${cond(w, 'Available')?.status}/${cond(w, 'Available')?.reason}`,
});
/** The Workload's copy in the DFW cell. */
async function copyInDfw(name: string): Promise<DeploymentObject | undefined> {
  const list = await fed.cells.DFW.client.list<DeploymentObject>(WorkloadDeployment.ref, { namespace: ns });
  return list.items.find((d) => d.metadata.name!.startsWith(`${name}-`));
}

test('right after a template change, before the cell has observed it: readyReplicas and Available stay as the cell reports', async () => {
  const name = uniqueName('roll');
  await apply(name, 'registry.example/web:1', 2);
  const rolledOut = async () => {
    const w = await workload(name);
    return (
      w.status?.observedGeneration === w.metadata.generation &&
      w.status?.readyReplicas === 2 &&
      w.status?.updatedReplicas === 2 &&
      cond(w, 'Available')?.status === 'True' &&
      w
    );
  };
  await waitFor('the workload Available with 2 ready', rolledOut, {
    timeoutMs: 90_000,
    observe: async () => summary(await workload(name)),
  });
  // The cell's Berth stopped: its copy takes the new template and nobody there observes it, so the
  // moment right after a template change lasts as long as the test looks.
  const dfw = fed.cells.DFW;
  await dfw.berth.stop();
  try {
    await apply(name, 'registry.example/web:2', 2);
    const applied = await waitFor(
      'the new template applied in the cell and the Workload status of its generation',
      async () => {
        const [w, d] = await Promise.all([workload(name), copyInDfw(name)]);
        return (
          w.status?.observedGeneration === w.metadata.generation &&
          d !== undefined &&
          d.metadata.generation !== d.status?.observedGeneration &&
          w
        );
      },
      { timeoutMs: 30_000, observe: async () => summary(await workload(name)) },
    );
    const check = async () => {
      const w = await workload(name);
      assert.deepEqual(
        [w.status?.readyReplicas, w.status?.updatedReplicas, cond(w, 'Available')?.status],
        [2, 0, 'True'],
        JSON.stringify(summary(w)),
      );
      assert.equal(cond(w, 'Progressing')?.status, 'True');
      return true;
    };
    assert.ok(applied);
    await holdsFor(
      "the cell's counts and Available upstream while it has not observed the change",
      check,
      3000,
      200,
    );
  } finally {
    dfw.berth = await startBerth(dfw.sandbox, CELL_ARGS);
  }
  await waitFor('rolled out on the new template', rolledOut, {
    timeoutMs: 90_000,
    observe: async () => summary(await workload(name)),
  });
});

test("an image the cell cannot pull: upstream says so with the kubelet's pull error", async () => {
  const name = uniqueName('pull');
  const image = `${MISSING_IMAGE_HOST}/web:1`;
  await apply(name, image, 1);
  const w = await waitFor(
    'the workload not Available, ImageUnavailable',
    async () => {
      const w = await workload(name);
      return cond(w, 'Available')?.reason === 'ImageUnavailable' && w;
    },
    { timeoutMs: 60_000, observe: async () => summary(await workload(name)) },
  );
  assert.match(
    cond(w, 'Available')!.message,
    new RegExp(`its image cannot be pulled: failed to pull and unpack image "${MISSING_IMAGE_HOST}/web:1"`),
  );
});
