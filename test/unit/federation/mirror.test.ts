// The mirror controller against stand-in apiservers (./apiserver.ts): a Cell the cache has not shown
// yet is not a Cell gone. A mirror made just after its Cell can be cached first (the Cells' watch is
// not the mirrors'); taken for gone, its Cell would lose it to a delete or an overwrite, and the
// instance whose name it holds would never get its Warning (a CI failure of federation-mirror.test).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { setupMirrorReconciler } from '../../../src/federation/controllers/mirror.ts';
import {
  WORKLOAD_NAME_LABEL,
  WORKLOAD_NAMESPACE_LABEL,
  WORKLOAD_UID_LABEL,
} from '../../../src/federation/types.ts';
import type { KubeObject } from '../../../src/runtime/api/meta.ts';
import { Cluster } from '../../../src/runtime/cluster/cluster.ts';
import { Manager } from '../../../src/runtime/manager/manager.ts';
import {
  DEPLOYMENT_LABEL,
  MIRROR_CELL_LABEL,
  MIRROR_LABEL,
  SOURCE_ANNOTATION,
} from '../../../src/workloads/types.ts';
import { apiserver, until } from './apiserver.ts';
import { cellObject, reachable, workload } from './fixtures.ts';

const BEFORE = '2026-11-23T03:00:00Z';
const template = { containers: [{ name: 'app', image: 'web:1' }] };

// Cell `dfw-1`'s instance `web-us-dfw-0` and cell `dfw-1-web`'s `us-dfw-0` have one mirror name.
const TAKEN = 'dfw-1-web-us-dfw-0';

/** Cell dfw-1-web's mirror of its instance us-dfw-0, made upstream just after that Cell. */
const othersMirror: KubeObject = {
  apiVersion: 'berth.dev/v1alpha1',
  kind: 'Instance',
  metadata: {
    name: TAKEN,
    namespace: 'shop',
    uid: 'uid-taken',
    resourceVersion: '1',
    labels: { [MIRROR_LABEL]: 'true', [MIRROR_CELL_LABEL]: 'dfw-1-web' },
    annotations: { [SOURCE_ANNOTATION]: 'us-dfw-0' },
  },
  spec: { template, templateHash: 'other', ordinal: 0 },
};
const newCell = cellObject('dfw-1-web', [], undefined);
const dfw = cellObject('dfw-1', ['DFW'], reachable('True', 'Reachable', BEFORE));

/** Cell dfw-1: Workload shop/web's WorkloadDeployment and its instance. */
const cellObjects = (): Record<string, KubeObject[]> => ({
  workloaddeployments: [
    {
      apiVersion: 'berth.dev/v1alpha1',
      kind: 'WorkloadDeployment',
      metadata: {
        name: 'web-us-dfw',
        namespace: 'shop',
        uid: 'uid-wd',
        resourceVersion: '1',
        labels: {
          [WORKLOAD_NAMESPACE_LABEL]: 'shop',
          [WORKLOAD_NAME_LABEL]: 'web',
          [WORKLOAD_UID_LABEL]: 'uid-1',
        },
      },
      spec: {},
    },
  ],
  instances: [
    {
      apiVersion: 'berth.dev/v1alpha1',
      kind: 'Instance',
      metadata: {
        name: 'web-us-dfw-0',
        namespace: 'shop',
        uid: 'uid-instance',
        resourceVersion: '1',
        labels: { [DEPLOYMENT_LABEL]: 'web-us-dfw' },
      },
      spec: { template, templateHash: 'abc', ordinal: 0 },
    },
  ],
});

/** The mirror controller on a manager whose local apiserver is `local`, cell dfw-1 engaged on `cell`. */
async function running(local: ReturnType<typeof apiserver>, cell?: ReturnType<typeof apiserver>) {
  const manager = new Manager({ client: local.client, metricsBindAddress: '0', healthBindAddress: '0' });
  const mirror = setupMirrorReconciler(manager, { workers: 2 });
  manager.cluster().start();
  await manager.cluster().waitForCacheSync();
  await mirror.start();
  if (cell) {
    const c = new Cluster({ name: 'cell-dfw-1', client: cell.client });
    manager.engage(c);
    c.start();
  }
  return {
    async stop() {
      await mirror.stop();
      for (const name of manager.clusterNames)
        if (name !== manager.cluster().name) await manager.disengage(name);
      await manager.cluster().stop();
    },
  };
}

describe('the mirror controller', () => {
  test('a mirror whose Cell the cache has not shown yet is neither pruned nor overwritten: the instance whose name it holds waits, with a Warning', async () => {
    // The apiserver has the Cell; the Cells' list and watch have not shown it yet.
    const local = apiserver(
      { workloads: [workload([['us', ['DFW'], 1]])], cells: [dfw], instances: [othersMirror] },
      Promise.resolve(),
      { cells: [dfw, newCell] },
    );
    const cell = apiserver(cellObjects());
    const r = await running(local, cell);
    try {
      const warnings = () =>
        local.posts.filter((e) => (e as KubeObject & { reason?: string }).reason === 'MirrorNameTaken');
      await until('a Warning MirrorNameTaken', () => warnings().length > 0);
      assert.match(
        (warnings()[0] as KubeObject & { note: string }).note,
        new RegExp(
          `instance web-us-dfw-0 of cell dfw-1 is not mirrored: its mirror's name ${TAKEN} is that of instance us-dfw-0 of cell dfw-1-web`,
        ),
      );
      await sleep(200);
      assert.deepEqual(local.deletes, [], 'not pruned');
      assert.deepEqual(
        local.applies.filter((a) => a.metadata?.name === TAKEN),
        [],
        'not overwritten',
      );
      assert.ok(local.gets.includes('cells/dfw-1-web'), 'the apiserver asked');
    } finally {
      await r.stop();
    }
  });

  test('a mirror whose Cell the apiserver says is gone is deleted', async () => {
    const local = apiserver({ workloads: [], cells: [dfw], instances: [othersMirror] });
    const r = await running(local);
    try {
      await until('the mirror deleted', () => local.deletes.includes(TAKEN));
      assert.ok(local.gets.includes('cells/dfw-1-web'), 'the apiserver asked first');
    } finally {
      await r.stop();
    }
  });
});
