import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { type CellView, type Placed, targets } from '../../../../src/federation/decide/placement.ts';
import { countsOnly, rollup } from '../../../../src/federation/decide/rollup.ts';
import type { Condition } from '../../../../src/runtime/api/conditions.ts';
import { type CityStatus, type WorkloadStatus } from '../../../../src/federation/types.ts';
import { CORDONED } from '../../../../src/cells/decide.ts';
import { BLOCKING_REASONS } from '../../../../src/workloads/types.ts';
import { ALL, cell, cond, HASH, placed, serving, workload } from '../fixtures.ts';

describe('rollup', () => {
  const w = workload([
    ['us', ['DFW'], 2],
    ['eu', ['LHR'], 2],
  ]);
  const cells = [cell('dfw', ['DFW']), cell('lhr', ['LHR'])];
  const us = { name: 'web-us-dfw', city: 'DFW', placement: 'us', replicas: 2 };
  const eu = { name: 'web-eu-lhr', city: 'LHR', placement: 'eu', replicas: 2 };
  const run = (views: CellView[], have: Placed[]) => {
    const byName = new Map(views.map((v) => [v.name, v]));
    const find = (c: string, n: string) =>
      have.find((d) => d.cell === c && d.object.metadata.name === n)?.object;
    return rollup(w, targets(w, ALL, views, have), HASH, byName, find, BLOCKING_REASONS);
  };

  test('every city serving: Available with totals per city, placement and workload; RolledOut', () => {
    const r = run(cells, [placed('dfw', us, serving(2)), placed('lhr', eu, serving(2))]);
    assert.equal(r.available.status, 'True');
    assert.equal(r.progressing.reason, 'RolledOut');
    assert.deepEqual(
      { ...r.status, placements: undefined },
      { replicas: 4, readyReplicas: 4, updatedReplicas: 4, desiredReplicas: 4, placements: undefined },
    );
    assert.deepEqual(r.status.placements![1], {
      name: 'eu',
      cities: [
        { city: 'LHR', cell: 'lhr', replicas: 2, readyReplicas: 2, updatedReplicas: 2, desiredReplicas: 2 },
      ],
      replicas: 2,
      readyReplicas: 2,
      updatedReplicas: 2,
      desiredReplicas: 2,
    });
  });

  test('a cell that has not observed what was applied: its counts and Available as it reports them, none updated', () => {
    // Right after a template change every instance still serves: never fewer ready than the cells say.
    for (const stale of [{ hash: 'old' }, { generation: 2 }]) {
      const d = placed('dfw', us, serving(2), stale);
      if (stale.generation) d.object.status!.observedGeneration = 1;
      const r = run(cells, [d, placed('lhr', eu, serving(2))]);
      const s = JSON.stringify(stale);
      assert.deepEqual([r.status.readyReplicas, r.status.updatedReplicas], [4, 2], s);
      assert.equal(r.available.status, 'True', s);
      assert.equal(r.progressing.reason, 'Progressing', s);
      // Not Available there as it last said: Provisioning until it has observed the spec.
      const down = placed('dfw', us, serving(2, 0), stale);
      if (stale.generation) down.object.status!.observedGeneration = 1;
      assert.equal(run(cells, [down, placed('lhr', eu, serving(2))]).available.reason, 'Provisioning', s);
    }
  });

  test('an unreachable cell: its last known counts, Available Unknown CellUnreachable since when', () => {
    const views = [
      cell('dfw', ['DFW'], { reachable: false, ready: false, unreachableSince: '2026-11-23T04:00:00Z' }),
      cells[1]!,
    ];
    const r = run(views, [placed('dfw', us, serving(2)), placed('lhr', eu, serving(2, 1))]);
    assert.equal(r.status.readyReplicas, 3);
    assert.deepEqual(r.available, {
      status: 'Unknown',
      reason: 'CellUnreachable',
      message: 'DFW: cell dfw is unreachable since 2026-11-23T04:00:00Z; last known counts',
    });
  });

  test('a cordoned cell: what runs there stays Available; a cell not Ready for another reason is CellNotReady', () => {
    const cordoned = cell('dfw', ['DFW'], {
      ready: false,
      unschedulable: true,
      notReady: { reason: CORDONED, message: 'the cell is cordoned (spec.unschedulable)' },
    });
    const have = [placed('dfw', us, serving(2)), placed('lhr', eu, serving(2))];
    const r = run([cordoned, cells[1]!], have);
    assert.equal(r.available.status, 'True');
    assert.equal(r.status.readyReplicas, 4);
    const crdless = { ...cordoned, notReady: { reason: 'CRDsMissing', message: 'no CRDs' } };
    assert.equal(run([crdless, cells[1]!], have).available.reason, 'CellNotReady');
  });

  test('a cell that refused the write: CellRefused with what it answered, until it holds what was applied', () => {
    const refusal = { reason: 'CellRefused' as const, message: 'POST namespaces: 403 forbidden' };
    const views = new Map(cells.map((v) => [v.name, v]));
    const have = [placed('lhr', eu, serving(2))];
    const find = (c: string, n: string) =>
      have.find((d) => d.cell === c && d.object.metadata.name === n)?.object;
    const ts = targets(w, ALL, cells, have);
    const r = rollup(w, ts, HASH, views, find, BLOCKING_REASONS, { refused: new Map([[us.name, refusal]]) });
    assert.deepEqual(r.available, {
      status: 'False',
      reason: 'CellRefused',
      message: `DFW: cell dfw refused the WorkloadDeployment: ${refusal.message}`,
    });
    const taken = {
      reason: 'NameTaken' as const,
      message: "the WorkloadDeployment shop/web-us-dfw there is Workload shop/web-us's",
    };
    assert.deepEqual(
      rollup(w, ts, HASH, views, find, BLOCKING_REASONS, { refused: new Map([[us.name, taken]]) }).available,
      {
        status: 'False',
        reason: 'NameTaken',
        message: `DFW: cell dfw: ${taken.message}`,
      },
    );
    // Without a refusal, a WorkloadDeployment not there yet is a wait.
    assert.equal(rollup(w, ts, HASH, views, find, BLOCKING_REASONS).available.reason, 'Provisioning');
    // One the cell holds as applied counts, whatever an earlier write met.
    have.push(placed('dfw', us, serving(2)));
    const held = rollup(w, ts, HASH, views, find, BLOCKING_REASONS, {
      refused: new Map([[us.name, refusal]]),
    });
    assert.equal(held.available.status, 'True');
  });

  test("the worst reason first: federation's own, then the cells' in part 1's order", () => {
    const imageless = serving(2, 1);
    imageless.conditions[0] = cond('Available', 'False', 'ImageUnavailable', '1 of 2 available');
    const quota = serving(2, 1);
    quota.conditions[0] = cond('Available', 'False', 'QuotaExceeded');
    assert.equal(
      run(cells, [placed('dfw', us, quota), placed('lhr', eu, imageless)]).available.reason,
      'ImageUnavailable',
    );
    const r = run([cells[0]!], [placed('dfw', us, quota)]);
    assert.equal(r.available.reason, 'NoMatchingLocation');
    assert.equal(r.available.status, 'False');
    const stuck = serving(2, 1);
    stuck.conditions[1] = cond('Progressing', 'False', 'ProgressDeadlineExceeded', 'web-1 not Ready');
    assert.deepEqual(run(cells, [placed('dfw', us, stuck), placed('lhr', eu, serving(2))]).progressing, {
      status: 'False',
      reason: 'ProgressDeadlineExceeded',
      message: 'DFW: web-1 not Ready',
    });
  });
});

test('countsOnly: instances coming up change counts and messages only; a generation, a condition, a city or the rollout does not', () => {
  const base: WorkloadStatus = {
    observedGeneration: 2,
    replicas: 4,
    readyReplicas: 1,
    desiredReplicas: 4,
    placements: [
      {
        name: 'p',
        readyReplicas: 1,
        cities: [
          { city: 'DFW', cell: 'dfw', readyReplicas: 1, reason: 'Provisioning', message: '1 of 4 ready' },
        ],
      },
    ],
    conditions: [
      {
        type: 'Available',
        status: 'False',
        reason: 'Provisioning',
        message: '1 of 4',
        lastTransitionTime: 't0',
      },
    ],
  };
  const city = (c: Partial<CityStatus>): WorkloadStatus => ({
    ...base,
    placements: [{ ...base.placements![0]!, cities: [{ ...base.placements![0]!.cities![0]!, ...c }] }],
  });
  const available = (c: Partial<Condition>): WorkloadStatus => ({
    ...base,
    conditions: [{ ...base.conditions![0]!, ...c }],
  });
  assert.ok(countsOnly(base, { ...base, readyReplicas: 2 }));
  assert.ok(countsOnly(base, city({ readyReplicas: 2, message: '2 of 4 ready' })));
  assert.ok(countsOnly(base, available({ message: '2 of 4', lastTransitionTime: 't1' })));
  assert.ok(!countsOnly(base, { ...base, observedGeneration: 3 }));
  assert.ok(!countsOnly(base, available({ status: 'True', reason: 'Available' })));
  assert.ok(!countsOnly(base, city({ reason: 'CellUnreachable' })));
  assert.ok(!countsOnly(base, city({ cell: 'dfw-2' })));
  assert.ok(!countsOnly(base, { ...base, rollout: { templateHash: 'h2' } }));
  assert.ok(!countsOnly(undefined, base), 'a first status is written at once');
  assert.ok(!countsOnly(base, { ...base, readyReplicas: 4 }), 'every instance Ready at last');
  assert.ok(!countsOnly({ ...base, readyReplicas: 4 }, base), 'every instance Ready no longer');
});
