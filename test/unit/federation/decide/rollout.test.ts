import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  deploymentManifest,
  drainOf,
  drains,
  serves,
  unwanted,
} from '../../../../src/federation/decide/copies.ts';
import {
  type CellView,
  type DeploymentObject,
  type LabelledLocation,
  type Placed,
  placementCities,
  type Target,
  targets,
} from '../../../../src/federation/decide/placement.ts';
import { rolloutTurn } from '../../../../src/federation/decide/rollout.ts';
import { rollup } from '../../../../src/federation/decide/rollup.ts';
import {
  CITY_LABEL,
  type Rollout,
  type RolloutStatus,
  type WorkloadObject,
} from '../../../../src/federation/types.ts';
import { BLOCKING_REASONS } from '../../../../src/workloads/types.ts';
import { withSeed } from '../../../helpers/prng.ts';
import { ALL, cell, cond, HASH, NOBODY, placed, serving, workload } from '../fixtures.ts';

const OLD = 'old111';
const T0 = Date.parse('2026-11-23T05:00:00Z');
const progressive = (o: Partial<Rollout> = {}): Rollout => ({
  type: 'Progressive',
  maxConcurrency: 1,
  minSuccessTime: 0,
  maxFailures: 0,
  ...o,
});

/** A workload in three cities (one placement each) rolled out with `rollout`, and a cell per city. */
function three(rollout?: Rollout) {
  const w = workload([
    ['us', ['DFW'], 2],
    ['eu', ['LHR'], 2],
    ['ap', ['NRT'], 2],
  ]);
  if (rollout) w.spec.rollout = rollout;
  const cells = [cell('dfw', ['DFW']), cell('lhr', ['LHR']), cell('nrt', ['NRT'])];
  return { w, cells };
}

/** The rollout plan of `w` over what the cells have, at `now`. */
function plan(w: WorkloadObject, cells: CellView[], have: Placed[], previous?: RolloutStatus, now = T0) {
  const ts = targets(w, ALL, cells, have);
  return {
    ts,
    p: rolloutTurn({
      rollout: w.spec.rollout,
      template: w.spec.template,
      hash: HASH,
      targets: ts,
      deployment: (t) => have.find((d) => d.cell === t.cell && d.object.metadata.name === t.name)?.object,
      previous,
      now,
    }),
  };
}

const t = (placement: string, city: string): Pick<Target, 'name' | 'city' | 'placement' | 'replicas'> => ({
  name: `web-${placement}-${city.toLowerCase()}`,
  city,
  placement,
  replicas: 2,
});
const US = t('us', 'DFW');
const EU = t('eu', 'LHR');
const AP = t('ap', 'NRT');
const onOld = (c: string, x: typeof US) => placed(c, x, serving(2), { hash: OLD, image: 'web:0' });
const failing = () => {
  const s = serving(2, 1);
  s.conditions[1] = cond('Progressing', 'False', 'ImageUnavailable', 'rollout stopped at web-1');
  return s;
};

describe('rolloutTurn', () => {
  test('All (or no rollout): every target with a listed cell gets the current template', () => {
    for (const r of [undefined, { ...progressive(), type: 'All' as const }]) {
      const { w, cells } = three(r);
      const { p } = plan(
        w,
        [...cells.slice(0, 2), cell('nrt', ['NRT'], { listed: false })],
        [onOld('dfw', US)],
      );
      assert.deepEqual([...p.applied.keys()], ['web-us-dfw', 'web-eu-lhr']);
      assert.ok([...p.applied.values()].every((a) => a.hash === HASH && a.template === w.spec.template));
      assert.equal(p.status, undefined);
      assert.equal(p.progressing, undefined);
    }
  });

  test('Progressive: the first cell in placement order gets the new template, the others keep theirs', () => {
    const { w, cells } = three(progressive());
    const have = [onOld('dfw', US), onOld('lhr', EU), onOld('nrt', AP)];
    const { ts, p } = plan(w, cells, have);
    assert.deepEqual(
      [...p.applied].map(([n, a]) => [n, a.hash, a.template.containers[0]!.image]),
      [
        ['web-us-dfw', HASH, 'web:1'],
        ['web-eu-lhr', OLD, 'web:0'],
        ['web-ap-nrt', OLD, 'web:0'],
      ],
    );
    assert.deepEqual(p.status, {
      templateHash: HASH,
      cells: [{ name: 'us/DFW', state: 'Updating', since: new Date(T0).toISOString() }],
      updatedCells: 0,
      totalCells: 3,
    });
    assert.deepEqual(p.progressing, {
      status: 'True',
      reason: 'RollingOut',
      message: `0 of 3 cells updated to template ${HASH}, waiting for us/DFW to become Available; next: eu/LHR, ap/NRT`,
    });
    // A replica change reaches a cell not rolled yet at once, on its old template.
    const m = deploymentManifest(w, ts[1]!, p.applied.get('web-eu-lhr')!, NOBODY);
    assert.equal(m.spec.workloadRef?.templateHash, OLD);
    assert.equal(m.spec.template.containers[0]!.image, 'web:0');
    assert.equal(m.spec.replicas, 2);
  });

  test('a cell Available on the new template soaks minSuccessTime, then the next starts', () => {
    const { w, cells } = three(progressive({ minSuccessTime: 60 }));
    const first = plan(w, cells, [onOld('dfw', US), onOld('lhr', EU), onOld('nrt', AP)]).p;
    const done = [placed('dfw', US, serving(2)), onOld('lhr', EU), onOld('nrt', AP)];
    const soaking = plan(w, cells, done, first.status, T0 + 5000).p;
    const at = new Date(T0 + 5000).toISOString();
    const until = new Date(T0 + 65_000).toISOString();
    assert.deepEqual(soaking.status?.cells, [{ name: 'us/DFW', state: 'Soaking', since: at }]);
    assert.equal(soaking.status?.soakingUntil, until);
    assert.equal(soaking.applied.get('web-eu-lhr')?.hash, OLD);
    assert.equal(soaking.requeueAfterMs, 60_000);
    assert.match(soaking.progressing!.message, new RegExp(`waiting for us/DFW to soak until ${until}`));
    // Restart-safe: the soak's start comes from the status, not from memory.
    const still = plan(w, cells, done, soaking.status, T0 + 64_000).p;
    assert.equal(still.status?.cells?.[0]?.since, at);
    assert.equal(still.requeueAfterMs, 1000);
    const next = plan(w, cells, done, still.status, T0 + 65_000).p;
    assert.deepEqual(
      next.status?.cells?.map((c) => [c.name, c.state]),
      [
        ['us/DFW', 'Updated'],
        ['eu/LHR', 'Updating'],
      ],
    );
    assert.equal(next.applied.get('web-eu-lhr')?.hash, HASH);
    assert.equal(next.applied.get('web-ap-nrt')?.hash, OLD);
    assert.match(next.progressing!.message, /^1 of 3 cells updated/);
  });

  test('a failed cell stops the rollout: RolloutStopped naming it, the others keep the old template', () => {
    const { w, cells } = three(progressive());
    const have = [placed('dfw', US, failing()), onOld('lhr', EU), onOld('nrt', AP)];
    const { p } = plan(w, cells, have);
    assert.deepEqual(p.status?.cells, [
      {
        name: 'us/DFW',
        state: 'Failed',
        since: new Date(T0).toISOString(),
        reason: 'ImageUnavailable',
        message: 'rollout stopped at web-1',
      },
    ]);
    assert.equal(p.applied.get('web-eu-lhr')?.hash, OLD);
    assert.equal(p.applied.get('web-ap-nrt')?.hash, OLD);
    assert.deepEqual(p.progressing, {
      status: 'False',
      reason: 'RolloutStopped',
      message:
        `0 of 3 cells updated to template ${HASH}; stopped after 1 failed (maxFailures 0): ` +
        'us/DFW ImageUnavailable: rollout stopped at web-1; eu/LHR, ap/NRT keep the old template',
    });
    // Tolerated: the next cell starts.
    w.spec.rollout = progressive({ maxFailures: 1 });
    const tolerated = plan(w, cells, have).p;
    assert.equal(tolerated.applied.get('web-eu-lhr')?.hash, HASH);
    assert.equal(tolerated.progressing?.reason, 'RollingOut');
  });

  test('a stopped rollout stays stopped while the failed cell cannot say so: not listed, or not yet seen the spec asked now', () => {
    const { w, cells } = three(progressive());
    const have = [placed('dfw', US, failing()), onOld('lhr', EU), onOld('nrt', AP)];
    const stopped = plan(w, cells, have).p.status;
    // A restart, or a new kubeconfig: dfw's WorkloadDeployments are not listed for a moment.
    const blind = [cell('dfw', ['DFW'], { listed: false }), ...cells.slice(1)];
    const meanwhile = plan(w, blind, have.slice(1), stopped).p;
    assert.equal(meanwhile.progressing?.reason, 'RolloutStopped');
    assert.equal(meanwhile.applied.get('web-eu-lhr')?.hash, OLD, 'the next cell does not start');
    assert.deepEqual(meanwhile.status?.cells, stopped?.cells, 'the failure is kept in the status');
    // The placement scaled while stopped: dfw has not observed its new replicas yet.
    w.spec.placements[0]!.scaleSettings.minReplicas = 3;
    const scaled = plan(w, cells, have, stopped).p;
    assert.equal(scaled.progressing?.reason, 'RolloutStopped');
    assert.equal(scaled.applied.get('web-eu-lhr')?.hash, OLD);
  });

  test('progressDeadline: a cell not Available on the new template in time has failed', () => {
    const { w, cells } = three(progressive({ progressDeadline: 30 }));
    const first = plan(w, cells, [onOld('dfw', US), onOld('lhr', EU), onOld('nrt', AP)]).p;
    assert.equal(first.requeueAfterMs, 30_000);
    const slow = [placed('dfw', US, serving(2, 1)), onOld('lhr', EU), onOld('nrt', AP)];
    assert.equal(plan(w, cells, slow, first.status, T0 + 29_999).p.status?.cells?.[0]?.state, 'Updating');
    const late = plan(w, cells, slow, first.status, T0 + 30_000).p;
    assert.deepEqual(
      [late.status?.cells?.[0]?.state, late.status?.cells?.[0]?.reason, late.progressing?.reason],
      ['Failed', 'ProgressDeadlineExceeded', 'RolloutStopped'],
    );
  });

  test('a new target (no WorkloadDeployment yet) gets the current template at once; a status of another template is not read', () => {
    const { w, cells } = three(progressive());
    const stale: RolloutStatus = {
      templateHash: 'other',
      cells: [{ name: 'us/DFW', state: 'Updated', since: '2026-11-23T01:00:00Z' }],
    };
    const { p } = plan(w, cells, [onOld('dfw', US), onOld('lhr', EU)], stale);
    assert.equal(p.applied.get('web-ap-nrt')?.hash, HASH);
    // The new one takes the one slot: the old cells wait for it.
    assert.deepEqual(
      p.status?.cells?.map((c) => [c.name, c.state, c.since]),
      [['ap/NRT', 'Updating', new Date(T0).toISOString()]],
    );
    assert.equal(p.applied.get('web-us-dfw')?.hash, OLD);
  });

  test('every cell on the new template and Available: no Progressing of its own, the rollup says RolledOut', () => {
    const { w, cells } = three(progressive());
    const have = [
      placed('dfw', US, serving(2)),
      placed('lhr', EU, serving(2)),
      placed('nrt', AP, serving(2)),
    ];
    const { ts, p } = plan(w, cells, have);
    assert.equal(p.progressing, undefined);
    assert.equal(p.status?.updatedCells, 3);
    const find = (c: string, n: string) =>
      have.find((d) => d.cell === c && d.object.metadata.name === n)?.object;
    const views = new Map(cells.map((c) => [c.name, c]));
    const r = rollup(w, ts, HASH, views, find, BLOCKING_REASONS, { applied: p.applied });
    assert.equal(r.progressing.reason, 'RolledOut');
  });
});

describe('rollup during a rollout', () => {
  test('a cell on its old template counts its instances, none updated; the rollout says Progressing', () => {
    // DFW soaks: LHR and NRT keep their old template.
    const { w, cells } = three(progressive({ minSuccessTime: 60 }));
    const have = [placed('dfw', US, serving(2)), onOld('lhr', EU), onOld('nrt', AP)];
    const { ts, p } = plan(w, cells, have);
    const find = (c: string, n: string) =>
      have.find((d) => d.cell === c && d.object.metadata.name === n)?.object;
    const views = new Map(cells.map((c) => [c.name, c]));
    const r = rollup(w, ts, HASH, views, find, BLOCKING_REASONS, {
      applied: p.applied,
      progressing: p.progressing!,
    });
    assert.deepEqual(
      [r.status.replicas, r.status.readyReplicas, r.status.updatedReplicas, r.status.desiredReplicas],
      [6, 6, 2, 6],
    );
    assert.equal(r.available.status, 'True');
    assert.equal(r.progressing.reason, 'RollingOut');
    // Without the plan's hashes the old cells have not observed what would be applied: their
    // instances still count as the cells report them (never fewer), none of them updated.
    const unplanned = rollup(w, ts, HASH, views, find, BLOCKING_REASONS);
    assert.deepEqual([unplanned.status.readyReplicas, unplanned.status.updatedReplicas], [6, 2]);
    assert.equal(unplanned.available.status, 'True');
  });

  test('a draining city is listed with its counts, Draining, and does not make the workload unavailable', () => {
    const w = workload([['eu', ['DFW'], 2]]);
    const cells = [cell('dfw', ['DFW']), cell('lhr', ['LHR'])];
    const have = [placed('dfw', t('eu', 'DFW'), serving(2, 1)), placed('lhr', EU, serving(2))];
    const ts = targets(w, ALL, cells, have);
    const find = (c: string, n: string) =>
      have.find((d) => d.cell === c && d.object.metadata.name === n)?.object;
    const { remove, draining } = drains(ts, unwanted(ts, have, new Set(['dfw', 'lhr'])), (x) =>
      serves(find(x.cell!, x.name)),
    );
    assert.deepEqual(remove, []);
    const r = rollup(w, ts, HASH, new Map(cells.map((c) => [c.name, c])), find, BLOCKING_REASONS, {
      draining,
    });
    assert.deepEqual(r.status.placements![0]!.cities![1], {
      city: 'LHR',
      cell: 'lhr',
      replicas: 2,
      readyReplicas: 2,
      updatedReplicas: 0,
      desiredReplicas: 0,
      reason: 'Draining',
      message: 'removed from the placement; deleted once DFW is Available',
    });
    assert.equal(r.available.reason, 'Provisioning');
    assert.equal(r.status.readyReplicas, 3);
    assert.equal(r.progressing.reason, 'Progressing');
  });

  test('a city whose deletion its cell refused: listed CellRefused with the answer, Available=False, never RolledOut', () => {
    const w = workload([['eu', ['DFW'], 2]]);
    const cells = [cell('dfw', ['DFW']), cell('lhr', ['LHR'])];
    const have = [placed('dfw', t('eu', 'DFW'), serving(2)), placed('lhr', EU, serving(2))];
    const ts = targets(w, ALL, cells, have);
    const find = (c: string, n: string) =>
      have.find((d) => d.cell === c && d.object.metadata.name === n)?.object;
    const { remove } = drains(ts, unwanted(ts, have, new Set(['dfw', 'lhr'])), (x) =>
      serves(find(x.cell!, x.name)),
    );
    assert.equal(remove.length, 1, 'DFW is Available: LHR is deleted');
    const r = rollup(w, ts, HASH, new Map(cells.map((c) => [c.name, c])), find, BLOCKING_REASONS, {
      draining: [drainOf(remove[0]!, 'forbidden')],
    });
    assert.deepEqual(
      [r.status.placements![0]!.cities![1]!.reason, r.status.placements![0]!.cities![1]!.message],
      ['CellRefused', 'removed from the placement; cell lhr refused its deletion: forbidden'],
    );
    assert.deepEqual(
      [r.available.status, r.available.reason, r.available.message],
      ['False', 'CellRefused', 'LHR: removed from the placement; cell lhr refused its deletion: forbidden'],
    );
    assert.equal(r.progressing.reason, 'Progressing');
  });

  test('one city draining in two cells (after a failover) is one entry of the list-map keyed by city', () => {
    const w = workload([['eu', ['DFW'], 2]]);
    const cells = [cell('dfw', ['DFW']), cell('lhr-a', ['LHR']), cell('lhr-b', ['LHR'])];
    const have = [
      placed('dfw', t('eu', 'DFW'), serving(2, 1)),
      placed('lhr-b', EU, serving(2, 1)),
      placed('lhr-a', EU, serving(2)),
    ];
    const ts = targets(w, ALL, cells, have);
    const find = (c: string, n: string) =>
      have.find((d) => d.cell === c && d.object.metadata.name === n)?.object;
    const { draining } = drains(ts, unwanted(ts, have, new Set(cells.map((c) => c.name))), (x) =>
      serves(find(x.cell!, x.name)),
    );
    assert.equal(draining.length, 2);
    const r = rollup(w, ts, HASH, new Map(cells.map((c) => [c.name, c])), find, BLOCKING_REASONS, {
      draining,
    });
    assert.deepEqual(r.status.placements![0]!.cities![1], {
      city: 'LHR',
      cell: 'lhr-a',
      replicas: 4,
      readyReplicas: 3,
      updatedReplicas: 0,
      desiredReplicas: 0,
      reason: 'Draining',
      message: 'removed from the placement (in cells lhr-a, lhr-b); deleted once DFW is Available',
    });
    assert.deepEqual(
      r.status.placements![0]!.cities!.map((c) => c.city),
      ['DFW', 'LHR'],
    );
  });

  test('a selector that matches no Location: the placement says NoMatchingLocation', () => {
    const w = workload([['eu', ['DFW'], 1]]);
    w.spec.placements[0] = {
      name: 'eu',
      locationSelector: { matchLabels: { tier: 'gold' } },
      scaleSettings: { minReplicas: 1 },
    };
    const r = rollup(w, targets(w, ALL, [], [], []), HASH, new Map(), () => undefined, BLOCKING_REASONS);
    assert.deepEqual(r.available, {
      status: 'False',
      reason: 'NoMatchingLocation',
      message: 'placement eu: its locationSelector matches no Location',
    });
    assert.equal(r.status.placements![0]!.reason, 'NoMatchingLocation');
  });
});

describe('drain after ready', () => {
  const w = workload([['eu', ['DFW', 'NRT'], 1]]);
  const cells = [cell('dfw', ['DFW']), cell('nrt', ['NRT']), cell('lhr', ['LHR'])];
  const old = placed('lhr', t('eu', 'LHR'), serving(1));
  const removed = (have: Placed[], avail: (x: Target) => boolean) => {
    const ts = targets(w, ALL, cells, have);
    return drains(ts, unwanted(ts, have, new Set(['dfw', 'nrt', 'lhr'])), avail);
  };

  test("a removed city waits for every city of its placement, then goes; another placement's city does not hold it", () => {
    const one = removed([old], (x) => x.city === 'DFW');
    assert.deepEqual(
      one.draining.map((d) => [d.city, d.waitingFor]),
      [['LHR', ['NRT']]],
    );
    assert.deepEqual(removed([old], () => true).remove, [old]);
    // A placement that is gone, or another placement's city: no wait on this placement's cities.
    const other = placed('lhr', t('gone', 'LHR'), serving(1));
    assert.deepEqual(removed([other], () => false).remove, [other]);
  });

  test('serves: observed and Available', () => {
    const d = placed('dfw', US, serving(2)).object;
    assert.equal(serves(d), true);
    assert.equal(serves(undefined), false);
    assert.equal(serves({ ...d, metadata: { ...d.metadata, generation: 2 } }), false);
    assert.equal(serves(placed('dfw', US, serving(2, 1)).object), false);
  });
});

describe('location selector', () => {
  const locs: LabelledLocation[] = [
    { city: 'NRT', labels: { region: 'ap', tier: 'gold' } },
    { city: 'LHR', labels: { region: 'eu', tier: 'gold' } },
    { city: 'DFW', labels: { region: 'us' } },
    { city: 'LHR', labels: { region: 'eu', tier: 'gold', zone: 'b' } },
  ];
  const p = (o: object) => ({ name: 'x', scaleSettings: { minReplicas: 1 }, ...o });

  test('cityCodes as written, then the matching Locations by city code, once each', () => {
    assert.deepEqual(placementCities(p({ locationSelector: { matchLabels: { tier: 'gold' } } }), locs), [
      'LHR',
      'NRT',
    ]);
    assert.deepEqual(
      placementCities(
        p({
          cityCodes: ['SIN', 'NRT'],
          locationSelector: { matchExpressions: [{ key: 'region', operator: 'In', values: ['ap', 'us'] }] },
        }),
        locs,
      ),
      ['SIN', 'NRT', 'DFW'],
    );
    assert.deepEqual(placementCities(p({ cityCodes: ['SIN'] }), locs), ['SIN']);
    // An empty selector selects every Location.
    assert.deepEqual(placementCities(p({ locationSelector: {} }), locs), ['DFW', 'LHR', 'NRT']);
  });

  test('targets follow the selector: a relabelled Location moves the placement', () => {
    const w = workload([['eu', ['DFW'], 1]]);
    w.spec.placements[0] = p({ locationSelector: { matchLabels: { tier: 'gold' } } }) as never;
    const cells = [cell('lhr', ['LHR']), cell('nrt', ['NRT']), cell('dfw', ['DFW'])];
    assert.deepEqual(
      targets(w, ALL, cells, [], locs).map((x) => [x.name, x.cell]),
      [
        ['web-x-lhr', 'lhr'],
        ['web-x-nrt', 'nrt'],
      ],
    );
    const relabelled = locs.map((l) => (l.city === 'NRT' ? { ...l, labels: { region: 'ap' } } : l));
    assert.deepEqual(
      targets(w, ALL, cells, [], relabelled).map((x) => x.city),
      ['LHR'],
    );
  });
});

/**
 * A simulated rollout: cells that take a random while to observe and roll a template, some failing
 * it; the plan is asked again after every step with the status it wrote last.
 */
test('generated: 1,500 simulated rollouts keep concurrency, order, the stop and restart-safety', () =>
  withSeed('rollout simulations', (r) => {
    let stoppedRuns = 0;
    let completed = 0;
    for (let run = 0; run < 1500; run++) {
      const cities = ['DFW', 'LHR', 'NRT', 'SIN', 'AMS', 'FRA'].slice(0, 1 + r.int(6));
      const w = workload(cities.map((c, i) => [`p${i % 2}`, [c], 1 + r.int(3)]));
      // Placements are merged by name: p0 and p1 each with their cities.
      w.spec.placements = ['p0', 'p1']
        .map((n) => ({
          name: n,
          cityCodes: cities.filter((_, i) => `p${i % 2}` === n),
          scaleSettings: { minReplicas: 1 + r.int(3) },
        }))
        .filter((pl) => pl.cityCodes.length);
      const cfg = progressive({
        maxConcurrency: 1 + r.int(3),
        minSuccessTime: r.pick([0, 0, 5, 30]),
        maxFailures: r.int(2),
        ...(r.chance(0.3) ? { progressDeadline: r.pick([20, 60]) } : {}),
      });
      w.spec.rollout = cfg;
      const cells = cities.map((c) => cell(c.toLowerCase(), [c]));
      const dooms = new Set(cities.filter(() => r.chance(0.15)));
      const slow = new Set(cities.filter(() => r.chance(0.1)));
      // Each city's WorkloadDeployment on the old template, serving.
      const ts0 = targets(w, ALL, cells, []);
      const wds = new Map<string, DeploymentObject>(
        ts0.map((x) => [
          x.name,
          placed(x.cell!, x, serving(x.replicas), { hash: OLD, image: 'web:0' }).object,
        ]),
      );
      const order = ts0.map((x) => x.name);
      let previous: RolloutStatus | undefined;
      let now = T0;
      let everNew = new Set<string>();
      let result = undefined as ReturnType<typeof rolloutTurn> | undefined;
      for (let step = 0; step < 400; step++) {
        const have = [...wds.values()].map((o) => ({
          cell: o.metadata.labels![CITY_LABEL]!.toLowerCase(),
          object: o,
        }));
        const ts = targets(w, ALL, cells, have);
        const p = rolloutTurn({
          rollout: cfg,
          template: w.spec.template,
          hash: HASH,
          targets: ts,
          deployment: (x) => wds.get(x.name),
          previous: r.chance(0.1) ? undefined : previous,
          now,
        });
        result = p;
        const isNew = order.filter((n) => p.applied.get(n)?.hash === HASH);
        // Started cells are a prefix of the order, and once started a cell stays on the new template.
        assert.deepEqual(isNew, order.slice(0, isNew.length), 'started cells are a prefix of the order');
        for (const n of everNew) assert.ok(isNew.includes(n), `${n} went back to the old template`);
        const failed = (p.status?.cells ?? []).filter((c) => c.state === 'Failed').length;
        if (failed > cfg.maxFailures) {
          assert.equal(p.progressing?.reason, 'RolloutStopped');
          assert.ok(
            isNew.every((n) => everNew.has(n)),
            'nothing starts once stopped',
          );
        }
        // No more than maxConcurrency cells on the new template that are not done soaking, unless
        // the status was lost (then every started cell counts again as just started).
        const busy = (p.status?.cells ?? []).filter((c) => c.state === 'Updating' || c.state === 'Soaking');
        assert.ok(busy.length <= Math.max(cfg.maxConcurrency, everNew.size), 'concurrency');
        const fresh = isNew.filter((n) => !everNew.has(n)).length;
        if (fresh) assert.ok(busy.length <= cfg.maxConcurrency, `started ${fresh} beyond maxConcurrency`);
        everNew = new Set(isNew);
        previous = p.status;
        if (!p.progressing) break;
        if (p.progressing.reason === 'RolloutStopped' && step > 50) break;
        // The cells act: the new template is applied, observed after a while, then rolled or failed.
        for (const x of ts) {
          const a = p.applied.get(x.name)!;
          const d = wds.get(x.name)!;
          if (d.spec.workloadRef!.templateHash !== a.hash) {
            const gen = d.metadata.generation! + 1;
            wds.set(x.name, {
              ...d,
              metadata: { ...d.metadata, generation: gen },
              spec: {
                ...d.spec,
                workloadRef: { ...d.spec.workloadRef!, templateHash: a.hash },
                template: a.template,
              },
              status: { ...d.status, observedGeneration: gen - 1 },
            });
          } else if (a.hash === HASH && r.chance(0.5) && !slow.has(x.city)) {
            const status = dooms.has(x.city) ? failingFor(x.replicas) : serving(x.replicas);
            wds.set(x.name, { ...d, status: { ...status, observedGeneration: d.metadata.generation! } });
          }
        }
        now += 1000 * (1 + r.int(10));
      }
      if (result?.progressing?.reason === 'RolloutStopped') stoppedRuns++;
      else if (!result?.progressing) {
        completed++;
        assert.equal(everNew.size, order.length, 'a finished rollout reached every cell');
        const expectFailed = cities.filter((c) => dooms.has(c) || slow.has(c)).length;
        assert.ok(expectFailed <= cfg.maxFailures, 'finished with no more failures than tolerated');
      }
    }
    assert.ok(stoppedRuns > 100 && completed > 500, `stopped ${stoppedRuns}, completed ${completed}`);
  }));

function failingFor(n: number): NonNullable<DeploymentObject['status']> {
  const s = serving(n, n - 1);
  s.conditions[1] = cond('Progressing', 'False', 'InstanceCrashing', 'web-0 crashing');
  return s;
}
