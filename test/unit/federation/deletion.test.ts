// A deleting Workload: which cells hold it back (deletionHold), and the controller releasing it as
// soon as what held it changes (a cell that lists, a Cell that goes), against stand-in apiservers
// (lists answered, watches fed by the test, writes recorded).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { setupFederationReconciler } from '../../../src/federation/controllers/federation.ts';
import { deletionHold } from '../../../src/federation/decide/deletion.ts';
import { type CellView, targets } from '../../../src/federation/decide/placement.ts';
import {
  CELL_UID_LABEL,
  FEDERATION_FINALIZER,
  PLANE_LABEL,
  WORKLOAD_NAME_LABEL,
  WORKLOAD_NAMESPACE_LABEL,
  WORKLOAD_UID_LABEL,
  type WorkloadObject,
  type WorkloadStatus,
} from '../../../src/federation/types.ts';
import { findCondition } from '../../../src/runtime/api/conditions.ts';
import type { KubeObject } from '../../../src/runtime/api/meta.ts';
import { Cluster } from '../../../src/runtime/cluster/cluster.ts';
import { Manager } from '../../../src/runtime/manager/manager.ts';
import { apiserver, until } from './apiserver.ts';
import { ALL, cell, cellObject, reachable, workload } from './fixtures.ts';

const CREATED = '2026-11-23T04:00:00Z';
const BEFORE = '2026-11-23T03:00:00Z';
const AFTER = '2026-11-23T05:00:00Z';

/** A workload being deleted, created at CREATED, with the status it was last given. */
function deleting(cities: string[], status?: WorkloadStatus): WorkloadObject {
  const w = workload([['us', cities, 1]]);
  return {
    ...w,
    metadata: {
      ...w.metadata,
      creationTimestamp: CREATED,
      deletionTimestamp: AFTER,
      finalizers: [FEDERATION_FINALIZER],
      resourceVersion: '1',
    },
    ...(status ? { status } : {}),
  };
}

/** A status whose placement `us` records each city in its cell (none: the city had no cell). */
const recorded = (...cities: [string, string?][]): WorkloadStatus => ({
  placements: [{ name: 'us', cities: cities.map(([city, c]) => ({ city, ...(c ? { cell: c } : {}) })) }],
});

/** A cell the Provider cannot engage (its Secret went): Reachable and Ready False since `since`. */
const broken = (name: string, cities: string[], since: string | undefined): CellView =>
  cell(name, cities, {
    listed: false,
    reachable: false,
    ready: false,
    ...(since ? { unreachableSince: since } : {}),
    notReady: { reason: 'SecretMissing', message: `Secret berth/cell-${name}-kubeconfig not found` },
  });

const none = () => 0;
const held = (...args: Parameters<typeof deletionHold>) => deletionHold(...args)?.cells ?? [];

describe('deletionHold', () => {
  test('a broken cell in cities the workload never had holds nothing, and nor does a listed cell that answers', () => {
    const w = deleting(['DFW']);
    const cells = [
      cell('dfw-1', ['DFW']),
      broken('sin-1', ['SIN'], AFTER),
      broken('nrt-1', ['NRT'], undefined),
    ];
    assert.equal(deletionHold(w, w.status, cells, none), undefined);
    // Copies in a cell that answers are deleted now (the controller waits for them), not held for.
    assert.equal(
      deletionHold(w, w.status, cells, (c) => (c === 'dfw-1' ? 2 : 0)),
      undefined,
    );
  });

  test('an unreachable listed cell holds it while a copy is there: CellUnreachable, since when', () => {
    const w = deleting(['DFW', 'LHR']);
    const lhr = cell('lhr-1', ['LHR'], { reachable: false, ready: false, unreachableSince: AFTER });
    assert.equal(deletionHold(w, w.status, [lhr], none), undefined);
    const hold = deletionHold(w, w.status, [lhr], (c) => (c === 'lhr-1' ? 1 : 0));
    assert.deepEqual(hold, {
      cells: ['lhr-1'],
      reason: 'CellUnreachable',
      message:
        `waiting to delete this workload's WorkloadDeployments in cell lhr-1 (unreachable since ${AFTER}): ` +
        'each is deleted once its cell answers and lists them',
    });
  });

  test('a cell not listed holds it when it serves a city the placements name (by code or selector) or the status names', () => {
    const listing = (name: string, cities: string[]) => cell(name, cities, { listed: false });
    const w = deleting(['DFW']);
    assert.deepEqual(held(w, w.status, [listing('dfw-1', ['DFW', 'SIN']), listing('sin-1', ['SIN'])], none), [
      'dfw-1',
    ]);
    const hold = deletionHold(w, w.status, [listing('dfw-1', ['DFW'])], none)!;
    // It answers probes but has not listed (still listing, or Berth may not list there): not unreachable.
    assert.equal(hold.reason, 'CellNotReady');
    assert.match(hold.message, /cell dfw-1 \(its WorkloadDeployments not listed yet; it may hold some\)/);

    const selecting: WorkloadObject = {
      ...w,
      spec: {
        ...w.spec,
        placements: [
          {
            name: 'edge',
            locationSelector: { matchLabels: { tier: 'edge' } },
            scaleSettings: { minReplicas: 1 },
          },
        ],
      },
    };
    const edge = [{ city: 'NRT', labels: { tier: 'edge' } }];
    assert.deepEqual(held(selecting, undefined, [listing('nrt-1', ['NRT'])], none, edge), ['nrt-1']);
    assert.deepEqual(held(selecting, undefined, [listing('nrt-1', ['NRT'])], none, []), []);

    // LHR, since removed from the placement, is still in its status, in a cell no longer serving it.
    const moved = deleting(['DFW'], recorded(['DFW', 'dfw-1'], ['LHR', 'old']));
    assert.deepEqual(
      held(
        moved,
        moved.status,
        [listing('lhr-1', ['LHR']), listing('old', []), listing('nrt-1', ['NRT'])],
        none,
      ),
      ['lhr-1', 'old'],
    );
  });

  test('a cell that cannot be engaged holds it only if it may have been written for it', () => {
    const w = deleting(['DFW']);
    // Broken before the workload was made: nothing of it was ever written there.
    assert.deepEqual(held(w, w.status, [broken('dfw-1', ['DFW'], BEFORE)], none), []);
    // Broken since it was made, or since when unknown: it may hold its copy of DFW.
    assert.deepEqual(held(w, w.status, [broken('dfw-1', ['DFW'], AFTER)], none), ['dfw-1']);
    assert.deepEqual(held(w, w.status, [broken('dfw-1', ['DFW'], undefined)], none), ['dfw-1']);
    // The status does not say so: a city whose cells have not all listed has no cell in it.
    const [dfw] = targets(w, ALL, [broken('dfw-1', ['DFW'], AFTER)], []);
    assert.equal(dfw!.cell, undefined);
    // Named by the status, it holds whatever its Reachable says; the message says why it does not answer.
    const named = deleting(['LHR'], recorded(['LHR', 'dfw-1']));
    const hold = deletionHold(named, named.status, [broken('dfw-1', ['DFW'], BEFORE)], none)!;
    assert.deepEqual(hold, {
      cells: ['dfw-1'],
      reason: 'CellUnreachable',
      message:
        `waiting to delete this workload's WorkloadDeployments in cell dfw-1 (SecretMissing since ${BEFORE}: ` +
        'Secret berth/cell-dfw-1-kubeconfig not found; it may hold some): each is deleted once its cell answers and lists them',
    });
  });
});

// ---------------------------------------------------------------------------------------------
// The controller

/** The federation controller on a manager whose local apiserver is `local`, its workers running. */
async function running(local: ReturnType<typeof apiserver>) {
  const manager = new Manager({ client: local.client, metricsBindAddress: '0', healthBindAddress: '0' });
  const federation = setupFederationReconciler(manager, { workers: 1 });
  manager.cluster().start();
  await manager.cluster().waitForCacheSync();
  await federation.start();
  const released = () => local.applies.some((b) => b.metadata?.finalizers?.length === 0);
  const releasedCondition = () =>
    findCondition(
      (local.applies.findLast((b) => (b as WorkloadObject).status) as WorkloadObject | undefined)?.status
        ?.conditions,
      'Released',
    );
  return {
    manager,
    released,
    releasedCondition,
    async stop() {
      await federation.stop();
      for (const name of manager.clusterNames)
        if (name !== manager.cluster().name) await manager.disengage(name);
      await manager.cluster().stop();
    },
  };
}

describe('the controller', () => {
  test('a cell whose Secret went, in cities the workload never had, does not hold its deletion', async () => {
    const w = deleting(['DFW'], recorded(['DFW']));
    const local = apiserver({
      workloads: [w],
      cells: [cellObject('sin-1', ['SIN'], reachable('False', 'SecretMissing', AFTER))],
    });
    const r = await running(local);
    try {
      await until('the finalizer off', r.released);
      assert.equal(r.releasedCondition(), undefined);
    } finally {
      await r.stop();
    }
  });

  test('a deleting workload waits for a cell that may hold it, and goes as soon as that cell lists, whatever cities it names now', async () => {
    // Its placement moved from DFW to LHR while dfw-1 was away: its status still has DFW in dfw-1.
    const w = deleting(['LHR'], recorded(['DFW', 'dfw-1']));
    const local = apiserver({
      workloads: [w],
      cells: [
        cellObject('dfw-1', ['DFW'], reachable('True', 'Reachable', BEFORE)),
        cellObject('sin-1', ['SIN'], reachable('False', 'SecretMissing', BEFORE)),
      ],
    });
    const lists = Promise.withResolvers<void>();
    const cellServer = apiserver({ workloaddeployments: [] }, lists.promise);
    const r = await running(local);
    try {
      const dfw = new Cluster({ name: 'cell-dfw-1', client: cellServer.client });
      r.manager.engage(dfw);
      dfw.start();
      await until('the workload held', () => r.releasedCondition()?.status === 'False');
      assert.equal(r.releasedCondition()?.reason, 'CellNotReady');
      // sin-1 serves none of its cities and never had it: not named.
      assert.match(r.releasedCondition()!.message, /in cell dfw-1 \(its WorkloadDeployments not listed yet/);
      assert.doesNotMatch(r.releasedCondition()!.message, /sin-1/);
      assert.equal(r.released(), false);
      lists.resolve();
      await until('the finalizer off once dfw-1 listed (nothing there)', r.released);
    } finally {
      await r.stop();
    }
  });

  test('a Cell deleted releases the deleting workloads it held, whatever cities they name now', async () => {
    const w = deleting(['LHR'], recorded(['DFW', 'dfw-1']));
    const gone = cellObject('dfw-1', ['DFW'], reachable('False', 'SecretMissing', AFTER));
    const local = apiserver({ workloads: [w], cells: [gone] });
    const r = await running(local);
    try {
      await until('the workload held', () => r.releasedCondition()?.status === 'False');
      assert.equal(r.releasedCondition()?.reason, 'CellUnreachable');
      assert.equal(r.released(), false);
      await local.push('cells', {
        type: 'DELETED',
        object: { ...gone, metadata: { ...gone.metadata, resourceVersion: '2' } },
      });
      await until('the finalizer off once the Cell went', r.released);
    } finally {
      await r.stop();
    }
  });

  /** This plane's kube-system Namespace: its identity (PLANE_LABEL). */
  const kubeSystem: KubeObject = {
    apiVersion: 'v1',
    kind: 'Namespace',
    metadata: { name: 'kube-system', uid: 'plane-1' },
  };

  /** A cell's WorkloadDeployment of Workload shop/gone, written by `plane` through the Cell of uid `cellUid`. */
  const leftover = (name: string, cellUid?: string, plane?: string): KubeObject => ({
    apiVersion: 'berth.dev/v1alpha1',
    kind: 'WorkloadDeployment',
    metadata: {
      name,
      namespace: 'shop',
      uid: `uid-${name}`,
      resourceVersion: '1',
      labels: {
        [WORKLOAD_NAMESPACE_LABEL]: 'shop',
        [WORKLOAD_NAME_LABEL]: 'gone',
        [WORKLOAD_UID_LABEL]: 'uid-gone',
        ...(cellUid ? { [CELL_UID_LABEL]: cellUid } : {}),
        ...(plane ? { [PLANE_LABEL]: plane } : {}),
      },
    },
    spec: {},
  });

  /** The controller with cell dfw-1 engaged on `cellServer`, until `fn` is done. */
  async function withCell(
    local: ReturnType<typeof apiserver>,
    cellServer: ReturnType<typeof apiserver>,
    fn: () => Promise<void>,
  ) {
    const r = await running(local);
    try {
      const dfw = new Cluster({ name: 'cell-dfw-1', client: cellServer.client });
      r.manager.engage(dfw);
      dfw.start();
      await fn();
    } finally {
      await r.stop();
    }
  }

  test("a Workload gone upstream: once its cell lists, the copies this plane wrote go, through this Cell or one before it; another plane's and an unlabelled one stay", async () => {
    const local = apiserver({
      workloads: [],
      cells: [cellObject('dfw-1', ['DFW'], reachable('True', 'Reachable', BEFORE))],
      namespaces: [kubeSystem],
    });
    const cellServer = apiserver({
      workloaddeployments: [
        leftover('gone-ours', 'uid-dfw-1', 'plane-1'),
        // Written through a Cell dfw-1 since deleted and joined again.
        leftover('gone-ours-earlier-cell', 'uid-dfw-0', 'plane-1'),
        // Written before the plane's label: told by the Cell's.
        leftover('gone-ours-by-cell', 'uid-dfw-1'),
        leftover('gone-theirs', 'uid-dfw-1', 'plane-2'),
        leftover('gone-theirs-by-cell', 'uid-another-plane'),
        leftover('gone-old'),
      ],
    });
    await withCell(local, cellServer, async () => {
      await until('the leftovers deleted', () => new Set(cellServer.deletes).size >= 3);
      await sleep(200);
      // Each delete is of the cached object (its uid a precondition): a repeat before the watch
      // shows it gone is answered 404 and is harmless.
      assert.deepEqual([...new Set(cellServer.deletes)].sort(), [
        'gone-ours',
        'gone-ours-by-cell',
        'gone-ours-earlier-cell',
      ]);
      assert.deepEqual(
        [...new Set(local.gets)],
        ['namespaces/kube-system', 'workloads/gone'],
        'the plane read once, the apiserver asked before a delete',
      );
    });
  });

  test('a copy whose Workload the apiserver still has (the cache behind, after a leader change) stays', async () => {
    const w = workload([['us', ['DFW'], 1]]);
    const local = apiserver(
      { workloads: [], cells: [cellObject('dfw-1', ['DFW'], reachable('True', 'Reachable', BEFORE))] },
      Promise.resolve(),
      { workloads: [{ ...w, metadata: { ...w.metadata, name: 'gone' } }], namespaces: [kubeSystem] },
    );
    const cellServer = apiserver({ workloaddeployments: [leftover('gone-ours', 'uid-dfw-1')] });
    await withCell(local, cellServer, async () => {
      await until('the apiserver asked', () => local.gets.includes('workloads/gone'));
      await sleep(300);
      assert.deepEqual(cellServer.deletes, []);
    });
  });
});
