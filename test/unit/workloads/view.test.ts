// What the page shows of workloads (workloads/view.ts, given through Capability.page): each
// WorkloadDeployment's row with its instances, and why the quota gate holds a pod.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { quotaReason, workloadRow } from '../../../src/workloads/view.ts';

const instance = (name: string, ordinal: number, conditions: object[]) => ({
  apiVersion: 'berth.dev/v1alpha1',
  kind: 'Instance',
  metadata: { name, namespace: 'shop' },
  spec: { ordinal },
  status: { conditions },
});

test('workloadRow: a WorkloadDeployment with its instances by ordinal, each Ready and quota as its conditions say', () => {
  const row = workloadRow(
    {
      apiVersion: 'berth.dev/v1alpha1',
      kind: 'WorkloadDeployment',
      metadata: { name: 'web', namespace: 'shop' },
      spec: { replicas: 3 },
      status: { observedGeneration: 2, readyReplicas: 1 },
    } as never,
    [
      instance('web-1', 1, [{ type: 'Ready', status: 'False', reason: 'PodPending', message: 'm' }]),
      instance('web-0', 0, [
        { type: 'Ready', status: 'True', reason: 'PodReady' },
        { type: 'QuotaGranted', status: 'True', reason: 'Granted' },
      ]),
    ],
  );
  assert.equal(row.desired, 3);
  assert.deepEqual(row.counts, { readyReplicas: 1 });
  assert.deepEqual(
    row.instances.map((i) => [i.name, i.ready, i.tone, i.reason, i.message, i.quota]),
    [
      ['web-0', 'True', 'good', 'PodReady', '', 'Granted'],
      ['web-1', 'False', 'bad', 'PodPending', 'm', ''],
    ],
  );
});

test('quotaReason: what QuotaGranted says, or that the quota controller has not answered yet', () => {
  assert.equal(quotaReason(undefined), 'quota: waiting for the quota controller');
  assert.equal(quotaReason(instance('a', 0, []) as never), 'quota: waiting for the quota controller');
  assert.equal(
    quotaReason(
      instance('a', 0, [
        { type: 'QuotaGranted', status: 'False', reason: 'QuotaExceeded', message: '4 of 4' },
      ]) as never,
    ),
    'quota: QuotaExceeded: 4 of 4',
  );
  assert.equal(
    quotaReason(instance('a', 0, [{ type: 'QuotaGranted', status: 'False', reason: 'Pending' }]) as never),
    'quota: Pending',
  );
});
