// `berth explain workload`: what it says of each placement × city from the Workload's status and the
// Cells and Locations it was decided from.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { LocationObject } from '../../../src/cells/types.ts';
import { workloadLines } from '../../../src/federation/explain.ts';
import { FEDERATION_FINALIZER, type WorkloadObject } from '../../../src/federation/types.ts';
import { cellObject, reachable, workload } from './fixtures.ts';

const NOW = new Date('2026-11-26T10:00:00Z');
const location = (city: string, labels: Record<string, string> = {}): LocationObject => ({
  apiVersion: 'berth.dev/v1alpha1',
  kind: 'Location',
  metadata: { name: city.toLowerCase(), labels },
  spec: { cityCode: city },
});

/** Web: us in DFW (2), eu by selector region=eu (1); DFW running, LHR's cell unreachable, SIN unserved. */
function web(): WorkloadObject {
  const w = workload([['us', ['DFW'], 2]]);
  w.spec.placements.push({
    name: 'eu',
    locationSelector: { matchLabels: { region: 'eu' } },
    scaleSettings: { minReplicas: 1 },
  });
  w.spec.placements.push({ name: 'ap', cityCodes: ['SIN'], scaleSettings: { minReplicas: 1 } });
  w.status = {
    observedGeneration: 3,
    readyReplicas: 2,
    desiredReplicas: 4,
    updatedReplicas: 2,
    conditions: [
      {
        type: 'Available',
        status: 'False',
        reason: 'NoMatchingLocation',
        message: 'placement ap: no cell serves SIN',
        lastTransitionTime: '2026-11-26T09:58:00Z',
      },
    ],
    placements: [
      {
        name: 'us',
        readyReplicas: 2,
        desiredReplicas: 2,
        updatedReplicas: 2,
        cities: [
          { city: 'DFW', cell: 'dfw-1', readyReplicas: 2, desiredReplicas: 2, updatedReplicas: 2 },
          // Removed from the placement, still draining.
          { city: 'ORD', cell: 'ord-1', readyReplicas: 1, desiredReplicas: 1, updatedReplicas: 1 },
        ],
      },
      {
        name: 'eu',
        cities: [
          {
            city: 'LHR',
            cell: 'lhr-1',
            desiredReplicas: 1,
            reason: 'CellUnreachable',
            message: 'cell lhr-1 is unreachable since 2026-11-26T09:59:00Z; last known counts',
          },
        ],
      },
      {
        name: 'ap',
        reason: 'NoMatchingLocation',
        message: 'no cell serves SIN',
        cities: [
          { city: 'SIN', desiredReplicas: 1, reason: 'NoMatchingLocation', message: 'no cell serves SIN' },
        ],
      },
    ],
  };
  return w;
}

const cells = [
  cellObject('dfw-1', ['DFW'], reachable('True', 'Reachable', '2026-11-26T09:00:00Z')),
  cellObject('lhr-1', ['LHR'], reachable('False', 'Unreachable', '2026-11-26T09:59:00Z')),
];
const locations = [location('DFW'), location('LHR', { region: 'eu' }), location('ORD')];

test('each placement and city: its cell, counts and reason; the cell in trouble; a city no cell serves; what to explain in the cell', () => {
  const lines = workloadLines(web(), cells, locations, NOW);
  const text = lines.join('\n');
  assert.match(text, /^ {2}Available: False \(NoMatchingLocation\) since 2026-11-26T09:58:00Z \(2m ago\)/m);
  assert.match(text, /in total: 2 of 4 Ready, 2 up to date/);
  assert.match(text, /placement us \(cities DFW\): 2 instance\(s\) in each of DFW; 2 of 2 Ready/);
  assert.match(
    text,
    /DFW: cell dfw-1, 2 of 2 Ready, 2 up to date\n {6}in the cell: berth explain wd shop\/web-us-dfw --kubeconfig FILE \(FILE: key kubeconfig of Secret berth\/cell-dfw-1-kubeconfig\)/,
  );
  assert.match(text, /ORD \(no longer placed here: drained once the placement serves\): cell ord-1/);
  assert.match(text, /its Cell ord-1 is gone/);
  assert.match(text, /placement eu \(Locations region=eu\): 1 instance\(s\) in each of LHR/);
  assert.match(
    text,
    /LHR: cell lhr-1, 0 of 1 Ready, 0 up to date; CellUnreachable: cell lhr-1 is unreachable/,
  );
  assert.match(text, /cell lhr-1: Reachable False \(Unreachable\) since 2026-11-26T09:59:00Z \(60s ago\)/);
  assert.match(text, /SIN: 0 of 1 Ready, 0 up to date; NoMatchingLocation/);
  assert.doesNotMatch(text, / {6}no Location has city code SIN/, 'said by the status already');
  assert.match(text, /no Cell serves SIN: berth cells join NAME --kubeconfig FILE --location SIN/);
  assert.doesNotMatch(text, /not seen yet/);
});

test('a spec Berth has not seen, a deletion held by the finalizer, a progressive rollout under way', () => {
  const w = web();
  w.metadata.generation = 4;
  w.metadata.deletionTimestamp = '2026-11-26T09:59:30Z';
  w.metadata.finalizers = [FEDERATION_FINALIZER];
  w.spec.rollout = { type: 'Progressive', maxConcurrency: 1, minSuccessTime: 30, maxFailures: 0 };
  w.status!.rollout = {
    templateHash: 'abc',
    updatedCells: 1,
    totalCells: 3,
    cells: [{ name: 'us/DFW', state: 'Soaking', since: '2026-11-26T09:59:50Z' }],
    soakingUntil: '2026-11-26T10:00:20Z',
  };
  const text = workloadLines(w, cells, locations, NOW).join('\n');
  assert.match(text, /not seen yet: generation 4, the status is of 3/);
  assert.match(
    text,
    /being deleted since 2026-11-26T09:59:30Z \(30s ago\): its WorkloadDeployments go from every cell first/,
  );
  assert.match(
    text,
    /rollout: Progressive, 1 cell\(s\) at a time, each Available 30 s before the next, 0 failure\(s\) tolerated: 1 of 3 cells on template abc/,
  );
  assert.match(text, / {4}us\/DFW: Soaking since 2026-11-26T09:59:50Z \(10s ago\)/);
  assert.match(text, /soaking until 2026-11-26T10:00:20Z/);
});

test('a cordoned cell, a cell never probed, a city served but not placed yet, a city with no Location', () => {
  const w = workload([['us', ['DFW', 'ORD', 'MEX'], 1]]);
  const cordoned = cellObject('dfw-1', ['DFW'], reachable('True', 'Reachable', '2026-11-26T09:00:00Z'));
  cordoned.spec.unschedulable = true;
  w.status = {
    observedGeneration: 3,
    placements: [{ name: 'us', cities: [{ city: 'DFW', cell: 'dfw-1', desiredReplicas: 1 }] }],
  };
  const text = workloadLines(w, [cordoned, cellObject('ord-1', ['ORD'], undefined)], locations, NOW).join(
    '\n',
  );
  assert.match(text, /cell dfw-1 is cordoned \(spec.unschedulable\)/);
  assert.match(
    text,
    /ORD: not in the status yet\n {6}cells serving ORD: ord-1 \(cell ord-1 has not been probed yet/,
  );
  assert.match(text, /MEX: not in the status yet\n {6}no Location has city code MEX\n {6}no Cell serves MEX/);
});

test("a city whose cells do not list the Workload's namespace says so", () => {
  const w = workload([['us', ['ORD'], 1]]);
  const ord = cellObject('ord-1', ['ORD'], reachable('True', 'Reachable', '2026-11-26T09:00:00Z'));
  ord.spec.namespaces = ['other'];
  const text = workloadLines(w, [ord], locations, NOW).join('\n');
  assert.match(text, /cells serving ORD: ord-1 \(namespace shop is not in its spec.namespaces\)/);
});

test('a cordoned cell that is unreachable too says both; a name another holds points nowhere in the cell', () => {
  const w = workload([['us', ['DFW'], 1]]);
  const dfw = cellObject('dfw-1', ['DFW'], reachable('False', 'Unreachable', '2026-11-26T09:59:00Z'));
  dfw.spec.unschedulable = true;
  w.status = {
    observedGeneration: 3,
    placements: [
      {
        name: 'us',
        cities: [
          {
            city: 'DFW',
            cell: 'dfw-1',
            desiredReplicas: 1,
            reason: 'NameTaken',
            message: "the WorkloadDeployment there is another management plane's",
          },
        ],
      },
    ],
  };
  const text = workloadLines(w, [dfw], locations, NOW).join('\n');
  assert.match(
    text,
    /cell dfw-1 is cordoned \(spec.unschedulable\); cell dfw-1: Reachable False \(Unreachable\)/,
  );
  assert.match(
    text,
    /nothing of this Workload to explain in cell dfw-1: the WorkloadDeployment \S+-us-dfw there is another's/,
  );
  assert.doesNotMatch(text, /berth explain wd/);
});
