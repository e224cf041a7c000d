// explain cell and explain location: how a cell answers (since when, last contact) and what it
// serves; which cells serve a city.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { explainCell, explainLocation } from '../../../src/cells/explain.ts';
import type { CellObject, LocationObject } from '../../../src/cells/types.ts';

const now = new Date('2026-11-27T12:00:00Z');
const location = (name: string, cityCode: string): LocationObject =>
  ({ metadata: { name }, spec: { cityCode } }) as LocationObject;
const cell = (name: string, locations: string[], reachable: 'True' | 'False'): CellObject =>
  ({
    metadata: { name },
    spec: {
      kubeconfigSecretRef: { namespace: 'berth-system', name: `${name}-kubeconfig`, key: 'kubeconfig' },
      locations,
      unschedulable: false,
      namespaces: ['shop'],
      createNamespaces: false,
    },
    status: {
      lastContactTime: '2026-11-27T11:55:00Z',
      conditions: [
        {
          type: 'Reachable',
          status: reachable,
          reason: reachable === 'True' ? 'Probed' : 'Unreachable',
          message: '',
          lastTransitionTime: '2026-11-27T11:58:00Z',
        },
      ],
    },
  }) as CellObject;

test('a cell: its last contact, the Locations it serves, a city no Location names', () => {
  const said = explainCell(
    cell('dfw', ['DFW', 'AUS'], 'False'),
    [location('dallas', 'DFW'), location('london', 'LHR')],
    now,
  );
  assert.deepEqual(
    said.subjects?.map((s) => `${s.name} ${s.in}`),
    ['dallas true', 'london false'],
  );
  assert.match(
    said.lines[0]!,
    /Reachable False \(Unreachable\) since 2026-11-27T11:58:00Z \(2m ago\), Ready not probed yet; last contact 2026-11-27T11:55:00Z \(5m ago\)/,
  );
  assert.ok(said.lines.includes('  city AUS: no Location names it'), said.lines.join('\n'));
});

test('a location: the cells that serve its city, and a city none serves', () => {
  const said = explainLocation(
    location('dallas', 'DFW'),
    [cell('dfw', ['DFW'], 'True'), cell('lhr', ['LHR'], 'True')],
    now,
  );
  assert.deepEqual(
    said.subjects?.map((s) => `${s.name} ${s.in}`),
    ['dfw true', 'lhr false'],
  );
  const none = explainLocation(location('tokyo', 'NRT'), [cell('dfw', ['DFW'], 'True')], now);
  assert.ok(none.lines.includes('  no Cell serves this city: a Workload placed here waits'));
});
