// The quota controller's pure pieces: what an instance counts as, the condition a verdict gives, and
// the Quota status it writes (only when it changes).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { decideGrants } from '../../../../src/workloads/decide/grant.ts';
import {
  candidateOf,
  countedInstances,
  managementGrant,
  MANAGEMENT_GRANT,
  quotaStatus,
  sameQuotaStatus,
  verdictCondition,
  type QuotaObject,
} from '../../../../src/workloads/decide/quota.ts';
import type { CachedInstance } from '../../../../src/workloads/decide/instances.ts';

const T0 = '2030-01-01T00:00:00Z';
const instance = (name: string, template: Record<string, unknown>, more: Record<string, unknown> = {}) =>
  ({
    metadata: { name, namespace: 'ns', uid: `uid-${name}`, creationTimestamp: T0, ...more },
    spec: { template, templateHash: 'h', ordinal: 0 },
  }) as CachedInstance;

test("an instance counts with its own cluster's InstanceTypes; without a size it says why", () => {
  const typed = instance('a', { instanceType: 'd1-standard-2', containers: [{ name: 'm', image: 'x' }] });
  const types = (n: string) => (n === 'd1-standard-2' ? { cpu: '1', memory: '2Gi' } : undefined);
  assert.deepEqual(candidateOf('cell-a', typed, types), {
    cluster: 'cell-a',
    name: 'a',
    uid: 'uid-a',
    creationTimestamp: T0,
    size: { milliCPU: 1000, memoryBytes: 2 ** 31 },
    granted: false,
    deleting: false,
  });
  assert.deepEqual(candidateOf('local', typed, () => undefined).size, {
    error: 'InstanceType d1-standard-2 does not exist',
  });
  const gone = candidateOf('local', instance('b', { containers: [] }, { deletionTimestamp: T0 }), types);
  assert.equal(gone.deleting, true);
});

test('an instance is sized again when its InstanceType object is replaced (as an informer replaces it)', () => {
  const typed = instance('a', { instanceType: 't', containers: [{ name: 'm', image: 'x' }] });
  let type = { cpu: '1', memory: '1Gi' };
  const sizeNow = () => candidateOf('local', typed, () => type).size;
  assert.deepEqual(sizeNow(), { milliCPU: 1000, memoryBytes: 2 ** 30 });
  type = { cpu: '2', memory: '1Gi' };
  assert.deepEqual(sizeNow(), { milliCPU: 2000, memoryBytes: 2 ** 30 });
  assert.deepEqual(candidateOf('local', typed, () => undefined).size, {
    error: 'InstanceType t does not exist',
  });
});

test('verdicts as QuotaGranted conditions: QuotaAvailable, NoQuota, QuotaExceeded', () => {
  const cs = ['a', 'b'].map((n) =>
    candidateOf('local', instance(n, { containers: [{ name: 'm', image: 'x' }] }), () => undefined),
  );
  const d = decideGrants({ instances: 1 }, [], cs, { gone: () => false, now: T0 });
  assert.deepEqual(verdictCondition(d, 'uid-a', 'budget', 'ns'), {
    status: 'True',
    reason: 'QuotaAvailable',
    message: 'counted by Quota budget',
  });
  assert.deepEqual(verdictCondition(d, 'uid-a', undefined, 'ns'), {
    status: 'True',
    reason: 'NoQuota',
    message: 'no Quota in namespace ns',
  });
  assert.deepEqual(verdictCondition(d, 'uid-b', 'budget', 'ns'), {
    status: 'False',
    reason: 'QuotaExceeded',
    message: 'needs 1 instance; 1 of 1 instances used',
  });
  assert.equal(verdictCondition(d, 'uid-none', 'budget', 'ns'), undefined);
});

test("a management plane's grants are marked as its own; no other grant passes for one", () => {
  const cs = ['a', 'b'].map((n) =>
    candidateOf('cell-a', instance(n, { containers: [{ name: 'm', image: 'x' }] }), () => undefined),
  );
  const d = decideGrants({ instances: 1 }, [], cs, { gone: () => false, now: T0 });
  const own = verdictCondition(d, 'uid-a', 'budget', 'ns', MANAGEMENT_GRANT)!;
  assert.equal(own.message, 'counted by Quota budget of the management plane');
  assert.equal(managementGrant(own), true);
  assert.equal(managementGrant(verdictCondition(d, 'uid-a', undefined, 'ns', MANAGEMENT_GRANT)), true);
  // A cell granting by itself, a refusal that happens to end so, or nothing at all: not its own.
  assert.equal(managementGrant(verdictCondition(d, 'uid-a', 'budget', 'ns')), false);
  assert.equal(
    managementGrant({ status: 'False', reason: 'QuotaExceeded', message: `x${MANAGEMENT_GRANT}` }),
    false,
  );
  assert.equal(managementGrant({ status: 'True', reason: 'Other', message: `x${MANAGEMENT_GRANT}` }), false);
  assert.equal(managementGrant(undefined), false);
});

test('on a management plane, only the instances of cells serving the namespace and not granted by others count', () => {
  const t = { containers: [{ name: 'm', image: 'x' }] };
  const cond = (message: string, status: 'True' | 'False' = 'True', reason = 'NoQuota') => ({
    status: { conditions: [{ type: 'QuotaGranted', status, reason, message, lastTransitionTime: T0 }] },
  });
  const waiting = instance('waiting', t);
  const ours = { ...instance('ours', t), ...cond(`no Quota in namespace ns${MANAGEMENT_GRANT}`) };
  const ledgered = { ...instance('ledgered', t), ...cond('counted by Quota old') };
  const elsewhere = { ...instance('elsewhere', t), ...cond('no Quota in namespace ns') };
  const denied = { ...instance('denied', t), ...cond('needs 1 instance', 'False', 'QuotaExceeded') };
  const cells = [
    { cluster: 'cell-a', instances: [waiting, ours, ledgered, elsewhere, denied] },
    { cluster: 'cell-b', instances: [instance('unserved', t)] },
    { cluster: 'cell-c', instances: [] },
  ];
  const ledger = [
    { cluster: 'cell-a', name: 'ledgered', uid: 'uid-ledgered', milliCPU: 0, memoryBytes: 0, grantedAt: T0 },
  ];
  const serves = (cluster: string, ns: string) => cluster === 'cell-a' && ns === 'ns';
  const scope = countedInstances('ns', ledger, cells, serves);
  assert.deepEqual(
    scope.counted.map((is) => is.map((i) => i.metadata?.name)),
    [['waiting', 'ours', 'ledgered', 'denied'], [], []],
  );
  assert.deepEqual(scope.foreign, ['cell-a/elsewhere']);
  assert.equal(scope.unserved, true);
  // A cluster with no instance there is not "unserved" (no look again for nothing).
  assert.equal(countedInstances('ns', [], [cells[2]!], serves).unserved, false);
  // In one cluster (no `serves`), every instance counts, whoever granted it.
  assert.deepEqual(
    countedInstances('ns', [], cells, undefined).counted.map((is) => is.length),
    [5, 1, 0],
  );
});

test('the Quota status: used, waiting, the ledger, Ready or OverBudget; equal statuses need no write', () => {
  const quota: QuotaObject = {
    metadata: { name: 'budget', namespace: 'ns', generation: 2 },
    spec: { instances: 1, cpu: '2' },
  };
  const granted = ['a', 'b'].map((n) => ({
    ...candidateOf(
      'local',
      instance(n, { containers: [{ name: 'm', image: 'x', resources: { requests: { cpu: '1500m' } } }] }),
      () => undefined,
    ),
    granted: true,
  }));
  const d = decideGrants({ instances: 1, milliCPU: 2000 }, [], granted, { gone: () => false, now: T0 });
  const status = quotaStatus(quota, d, new Date(T0));
  assert.deepEqual(status.used, { instances: 2, cpu: '3', memory: '0' });
  assert.equal(status.waiting, 0);
  assert.deepEqual(
    status.claims?.map((c) => c.name),
    ['a', 'b'],
  );
  assert.equal(status.observedGeneration, 2);
  const [ready] = status.conditions;
  assert.equal(ready?.status, 'False');
  assert.equal(ready?.reason, 'OverBudget');
  assert.match(ready!.message, /^2 of 1 instances, 3 of 2 vCPU used, over the budget in instances, vCPU/);
  // Written again later, only the transition time could differ: no write.
  const later = quotaStatus({ ...quota, status }, d, new Date('2030-01-02T00:00:00Z'));
  assert.equal(later.conditions[0]!.lastTransitionTime, ready!.lastTransitionTime);
  assert.ok(sameQuotaStatus(status, later));
  assert.ok(!sameQuotaStatus(status, { ...later, waiting: 1 }));
  assert.ok(!sameQuotaStatus(undefined, later));
});

test('the Quota status names the clusters decided without, and says what that means', () => {
  const quota: QuotaObject = { metadata: { name: 'budget', namespace: 'ns' }, spec: { instances: 3 } };
  const d = decideGrants({ instances: 3 }, [], [], { gone: () => false, now: T0 });
  const [whole] = quotaStatus(quota, d, new Date(T0)).conditions;
  assert.equal(whole?.message, '0 of 3 instances used');
  const [partial] = quotaStatus(quota, d, new Date(T0), ['cell-lhr']).conditions;
  assert.equal(partial?.status, 'True');
  assert.equal(
    partial?.message,
    '0 of 3 instances used; cluster cell-lhr not read: its claims stay counted, its waiting instances are decided once it answers',
  );
});
