// berth plan of Workloads, Cells and Locations: instances per cell and city from targets and the
// deployment plan stepped to its end, granted or left waiting by the namespace's Quota across cells.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { CellObject, LocationObject } from '../../../src/cells/types.ts';
import { planFederation, type Facts, type Ground } from '../../../src/federation/plan.ts';
import {
  CITY_LABEL,
  WORKLOAD_NAME_LABEL,
  WORKLOAD_NAMESPACE_LABEL,
  type WorkloadObject,
} from '../../../src/federation/types.ts';
import type { QuotaObject } from '../../../src/workloads/decide/quota.ts';
import { templateHash } from '../../../src/workloads/decide/revisions.ts';
import { type InstanceObject } from '../../../src/workloads/decide/instances.ts';
import {
  DEPLOYMENT_LABEL,
  MIRROR_CELL_LABEL,
  MIRROR_LABEL,
  SOURCE_ANNOTATION,
  SOURCE_UID_ANNOTATION,
} from '../../../src/workloads/types.ts';
import { workload } from './fixtures.ts';

const NOW = Date.parse('2026-11-27T12:00:00Z');
const ok = [
  {
    type: 'Reachable',
    status: 'True',
    reason: 'Probed',
    message: '',
    lastTransitionTime: '2026-11-27T11:00:00Z',
  },
  { type: 'Ready', status: 'True', reason: 'Ready', message: '', lastTransitionTime: '2026-11-27T11:00:00Z' },
];
const cell = (name: string, cities: string[]): CellObject =>
  ({
    apiVersion: 'berth.dev/v1alpha1',
    kind: 'Cell',
    metadata: { name, uid: `uid-${name}` },
    spec: { locations: cities, namespaces: ['shop'], unschedulable: false, createNamespaces: true },
    status: { conditions: ok },
  }) as unknown as CellObject;
const location = (city: string): LocationObject =>
  ({
    apiVersion: 'berth.dev/v1alpha1',
    kind: 'Location',
    metadata: { name: city.toLowerCase() },
    spec: { cityCode: city },
  }) as LocationObject;

/** A mirror of instance `name` of WorkloadDeployment `wd` in `cellName`, Ready, granted. */
function mirror(
  cellName: string,
  wd: string,
  ordinal: number,
  w: WorkloadObject,
  city: string,
): InstanceObject {
  const name = `${wd}-${ordinal}`;
  return {
    apiVersion: 'berth.dev/v1alpha1',
    kind: 'Instance',
    metadata: {
      name: `${cellName}-${name}`,
      namespace: 'shop',
      creationTimestamp: `2026-11-27T11:0${ordinal}:00Z`,
      labels: {
        [MIRROR_LABEL]: 'true',
        [MIRROR_CELL_LABEL]: cellName,
        [DEPLOYMENT_LABEL]: wd,
        [WORKLOAD_NAMESPACE_LABEL]: 'shop',
        [WORKLOAD_NAME_LABEL]: w.metadata.name!,
        [CITY_LABEL]: city,
      },
      annotations: { [SOURCE_ANNOTATION]: name, [SOURCE_UID_ANNOTATION]: `uid-${cellName}-${name}` },
    },
    spec: { ordinal, templateHash: templateHash(w.spec.template), template: w.spec.template },
    status: {
      conditions: ['Ready', 'Available', 'Programmed', 'QuotaGranted'].map((type) => ({
        type,
        status: 'True',
        reason: 'X',
        message: '',
        lastTransitionTime: '2026-11-27T11:00:00Z',
      })),
    },
  } as unknown as InstanceObject;
}

const ground = (
  workloads: WorkloadObject[],
  cells = [cell('dfw1', ['DFW']), cell('lhr1', ['LHR'])],
): Ground => ({
  workloads,
  cells,
  locations: [location('DFW'), location('LHR')],
});
const facts = (before: Ground, after: Ground, o: Partial<Facts> = {}): Facts => ({
  before,
  after,
  mirrors: [],
  instanceType: () => undefined,
  now: NOW,
  ...o,
});
const quota = (instances: number): QuotaObject => ({
  metadata: { name: 'budget', namespace: 'shop', creationTimestamp: '2026-11-27T10:00:00Z' },
  spec: { instances },
});
const lines = (p: ReturnType<typeof planFederation>) =>
  p.effects.map((e) => `${e.op} ${e.kind} ${e.name}: ${e.what}`);

test('a new Workload: one WorkloadDeployment per city in the cell serving it, its instances by ordinal, granted oldest first', () => {
  const w = workload([
    ['us', ['DFW'], 3],
    ['eu', ['LHR'], 1],
  ]);
  const p = planFederation(
    facts(ground([]), ground([w]), { quotas: [quota(3)] }),
    ['shop/web'],
    'Workload shop/web',
  );
  assert.deepEqual(lines(p), [
    '+ WorkloadDeployment shop/web-us-dfw: in cell dfw1 (city DFW): 3 instance(s)',
    '+ Instance shop/web-us-dfw-0: in cell dfw1 (city DFW); quota granted (Quota shop/budget)',
    '+ Instance shop/web-us-dfw-1: in cell dfw1 (city DFW); quota granted (Quota shop/budget)',
    '+ Instance shop/web-us-dfw-2: in cell dfw1 (city DFW); waits for quota: needs 1 instance; 3 of 3 instances used (Quota shop/budget)',
    '+ WorkloadDeployment shop/web-eu-lhr: in cell lhr1 (city LHR): 1 instance(s)',
    '+ Instance shop/web-eu-lhr-0: in cell lhr1 (city LHR); quota granted (Quota shop/budget)',
  ]);
  assert.deepEqual(p.warnings, [
    'Workload shop/web would exceed its quota in cell dfw1 (city DFW): web-us-dfw-2 wait',
  ]);
  assert.deepEqual(p.unknown, []);
});

test('two cells racing for the last grant: the plan says it cannot know which waits', () => {
  const w = workload([
    ['us', ['DFW'], 2],
    ['eu', ['LHR'], 2],
  ]);
  const p = planFederation(
    facts(ground([]), ground([w]), { quotas: [quota(3)] }),
    ['shop/web'],
    'Workload shop/web',
  );
  assert.equal(p.effects.filter((e) => /waits for quota/.test(e.what)).length, 1);
  assert.match(p.unknown.join('\n'), /goes to whichever cell creates its instance first/);
});

test('no quota across cells: every instance made, nothing said of quota; a scale down deletes the highest ordinals', () => {
  const w = workload([['us', ['DFW'], 3]]);
  const mirrors = [0, 1, 2].map((i) => mirror('dfw1', 'web-us-dfw', i, w, 'DFW'));
  const placed = {
    ...w,
    status: { placements: [{ name: 'us', cities: [{ city: 'DFW', cell: 'dfw1' }] }] },
  } as WorkloadObject;
  const smaller = {
    ...placed,
    spec: { ...w.spec, placements: [{ ...w.spec.placements[0]!, scaleSettings: { minReplicas: 1 } }] },
  };
  const p = planFederation(
    facts(ground([placed]), ground([smaller]), { mirrors }),
    ['shop/web'],
    'Workload shop/web',
  );
  assert.deepEqual(lines(p), [
    '~ WorkloadDeployment shop/web-us-dfw: in cell dfw1 (city DFW): replicas 3 -> 1',
    '- Instance shop/web-us-dfw-1: deleted in cell dfw1 (city DFW)',
    '- Instance shop/web-us-dfw-2: deleted in cell dfw1 (city DFW)',
  ]);
  const same = planFederation(
    facts(ground([placed]), ground([placed]), { mirrors }),
    ['shop/web'],
    'Workload shop/web',
  );
  assert.deepEqual(lines(same), [], 'applied as it runs: nothing changes');
});

test('a new template rolls every instance; deleting the Workload removes every instance, with a warning', () => {
  const w = workload([['us', ['DFW'], 2]]);
  const mirrors = [0, 1].map((i) => mirror('dfw1', 'web-us-dfw', i, w, 'DFW'));
  const placed = {
    ...w,
    status: { placements: [{ name: 'us', cities: [{ city: 'DFW', cell: 'dfw1' }] }] },
  } as WorkloadObject;
  const v2 = { ...placed, spec: { ...w.spec, template: { containers: [{ name: 'app', image: 'web:2' }] } } };
  const rolled = planFederation(
    facts(ground([placed]), ground([v2]), { mirrors, quotas: [quota(2)] }),
    ['shop/web'],
    'Workload shop/web',
  );
  const hash = templateHash(v2.spec.template);
  assert.deepEqual(lines(rolled), [
    `~ WorkloadDeployment shop/web-us-dfw: in cell dfw1 (city DFW): template -> ${hash}`,
    `~ Instance shop/web-us-dfw-0: in cell dfw1 (city DFW): rolled to template ${hash}; quota granted (Quota shop/budget)`,
    `~ Instance shop/web-us-dfw-1: in cell dfw1 (city DFW): rolled to template ${hash}; quota granted (Quota shop/budget)`,
  ]);
  const gone = planFederation(
    facts(ground([placed]), ground([]), { mirrors }),
    ['shop/web'],
    'Workload shop/web',
  );
  assert.deepEqual(lines(gone), [
    '- WorkloadDeployment shop/web-us-dfw: deleted in cell dfw1 (city DFW)',
    '- Instance shop/web-us-dfw-0: deleted in cell dfw1 (city DFW)',
    '- Instance shop/web-us-dfw-1: deleted in cell dfw1 (city DFW)',
  ]);
  assert.deepEqual(gone.warnings, ['Workload shop/web would lose every instance (2, in cell(s) dfw1)']);
});

test('a city with no cell: a warning, nothing made', () => {
  const w = workload([['ap', ['NRT'], 1]]);
  const p = planFederation(facts(ground([]), ground([w])), ['shop/web'], 'Workload shop/web');
  assert.deepEqual(p.effects, []);
  assert.deepEqual(p.warnings, [
    'would run nowhere: Workload shop/web placement ap city NRT: NoMatchingLocation: no Location has city code NRT',
  ]);
});

test('a second cell of a city removed from the first: the city moves, its instances made in the new cell', () => {
  const w = workload([['us', ['DFW'], 1]]);
  const placed = {
    ...w,
    status: { placements: [{ name: 'us', cities: [{ city: 'DFW', cell: 'dfw1' }] }] },
  } as WorkloadObject;
  const mirrors = [mirror('dfw1', 'web-us-dfw', 0, w, 'DFW')];
  const before = ground([placed], [cell('dfw1', ['DFW']), cell('dfw2', ['DFW'])]);
  const after = ground([placed], [cell('dfw2', ['DFW'])]);
  const p = planFederation(facts(before, after, { mirrors }), ['shop/web'], 'Cell dfw1');
  // The removed cell is no longer reached: what runs there is left, not deleted.
  assert.deepEqual(lines(p), [
    '+ WorkloadDeployment shop/web-us-dfw: in cell dfw2 (city DFW): 1 instance(s)',
    '+ Instance shop/web-us-dfw-0: in cell dfw2 (city DFW)',
  ]);
});

test('a Progressive rollout: the end planned, the turns said to be unknown', () => {
  const w = workload([['us', ['DFW'], 1]]);
  const mirrors = [mirror('dfw1', 'web-us-dfw', 0, w, 'DFW')];
  const placed = {
    ...w,
    status: { placements: [{ name: 'us', cities: [{ city: 'DFW', cell: 'dfw1' }] }] },
  } as WorkloadObject;
  const v2 = {
    ...placed,
    spec: {
      ...w.spec,
      template: { containers: [{ name: 'app', image: 'web:2' }] },
      rollout: { type: 'Progressive' as const, maxConcurrency: 1, minSuccessTime: 60, maxFailures: 0 },
    },
  };
  const p = planFederation(
    facts(ground([placed]), ground([v2]), { mirrors }),
    ['shop/web'],
    'Workload shop/web',
  );
  assert.equal(p.effects.filter((e) => e.op === '~' && e.kind === 'Instance').length, 1);
  assert.match(p.unknown.join('\n'), /rolls out Progressive: its cells take turns/);
});
