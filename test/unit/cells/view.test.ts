// The cells' map on the page (cells/view.ts), with the federated Workloads' shares per cell
// (federation/view.ts) under each cell.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { cityRows } from '../../../src/cells/view.ts';
import { workloadsByCell } from '../../../src/federation/view.ts';

test('cityRows: cells by city with their Locations, a cell of two cities under both, cells of none last', () => {
  const cond = (type: string, status: string, reason = '', message = '') => ({
    type,
    status,
    reason,
    message,
  });
  const cellObj = (name: string, locations: string[], conditions: object[], extra: object = {}) => ({
    apiVersion: 'berth.dev/v1alpha1',
    kind: 'Cell',
    metadata: { name },
    spec: { locations, ...extra },
    status: { conditions, serverVersion: 'v1.35.4' },
  });
  const loc = (name: string, cityCode: string, topology?: object, cls?: string) => ({
    apiVersion: 'berth.dev/v1alpha1',
    kind: 'Location',
    metadata: { name },
    spec: { cityCode, ...(topology ? { topology } : {}), ...(cls ? { class: cls } : {}) },
  });
  const rows = cityRows(
    [
      cellObj(
        'dfw-b',
        ['DFW'],
        [
          cond('Reachable', 'False', 'Unreachable'),
          cond('Ready', 'False', 'Unreachable', 'dial tcp: refused'),
        ],
      ),
      cellObj('dfw-a', ['DFW', 'LHR'], [cond('Reachable', 'True'), cond('Ready', 'True', 'Ready')]),
      cellObj('lab', [], [], { unschedulable: true }),
    ],
    [loc('dfw-1', 'DFW', { region: 'us-central', zone: 'z1' }, 'edge'), loc('ams-1', 'AMS')],
  );
  assert.deepEqual(
    rows.map((r) => [
      r.city,
      r.locations.map((l) => `${l.name}${l.where ? ` (${l.where})` : ''}`),
      r.cells.map((c) => `${c.name} ${c.reachable}/${c.ready} ${c.reason}`),
    ]),
    [
      ['AMS', ['ams-1'], []],
      ['DFW', ['dfw-1 (us-central, z1, edge)'], ['dfw-a True/True Ready', 'dfw-b False/False Unreachable']],
      ['LHR', [], ['dfw-a True/True Ready']],
      ['', [], ['lab Unknown/Unknown ']],
    ],
  );
  const dfwB = rows[1]!.cells[1]!;
  assert.equal(dfwB.message, 'dial tcp: refused');
  assert.equal(dfwB.serverVersion, 'v1.35.4');
  assert.equal(rows[3]!.cells[0]!.cordoned, true);
  assert.deepEqual(cityRows([], []), []);

  // A federated Workload's share in each cell (federation/view.ts), per city: a cell of two cities
  // shows each city's own.
  const workload = {
    apiVersion: 'berth.dev/v1alpha1',
    kind: 'Workload',
    metadata: { name: 'web', namespace: 'shop' },
    status: {
      placements: [
        {
          name: 'us',
          cities: [
            { city: 'DFW', cell: 'dfw-a', readyReplicas: 2, desiredReplicas: 3, reason: 'Provisioning' },
            { city: 'LHR', cell: 'dfw-a', readyReplicas: 1, desiredReplicas: 1 },
            { city: 'NRT', reason: 'NoMatchingLocation' },
          ],
        },
      ],
    },
  };
  const placed = cityRows(
    [cellObj('dfw-a', ['DFW', 'LHR'], [cond('Ready', 'True', 'Ready')])],
    [],
    workloadsByCell([workload]),
  );
  assert.deepEqual(
    placed.map((c) => [
      c.city,
      c.cells.map((x) =>
        x.workloads.map((w) => `${w.namespace}/${w.name} ${w.placement} ${w.ready}/${w.desired} ${w.reason}`),
      ),
    ]),
    [
      ['DFW', [['shop/web us 2/3 Provisioning']]],
      ['LHR', [['shop/web us 1/1 ']]],
    ],
  );
});
