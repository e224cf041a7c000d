import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  deploymentManifest,
  heldBy,
  namespaceManifest,
  namespaceToDelete,
  orphaned,
  ownCopy,
  unwanted,
} from '../../../../src/federation/decide/copies.ts';
import { namespaceRefusal, targets, workloadKeyOf } from '../../../../src/federation/decide/placement.ts';
import {
  CELL_UID_LABEL,
  CITY_LABEL,
  PLACEMENT_LABEL,
  WORKLOAD_NAME_LABEL,
  WORKLOAD_NAMESPACE_LABEL,
  WORKLOAD_UID_LABEL,
  PLANE_LABEL,
} from '../../../../src/federation/types.ts';
import { ALL, cell, HASH, NOBODY, placed, workload } from '../fixtures.ts';

test('the manifest: labels naming the upstream owner, the template, replicas, the workload namespace', () => {
  const w = workload([['us', ['DFW'], 2]]);
  const [t] = targets(w, ALL, [cell('a', ['DFW'])], []);
  const m = deploymentManifest(
    w,
    t!,
    { hash: HASH, template: w.spec.template },
    { plane: 'plane-1', cellUid: 'cell-a-uid' },
  );
  assert.equal(m.metadata.name, 'web-us-dfw');
  assert.equal(m.metadata.namespace, 'shop');
  assert.deepEqual(m.metadata.labels, {
    [WORKLOAD_NAMESPACE_LABEL]: 'shop',
    [WORKLOAD_NAME_LABEL]: 'web',
    [WORKLOAD_UID_LABEL]: 'uid-1',
    [PLACEMENT_LABEL]: 'us',
    [CITY_LABEL]: 'DFW',
    [CELL_UID_LABEL]: 'cell-a-uid',
    [PLANE_LABEL]: 'plane-1',
  });
  assert.deepEqual(m.spec.template, w.spec.template);
  assert.equal(m.spec.replicas, 2);
  assert.deepEqual(m.spec.workloadRef, { name: 'web', uid: 'uid-1', templateHash: HASH });
  assert.equal(workloadKeyOf(m), 'shop/web');
  assert.equal(workloadKeyOf({ metadata: { labels: {} } }), undefined);
  // Labels naming a management namespace other than the copy's own in the cell name no Workload.
  const elsewhere = { ...m, metadata: { ...m.metadata, namespace: 'evil' } };
  assert.equal(workloadKeyOf(elsewhere), undefined);
});

test("orphaned: of a gone Workload's copies in a cell, only those this plane wrote, through whichever Cell, not being deleted", () => {
  const w = workload([['us', ['DFW'], 1]]);
  const [t] = targets(w, ALL, [cell('a', ['DFW'])], []);
  const applied = { hash: HASH, template: w.spec.template };
  const me = { plane: 'plane-1', cellUid: 'cell-a-uid' };
  const ours = deploymentManifest(w, t!, applied, me);
  // Written through a Cell of the same name since deleted and joined again.
  const earlierCell = deploymentManifest(w, t!, applied, { plane: 'plane-1', cellUid: 'cell-a-old-uid' });
  const another = deploymentManifest(w, t!, applied, { plane: 'plane-2', cellUid: 'cell-a-uid' });
  // Before the plane's label: told by the Cell's uid.
  const labelledByCell = deploymentManifest(w, t!, applied, { plane: undefined, cellUid: 'cell-a-uid' });
  const otherCell = deploymentManifest(w, t!, applied, { plane: undefined, cellUid: 'other-plane-cell' });
  const older = deploymentManifest(w, t!, applied, NOBODY);
  const going = { ...ours, metadata: { ...ours.metadata, deletionTimestamp: '2026-11-26T00:00:00Z' } };
  assert.deepEqual(orphaned([ours, earlierCell, another, labelledByCell, otherCell, older, going], me), [
    ours,
    earlierCell,
    labelledByCell,
  ]);
  assert.deepEqual(
    orphaned([ours, another, labelledByCell], { plane: undefined, cellUid: 'cell-a-uid' }),
    [labelledByCell],
    'a plane that cannot read its identity: by the Cell only, and not over a plane label',
  );
  assert.deepEqual(
    orphaned([ours, labelledByCell], NOBODY),
    [],
    'no Cell, no plane: nothing is known to be ours',
  );
});

test("ownCopy and heldBy: a live Workload's copies are its uid's or this plane's, of its name; another's name is not written over", () => {
  const w = workload([['us', ['DFW'], 1]]);
  const [t] = targets(w, ALL, [cell('a', ['DFW'])], []);
  const applied = { hash: HASH, template: w.spec.template };
  const me = { plane: 'plane-1', cellUid: 'cell-a-uid' };
  const them = { plane: 'plane-2', cellUid: 'cell-x-uid' };
  const blind = { plane: undefined, cellUid: 'cell-a-uid' };
  const earlier = { ...w, metadata: { ...w.metadata, uid: 'uid-0' } };
  const theirs = deploymentManifest(earlier, t!, applied, them);
  const mineEarlier = deploymentManifest(earlier, t!, applied, me);
  // Workload `web-us` placed `east` and `web` placed `us-east`: one name, web-us-east-dfw.
  const other = workload([['east', ['DFW'], 1]], 'web-us');
  const [o] = targets(other, ALL, [cell('a', ['DFW'])], []);
  const [u] = targets(workload([['us-east', ['DFW'], 1]]), ALL, [cell('a', ['DFW'])], []);
  assert.equal(o!.name, u!.name);
  const anotherWorkloads = deploymentManifest(other, o!, applied, me);

  assert.equal(
    ownCopy(deploymentManifest(w, t!, applied, them), w, me),
    true,
    'its own uid, whoever wrote it',
  );
  assert.equal(ownCopy(mineEarlier, w, me), true, 'an earlier Workload of its name, ours');
  assert.equal(
    ownCopy(deploymentManifest(earlier, t!, applied, NOBODY), w, me),
    false,
    'unlabelled, another uid',
  );
  assert.equal(ownCopy(theirs, w, me), false);
  assert.equal(ownCopy(anotherWorkloads, w, me), false, "this plane's, of another Workload's name");

  assert.match(
    heldBy(theirs, w, me)!,
    /^another management plane's \(federation.berth.dev\/plane=plane-2\)$/,
  );
  assert.equal(heldBy(mineEarlier, w, me), undefined, 'its own plane');
  assert.equal(
    heldBy(deploymentManifest(earlier, t!, applied, NOBODY), w, me),
    undefined,
    'unlabelled: adopted',
  );
  assert.equal(heldBy(anotherWorkloads, w, me), `Workload shop/web-us's`);
  // Made by hand in the cell with the very spec Berth applies, but none of federation's labels.
  const byHand = deploymentManifest(w, t!, applied, me);
  byHand.metadata.labels = { team: 'cell-local' };
  assert.equal(heldBy(byHand, w, me), "not a Workload's copy (it has none of federation's labels)");
  // A plane that cannot read its identity: a plane label not on this very Workload's copy is another's.
  assert.match(heldBy(theirs, w, blind)!, /^perhaps another management plane's/);
  assert.equal(heldBy(deploymentManifest(w, t!, applied, them), w, blind), undefined);
});

test('unwanted: what no target wants, in listed cells only', () => {
  const w = workload([['us', ['DFW'], 1]]);
  const t = { name: 'web-us-dfw', city: 'DFW', placement: 'us', replicas: 1 };
  const old = { name: 'web-eu-lhr', city: 'LHR', placement: 'eu', replicas: 1 };
  const have = [placed('a', t), placed('b', old), placed('c', old)];
  const wanted = targets(w, ALL, [cell('a', ['DFW']), cell('b', ['LHR']), cell('c', ['LHR'])], have);
  assert.deepEqual(
    unwanted(wanted, have, new Set(['a', 'b'])).map((d) => d.cell),
    ['b'],
  );
});

describe('namespaces', () => {
  test("refused whatever a Cell lists: kube-*, default, Berth's own (here and its usual name)", () => {
    for (const ns of [
      'kube-system',
      'kube-public',
      'kube-node-lease',
      'kube-anything',
      'default',
      'berth-system',
      'berth-x',
    ])
      assert.ok(namespaceRefusal(ns, 'berth-x'), ns);
    for (const ns of ['shop', 'payments', 'kubex', 'defaults'])
      assert.equal(namespaceRefusal(ns, 'berth-x'), undefined, ns);
  });

  test('a refused namespace is placed nowhere: NamespaceRefused for every city, whatever the cells list', () => {
    const w = { ...workload([['us', ['DFW', 'LHR'], 1]]) };
    w.metadata = { ...w.metadata, namespace: 'kube-system' };
    const cells = [
      cell('dfw', ['DFW'], { namespaces: ['kube-system'] }),
      cell('lhr', ['LHR'], { namespaces: ['kube-system'] }),
    ];
    const ts = targets(w, ALL, cells, []);
    assert.deepEqual(
      ts.map((t) => [t.cell, t.problem?.reason]),
      [
        [undefined, 'NamespaceRefused'],
        [undefined, 'NamespaceRefused'],
      ],
    );
  });

  test('only a cell whose Cell lists the namespace takes it; none: NamespaceNotServed, naming the cells of the city', () => {
    const w = workload([['us', ['DFW'], 1]]);
    assert.equal(
      targets(w, ALL, [cell('a', ['DFW'], { namespaces: [] }), cell('b', ['DFW'])], [])[0]!.cell,
      'b',
    );
    const [t] = targets(w, ALL, [cell('a', ['DFW'], { namespaces: ['other'] })], []);
    assert.equal(t!.cell, undefined);
    assert.equal(t!.problem?.reason, 'NamespaceNotServed');
    assert.match(t!.problem!.message, /^no cell of DFW serves namespace shop \(a\)/);
    // A copy in a cell that no longer lists the namespace is not kept there.
    const kept = targets(
      w,
      ALL,
      [cell('a', ['DFW'], { namespaces: [] }), cell('b', ['DFW'])],
      [placed('a', t!)],
    );
    assert.equal(kept[0]!.cell, 'b');
  });

  test('a namespace is deleted only where this plane created it, it holds no WorkloadDeployment, and no Workload maps there', () => {
    const me = { plane: 'plane-1', cellUid: 'cell-uid' };
    const ns = namespaceManifest('shop', me);
    const idle = { deployments: 0, served: true, workloads: 0 };
    assert.ok(namespaceToDelete(ns, me, idle));
    assert.ok(
      namespaceToDelete(ns, me, { ...idle, served: false, workloads: 2 }),
      'the Cell no longer lists it',
    );
    assert.ok(
      !namespaceToDelete(ns, me, { ...idle, workloads: 1 }),
      'a Workload of the namespace may place there',
    );
    assert.ok(!namespaceToDelete(ns, me, { ...idle, deployments: 1 }), 'something is still in it');
    assert.ok(!namespaceToDelete(ns, { plane: 'plane-2', cellUid: 'cell-uid' }, idle), "another plane's");
    assert.ok(!namespaceToDelete({ metadata: { name: 'shop' } }, me, idle), 'not created by Berth');
    assert.ok(
      !namespaceToDelete({ ...ns, metadata: { ...ns.metadata, deletionTimestamp: 'now' } }, me, idle),
    );
  });
});
