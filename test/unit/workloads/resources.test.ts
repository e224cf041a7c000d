// A Pod the apiserver made without the pod-level resources Berth sent: a feature turned off, said.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { droppedPodResources, instanceSize } from '../../../src/workloads/resources.ts';

test('pod-level resources sent and dropped are a reason; kept, or never sent, are none', () => {
  const typed = instanceSize(
    { instanceType: 'small', containers: [{ name: 'c', image: 'i' }] } as never,
    () => ({
      cpu: '1',
      memory: '1Gi',
    }),
  );
  assert.ok(!('error' in typed) && typed.pod, 'the instance type sizes the Pod as a whole');
  assert.match(droppedPodResources(typed, { spec: {} }) ?? '', /PodLevelResources feature is off/);
  assert.equal(droppedPodResources(typed, { spec: { resources: { requests: typed.pod } } }), undefined);
  assert.equal(droppedPodResources({ milliCPU: 100, memoryBytes: 1 }, { spec: {} }), undefined);
});
