import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { unwanted } from '../../../../src/federation/decide/copies.ts';
import {
  cellView,
  type CellView,
  deploymentName,
  type Placed,
  targets,
} from '../../../../src/federation/decide/placement.ts';
import { FEDERATION_REASONS, rollup } from '../../../../src/federation/decide/rollup.ts';
import type { CellObject } from '../../../../src/cells/types.ts';
import { BLOCKING_REASONS } from '../../../../src/workloads/types.ts';
import { withSeed, type Prng } from '../../../helpers/prng.ts';
import { ALL, cell, cond, HASH, placed, serving, workload } from '../fixtures.ts';

describe('targets', () => {
  test('one per placement × city, named <workload>-<placement>-<city>, in the first Ready schedulable cell by name', () => {
    const w = workload([
      ['us', ['DFW'], 2],
      ['eu', ['LHR', 'DFW'], 1],
    ]);
    const cells = [
      cell('dfw-b', ['DFW']),
      cell('dfw-a', ['DFW'], { unschedulable: true }),
      cell('dfw-0', ['DFW'], { ready: false, notReady: { reason: 'CrdsMissing', message: 'x' } }),
      cell('lhr', ['LHR']),
    ];
    assert.deepEqual(
      targets(w, ALL, cells, []).map((t) => [t.name, t.cell, t.replicas]),
      [
        ['web-us-dfw', 'dfw-b', 2],
        ['web-eu-lhr', 'lhr', 1],
        ['web-eu-dfw', 'dfw-b', 1],
      ],
    );
  });

  test('sticky: it stays in the cell it is in while that cell exists and serves the city, unreachable or cordoned', () => {
    const w = workload([['us', ['DFW'], 2]]);
    const t = { name: 'web-us-dfw', city: 'DFW', placement: 'us', replicas: 2 };
    for (const o of [{ reachable: false, ready: false }, { unschedulable: true }]) {
      const cells = [cell('a', ['DFW']), cell('b', ['DFW'], o)];
      assert.equal(targets(w, ALL, cells, [placed('b', t)])[0]!.cell, 'b', JSON.stringify(o));
    }
    // Another cell of the city not listed yet: what is known is kept.
    const unlisted = cell('a', ['DFW'], { listed: false });
    assert.equal(targets(w, ALL, [unlisted, cell('b', ['DFW'])], [placed('b', t)])[0]!.cell, 'b');
    // The cell no longer serves DFW, or is gone: the first Ready one takes it.
    assert.equal(targets(w, ALL, [cell('a', ['DFW']), cell('b', ['LHR'])], [placed('b', t)])[0]!.cell, 'a');
    assert.equal(targets(w, ALL, [cell('a', ['DFW'])], [placed('b', t)])[0]!.cell, 'a');
  });

  test('failover, opt-in: a cell unreachable for afterSeconds hands the city to another Ready, schedulable, reachable cell', () => {
    const w = workload([['us', ['DFW'], 2]]);
    w.spec.placements[0]!.failover = { afterSeconds: 30 };
    const t = { name: 'web-us-dfw', city: 'DFW', placement: 'us', replicas: 2 };
    const since = '2026-11-23T04:00:00Z';
    const at = Date.parse(since) + 30_000;
    const down = cell('a', ['DFW'], { reachable: false, ready: false, unreachableSince: since });
    const cells = [down, cell('b', ['DFW'], { unschedulable: true }), cell('c', ['DFW'])];
    const early = targets(w, ALL, cells, [placed('a', t)], [], at - 1)[0]!;
    assert.deepEqual([early.cell, early.failoverAt, early.failedOverFrom], ['a', at, undefined]);
    const moved = targets(w, ALL, cells, [placed('a', t)], [], at)[0]!;
    assert.deepEqual([moved.cell, moved.failoverAt, moved.failedOverFrom], ['c', undefined, 'a']);
    // No other cell that could take it: it waits for its own.
    assert.equal(targets(w, ALL, cells.slice(0, 2), [placed('a', t)], [], at)[0]!.cell, 'a');
    // Not opted in: it waits, whatever the time.
    const plain = workload([['us', ['DFW'], 2]]);
    assert.equal(targets(plain, ALL, cells, [placed('a', t)], [], at + 3_600_000)[0]!.cell, 'a');
    // The old cell answers again: the one created last keeps the city, the old one is unwanted.
    const old = placed('a', t);
    old.object.metadata.creationTimestamp = '2026-11-23T03:00:00Z';
    const failedOver = placed('c', t);
    failedOver.object.metadata.creationTimestamp = '2026-11-23T04:01:00Z';
    const back = [cell('a', ['DFW']), cells[2]!];
    const ts = targets(w, ALL, back, [old, failedOver], [], at);
    assert.equal(ts[0]!.cell, 'c');
    assert.deepEqual(unwanted(ts, [old, failedOver], new Set(['a', 'c'])), [old]);
  });

  // A cell not listed shows no WorkloadDeployment, as the controller's cache does: whatever it holds
  // is unseen (`have` is what the listed cells show).
  describe('a cell serving the city not listed yet (a restart, a rotated kubeconfig, a partition)', () => {
    const w = workload([['us', ['DFW'], 2]]);
    const since = '2026-11-23T04:00:00Z';
    const down = { reachable: false, ready: false, unreachableSince: since };

    test('the city is placed nowhere else: it may run there', () => {
      // dfw-b holds it; dfw-a listed first.
      const [t] = targets(w, ALL, [cell('dfw-a', ['DFW']), cell('dfw-b', ['DFW'], { listed: false })], []);
      assert.equal(t!.cell, undefined);
      assert.deepEqual(t!.problem, {
        reason: 'CellNotReady',
        message:
          'the WorkloadDeployments of cell dfw-b are not listed yet: DFW may run there, so it is placed nowhere else until they are',
      });
      // dfw-b partitioned as Berth restarts: CellUnreachable, and Available says Unknown.
      const cells = [cell('dfw-a', ['DFW']), cell('dfw-b', ['DFW'], { listed: false, ...down })];
      const ts = targets(w, ALL, cells, []);
      assert.equal(ts[0]!.cell, undefined);
      assert.equal(ts[0]!.problem?.reason, 'CellUnreachable');
      const r = rollup(
        w,
        ts,
        HASH,
        new Map(cells.map((c) => [c.name, c])),
        () => undefined,
        BLOCKING_REASONS,
      );
      assert.deepEqual(r.available, {
        status: 'Unknown',
        reason: 'CellUnreachable',
        message: `DFW: the WorkloadDeployments of cell dfw-b (unreachable since ${since}) are not listed yet: DFW may run there, so it is placed nowhere else until they are`,
      });
    });

    test('a city of one cell partitioned during a restart: CellUnreachable, not NoMatchingLocation', () => {
      const only = cell('dfw', ['DFW'], {
        listed: false,
        ...down,
        notReady: { reason: 'Unreachable', message: '' },
      });
      const ts = targets(w, ALL, [only], []);
      assert.equal(ts[0]!.problem?.reason, 'CellUnreachable');
      const r = rollup(w, ts, HASH, new Map([['dfw', only]]), () => undefined, BLOCKING_REASONS);
      assert.equal(r.available.status, 'Unknown');
    });

    test('failover waits for it too, unless it is past its own failover time', () => {
      const fw = workload([['us', ['DFW'], 2]]);
      fw.spec.placements[0]!.failover = { afterSeconds: 30 };
      const at = Date.parse(since) + 30_000;
      const t = { name: 'web-us-dfw', city: 'DFW', placement: 'us', replicas: 2 };
      const a = cell('a', ['DFW'], down);
      const c = cell('c', ['DFW']);
      // b may hold the copy that a failover made before the restart: a keeps the city.
      for (const b of [
        cell('b', ['DFW'], { listed: false }),
        cell('b', ['DFW'], { listed: false, ...down, unreachableSince: '2026-11-23T04:00:10Z' }),
      ]) {
        const kept = targets(fw, ALL, [a, b, c], [placed('a', t)], [], at)[0]!;
        assert.deepEqual([kept.cell, kept.failedOverFrom], ['a', undefined], JSON.stringify(b));
        // An unreachable b holds it back until its own failover time.
        assert.equal(kept.failoverAt, b.reachable ? undefined : at + 10_000);
      }
      // Past it, b would be left anyway: the city fails over to c.
      const b = cell('b', ['DFW'], { listed: false, ...down });
      const moved = targets(fw, ALL, [a, b, c], [placed('a', t)], [], at)[0]!;
      assert.deepEqual([moved.cell, moved.failedOverFrom], ['c', 'a']);
      // And a city with no copy seen is placed anew.
      assert.equal(targets(fw, ALL, [b, c], [], [], at)[0]!.cell, 'c');
    });
  });

  test('no Location, or no Ready schedulable cell: NoMatchingLocation saying why', () => {
    const w = workload([['ap', ['NRT'], 1]]);
    assert.deepEqual(targets(w, new Set(['DFW']), [cell('nrt', ['NRT'])], [])[0]!.problem, {
      reason: 'NoMatchingLocation',
      message: 'no Location has city code NRT',
    });
    assert.deepEqual(
      targets(
        w,
        ALL,
        [
          cell('nrt', ['NRT'], { unschedulable: true }),
          cell('nrt2', ['NRT'], { ready: false, notReady: { reason: 'Unreachable', message: '' } }),
        ],
        [],
      )[0]!.problem,
      {
        reason: 'NoMatchingLocation',
        message: 'no Ready, schedulable cell serves NRT (nrt: cordoned, nrt2: Unreachable)',
      },
    );
    assert.equal(targets(w, ALL, [], [])[0]!.problem?.message, 'no Ready, schedulable cell serves NRT');
  });

  test('a cell of the city not probed to an answer yet: CellNotReady, a wait rather than something to fix', () => {
    const w = workload([['ap', ['NRT'], 1]]);
    const probing = cell('nrt', ['NRT'], {
      ready: false,
      probing: true,
      notReady: { reason: 'NotProbed', message: 'not probed yet' },
    });
    assert.deepEqual(targets(w, ALL, [probing], [])[0]!.problem, {
      reason: 'CellNotReady',
      message: 'waiting for the first probe of cell nrt, which serves NRT',
    });
    // Cordoned, it would not take the workload once probed either.
    assert.equal(
      targets(w, ALL, [{ ...probing, unschedulable: true }], [])[0]!.problem?.reason,
      'NoMatchingLocation',
    );
    // No Location of the city is for the user to fix, probed or not.
    assert.equal(targets(w, new Set(['DFW']), [probing], [])[0]!.problem?.reason, 'NoMatchingLocation');
  });

  test('a name too long for its instances (<name>-<ordinal> a label value of at most 63) is InvalidName', () => {
    // -us-dfw adds 7 characters: a workload name of 51 makes 58, of 52 makes 59.
    const fits = workload([['us', ['DFW'], 1]], 'w'.repeat(51));
    assert.equal(targets(fits, ALL, [cell('a', ['DFW'])], [])[0]!.cell, 'a');
    const long = targets(workload([['us', ['DFW'], 1]], 'w'.repeat(52)), ALL, [cell('a', ['DFW'])], [])[0]!;
    assert.equal(long.problem?.reason, 'InvalidName');
    assert.match(long.problem!.message, /longer than 58 characters.*shorten the workload or placement name/);
    assert.equal(long.cell, undefined);
  });
});

test('cellView reads Reachable and Ready, with since when it is unreachable', () => {
  const c: CellObject = {
    apiVersion: 'berth.dev/v1alpha1',
    kind: 'Cell',
    metadata: { name: 'dfw' },
    spec: {
      kubeconfigSecretRef: { namespace: 'berth-system', name: 's', key: 'kubeconfig' },
      locations: ['DFW'],
      unschedulable: false,
      namespaces: ['shop'],
      createNamespaces: true,
    },
    status: {
      conditions: [cond('Reachable', 'False', 'Unreachable'), cond('Ready', 'False', 'Unreachable', 'gone')],
    },
  };
  assert.deepEqual(cellView(c, true), {
    name: 'dfw',
    cities: ['DFW'],
    unschedulable: false,
    reachable: false,
    unreachableSince: '2026-11-23T04:00:00Z',
    ready: false,
    notReady: { reason: 'Unreachable', message: 'gone' },
    probing: false,
    listed: true,
    namespaces: ['shop'],
    createNamespaces: true,
  });
  const unprobed = cellView({ ...c, status: {} }, false);
  assert.equal(unprobed.notReady?.reason, 'NotProbed');
  assert.equal(unprobed.probing, true);
  assert.equal(unprobed.listed, false);
  // A name that can make no cluster: never engaged, it holds nothing, and holds no city back.
  assert.equal(cellView({ ...c, metadata: { name: 'd'.repeat(59) } }, false).listed, true);
});

/** Random cells, placements and existing deployments, within a handful of cities. */
function scenario(r: Prng) {
  const cityCodes = ['DFW', 'LHR', 'NRT', 'SIN'];
  const cells: CellView[] = Array.from({ length: r.int(6) }, (_, i) => {
    const ready = r.chance(0.6);
    const probing = !ready && r.chance(0.3);
    return cell(
      `c${r.int(9)}${i}`,
      cityCodes.filter(() => r.chance(0.4)),
      {
        ready,
        probing,
        reachable: ready || probing || r.chance(0.5),
        unschedulable: r.chance(0.2),
        listed: r.chance(0.85),
        ...(ready ? {} : { notReady: { reason: probing ? 'NotProbed' : 'Unreachable', message: '' } }),
      },
    );
  });
  const w = workload(
    Array.from({ length: 1 + r.int(3) }, (_, i) => [
      `p${i}`,
      cityCodes
        .filter(() => r.chance(0.5))
        .slice(0, 3)
        .concat(r.chance(0.2) ? ['AMS'] : []),
      r.int(4),
    ]),
  );
  const locations = new Set(cityCodes.filter(() => r.chance(0.9)));
  const have: Placed[] = [];
  for (const p of w.spec.placements)
    for (const city of p.cityCodes!)
      if (r.chance(0.5)) {
        const where = r.chance(0.8) && cells.length ? r.pick(cells).name : 'gone-cell';
        const t = {
          name: deploymentName('web', p.name, city),
          city,
          placement: p.name,
          replicas: p.scaleSettings.minReplicas,
        };
        have.push(placed(where, t, r.chance(0.7) ? serving(t.replicas, r.int(t.replicas + 1)) : undefined));
      }
  // What the controller's caches show: nothing of a cell not listed.
  const unlisted = new Set(cells.filter((c) => !c.listed).map((c) => c.name));
  const seen = have.filter((d) => !unlisted.has(d.cell));
  return { cells, w, locations, have: seen, hidden: have.filter((d) => unlisted.has(d.cell)) };
}

test('generated: 3,000 scenarios keep the placement rules, and the rollup adds up', () =>
  withSeed('federation scenarios', (r) => {
    let sticky = 0;
    let fresh = 0;
    let none = 0;
    let unseen = 0;
    for (let i = 0; i < 3000; i++) {
      const { cells, w, locations, have, hidden } = scenario(r);
      const ts = targets(w, locations, cells, have);
      // One per placement × city.
      assert.deepEqual(
        ts.map((t) => `${t.placement}/${t.city}`),
        w.spec.placements.flatMap((p) => p.cityCodes!.map((c) => `${p.name}/${c}`)),
      );
      for (const t of ts) {
        const servingCells = cells
          .filter((c) => c.cities.includes(t.city))
          .sort((a, b) => (a.name < b.name ? -1 : 1));
        const stay = have.find(
          (d) => d.object.metadata.name === t.name && servingCells.some((c) => c.name === d.cell),
        );
        const notListed = servingCells.filter((c) => !c.listed);
        if (t.cell)
          assert.ok(
            !hidden.some(
              (d) => d.object.metadata.name === t.name && servingCells.some((c) => c.name === d.cell),
            ) || t.cell === stay?.cell,
            'a city that may run in a cell not listed is never placed anew',
          );
        if (stay) {
          sticky++;
          assert.equal(t.cell, stay.cell, 'a deployment stays in a cell that exists and serves the city');
        } else if (t.cell) {
          fresh++;
          const first = servingCells.find((c) => c.ready && !c.unschedulable);
          assert.equal(t.cell, first?.name, 'the first Ready, schedulable cell by name');
          assert.ok(locations.has(t.city), 'a new placement needs a Location');
          assert.deepEqual(notListed, [], 'placed anew once every cell of the city is listed');
        } else if (notListed.length) {
          unseen++;
          assert.equal(
            t.problem?.reason,
            notListed.some((c) => !c.reachable) ? 'CellUnreachable' : 'CellNotReady',
          );
        } else {
          none++;
          const waitForProbe =
            locations.has(t.city) && servingCells.some((c) => c.probing && !c.unschedulable);
          assert.equal(t.problem?.reason, waitForProbe ? 'CellNotReady' : 'NoMatchingLocation');
          assert.ok(!locations.has(t.city) || !servingCells.some((c) => c.ready && !c.unschedulable));
        }
      }
      const listed = new Set(cells.filter((c) => c.listed).map((c) => c.name));
      const gone = unwanted(ts, have, listed);
      for (const d of gone) {
        assert.ok(listed.has(d.cell), 'nothing is deleted in a cell not listed');
        assert.ok(
          !ts.some((t) => t.cell === d.cell && t.name === d.object.metadata.name),
          'a wanted one is never deleted',
        );
      }
      // Everything in a listed cell is either wanted or unwanted.
      assert.equal(
        have.filter((d) => listed.has(d.cell)).length,
        gone.length +
          have.filter(
            (d) =>
              listed.has(d.cell) && ts.some((t) => t.cell === d.cell && t.name === d.object.metadata.name),
          ).length,
      );

      const views = new Map(cells.map((c) => [c.name, c]));
      const find = (c: string, n: string) =>
        have.find((d) => d.cell === c && d.object.metadata.name === n)?.object;
      const ru = rollup(w, ts, HASH, views, find, BLOCKING_REASONS);
      const cities = ru.status.placements!.flatMap((p) => p.cities!);
      for (const k of ['replicas', 'readyReplicas', 'updatedReplicas', 'desiredReplicas'] as const)
        assert.equal(
          ru.status[k],
          cities.reduce((n, c) => n + c[k]!, 0),
          k,
        );
      const reasons = cities.flatMap((c) => c.reason ?? []);
      assert.equal(ru.available.status === 'True', reasons.length === 0);
      if (reasons.length) {
        const fed = FEDERATION_REASONS.filter((f) => reasons.includes(f));
        if (fed.length) assert.equal(ru.available.reason, fed[0]);
        assert.equal(ru.available.status === 'Unknown', ru.available.reason === 'CellUnreachable');
      }
    }
    // The generator reaches every branch.
    assert.ok(
      sticky > 300 && fresh > 300 && none > 300 && unseen > 300,
      `sticky ${sticky}, fresh ${fresh}, none ${none}, unseen ${unseen}`,
    );
  }));
