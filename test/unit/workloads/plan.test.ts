// berth plan of Quotas: what the Quota in force would grant or leave waiting, as decideGrants decides.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { QuotaObject } from '../../../src/workloads/decide/quota.ts';
import type { InstanceObject } from '../../../src/workloads/decide/instances.ts';
import { emptyPart } from '../../../src/policy/plan.ts';
import {
  instanceEffects,
  planDeploymentObjects,
  planQuotas,
  stepDeployments,
  stepped,
} from '../../../src/workloads/plan.ts';
import type { KubeObject } from '../../../src/runtime/api/meta.ts';
import type { KubeClient } from '../../../src/runtime/client/client.ts';

const NOW = Date.parse('2026-11-27T12:00:00Z');

function instance(name: string, minute: number, granted: 'True' | 'False'): InstanceObject {
  return {
    metadata: {
      name,
      namespace: 'shop',
      uid: `uid-${name}`,
      creationTimestamp: `2026-11-27T11:0${minute}:00Z`,
    },
    spec: { ordinal: 0, templateHash: 'h', template: { containers: [{ name: 'app', image: 'web:1' }] } },
    status: {
      conditions: [
        {
          type: 'QuotaGranted',
          status: granted,
          reason: granted === 'True' ? 'QuotaAvailable' : 'QuotaExceeded',
          message: '',
          lastTransitionTime: '2026-11-27T11:00:00Z',
        },
      ],
    },
  } as unknown as InstanceObject;
}

const claim = (name: string) => ({
  cluster: 'local',
  name,
  uid: `uid-${name}`,
  milliCPU: 0,
  memoryBytes: 0,
  grantedAt: '2026-11-27T11:00:00Z',
});
const budget = (instances: number, claims: string[] = []): QuotaObject => ({
  metadata: { name: 'budget', namespace: 'shop', creationTimestamp: '2026-11-27T10:00:00Z' },
  spec: { instances },
  status: { claims: claims.map(claim) },
});
const running = [
  instance('a', 1, 'True'),
  instance('b', 2, 'True'),
  instance('c', 3, 'False'),
  instance('d', 4, 'False'),
];
const lines = (p: ReturnType<typeof planQuotas>) =>
  p.effects.map((e) => `${e.op} ${e.kind} ${e.name}: ${e.what} (${e.by})`);

test('a Quota raised grants the waiting instances oldest first, and says which still wait', () => {
  const p = planQuotas(
    [budget(2, ['a', 'b'])],
    [{ ...budget(3), status: undefined }],
    false,
    running,
    () => undefined,
    NOW,
  );
  assert.deepEqual(lines(p), [
    '+ Instance shop/c: quota granted (Quota shop/budget)',
    '~ Quota shop/budget: WithinBudget: 3 of 3 instances used, 1 waiting (Quota shop/budget)',
  ]);
  assert.deepEqual(p.warnings, [
    'Quota shop/budget would leave 1 instance(s) waiting: d: needs 1 instance; 3 of 3 instances used',
  ]);
});

test('a new Quota below what runs: nothing revoked, over budget, a warning that it blocks the running work', () => {
  const p = planQuotas(
    [],
    [{ metadata: { name: 'budget', namespace: 'shop' }, spec: { instances: 1 } }],
    false,
    running.slice(0, 2),
    () => undefined,
    NOW,
  );
  assert.deepEqual(lines(p), [
    '+ Quota shop/budget: OverBudget: 2 of 1 instances used, 0 waiting (Quota shop/budget)',
  ]);
  assert.match(
    p.warnings.join('\n'),
    /over its budget: the running instances are kept \(nothing is revoked\), but none is granted/,
  );
});

test('a Quota deleted: what it stopped limiting, every waiting instance granted', () => {
  const p = planQuotas([budget(2, ['a', 'b'])], [budget(2)], true, running, () => undefined, NOW);
  assert.deepEqual(lines(p), [
    '+ Instance shop/c: quota granted (no Quota in shop)',
    '+ Instance shop/d: quota granted (no Quota in shop)',
    '- Quota shop/budget: no longer limits shop (2 of 2 instances used): every instance is granted (Quota shop/budget)',
  ]);
});

test('a Parallel deployment stepped: every instance made in one round, the Quota granting the first by name', () => {
  const d = stepped('shop', 'web', 'local', []);
  Object.assign(d, {
    replicas: 3,
    policy: 'Parallel',
    hash: 'h1',
    template: { containers: [{ name: 'app', image: 'web:1' }] },
  });
  const part = emptyPart();
  const said = stepDeployments(
    [d],
    { counted: [], quotas: [budget(1)], instanceType: () => undefined, now: NOW },
    part,
  );
  instanceEffects(
    d,
    said,
    { where: '', by: 'WorkloadDeployment shop/web', owner: 'WorkloadDeployment shop/web' },
    part,
  );
  assert.deepEqual(
    part.effects.map((e) => `${e.op} ${e.name}: ${e.what}`),
    [
      '+ shop/web-0: created; quota granted (Quota shop/budget)',
      '+ shop/web-1: created; waits for quota: needs 1 instance; 1 of 1 instances used (Quota shop/budget)',
      '+ shop/web-2: created; waits for quota: needs 1 instance; 1 of 1 instances used (Quota shop/budget)',
    ],
  );
  assert.deepEqual(part.warnings, ['WorkloadDeployment shop/web would exceed its quota: web-1, web-2 wait']);
});

test('a WorkloadDeployment beside its Quota and InstanceType in one change: sized and granted by them, not the cluster’s', async () => {
  const client = { list: async () => ({ items: [] }) } as unknown as KubeClient;
  const all: KubeObject[] = [
    {
      apiVersion: 'berth.dev/v1alpha1',
      kind: 'InstanceType',
      metadata: { name: 'small' },
      spec: { cpu: '500m', memory: '512Mi' },
    },
    {
      apiVersion: 'berth.dev/v1alpha1',
      kind: 'Quota',
      metadata: { name: 'budget', namespace: 'shop' },
      spec: { instances: 4, cpu: '1' },
    },
    {
      apiVersion: 'berth.dev/v1alpha1',
      kind: 'WorkloadDeployment',
      metadata: { name: 'hello', namespace: 'shop' },
      spec: {
        replicas: 3,
        instanceManagementPolicy: 'Parallel',
        template: { instanceType: 'small', containers: [{ name: 'app', image: 'web:1' }] },
      },
    },
  ];
  const part = await planDeploymentObjects({
    client,
    objects: all.filter((o) => o.kind === 'WorkloadDeployment'),
    all,
    deleting: false,
    options: {},
    berthNamespace: 'berth-system',
    keys: () => Promise.reject(new Error('not asked')),
  });
  const instances = part.effects.filter((e) => e.kind === 'Instance').map((e) => `${e.name}: ${e.what}`);
  // 1 vCPU holds two instances of 500m: the third waits, for the Quota's cpu, not for a missing size.
  assert.equal(instances.length, 3, instances.join('\n'));
  assert.equal(
    instances.filter((l) => /granted/.test(l) && !/waits/.test(l)).length,
    2,
    instances.join('\n'),
  );
  assert.match(instances.find((l) => /waits/.test(l)) ?? '', /vCPU/);
  assert.ok(!instances.some((l) => /does not exist/.test(l)), instances.join('\n'));
});

test('a WorkloadDeployment past the bytes budget: the plan makes as many instances as fit, and warns ReplicasBounded', async () => {
  const client = { list: async () => ({ items: [] }) } as unknown as KubeClient;
  const wd: KubeObject = {
    apiVersion: 'berth.dev/v1alpha1',
    kind: 'WorkloadDeployment',
    metadata: { name: 'wide', namespace: 'shop' },
    spec: {
      replicas: 300,
      instanceManagementPolicy: 'Parallel',
      template: {
        containers: [
          {
            name: 'app',
            image: 'web:1',
            env: [
              { name: 'A', value: 'x'.repeat(30_000) },
              { name: 'B', value: 'y'.repeat(30_000) },
            ],
          },
        ],
      },
    },
  };
  const part = await planDeploymentObjects({
    client,
    objects: [wd],
    all: [wd],
    deleting: false,
    options: {},
    berthNamespace: 'berth-system',
    keys: () => Promise.reject(new Error('not asked')),
  });
  assert.deepEqual(part.errors, []);
  assert.equal(part.effects.filter((e) => e.kind === 'Instance').length, 279);
  assert.match(
    part.warnings.join('\n'),
    /WorkloadDeployment shop\/wide: 300 replicas of a 60\d{3}-byte template .*: 279 run .*\(ReplicasBounded\)/,
  );
});

test('OrderedReady stepped round by round: each granted instance Ready before the next; two cells racing for the last of a Quota is said once', () => {
  const web = (cluster: string, policy: 'OrderedReady' | 'Parallel', replicas: number) =>
    Object.assign(stepped('shop', 'web', cluster, []), {
      replicas,
      policy,
      hash: 'h1',
      template: { containers: [{ name: 'app', image: 'web:1' }] },
    });
  const ordered = web('local', 'OrderedReady', 3);
  const part = emptyPart();
  const said = stepDeployments(
    [ordered],
    { counted: [], quotas: [budget(2)], instanceType: () => undefined, now: NOW },
    part,
  );
  // Ordinals 0 and 1 granted (each made once the one before is Ready), 2 made and left waiting.
  assert.deepEqual(
    [...said.values()].map((v) => v.granted),
    [true, true, false],
  );
  assert.equal(ordered.waitingFor?.name, 'web-2');
  assert.deepEqual(part.unknown, []);
  // One instance of room, one new instance in each of two cells in the same round.
  const raced = emptyPart();
  stepDeployments(
    [web('paris', 'Parallel', 1), web('tokyo', 'Parallel', 1)],
    { counted: [], quotas: [budget(1)], instanceType: () => undefined, now: NOW },
    raced,
  );
  assert.equal(raced.unknown.length, 1);
  assert.match(raced.unknown[0]!, /whichever cell creates its instance first/);
});
