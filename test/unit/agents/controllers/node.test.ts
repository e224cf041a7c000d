import assert from 'node:assert/strict';
import { test } from 'node:test';
import { podChanged } from '../../../../src/agents/controllers/node.ts';
import type { SlimPod } from '../../../../src/policy/slim.ts';

const pod = (extra: Partial<SlimPod> = {}): SlimPod => ({
  metadata: {
    name: 'p',
    namespace: 'ns',
    resourceVersion: '1',
    labels: { app: 'w' },
    ownerReferences: [{ apiVersion: 'apps/v1', kind: 'ReplicaSet', name: 'rs', uid: 'u1', controller: true }],
  },
  spec: { nodeName: 'n1', containers: [] },
  status: { phase: 'Pending' },
  ...extra,
});

test("a pod's node sees only the pod changes that can change its claims", () => {
  const a = pod();
  assert.equal(podChanged(a, a), true, 'a resync reconciles');
  assert.equal(podChanged(a, pod({ status: { phase: 'Running', hostIP: '10.0.0.1' } })), false, 'starting');
  assert.equal(podChanged(a, pod({ status: { phase: 'Succeeded' } })), true, 'finished');
  assert.equal(podChanged(a, pod({ spec: { nodeName: 'n2', containers: [] } })), true, 'moved');
  assert.equal(podChanged(a, pod({ metadata: { ...a.metadata, labels: { app: 'x' } } })), true, 'relabelled');
  assert.equal(podChanged(a, pod({ metadata: { ...a.metadata, ownerReferences: [] } })), true, 'orphaned');
  assert.equal(
    podChanged(a, pod({ metadata: { ...a.metadata, resourceVersion: '2', labels: { app: 'w' } } })),
    false,
    'same labels and owners',
  );
});
